"""Benchmark: round workers forked from a parent that has done their imports, against fresh interpreters — what a
worker's start costs each way, and whether a forked worker's timings vary from process to process as much as a
fresh one's (the placement caution of docs/cost-model.md, "So the rounds keep fresh processes").

    python benchmarks/forked_workers.py RUN [--kind kernels|models] [--side base] [--processes 8] [--passes 4]
                                            [--map-pages N] [--json FILE]

``RUN`` is a finished compare's run directory (README command 1's). The jobs of its plan for one kind
(``pair/<kind>/plan.json``) and one side are timed by ``--processes`` workers of each sort, started alternately
(fresh, forked, fresh, ...) so that a drift of the machine lands on both:

* fresh: the paired stage's own worker (``stages.support.worker_process.Worker``): a new interpreter with the side's
  environment and a padding variable of random length, as a round starts it;
* forked: a child of this process, which took the side's environment and made itself ready as the worker does
  (``worker_setup``: torch, dynamo and transformers imported, Inductor prepared) and, for kernels, imported what
  the side's graph modules import, before the first fork; the child maps a region of random size first
  (``--map-pages``), so that what it loads need not land where its siblings' did.

Each worker prepares the side's items (models built and compiled from the side's cache, kernel modules loaded), is
pinned to the last CPU and visits every job ``--passes`` times. Per sort it prints the start (spawn to prepared,
median over workers) and, over the items, the median spread of the workers' medians (the standard deviation of
their logs, in %): the process level the rounds average out, which forking must not shrink into a fixed offset.
Run it with the venv of the run (torch), from the repository root.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import math
import mmap
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from foundation.atomic_io import write_json  # noqa: E402
from foundation.formats.stage_records import Plan, PlanJob, read_plan  # noqa: E402
from stages.paired import LAYOUT_PAD_MAX, fresh_worker_env  # noqa: E402
from stages.support.worker_process import JobHandler, Worker, last_cpu, pin  # noqa: E402

FORMAT_VERSION = 1
MAP_PAGES_MAX = 4096  # pages a forked child maps before its loads, by default (up to 16 MiB)


@dataclass(frozen=True)
class Worked:
    """One worker's run: fresh or forked, seconds from spawn to its items prepared, and {item: median sample}."""

    how: str  # fresh or forked
    start_s: float
    medians: dict[str, float]


def side_jobs(plan: Plan, side: str) -> tuple[list[PlanJob], list[PlanJob]]:
    """The side's prepare jobs and the jobs its blocks visit, in plan order."""
    if side not in plan.sides:
        raise SystemExit(f"--side {side}: the plan has sides {', '.join(sorted(plan.sides))}")
    visits = [job for block in plan.blocks if (job := block.get(side)) is not None]
    return list(plan.sides[side].prepare), visits


