"""Benchmark: round workers forked from a parent that has done their imports, against fresh interpreters — what a
worker's start costs each way, and whether a forked worker's timings vary from process to process as much as a
fresh one's (the placement caution of docs/cost-model.md, "So the rounds keep fresh processes").

    python benchmarks/forked_workers.py RUN [--kind kernels|models] [--side base] [--processes 8] [--passes 4]
                                            [--map-pages N] [--parents K] [--json FILE]

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

With ``--parents K`` (K ≥ 2) it runs itself K times, one after the other, each a parent of its own (a fresh
interpreter that takes the side's environment and forks its ``--processes`` children), and asks what a fork server
with one parent per side would leave behind: per sort, the part of each item's time that all children of one
parent share beyond their own spread (`parent_parts`). For the forked sort that is the offset between two sides
that one parent each would give every kernel, for the whole compare; for the fresh sort, whose "parent" is only the
invocation, it is what the machine's drift between invocations gives, the level the forked one is read against.
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
import subprocess
import sys
import tempfile
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


@dataclass(frozen=True)
class ParentParts:
    """Children grouped by their parent (a nested analysis of variance of their log medians, in % of the time)."""

    parents: int
    children: int  # per parent (the fewest any parent had)
    items: int
    own_pct: float  # each item's offset that all children of a parent share, beyond their own spread
    child_own_pct: float  # each item's own spread between children of one parent
    f: float  # the test of own_pct > 0: mean squares between parents over within, per item
    p: float
    shared_pct: float  # the offset over all items that a parent's children share, beyond their own
    child_shared_pct: float  # the spread of the children's offsets over all items, within a parent


def parent_parts(groups: list[list[dict[str, float]]]) -> ParentParts | None:
    """How much of each item's time a parent passes on to all its children: ``groups[k]`` holds parent k's
    children, each {item: median}. Each child's offset over all items (what it shares over its items, which the
    in-run control takes out) is set apart first; what is left per item is split into between parents and within
    (degrees of freedom (K−1)(J−1) and K(P−1)(J−1)). None when there are fewer than 2 parents, 2 children each or
    2 items every child timed."""
    from scipy import stats

    children = min((len(group) for group in groups), default=0)
    if len(groups) < 2 or children < 2:
        return None
    items = sorted(set.intersection(*(set(child) for group in groups for child in group[:children])))
    items = [item for item in items if all(child[item] > 0 for group in groups for child in group[:children])]
    if len(items) < 2:
        return None
    k_n, p_n, j_n = len(groups), children, len(items)
    logs = [[[math.log(child[item]) for item in items] for child in group[:children]] for group in groups]
    item_mean = [statistics.fmean(row[j] for group in logs for row in group) for j in range(j_n)]
    offsets = [[statistics.fmean(row[j] - item_mean[j] for j in range(j_n)) for row in group] for group in logs]
    left = [[[row[j] - item_mean[j] - offsets[k][i] for j in range(j_n)] for i, row in enumerate(group)]
            for k, group in enumerate(logs)]
    parent_item = [[statistics.fmean(row[j] for row in group) for j in range(j_n)] for group in left]
    within = sum((row[j] - parent_item[k][j]) ** 2 for k, group in enumerate(left) for row in group
                 for j in range(j_n)) / (k_n * (p_n - 1) * (j_n - 1))
    between = p_n * sum(value ** 2 for means in parent_item for value in means) / ((k_n - 1) * (j_n - 1))
    parent_offset = [statistics.fmean(group) for group in offsets]
    shared_within = sum((o - parent_offset[k]) ** 2 for k, group in enumerate(offsets) for o in group) / (
        k_n * (p_n - 1))
    shared_between = p_n * statistics.variance(parent_offset)
    f = between / within if within > 0 else math.inf
    return ParentParts(
        parents=k_n, children=p_n, items=j_n,
        own_pct=100 * math.sqrt(max(between - within, 0.0) / p_n), child_own_pct=100 * math.sqrt(within),
        f=f, p=float(stats.f.sf(f, (k_n - 1) * (j_n - 1), k_n * (p_n - 1) * (j_n - 1))),
        shared_pct=100 * math.sqrt(max(shared_between - shared_within, 0.0) / p_n),
        child_shared_pct=100 * math.sqrt(shared_within))


def run_parents(args: argparse.Namespace) -> int:
    """This benchmark run ``args.parents`` times, each in a fresh interpreter of its own (a parent), then the
    children of each sort grouped by parent (`parent_parts`)."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="prbench-parents-") as folder:
        for number in range(1, args.parents + 1):
            out = Path(folder) / f"parent-{number}.json"
            print(f"parent {number} of {args.parents}:", flush=True)
            command = [sys.executable, __file__, str(args.run), "--kind", args.kind, "--side", args.side,
                       "--processes", str(args.processes), "--passes", str(args.passes), "--map-pages",
                       str(args.map_pages), "--json", str(out)]
            done = subprocess.run(command, check=False).returncode
            if done != 0:
                raise SystemExit(f"parent {number}: the benchmark exited with {done} (its output is above)")
            runs.append(json.loads(out.read_text(encoding="utf-8")))
    parts = {how: parent_parts([[w["medians"] for w in run["workers"] if w["how"] == how] for run in runs])
             for how in ("fresh", "forked")}
    for how, found in parts.items():
        if found is None:
            print(f"{how:6}: n/a (too few children or items to split)")
            continue
        print(f"{how:6}: {found.parents} parents x {found.children} children, {found.items} items: each item's "
              f"offset a parent passes on {found.own_pct:.2f} % (children's own {found.child_own_pct:.2f} %; "
              f"F {found.f:.2f}, p {found.p:.2g}); over all items {found.shared_pct:.2f} % (children's "
              f"{found.child_shared_pct:.2f} %)")
    if args.json:
        write_json(args.json, {"format_version": FORMAT_VERSION, "run": str(args.run), "side": args.side,
                               "kind": args.kind, "parents": runs,
                               "parent_parts": {how: asdict(found) if found else None
                                                for how, found in parts.items()}})
    return 0


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
    parser.add_argument("--parents", type=int, default=1,
                        help="run the whole benchmark this many times, each a parent of its own, and split the "
                             "children's times by parent (default 1: this process is the one parent)")
    parser.add_argument("--json", type=Path, help="write every worker's medians and the summary here")
    args = parser.parse_args(argv)
    if args.processes < 2 or args.passes < 1 or args.map_pages < 0 or args.parents < 1:
        parser.error("--processes must be at least 2, --passes and --parents at least 1 and --map-pages at least 0")
    plan_path = args.run / "pair" / args.kind / "plan.json"
    if not plan_path.is_file():
        parser.error(f"{args.run}: no pair/{args.kind}/plan.json (a finished compare's run directory)")
    if args.parents > 1:
        return run_parents(args)
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
