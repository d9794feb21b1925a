"""Runners: where a stage executes. ``local`` (this Python) and ``docker`` (the variant's image).

A stage is always ``python -m stages.<name> ARGS`` with an environment; the runner decides which Python,
which filesystem and which devices. Stages never know which runner started them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from foundation.errors import UserError

CODE_ROOT = Path(__file__).resolve().parents[2]


class StageFailed(UserError):
    """A stage exited non-zero; the message names the stage and its log file."""


class StageLost(StageFailed):
    """The stage's process was killed from outside (a signal it did not ask for: the OOM killer, a node going down,
    someone's ``kill``): nothing is wrong with its inputs, so an executor may run it again elsewhere."""


# Stages report a user mistake as one line "error: <what, naming the file or flag>" and exit non-zero.
STAGE_ERROR_PREFIX = "error: "

# The labels a stage's container carries (``StageCommand.labels`` and the Docker runner's own): whose it is, so that
# what a killed host or actor left running can be found by run, shard and side, and removed.
RUN_LABEL = "dev.prbench.run"  # the run directory, absolute
SHARD_LABEL = "dev.prbench.shard"  # an executor's shard ("kernels round 3 shard 2/4")
SIDE_LABEL = "dev.prbench.side"  # "base", "pr" (a variant's name)
STAGE_LABEL = "dev.prbench.stage"  # the stage a container runs; every stage container has it
OWNER_LABEL = "dev.prbench.owner"  # <host>:<pid> of the process that started the container and waits for it


class ErrorLineTracker:
    """Follows a stage's output: remembers its last ``error:`` line, so a failure reads as the stage's own
    message, and hands every line to the command's ``on_line``."""

    def __init__(self, on_line: Callable[[str], None] | None = None) -> None:
        self.last: str | None = None
        self.on_line = on_line

    def feed(self, text: str) -> None:
        for line in text.splitlines():
            if self.on_line is not None:
                self.on_line(line)
            if line.startswith(STAGE_ERROR_PREFIX):
                self.last = line[len(STAGE_ERROR_PREFIX):].strip()

    def failure(self, command: StageCommand, detail: str) -> StageFailed:
        if self.last:
            return StageFailed(self.last)
        where = f"; log: {command.log_path}" if command.log_path else ""
        return StageFailed(f"stage {command.label} {detail}{where}")


@dataclass
class StageCommand:
    module: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # Extra entries put before the code root on PYTHONPATH (e.g. a Python overlay's shadow package).
    python_path: list[Path] = field(default_factory=list)
    log_path: Path | None = None
    timeout_s: float | None = None
    # Called with every line the stage prints (the host's progress display follows the stage through it).
    on_line: Callable[[str], None] | None = None
    # The CPUs the stage (and what it starts) may run on; None: the runner's own. A CPU "device" of an executor.
    cpus: frozenset[int] | None = None
    # What the stage's container is labelled with beyond the runner's own labels (docker: the shard and side, so
    # what a killed process left running can be found and removed; ``prbench.runners.docker``).
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.module.rsplit(".", 1)[-1]


class Runner(Protocol):
    name: str

    def environment(self, command: StageCommand) -> dict[str, str]:
        """The variables the stage's process gets (its own environment variables, PYTHONPATH included)."""
        ...

    def run(self, command: StageCommand) -> None:
        """Run the stage to completion; raise StageFailed on a non-zero exit or timeout (StageLost when it was
        killed from outside)."""
        ...

    def interrupt(self) -> None:
        """Ask the stage running now (from another thread) to stop as on Ctrl-C; nothing when none runs."""
        ...
