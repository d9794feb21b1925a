"""The pipeline: run a variant's stages through a runner, recording each in the run manifest.

A stage is skipped when the manifest says it finished with the same inputs and its outputs exist; ``force``
names stages to redo. Every stage's inputs include the variant's identity and the inputs of the stage
before it, so a change upstream (another overlay, another setting) redoes everything downstream.

A run-level ("joint") stage belongs to the comparison rather than to one variant (the paired timing rounds):
its key is ``pair/<name>``, its log ``<run>/pair/logs/<name>.log``, its inputs whatever it names (both sides'
upstream hashes), and its commands carry the runner of the environment each needs.

A stage that fails leaves no outputs behind (its ``reset`` runs and its declared outputs are removed; its log
stays, it is how the user finds out why), so nothing reads half a result as a whole one; a stopped stage keeps
what it wrote and resumes from it next time with the same inputs (saying what it kept, ``StageSpec.kept``):
interrupted (Ctrl-C, SIGTERM to the host), or killed from outside (``StageLost``: a stop that reached the stage's
process before the host, as a ``kill`` of the process tree or a machine's shutdown does). A stage that failed
because the disk is full says so in one line, whatever its own output looked like.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from foundation import atomic_io
from foundation.errors import UserError
from foundation.formats.run_layout import PAIRED_DIR, VariantLayout
from foundation.formats.stage_records import pinned_over
from foundation.io_errors import NoSpaceLeft, no_space_in, no_space_message
from prbench.runners import SIDE_LABEL, Runner, StageCommand, StageFailed, StageLost
from prbench.runners.local import python_keeps_bytecode
from prbench.runs.run_store import Run, input_hash
from prbench.sides.overlay import PythonOverlay, installed_package_dir
from prbench.sides.variants import Variant

JOINT = PAIRED_DIR  # key prefix and directory of the stages that belong to the run, not to one variant
_LOG_TAIL_BYTES = 64 * 1024  # how much of a failed stage's log is searched for a full disk


class StageProgress:
    """A rich progress bar that follows a stage's ``[name] i/N ...`` lines (``stages.support.progress``, every
    stage)."""

    _pattern = re.compile(r"^\[[\w-]+\]\s+(\d+)/(\d+)\s*(.*)")

    def __init__(self, console: Console, title: str) -> None:
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True)
        self._task = self._progress.add_task(title, total=None)
        self._title = title

    def __enter__(self) -> StageProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def feed(self, line: str) -> None:
        match = self._pattern.match(line)
        if match:
            done, total, what = int(match.group(1)), int(match.group(2)), match.group(3)
            # "i/N name: start" means item i is under way, so i-1 are finished.
            finished = done - 1 if what.rstrip().endswith("start") else done
            self._progress.update(self._task, completed=finished, total=total,
                                  description=f"{self._title} {what[:60]}")


@dataclass
class StageSpec:
    """What a stage needs from the pipeline: its inputs, its outputs and how to build its command.

    A step that only combines files already in the run directory gives ``host`` instead of ``command``: it
    runs in this process, with the same skip / force / manifest rules.
    """

    name: str
    inputs: dict[str, Any]
    outputs: list[Path]
    command: Callable[[], StageCommand] | None = None
    summarize: Callable[[], dict[str, Any]] = field(default=dict)
    # Removes what an attempt wrote. Called before a forced run or when the inputs changed, and after a failed
    # attempt, but not when resuming an interrupted attempt with the same inputs (the suite resumes from it).
    reset: Callable[[], None] = field(default=lambda: None)
    host: Callable[[], None] | None = None
    # A joint stage's commands in order, each with the runner it runs in (docker: one per side, in its image).
    commands: Callable[[], list[tuple[Runner, StageCommand]]] | None = None
    # A stage that records work done before it (its shards, run by an executor; ``host`` only merges them): when
    # that work began and for how long it ran, which the manifest shows as the stage's (None: not known).
    ran_before: Callable[[], tuple[str, float] | None] | None = None
    # What a stopped attempt with the same inputs left that this one keeps, in the user's words ("38 of 54 models
    # kept from the stopped run"; "": nothing), said once when the stage resumes.
    kept: Callable[[], str] | None = None


@dataclass
class PreparedVariant:
    variant: Variant
    directory: Path
    env: dict[str, str]
    python_path: list[Path]


class Pipeline:
    def __init__(self, run: Run, runner: Runner, console: Console | None = None, force: Iterable[str] = ()) -> None:
        self.run = run
        self.runner = runner
        self.console = console or Console()
        self.force = set(force)

    def prepare(self, variant: Variant, overlay: PythonOverlay | None, python: str) -> PreparedVariant:
        """Write the variant's env.json and (re)build its overlay; return what its stages run with."""
        directory = self.run.path(variant.name)
        directory.mkdir(parents=True, exist_ok=True)
        keep_bytecode = variant.recipe.runner == "local" and not python_keeps_bytecode(python)
        env = variant.stage_environment(directory, keep_bytecode=keep_bytecode)
        for key in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TMPDIR"):
            Path(env[key]).mkdir(parents=True, exist_ok=True)
        python_path: list[Path] = []
        if overlay is not None:
            atomic_io.write_text(VariantLayout(directory).overlay_patch, overlay.patch_text)
            installed = installed_package_dir(python, overlay.package)  # torch, or a Triton A/B's triton
            shadow = overlay.materialize(VariantLayout(directory).overlay_shadow, installed)
            python_path.append(shadow)
        description = {
            **variant.describe(),
            "runner": self.runner.name,
            "overlay_files": [f.path for f in overlay.files] if overlay else [],
            "stage_env": env,
        }
        atomic_io.write_json(VariantLayout(directory).env_json, description)
        return PreparedVariant(variant=variant, directory=directory, env=env, python_path=python_path)

    def run_stage(self, prepared: PreparedVariant, spec: StageSpec) -> str:
        """Run one stage unless it is already done with the same inputs; return its input hash."""

        def execute() -> None:
            if spec.host is not None:
                spec.host()
            else:
                self._run_command(prepared, spec)

        return self._run_recorded(*self.stage_entry(prepared, spec), spec, execute)

    def run_joint_stage(self, spec: StageSpec) -> str:
        """Run a stage of the whole run (``pair/<name>``) unless it is already done with the same inputs; its
        ``host`` step, or else its ``commands``."""
        execute = spec.host if spec.host is not None else lambda: self._run_joint(spec)
        return self._run_recorded(*self.joint_entry(spec), spec, execute)

    @staticmethod
    def stage_entry(prepared: PreparedVariant, spec: StageSpec) -> tuple[str, dict[str, Any]]:
        """The manifest key of one side's stage and the inputs it is recorded (and skipped) by."""
        return f"{prepared.variant.name}/{spec.name}", {"variant": prepared.variant.identity_hash(), **spec.inputs}

    @staticmethod
    def joint_entry(spec: StageSpec) -> tuple[str, dict[str, Any]]:
        """The manifest key of a stage of the whole run and the inputs it is recorded (and skipped) by."""
        return f"{JOINT}/{spec.name}", dict(spec.inputs)

    def forced(self, spec: StageSpec) -> bool:
        # "--force kernels" also redoes the timing rounds "kernels-round-1", "kernels-round-2", ...
        return spec.name in self.force or spec.name.split("-")[0] in self.force

    def stage_digest(self, prepared: PreparedVariant, spec: StageSpec) -> str:
        """The input hash ``run_stage(prepared, spec)`` records (and skips by)."""
        return input_hash(self.stage_entry(prepared, spec)[1])

    def stage_pending(self, prepared: PreparedVariant, spec: StageSpec) -> bool:
        """Whether ``run_stage(prepared, spec)`` would run it (not done with the same inputs, or forced)."""
        key, inputs = self.stage_entry(prepared, spec)
        return self.forced(spec) or not self.run.is_done(key, input_hash(inputs))

    def joint_pending(self, spec: StageSpec) -> bool:
        """Whether ``run_joint_stage(spec)`` would run it (not done with the same inputs, or forced)."""
        key, inputs = self.joint_entry(spec)
        return self.forced(spec) or not self.run.is_done(key, input_hash(inputs))

    def _run_recorded(self, key: str, inputs: dict[str, Any], spec: StageSpec, execute: Callable[[], None]) -> str:
        digest = input_hash(inputs)
        forced = self.forced(spec)
        if not forced and self.run.is_done(key, digest):
            self.console.print(f"[dim]{key}: done earlier with the same inputs, skipped[/]")
            return digest
        previous = self.run.record(key)
        resumed = not forced and previous is not None and previous.input_hash == digest
        if not resumed:
            spec.reset()
        self.console.rule(f"{key}")
        if resumed and spec.kept is not None and (kept := spec.kept()):
            self.console.print(f"{key}: {kept}")
        with self.run.stage(key, inputs) as record:
            try:
                execute()
                missing = [p for p in spec.outputs if not p.exists()]
                if missing:
                    raise UserError(f"stage {key} finished but did not write {self.run.relative(missing[0])}")
                record.outputs = [self.run.relative(p) for p in spec.outputs]
                record.summary = spec.summarize()
                earlier = spec.ran_before() if spec.ran_before is not None else None
                if earlier is not None:
                    record.started, record.duration_s = earlier
            except StageLost:  # stopped from outside, as by Ctrl-C: resumed from what it wrote, like an interrupt
                raise
            except Exception:  # not KeyboardInterrupt: an interrupted attempt is resumed from what it wrote
                _discard_outputs(spec)
                raise
        return digest

    def _run_joint(self, spec: StageSpec) -> None:
        assert spec.commands is not None, f"joint stage {spec.name} has no commands"
        for runner, command in spec.commands():
            if command.log_path is None:
                command.log_path = self.run.layout.paired_logs / f"{spec.name}.log"
            with StageProgress(self.console, f"{JOINT}/{spec.name}") as progress:
                command.on_line = progress.feed
                _run_naming_a_full_disk(runner, command)

    def _run_command(self, prepared: PreparedVariant, spec: StageSpec) -> None:
        assert spec.command is not None, f"stage {spec.name} has neither a command nor a host step"
        command = spec.command()
        command.env = pinned_over(prepared.env, command.env)  # a stage pinned to a device keeps only its pin
        command.python_path = [*prepared.python_path, *command.python_path]
        command.labels = {SIDE_LABEL: prepared.variant.name, **command.labels}
        if command.log_path is None:
            command.log_path = VariantLayout(prepared.directory).log(spec.name)
        with StageProgress(self.console, f"{prepared.variant.name}/{spec.name}") as progress:
            command.on_line = progress.feed
            _run_naming_a_full_disk(self.runner, command)