def graph_imports(paths: list[str]) -> list[str]:
    """The packages the graph modules import at their top level (torch and its Inductor modules), each once."""
    names: dict[str, None] = {}
    for path in paths:
        for node in ast.parse(Path(path).read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                names.update((alias.name, None) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names[node.module] = None
    return list(names)


def medians_of(replies: list[dict[str, Any]]) -> dict[str, float]:
    """{item: median of all its samples over the visits}; an item with an error or no sample is left out."""
    pooled: dict[str, list[float]] = {}
    for reply in replies:
        for name, entry in reply.get("results", {}).items():
            if entry.get("samples"):
                pooled.setdefault(name, []).extend(entry["samples"])
    return {name: statistics.median(samples) for name, samples in pooled.items()}


def process_spread_pct(workers: list[Worked]) -> dict[str, float]:
    """{item: standard deviation of the log of the workers' medians, in %} over the items every worker timed."""
    if len(workers) < 2:
        return {}
    common = set.intersection(*(set(w.medians) for w in workers))
    return {name: 100 * statistics.stdev(math.log(w.medians[name]) for w in workers) for name in sorted(common)
            if all(w.medians[name] > 0 for w in workers)}


def run_fresh(plan: Plan, side: str, prepare: list[PlanJob], visits: list[PlanJob], passes: int,
              log: Path) -> Worked:
    env = fresh_worker_env(plan.sides[side], random.randrange(LAYOUT_PAD_MAX))  # drawn per worker, as a round does
    worker = Worker(side, plan.worker, env, log, {last_cpu()})
    begin = time.monotonic()
    try:
        worker.start()
        for job in prepare:
            worker.run(job, float(job["timeout_s"]))
        start_s = time.monotonic() - begin
        worker.pin_now()
        replies = [worker.run(job, float(job["timeout_s"])) for _ in range(passes) for job in visits]
    finally:
        worker.stop()
    return Worked("fresh", start_s, medians_of(replies))


def take_side_environment(plan: Plan, side: str) -> None:
    """This process takes the side's environment (the plan's, laid over its own) before it imports torch: a PR
    side's overlay (its ``PYTHONPATH``) goes in front of the import path, as it does in a fresh worker."""
    for key, value in plan.sides[side].env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    overlay = plan.sides[side].env.get("PYTHONPATH")
    if overlay:
        sys.path[:0] = [entry for entry in overlay.split(os.pathsep) if entry]


def prepare_parent(worker: str, prepare: list[PlanJob]) -> Callable[[], JobHandler]:
    """This process set up as the plan's worker is (``worker_setup``), and for kernel workers the imports of the
    side's graph modules done; returns what makes a worker's job handler, which each forked child calls."""
    make_handler: Callable[[], JobHandler] = importlib.import_module(worker).worker_setup()
    for name in graph_imports(sorted({job["path"] for job in prepare if "path" in job})):
        importlib.import_module(name)
    return make_handler


def run_forked(make_handler: Callable[[], JobHandler], prepare: list[PlanJob], visits: list[PlanJob], passes: int,
               log: Path, map_pages: int) -> Worked:
    read_end, write_end = os.pipe()
    begin = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the benchmark
        status = 1
        try:
            os.close(read_end)
            with log.open("a") as errors:  # what a worker prints goes to the log, as a fresh worker's does
                os.dup2(errors.fileno(), 2)
            pages = random.randrange(map_pages) if map_pages else 0
            region = mmap.mmap(-1, mmap.PAGESIZE * pages) if pages else None  # noqa: F841 (held while it times)
            handle = make_handler()
            for job in prepare:
                handle(job)
            start_s = time.monotonic() - begin
            pin(os.getpid(), {last_cpu()})
            replies = [handle(job) for _ in range(passes) for job in visits]
            with os.fdopen(write_end, "w") as out:
                json.dump({"start_s": start_s, "medians": medians_of(replies)}, out)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as reply:
        text = reply.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not text:
        raise SystemExit(f"a forked worker failed (wait status {status})")
    data = json.loads(text)
    return Worked("forked", data["start_s"], data["medians"])


def shared_and_own_pct(workers: list[Worked]) -> tuple[float, float] | None:
    """The process level split in two (in % of the time): the spread of what all items of a worker share (a worker
    slower as a whole, which the in-run control takes out) and each item's own, from the item × worker table of
    log medians (two-way, without replication: the worker effects' standard deviation and the residuals')."""
    items = sorted(set.intersection(*(set(w.medians) for w in workers))) if len(workers) >= 2 else []
    if len(items) < 2:
        return None
    table = [[math.log(w.medians[item]) for item in items] for w in workers]
    item_means = [statistics.fmean(row[j] for row in table) for j in range(len(items))]
    offsets = [statistics.fmean(row[j] - item_means[j] for j in range(len(items))) for row in table]
    residuals = [row[j] - item_means[j] - offsets[i] for i, row in enumerate(table) for j in range(len(items))]
    own_var = sum(r * r for r in residuals) / ((len(workers) - 1) * (len(items) - 1))
    shared_var = max(statistics.variance(offsets) - own_var / len(items), 0.0)
    return 100 * math.sqrt(shared_var), 100 * math.sqrt(own_var)


def summary(workers: list[Worked]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for how in ("fresh", "forked"):
        mine = [w for w in workers if w.how == how]
        spread = process_spread_pct(mine)
        split = shared_and_own_pct(mine)
        out[how] = {"workers": len(mine), "start_s_median": statistics.median(w.start_s for w in mine),
                    "items": len(spread),
                    "process_spread_pct_median": statistics.median(spread.values()) if spread else None,
                    "shared_pct": split[0] if split else None, "own_pct": split[1] if split else None,
                    "process_spread_pct": spread}
    return out


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} %"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a finished compare's run directory")
    parser.add_argument("--kind", choices=("kernels", "models"), default="kernels",
                        help="whose plan: kernel or model rounds (default kernels)")
    parser.add_argument("--side", default="base", help="the side whose jobs are timed (default base)")
    parser.add_argument("--processes", type=int, default=8, help="workers of each sort, fresh and forked (default 8)")
    parser.add_argument("--passes", type=int, default=4, help="visits of every job per worker (default 4)")
    parser.add_argument("--map-pages", type=int, default=MAP_PAGES_MAX,
                        help=f"a forked child maps a region of up to this many pages before its loads, its size "
                             f"drawn per child; 0: none (default {MAP_PAGES_MAX})")
    parser.add_argument("--json", type=Path, help="write every worker's medians and the summary here")
    args = parser.parse_args(argv)
    if args.processes < 2 or args.passes < 1 or args.map_pages < 0:
        parser.error("--processes must be at least 2, --passes at least 1 and --map-pages at least 0")
    plan_path = args.run / "pair" / args.kind / "plan.json"
    if not plan_path.is_file():
        parser.error(f"{args.run}: no pair/{args.kind}/plan.json (a finished compare's run directory)")
    plan = read_plan(plan_path)
    prepare, visits = side_jobs(plan, args.side)
    log = args.run / f"forked-workers-{args.kind}.log"
    workers: list[Worked] = []
    take_side_environment(plan, args.side)
    make_handler = prepare_parent(plan.worker, prepare)
    for index in range(2 * args.processes):
        if index % 2 == 0:
            workers.append(run_fresh(plan, args.side, prepare, visits, args.passes, log))
        else:
            workers.append(run_forked(make_handler, prepare, visits, args.passes, log, args.map_pages))
        print(f"{workers[-1].how:6} worker {index // 2 + 1}: start {workers[-1].start_s:.2f} s, "
              f"{len(workers[-1].medians)} items", flush=True)
    result = summary(workers)
    for how, entry in result.items():
        print(f"{how:6}: start {entry['start_s_median']:.2f} s (median of {entry['workers']}), process spread "
              f"{_pct(entry['process_spread_pct_median'])} (median over {entry['items']} items): shared "
              f"{_pct(entry['shared_pct'])}, each item's own {_pct(entry['own_pct'])}")
    if args.json:
        write_json(args.json, {"format_version": FORMAT_VERSION, "run": str(args.run), "side": args.side,
                               "kind": args.kind, "passes": args.passes, "map_pages": args.map_pages, "summary": result,
                               "workers": [asdict(w) for w in workers]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
