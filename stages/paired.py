"""Stage ``paired``: one timing round of base and PR, interleaved item by item in fresh worker processes.

    python -m stages.paired --plan PLAN.json --round N --out FILE [--sides base,pr|base|pr]
                            [--blocks 0-31,40 --device D --node NAME]

The host writes the plan (``prbench.stages.paired``); this stage runs round ``N`` of it and writes one
``foundation.formats.paired_rounds.RoundRecord`` to ``--out`` (atomically, at the end: an interrupted round leaves
nothing behind and is redone).

Per round, every side gets a FRESH worker (``python -m <plan.worker> --worker``) on the plan's device; for the
timed visits both are pinned to the same single CPU (the last one this stage may use), so neither side gets a
better core (on a GPU too: a small model's step is launch-bound, and unpinned workers on an H100 ran whole visits
at 0.76 or 1.9 ms depending on the process), and
each worker's environment carries a padding variable of random length (``LAYOUT_PAD_VAR``), drawn per worker and
round, so no side keeps a luckier memory layout for the whole comparison. Models are prepared first (built,
compiled from the side's warm Inductor cache, warmed up); with ``groups`` each group of models gets its own fresh
workers. Then the blocks are walked in order: block ``i`` is timed A, B, B, A with A = base when ``(i + N + p) % 2
== 0``, else PR, so each side goes first once and last once per block (a drift, or an advantage of running right
after the other process, cancels), and the starting side alternates between blocks, rounds and passes. The blocks
are walked ``passes`` times (pass ``p`` = 0, 1, ...), all of them each time, so an item's visits are spread over
the round. Each visit of a side's job gives one visit record per item (a C++ graph job times all its kernels). A
worker that crashes or hangs past the job's ``timeout_s`` costs error visits for that job's items, the job is
skipped for the rest of the round on that side, and the worker is restarted (models re-prepared) for the next
block.

Kernel modules: with ``modules_per_worker`` N (``foundation.hip_modules``: ROCm's HIP module table runs out
when one process loads thousands), the round's blocks are cut into consecutive groups of N, each with fresh workers
that load only the group's modules. A job whose reply carries error 209 (``hipErrorNoBinaryForGpu``) is timed
once more in a fresh worker (prepared again); a second 209 is the job's error visit and the job is skipped for the
rest of the round on that side, as after a crash.

A round may be cut into shards (``foundation.formats.round_shards``): ``--blocks`` times only those blocks (their items
are the only ones prepared), on ``--device`` instead of the plan's (the workers' environment is pinned to it again,
with the plan's ``platform``), and the record's ``shards`` entry says where it ran (``--node``). The block numbers,
passes and ABBA order are the plan's, so the shards' records merge into the round's record.

With ``--sides base`` (or ``pr``) only that side's jobs are timed: docker recipes run the two sides in their
own images, one stage per side, alternating which side goes first from round to round.

The plan is ``foundation.formats.stage_records.Plan`` (its JSON format is that module's docstring).
``prepare`` jobs go to every fresh worker before its first visit, both sides at once: a model is built,
compiled and warmed up; a kernel job's module is loaded (``"kind": "load"``).
``env`` is how the side's worker environment (PYTHONPATH included) differs from this stage's own: laid over it,
``null`` unsetting a variable (inside a container this stage's environment also holds the image's variables).
A job is what the worker takes, plus ``timeout_s``; its items are ``job["kernels"]`` ({kernel name: organized
path}) or ``job["model"]``. ``organized`` (kernels): its ``*.best_config`` files are deleted before the round, so
every round autotunes afresh.

Stdlib only: the workers import torch, this process does not.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation.errors import UserError
from foundation.formats.paired_rounds import SIDES, RoundRecord, Visit, write_round
from foundation.formats.round_shards import parse_block_ranges
from foundation.formats.stage_records import (
    LAYOUT_PAD_VAR,
    Block,
    Plan,
    PlanJob,
    SidePlan,
    device_env,
    job_items,
    read_plan,
)
from foundation.hip_modules import is_error_209
from foundation.records import is_number
from stages.entry import StageArgumentParser, raise_if_stopped, run_as_script
from stages.support.progress import progress_line
from stages.support.worker_process import Worker, WorkerFailure, last_cpu, reply_entry, reply_outcomes

# A variable of random length in each worker's environment. The sides' environments differ by fixed amounts
# (their paths say base/ or pr/), and the environment's size sets where the stack starts and how it is aligned,
# which can move a process's speed by a percent or more for as long as it lives. Drawn afresh per worker and round,
# that layout becomes part of the round-to-round spread the intervals carry instead of a fixed offset between sides.
LAYOUT_PAD_MAX = 4096


# --- one side within a round ---------------------------------------------------------------------------------


def fresh_worker_env(side: SidePlan, layout_pad: int) -> dict[str, str]:
    """A fresh worker's environment: this stage's, the side's laid over it (``None`` unsets a variable), and the
    padding variable ``layout_pad`` characters long."""
    env = {k: v for k, v in {**os.environ, **side.env}.items() if v is not None}
    env[LAYOUT_PAD_VAR] = "x" * layout_pad
    return env


class Side:
    """One side's worker in a round: fresh at the start of each group, restarted (and re-prepared) after a crash."""

    def __init__(self, name: str, plan: Plan, cpus: set[int] | None, say: Callable[[str], None],
                 device: str | None = None, layout_pad: int = 0, t0: float | None = None) -> None:
        side = plan.sides[name]
        self.name = name
        self.say = say
        env = fresh_worker_env(side, layout_pad)
        if device is not None and device != plan.device:  # a shard placed on another device than the plan's
            env = device_env(device, plan.platform or ("cpu" if device == "cpu" else "cuda"), env)
        self.layout_pad = layout_pad
        self.worker = Worker(name, plan.worker, env, Path(side.log), cpus)
        self.all_prepares = side.prepare
        self.prepares: list[PlanJob] = []
        # item → why this side cannot time it in this round (its prepare failed, or it killed the worker)
        self.failed: dict[str, str] = {}
        self.start_error = ""
        self.compiles: dict[str, list[float]] = {}  # model → first-call seconds of each prepare in this round
        self.t0 = time.monotonic() if t0 is None else t0  # the round's start: the startups' clock
        # One entry per worker start: when (s since the round started), spawn → ready, the worker's own
        # imports, each prepare job's wall time and the numbers its reply gave, and when the worker was pinned.
        self.startups: list[dict[str, Any]] = []

    def start_group(self, blocks: list[tuple[int, Block]]) -> None:
        """A fresh worker for this side's items of the group's blocks."""
        self.worker.stop()
        items = {item for _, block in blocks if (job := block.get(self.name)) for item in job_items(job).values()}
        self.prepares = [j for j in self.all_prepares if set(job_items(j).values()) & items]
        self.failed = {}
        self._start()

    def _start(self) -> None:
        """Start the worker and prepare its items (models compiled, kernel modules loaded); a prepare that kills
        the worker fails that job's items only."""
        self.start_error = ""
        while True:
            startup: dict[str, Any] = {"at_s": self._since_t0(), "prepares": []}
            self.startups.append(startup)
            try:
                self.worker.start()
            except WorkerFailure as exc:
                self.start_error = f"worker did not start: {exc}"
                return
            startup.update(ready_s=self.worker.ready_s, imports_s=self.worker.imports_s)
            current: list[str] = []
            try:
                for index, job in enumerate(self.prepares):
                    current = list(job_items(job).values())
                    if not any(item in self.failed for item in current):
                        started = time.monotonic()
                        numbers = self._prepare(self._naming_later_models(index))
                        startup["prepares"].append({"items": current, **numbers,
                                                    "wall_s": round(time.monotonic() - started, 3)})
                self.worker.pin_now()  # after start-up and compiles: only the timed visits share one CPU
                startup["pinned_at_s"] = self._since_t0()
                return
            except WorkerFailure as exc:
                self.failed.update(dict.fromkeys(current, f"prepare: {exc}"))

    def _naming_later_models(self, index: int) -> PlanJob:
        """Prepare job ``index``; a model's also names the models this worker prepares after it (``later``), which
        the model worker builds before it compiles this one (`stages.model_worker`)."""
        job = self.prepares[index]
        if "model" not in job:
            return job
        later = [j["model"] for j in self.prepares[index + 1:] if "model" in j and j["model"] not in self.failed]
        return {**job, "later": later}

    def _since_t0(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def _prepare(self, job: PlanJob) -> dict[str, float]:
        """Run one prepare job; the seconds its reply reports (a model's build, first call, warm-up)."""
        reply = self.worker.run(job, float(job["timeout_s"]))
        errors = []
        numbers: dict[str, float] = {}
        for key, item in job_items(job).items():
            entry, error = reply_entry(reply, key)
            if error:
                self.failed[item] = f"prepare: {error}"
                errors.append(error)
            numbers.update({k: float(v) for k, v in entry.items() if k.endswith("_s") and is_number(v)})
        if "model" in job:
            # The first call's time shows whether the compile loaded the side's warm cache (seconds, not minutes).
            compile_s = entry.get("compile_s", 0.0)
            first = f"{compile_s:.1f} s" if is_number(compile_s) else "unknown"
            if not errors and is_number(compile_s):
                self.compiles.setdefault(job["model"], []).append(float(compile_s))
            done = f"failed: {errors[0]}" if errors else f"ok, first call {first}"
            self.say(f"pair: prepared {self.name} {job['model']}: {done}")
        elif errors:
            self.say(f"pair: prepared {self.name} {Path(job.get('path', '?')).name}: failed: {errors[0]}")
        return numbers

    def visit(self, job: PlanJob) -> dict[str, tuple[list[float], str]]:
        """Time one job: {item: (samples, error)}; after an error 209 once more in a fresh worker."""
        skipped = {item for item in job_items(job).values() if item in self.failed}
        result = self._visit(job)
        if not _error_209(result, skipped):
            return result
        # The worker's HIP module table may be full: a fresh worker (prepared again) holds only what it loads next.
        self.say(f"pair: {self.name} {_job_label(job)}: error 209; timed again in a fresh worker")
        self.worker.stop()
        result = self._visit(job)
        if _error_209(result, skipped):
            self.worker.stop()  # the next job gets a fresh worker; this one is skipped for the round, as a crash
            self.failed.update({item: error for item, (_, error) in result.items() if item not in skipped})
        return result

    def _visit(self, job: PlanJob) -> dict[str, tuple[list[float], str]]:
        items = job_items(job)
        if not self.worker.alive:
            self._start()
        if self.start_error:
            return {item: ([], self.start_error) for item in items.values()}
        skipped: dict[str, tuple[list[float], str]] = {item: ([], self.failed[item]) for item in items.values()
                                                       if item in self.failed}
        if len(skipped) == len(items):
            return skipped
        try:
            reply = self.worker.run(job, float(job["timeout_s"]))
        except WorkerFailure as exc:
            # A job that killed its worker would only kill (or hang) the next one too: skip it for the round.
            for item in items.values():
                self.failed[item] = str(exc)
            return {item: ([], str(exc)) for item in items.values()}
        return {**outcomes(job, reply), **skipped}

    def describe(self, device: str) -> dict[str, Any]:
        cpus = sorted(self.worker.cpus) if self.worker.cpus is not None else []
        return {"device": device, "cpus": cpus, "pids": self.worker.pids, "starts": self.worker.starts,
                "layout_pad": self.layout_pad, "startups": self.startups}


def _error_209(result: dict[str, tuple[list[float], str]], skipped: set[str]) -> bool:
    """Whether a visit's reply (not an item skipped before it) carries error 209 (`is_error_209`)."""
    return any(is_error_209(error) for item, (_, error) in result.items() if item not in skipped)


def outcomes(job: PlanJob, reply: dict[str, Any]) -> dict[str, tuple[list[float], str]]:
    """A worker's reply split per item; an item without samples (or with a mis-shaped entry) is an error."""
    items = job_items(job)
    per_key = reply_outcomes(reply, list(items))
    return {item: per_key[key] for key, item in items.items()}


# --- the round ------------------------------------------------------------------------------------------------


def side_order(block: int, number: int, pass_index: int = 0) -> tuple[str, str, str, str]:
    """The visits of one block: A B B A, base first when ``block + round + pass`` is even.

    Each side is timed first once and last once in every block, so a position effect (the visit after the
    other process ran is slower, or faster) and a linear drift cancel within the round, per item; the first side
    alternates from block to block, round to round and pass to pass.
    """
    first, second = ("base", "pr") if (block + number + pass_index) % 2 == 0 else ("pr", "base")
    return first, second, second, first


def _label(block: Block) -> str:
    return _job_label(next(j for j in block.values() if j is not None))


def _job_label(job: PlanJob) -> str:
    if "model" in job:
        return job["model"]
    name = Path(job.get("path", "?")).name
    return name if len(job["kernels"]) == 1 else f"{name} ({len(job['kernels'])} kernels)"


def _block_items(blocks: list[tuple[int, Block]]) -> set[str]:
    return {item for _, block in blocks for job in block.values() if job for item in job_items(job).values()}


def _groups(plan: Plan, blocks: list[tuple[int, Block]]) -> list[list[tuple[int, Block]]]:
    """The blocks of each group that has blocks to time, in plan order (one group without groups): the plan's
    groups, or consecutive groups of ``modules_per_worker`` blocks (each block holds one job per side at most).

    Only the items of ``blocks`` are prepared: a shard of the round loads and compiles its own items only.
    """
    if plan.modules_per_worker:
        size = plan.modules_per_worker
        return [blocks[i:i + size] for i in range(0, len(blocks), size)]
    if not plan.groups:
        return [blocks] if blocks else []
    items = _block_items(blocks)
    out: list[list[tuple[int, Block]]] = []
    for group in plan.groups:
        members = set(group) & items
        mine = [(i, b) for i, b in blocks if any(set(job_items(j).values()) & members for j in b.values() if j)]
        if mine:
            out.append(mine)
    return out


def _remove_best_configs(plan: Plan, sides: list[str], blocks: list[tuple[int, Block]]) -> None:
    """A previous round's autotune choice must not spare this round the autotuning. The whole round clears every
    side's directory; a shard only its own kernels' files (a shard of another round may be tuning the others)."""
    whole = len(blocks) == len(plan.blocks)
    for side in sides:
        organized = plan.sides[side].organized
        if not organized:
            continue
        if whole:
            stale = list(Path(organized).rglob("*.best_config"))
        else:
            stale = [Path(job["path"]).with_suffix(".best_config") for _, block in blocks
                     if (job := block.get(side)) and "path" in job]
        for path in stale:
            path.unlink(missing_ok=True)


@dataclass(frozen=True)
class Placement:
    """Where a shard of a round runs: a subset of the plan's blocks (None: all), the device (None: the plan's) and
    the node's name (recorded, not used)."""

    blocks: list[int] | None = None
    device: str | None = None
    node: str = ""


def run_round(plan: Plan, number: int, sides: list[str], say: Callable[[str], None] = print,
              placement: Placement | None = None, layout: random.Random | None = None) -> RoundRecord:
    """Time round ``number``; ``layout`` draws each worker's environment padding (fresh entropy by default)."""
    placement = placement or Placement()
    started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    device = placement.device or plan.device
    cpus = {last_cpu()}
    chosen = set(range(len(plan.blocks)) if placement.blocks is None else placement.blocks)
    blocks = [(i, b) for i, b in enumerate(plan.blocks)
              if i in chosen and any(b.get(s) is not None for s in sides)]
    _remove_best_configs(plan, sides, [(i, b) for i, b in enumerate(plan.blocks) if i in chosen])
    where = f"pinned to CPU {min(cpus)}" + ("" if device == "cpu" else f", GPU {device}")
    say(f"pair: round {number}, {plan.kind}, sides {','.join(sides)}, {len(blocks)} blocks × {plan.passes} "
        f"pass(es), {where}" + (f" on {placement.node}" if placement.node else ""))
    layout = layout or random.Random()
    workers = {side: Side(side, plan, cpus, say, device, layout.randrange(LAYOUT_PAD_MAX), t0) for side in sides}
    visits: list[Visit] = []
    done, total = 0, len(blocks) * plan.passes
    try:
        for group in _groups(plan, blocks):
            _start_together([workers[side] for side in start_order(sides, number)], group)
            for pass_index in range(plan.passes):
                for index, block in group:
                    order = side_order(index, number, pass_index)
                    present = [s for s in order if s in workers and block.get(s) is not None]
                    failed = []
                    for position, side in enumerate(present):
                        started = round(time.monotonic() - t0, 3)
                        job = block[side]
                        assert job is not None
                        for item, (samples, error) in workers[side].visit(job).items():
                            visits.append(Visit(side, item, index, position, started, samples, error, pass_index))
                            if error:
                                failed.append(f"{side} {item}: {error}")
                    done += 1
                    raise_if_stopped()
                    say(progress_line("pair", done, total, f"{_label(block)}: " + ("; ".join(failed)[:300] or "ok")))
    finally:
        for worker in workers.values():
            worker.worker.stop()
    wall_s = round(time.monotonic() - t0, 3)
    shard = {"blocks": sorted(chosen), "node": placement.node, "device": device, "cpus": sorted(cpus or []),
             "sides": sides, "started_at": started_at, "wall_s": wall_s}
    return RoundRecord(kind=plan.kind, round=number, sides=sides, started_at=started_at, wall_s=wall_s,
                       workers={s: w.describe(device) for s, w in workers.items()}, visits=visits, shards=[shard],
                       compiles={s: w.compiles for s, w in workers.items() if w.compiles})


def start_order(sides: list[str], number: int) -> list[str]:
    """Whose worker is started first: base in odd rounds, PR in even ones.

    In A/A checks here the worker started first timed ~0.5 % slower over whole runs (both sides on the same CPU,
    the same files): a fixed order would turn that into a bias no number of rounds removes; alternating it makes it
    part of the round-to-round spread the intervals already carry.
    """
    return list(sides) if number % 2 else list(reversed(sides))


def _start_together(sides: list[Side], blocks: list[tuple[int, Block]]) -> None:
    """Start (and prepare) every side's worker at once: start-up is half a round when done one after the other."""
    threads = [threading.Thread(target=side.start_group, args=(blocks,), daemon=True) for side in sides]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def parse_sides(spec: str, plan: Plan, plan_path: Path) -> list[str]:
    sides = [s.strip() for s in spec.split(",") if s.strip()]
    if not sides or len(set(sides)) != len(sides) or any(s not in SIDES for s in sides):
        raise UserError(f"--sides {spec!r}: expected base,pr or base or pr")
    missing = [s for s in sides if s not in plan.sides]
    if missing:
        raise UserError(f"--plan {plan_path}: no worker environment for side {missing[0]} (--sides {spec})")
    return [s for s in SIDES if s in sides]


def _shard_blocks(spec: str | None, plan: Plan, plan_path: Path) -> list[int] | None:
    if spec is None:
        return None
    blocks = parse_block_ranges(spec)
    beyond = [b for b in blocks if b >= len(plan.blocks)]
    if beyond:
        raise UserError(f"--blocks {spec}: the plan {plan_path} has {len(plan.blocks)} blocks (no block {beyond[0]})")
    return blocks


def _device_flag(device: str | None) -> str | None:
    if device is not None and device != "cpu" and not device.isdigit():
        raise UserError(f"--device {device!r}: expected cpu or a GPU index")
    return device


def build_parser() -> argparse.ArgumentParser:
    parser = StageArgumentParser(prog="python -m stages.paired", description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=Path, required=True, help="the plan JSON written by the host")
    parser.add_argument("--round", type=int, required=True, help="round number, 1-based (decides who goes first)")
    parser.add_argument("--out", type=Path, required=True, help="round file to write")
    parser.add_argument("--sides", default="base,pr", help="base,pr (interleaved), or one side only")
    parser.add_argument("--blocks", default=None, help="only these blocks of the plan (a shard): ranges like 0-31,40")
    parser.add_argument("--device", default=None, help="the device to time on instead of the plan's: cpu or a GPU "
                                                       "index (where the executor placed the shard)")
    parser.add_argument("--node", default="", help="the node's name, recorded in the round file's shards")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.round < 1:
        raise UserError(f"--round {args.round}: rounds are numbered from 1")
    plan = read_plan(args.plan)
    sides = parse_sides(args.sides, plan, args.plan)
    placement = Placement(blocks=_shard_blocks(args.blocks, plan, args.plan), device=_device_flag(args.device),
                          node=args.node)
    try:
        record = run_round(plan, args.round, sides, say=lambda line: print(line, flush=True), placement=placement)
    except KeyboardInterrupt:
        print("pair: interrupted; the round is redone next time", flush=True)
        return 130
    write_round(args.out, record)
    bad = sum(1 for v in record.visits if v.error)
    print(f"pair: round {args.round} done in {record.wall_s:.1f} s: {len(record.visits)} visits, {bad} failed "
          f"→ {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    run_as_script(main)