def _discard_outputs(spec: StageSpec) -> None:
    """After a failed attempt: remove what it wrote, so no later step or ``invoke report`` takes it as a result.

    Failures here are not reported: the error that failed the stage is the one the user needs.
    """
    with contextlib.suppress(OSError):
        spec.reset()
    for path in spec.outputs:
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)


def _run_naming_a_full_disk(runner: Runner, command: StageCommand) -> None:
    """Run the stage; if it failed and its output shows the disk filled up, say that instead.

    A full disk rarely ends a stage with its own words: the suite's compile fails as a ``CppCompileError`` whose
    text holds the compiler's "No space left on device", a stage's last write as an ``OSError``. The tail of the
    stage's log is where that shows.
    """
    try:
        runner.run(command)
    except StageFailed as exc:
        found = no_space_in(str(exc))
        if found is None:
            found = no_space_in(_log_tail(command.log_path))
        if found is None:
            raise
        if str(exc).startswith("no space left on device"):  # the stage's own one-line error says it already
            raise NoSpaceLeft(str(exc)) from None
        log = f"; log: {command.log_path}" if command.log_path else ""
        what = found or f"the files of stage {command.label}"
        raise NoSpaceLeft(no_space_message(what) + log) from None


def _log_tail(log_path: Path | None) -> str:
    if log_path is None:
        return ""
    try:
        with open(log_path, "rb") as log:
            log.seek(0, 2)
            log.seek(max(log.tell() - _LOG_TAIL_BYTES, 0))
            return log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
