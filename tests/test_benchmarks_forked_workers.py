"""benchmarks/forked_workers.py: given a compare's kernel plan and the workers' replies, the benchmark takes one
side's jobs, the imports its graph modules make, each worker's median per kernel, and the spread between workers;
given the children of several parents, what each parent passes on to all of its children."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from forked_workers import (  # noqa: E402
    Worked,
    graph_imports,
    medians_of,
    parent_parts,
    process_spread_pct,
    shared_and_own_pct,
    side_jobs,
)

from foundation.formats.stage_records import Plan, SidePlan  # noqa: E402

# The head of a graph module as Inductor writes it for the CPU (shortened).
GRAPH = '''
# AOT ID: ['0_inference']
from ctypes import c_void_p, c_long, c_int
import torch
import math
from torch._inductor.hooks import run_intermediate_hooks
from torch._inductor.codegen.memory_planning import _align as align
from torch import device, empty_strided
from torch._inductor.async_compile import AsyncCompile
from . import sibling
from .kernels import helper

async_compile = AsyncCompile()
def call(args):
    import random
'''


def job(number: int, side: str) -> dict:
    return {"id": number, "kind": "graph", "path": f"/{side}/graph{number}.py", "kernels": {f"k{number}": "x"},
            "warmup": 1, "iterations": 3, "timeout_s": 60.0}


def test_one_sides_prepare_and_visit_jobs_in_plan_order() -> None:
    prepare = [dict(job(1, "base"), kind="load")]
    plan = Plan(kind="kernels", worker="stages.kernels", device="cpu",
                sides={"base": SidePlan(env={}, log="b.log", prepare=prepare),
                       "pr": SidePlan(env={}, log="p.log", prepare=[])},
                blocks=[{"base": job(1, "base"), "pr": job(1, "pr")}, {"base": None, "pr": job(2, "pr")},
                        {"base": job(3, "base"), "pr": None}])

    loads, visits = side_jobs(plan, "base")

    assert loads == prepare and [v["id"] for v in visits] == [1, 3]
    with pytest.raises(SystemExit, match="--side nope: the plan has sides base, pr"):
        side_jobs(plan, "nope")


def test_the_parent_imports_what_the_graph_modules_import_at_their_top_level(tmp_path: Path) -> None:
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text(GRAPH)
    second.write_text("import torch\nfrom torch._inductor.runtime import triton_heuristics\n")

    assert graph_imports([str(first), str(second)]) == [
        "ctypes", "torch", "math", "torch._inductor.hooks", "torch._inductor.codegen.memory_planning",
        "torch._inductor.async_compile", "torch._inductor.runtime"]


def test_a_workers_median_pools_its_visits_and_leaves_out_errors() -> None:
    replies = [{"results": {"k1": {"samples": [1.0, 9.0]}, "k2": {"error": "crashed"}}},
               {"results": {"k1": {"samples": [2.0]}, "k2": {"samples": []}}}]

    assert medians_of(replies) == {"k1": 2.0}


def test_the_process_spread_is_the_sd_of_the_workers_log_medians_over_kernels_all_timed() -> None:
    workers = [Worked("fresh", 1.0, {"k1": 100.0, "k2": 5.0}), Worked("fresh", 1.0, {"k1": 102.0}),
               Worked("fresh", 1.0, {"k1": 98.0, "k2": 5.0})]

    spread = process_spread_pct(workers)

    assert list(spread) == ["k1"]
    logs = [math.log(v) for v in (100.0, 102.0, 98.0)]
    mean = sum(logs) / 3
    assert spread["k1"] == pytest.approx(100 * math.sqrt(sum((x - mean) ** 2 for x in logs) / 2))
    assert process_spread_pct(workers[:1]) == {}


def test_a_worker_slower_as_a_whole_is_the_shared_part_and_the_rest_each_items_own() -> None:
    # Three workers, three items; the third worker 10 % slower on every item, and one item 2 % off in one worker.
    base = {"a": 100.0, "b": 10.0, "c": 1.0}
    workers = [Worked("fresh", 1.0, dict(base)), Worked("fresh", 1.0, {**base, "b": 10.2}),
               Worked("fresh", 1.0, {k: v * 1.1 for k, v in base.items()})]

    shared, own = shared_and_own_pct(workers)

    assert 5.0 < shared < 6.0  # the 10 % worker, as a spread over three workers
    assert 0.5 < own < 1.5  # the 2 % item, spread over the table's 4 degrees of freedom
    alike = [Worked("fresh", 1.0, {k: v * f for k, v in base.items()}) for f in (1.0, 1.05, 0.95)]
    assert shared_and_own_pct(alike)[1] == pytest.approx(0.0, abs=1e-9)
    assert shared_and_own_pct(workers[:1]) is None


def _children(parents: int, children: int, items: int, own: float, parent_own: float, parent_shared: float,
              seed: int) -> list[list[dict[str, float]]]:
    """Children's medians: each item's time × a parent's offset for that item (``parent_own``) and over all items
    (``parent_shared``) × each child's own noise (``own``), all log-normal, in fractions."""
    rng = random.Random(seed)
    times = {f"k{j}": rng.uniform(0.05, 50.0) for j in range(items)}
    groups = []
    for _ in range(parents):
        shared = rng.gauss(0, parent_shared)
        offset = {item: rng.gauss(0, parent_own) for item in times}
        groups.append([{item: t * math.exp(shared + offset[item] + rng.gauss(0, own)) for item, t in times.items()}
                       for _ in range(children)])
    return groups


def test_an_offset_each_parent_gives_its_children_per_kernel_is_found_and_its_size_read_back() -> None:
    """Six parents of six children, 37 kernels (a README run's): a parent that moves each kernel by 2 % (sd) in all
    its children, against children that differ by 1 % among themselves."""
    found = parent_parts(_children(6, 6, 37, own=0.01, parent_own=0.02, parent_shared=0.0, seed=1))

    assert found is not None and (found.parents, found.children, found.items) == (6, 6, 37)
    assert 1.6 < found.own_pct < 2.4 and 0.9 < found.child_own_pct < 1.1
    assert found.p < 1e-6


def test_children_of_parents_that_pass_nothing_on_show_no_parent_part() -> None:
    p_values = []
    for seed in range(20):
        found = parent_parts(_children(6, 6, 37, own=0.01, parent_own=0.0, parent_shared=0.0, seed=seed))
        assert found is not None and found.own_pct < 0.4 and 0.9 < found.child_own_pct < 1.1
        p_values.append(found.p)
    assert sum(p < 0.05 for p in p_values) <= 4  # a test at 5 %: about one in twenty by chance


def test_a_parent_slower_on_every_kernel_is_its_shared_part_not_each_kernels_own() -> None:
    found = parent_parts(_children(30, 6, 37, own=0.01, parent_own=0.0, parent_shared=0.03, seed=2))

    assert found is not None and 2.0 < found.shared_pct < 4.0 and found.own_pct < 0.4
    assert found.child_shared_pct < 0.5  # the children's own noise averages out over 37 kernels


def test_too_few_parents_children_or_kernels_give_no_split() -> None:
    groups = _children(3, 3, 5, own=0.01, parent_own=0.0, parent_shared=0.0, seed=3)

    assert parent_parts(groups[:1]) is None
    assert parent_parts([group[:1] for group in groups]) is None
    assert parent_parts([[{"k0": child["k0"]} for child in group] for group in groups]) is None
