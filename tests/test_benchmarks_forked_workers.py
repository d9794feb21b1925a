"""benchmarks/forked_workers.py: given a compare's kernel plan and the workers' replies, the benchmark takes one
side's jobs, the imports its graph modules make, each worker's median per kernel, and the spread between workers."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from forked_workers import (  # noqa: E402
    Worked,
    graph_imports,
    medians_of,
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
