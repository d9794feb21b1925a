"""The timing rounds of a comparison as shards, run by an executor, resumable shard by shard.

A round (``pair/<kind>-round-N`` in the manifest, ``pair/<kind>/round-NNN[-<side>].json``) is cut into shards of
``shard_size`` blocks (0: the whole round is one shard, as a round always was). Every shard of every round still
to do goes to the executor at once, so with several devices rounds and shards run side by side. A shard's record
is written by its stage, atomically, to ``pair/<kind>/shards/round-NNN-<inputs hash>/shard-KKK[-<side>].json``:
a finished shard is never redone (the directory is named by the round's input hash, so records of other
settings are never taken for this one's); an interrupted or lost shard left nothing there and runs again. When a
round's shards are all there, the round's stage merges them (``foundation.formats.round_shards.merge_shards``) into the
round file every reader knows.

The nodes and devices the shards ran on are in each round file's ``shards``; `node_summary` gathers them, with
the facts each node reported, for the run's ``lock.json`` (``nodes``) and the report's environment table. A shard
lost on the way (its node went down) and run again is listed in its stage's manifest summary (``redone``:
``prbench.executors.ShardRedo``), with where it was lost, where it was redone and the seconds the loss cost.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foundation.errors import UserError
from foundation.formats.paired_rounds import read_round, read_rounds, round_file, write_round
from foundation.formats.round_shards import block_ranges, merge_shards, partition_blocks
from prbench.executors import Executor, RunnerSpec, ShardOutcome, ShardRedo, ShardTask, StageStep
from prbench.runners import SHARD_LABEL, SIDE_LABEL, StageCommand
from prbench.stages.command_lines import paired_command

SHARDS_DIR = "shards"


@dataclass(frozen=True)
class SideRunner:
    """One side of the comparison as a shard sees it: its name and how a node runs its stages."""

    name: str
    runner: RunnerSpec


@dataclass(frozen=True)
class RoundShards:
    """The shards of one round: where their records go, and the commands that make them."""

    kind: str
    number: int
    digest: str  # the round stage's input hash
    kind_dir: Path  # <run>/pair/<kind>
    plan: Path
    shards: tuple[tuple[int, ...], ...]  # the blocks of each shard
    sides: tuple[SideRunner, ...]
    apart: bool  # docker recipes: one stage per side (its own image), alternating which goes first
    logs: Path

    @property
    def directory(self) -> Path:
        return self.kind_dir / SHARDS_DIR / f"round-{self.number:03d}-{self.digest}"

    def files(self, index: int) -> list[Path]:
        suffixes = [f"-{side.name}" for side in self.sides] if self.apart else [""]
        return [self.directory / f"shard-{index + 1:03d}{suffix}.json" for suffix in suffixes]

    def round_files(self) -> list[Path]:
        names = [side.name for side in self.sides] if self.apart else [None]
        return [round_file(self.kind_dir, self.number, name) for name in names]

    def missing(self) -> list[int]:
        """The shards without their records (never run, interrupted or lost)."""
        return [i for i in range(len(self.shards)) if not all(_readable(p) for p in self.files(i))]

    def key(self, index: int) -> str:
        """How progress lines, errors and the manifest name shard ``index``."""
        return f"{self.kind} round {self.number} shard {index + 1}/{len(self.shards)}"

    def task(self, index: int) -> ShardTask:
        """Shard ``index`` as an executor runs it: both sides on one device."""
        ranges = block_ranges(list(self.shards[index]))
        label = self.key(index)
        log = self.logs / (f"{self.kind}-round-{self.number}.log" if len(self.shards) == 1
                           else f"{self.kind}-round-{self.number}-shard-{index + 1}.log")
        files = self.files(index)
        if not self.apart:
            names = ",".join(side.name for side in self.sides)
            steps = [StageStep(self.sides[0].runner, self._command(files[0], names, ranges, log, label))]
        else:
            # One side per image; odd rounds base first, even rounds PR first.
            order = list(zip(self.sides, files, strict=True))
            order = order if self.number % 2 else order[::-1]
            steps = [StageStep(side.runner, self._command(out, side.name, ranges, log, label))
                     for side, out in order]
        return ShardTask(key=label, steps=tuple(steps), outputs=tuple(files))

    def _command(self, out: Path, sides: str, ranges: str, log: Path, shard: str) -> StageCommand:
        command = paired_command(self.plan, self.number, out, sides)
        command.args += ["--blocks", ranges]
        command.log_path = log
        command.labels = {SHARD_LABEL: shard, SIDE_LABEL: sides}
        return command

    def merge(self) -> None:
        """Write the round file(s) from the shards' records; every shard must be there."""
        missing = self.missing()
        if missing:
            raise UserError(f"{self.kind} round {self.number}: shard {missing[0] + 1} has no record in "
                            f"{self.directory}; run the comparison again to time it")
        for position, out in enumerate(self.round_files()):
            records = [read_round(self.files(i)[position]) for i in range(len(self.shards))]
            write_round(out, merge_shards(records))

    def clear(self, keep_current: bool) -> None:
        """Remove this round's shard records: of other inputs only, or all (``--force``)."""
        parent = self.directory.parent
        if not parent.is_dir():
            return
        for stale in parent.glob(f"round-{self.number:03d}-*"):
            if not (keep_current and stale == self.directory):
                shutil.rmtree(stale, ignore_errors=True)


def round_shards(kind: str, number: int, digest: str, kind_dir: Path, plan: Path, block_count: int,
                 shard_size: int, sides: list[SideRunner], apart: bool, logs: Path) -> RoundShards:
    shards = tuple(tuple(blocks) for blocks in partition_blocks(block_count, shard_size))
    return RoundShards(kind, number, digest, kind_dir, plan, shards, tuple(sides), apart, logs)


def run_shards(rounds: list[RoundShards], executor: Executor, say: Callable[[str], None],
               on_done: Callable[[ShardOutcome], None] = lambda outcome: None) -> None:
    """Every missing shard of ``rounds`` through the executor, all at once; a progress line per finished one."""
    tasks = [r.task(i) for r in rounds for i in r.missing()]
    run_tasks(tasks, executor, say, "pair", f"shards of {len(rounds)} round(s)", on_done)


def run_tasks(tasks: list[ShardTask], executor: Executor, say: Callable[[str], None], tag: str, what: str,
              on_done: Callable[[ShardOutcome], None] = lambda outcome: None) -> None:
    """``tasks`` through the executor, with ``[tag] i/N`` progress lines (``what``: what the N are)."""
    if not tasks:
        return
    finished = [0]
    say(f"[{tag}] 0/{len(tasks)} {what} to run ({executor.name} executor)")

    def done(outcome: ShardOutcome) -> None:
        finished[0] += 1
        again = f", attempt {outcome.attempts}" if outcome.attempts > 1 else ""
        if outcome.lost:
            again += f" ({sum(loss.lost_s for loss in outcome.lost):.1f} s lost on " \
                     f"{', '.join(dict.fromkeys(loss.slot.describe() for loss in outcome.lost))})"
        say(f"[{tag}] {finished[0]}/{len(tasks)} {outcome.key} on {outcome.slot.describe()}: "
            f"{outcome.wall_s:.1f} s{again}")
        on_done(outcome)

    executor.run(tasks, done)


@dataclass
class NodeFacts:
    """What this invocation heard from each node (``ShardOutcome.facts``), by node name, and the shards it had to
    run again (by shard key)."""

    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    redone: dict[str, list[ShardRedo]] = field(default_factory=dict)

    def add(self, outcome: ShardOutcome) -> None:
        self.facts[outcome.slot.node] = dict(outcome.facts)
        if outcome.lost:
            self.redone[outcome.key] = outcome.redos()

    def redone_summary(self, shard_keys: list[str]) -> dict[str, Any]:
        """A stage's manifest summary entry for the lost attempts of its shards (none: no entry)."""
        redos = [redo.to_dict() for key in shard_keys for redo in self.redone.get(key, [])]
        return {"redone": redos} if redos else {}


def node_summary(round_paths: list[Path], heard: NodeFacts, earlier: dict[str, Any],
                 other_shards: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``{node: {"devices": [...], "shards": N, "facts": {...}}}`` from the round files' ``shards`` entries and
    ``other_shards`` (the suite's, ``prbench.stages.suite_shards``: the same node, device and cpus fields), with the
    facts heard now or recorded by an earlier invocation (``earlier``: the previous lock's ``nodes``)."""
    nodes: dict[str, Any] = {}
    rounds = [shard for record in read_rounds([p for p in round_paths if p.is_file()]) for shard in record.shards]
    for shard in [*rounds, *(other_shards or [])]:
        name = str(shard.get("node") or "this machine")
        entry = nodes.setdefault(name, {"devices": [], "shards": 0})
        device = _device_label(shard)
        if device not in entry["devices"]:
            entry["devices"].append(device)
        entry["shards"] += 1
    for name, entry in nodes.items():
        facts = heard.facts.get(name) or (earlier.get(name) or {}).get("facts")
        if facts:
            entry["facts"] = facts
    return nodes


def time_in_shards(placements: list[dict[str, Any]]) -> tuple[str, float] | None:
    """(start of the first shard, seconds during which at least one shard ran) from shards' placements (a round's
    ``shards``, a sharded suite's): shards side by side count once, the pause between an interrupted invocation and
    the one that resumed it not at all. None when no placement carries its start and wall time."""
    # numpy (and, with the interval union, pandas) when a stage timed by its shards is recorded: not when the
    # command line starts, so a mistyped flag still answers at once.
    import numpy as np

    from analysis.traces.analyses.timeline import union_length

    pieces = []
    for shard in placements:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            started = dt.datetime.fromisoformat(str(shard["started_at"]))
            wall = float(shard["wall_s"])
            if started.tzinfo is not None and math.isfinite(wall) and wall >= 0:
                pieces.append((started, str(shard["started_at"]), wall))
    if not pieces:
        return None
    first = min(pieces)
    starts = np.array([round((started - first[0]).total_seconds() * 1e6) for started, _, _ in pieces], dtype=np.int64)
    ends = starts + np.array([round(wall * 1e6) for _, _, wall in pieces], dtype=np.int64)
    return first[1], union_length(starts, ends) / 1e6


def _device_label(shard: dict[str, Any]) -> str:
    device = str(shard.get("device", ""))
    if device == "cpu":
        cpus = shard.get("cpus") or []
        return f"CPU {','.join(map(str, cpus))}" if cpus else "CPU"
    return f"GPU {device}"


def _readable(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        read_round(path)
    except UserError:
        return False  # a foreign or damaged file is not a finished shard: it is timed again and replaced
    return True
