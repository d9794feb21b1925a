"""Which PyTorch op launched each kernel: counts on the real H100 and MI300X traces agree with a join done here
with plain json, kernels without a launching op are counted (never dropped), and Inductor's Triton/C++ kernels
are attributed to their compiled graph."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.traces import read_trace
from analysis.traces.analyses.ops import (
    NO_OP,
    UNLINKED,
    UNLINKED_SHARE,
    attribute,
    innermost_enclosing,
    kernel_summary,
    ops_by_category,
    ops_summary,
    unlinked_sentence,
)

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
H100 = FIXTURES / "h100_bert-small-uncased.json.gz"
MI300 = FIXTURES / "mi300_bert-small-uncased.json.gz"
CPU = FIXTURES / "cpu_tiny_bert_inductor.json.gz"
MULTIRANK = FIXTURES / "multirank" / "sampled_rank-0.json.gz"


def _independent_attribution(path: Path) -> tuple[Counter[str], Counter[str], int]:
    """Kernels and kernel time (µs) per launching op, with plain json and loops: kernel → runtime call by
    correlation id, runtime call → the innermost cpu_op on its thread whose [ts, ts + dur) holds it: the latest
    to start, then the shortest, then the one written later (PyTorch writes a parent before its children)."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    runtime = {e["args"]["correlation"]: e for e in events
               if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = [(i, e) for i, e in enumerate(events) if e.get("cat") == "cpu_op"]
    kernels: Counter[str] = Counter()
    time_us: Counter[str] = Counter()
    unlinked = 0
    for k in events:
        if k.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        launch = runtime.get(k["args"].get("correlation"))
        holders = [(o["ts"], -o["dur"], i, o["name"]) for i, o in ops if launch is not None
                   and o["tid"] == launch["tid"] and o["ts"] <= launch["ts"] < o["ts"] + o["dur"]]
        if not holders:
            unlinked += 1
            continue
        op = max(holders)[3]
        kernels[op] += 1
        time_us[op] += k["dur"]
    return kernels, time_us, unlinked


@pytest.mark.parametrize("path", [H100, MI300, MULTIRANK], ids=["h100", "mi300x", "two-threads-nccl"])
def test_every_op_launches_the_kernels_an_independent_correlation_join_finds(path: Path) -> None:
    kernels, time_us, unlinked = _independent_attribution(path)

    trace = read_trace(path)
    table = ops_summary(trace).set_index("op")

    linked = table.drop(index=NO_OP, errors="ignore")
    assert linked["kernels"].to_dict() == dict(kernels)
    for op, us in time_us.items():
        assert linked.loc[op, "kernel time ms"] == pytest.approx(us / 1e3, abs=1e-6)
    assert (table.loc[NO_OP, "kernels"] if NO_OP in table.index else 0) == unlinked
    assert table["kernels"].sum() == trace.n_events
    assert table["percent"].sum() == pytest.approx(100.0)


@pytest.mark.parametrize("path", [H100, MI300], ids=["h100", "mi300x"])
def test_every_vendors_launch_call_reaches_the_bert_gemms(path: Path) -> None:
    table = ops_summary(read_trace(path)).set_index("op")

    # ROCm launches GEMMs with hipExtModuleLaunchKernel and Triton attention with hipModuleLaunchKernel; CUDA
    # uses cuLaunchKernel / cudaLaunchKernelExC for its GEMMs: all of them reach aten::addmm here.
    assert NO_OP not in table.index
    assert table.loc["aten::addmm", "kernels"] == 26 and table.loc["aten::addmm", "calls"] == 26


def test_ops_by_category_puts_the_bert_gemms_attention_and_norms_where_an_engineer_expects() -> None:
    categories = ops_by_category(read_trace(MI300)).set_index("category")

    assert categories.loc["GEMM", "kernels"] == 26
    assert categories.loc["SDPA", "kernels"] == 4  # Triton attn_fwd under aten::_flash_attention_forward
    assert categories.loc["NORM", "kernels"] == 10
    assert categories["kernels"].sum() == 61
    assert categories["percent"].sum() == pytest.approx(100.0)


def test_the_kernel_summary_names_each_kernels_parent_op() -> None:
    summary = kernel_summary(read_trace(H100))

    flash = summary[summary["kernel"].str.contains("flash_fwd_kernel")]
    assert flash["parent op"].tolist() == ["aten::_flash_attention_forward"]
    assert flash["category"].tolist() == ["SDPA"]
    assert summary["count"].sum() == 61


def _write(tmp_path: Path, events: list[dict[str, object]], name: str = "trace.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def _op(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op") -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def _launch(ts: float, correlation: int, tid: int = 1, name: str = "cuLaunchKernel") -> dict[str, object]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": 2,
            "args": {"correlation": correlation}}


def _kernel(name: str, ts: float, dur: float, correlation: int) -> dict[str, object]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"correlation": correlation, "device": 0, "stream": 7}}


def test_kernels_without_a_launching_op_are_counted_and_kept_in_every_table(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        _op("aten::mm", 0, 10), _launch(1, 1, name="cudaLaunchKernel"), _kernel("gemm_kernel", 20, 30, 1),
        _launch(40, 2, name="cudaLaunchKernel"), _kernel("orphan_launch", 60, 10, 2),  # no op around its launch
        _kernel("no_launch_record", 80, 10, 99),  # no runtime call with this correlation
        _op("aten::add", 100, 10, tid=2), _launch(101, 3, tid=1),  # an op on another thread does not count
        _kernel("vectorized_elementwise_kernel", 120, 10, 3),
    ])

    trace = read_trace(path)
    attr = attribute(trace)
    table = ops_summary(trace, attr).set_index("op")

    assert attr.unlinked == 3
    assert table.loc[NO_OP, "kernels"] == 3 and table.loc["aten::mm", "kernels"] == 1
    assert table["kernels"].sum() == 4
    assert unlinked_sentence(trace, attr).startswith("3 kernels (50.0 % of kernel time) have no launching op")
    assert kernel_summary(trace, attr)["count"].sum() == 4
    categories = ops_by_category(trace, attr).set_index("category")
    assert categories.loc["elementwise", "kernels"] == 1  # unlinked: categorized by the kernel's own name
    # ... and shown again in a row of their own, outside the totals.
    assert categories.loc[UNLINKED_SHARE, "kernels"] == 3 and pd.isna(categories.loc[UNLINKED_SHARE, "percent"])
    assert categories["kernels"].sum() == 4 + 3


def test_with_tracelens_rules_a_launch_without_op_is_its_own_launcher_and_a_kernel_without_launch_its_own_row(
        tmp_path: Path) -> None:
    path = _write(tmp_path, [
        _op("aten::mm", 0, 10), _launch(1, 1, name="cudaLaunchKernel"), _kernel("gemm_kernel", 20, 30, 1),
        _launch(40, 2, name="cudaLaunchKernel"), _kernel("orphan_launch", 60, 10, 2),  # no op around its launch
        _kernel("no_launch_record", 80, 10, 99),  # no runtime call with this correlation
    ])

    trace = read_trace(path)
    attr = attribute(trace, "tracelens")
    ops = ops_summary(trace, attr).set_index("op")
    kernels = kernel_summary(trace, attr).set_index("kernel")

    assert ops.loc["cudaLaunchKernel", "calls"] == 1 and ops.loc["cudaLaunchKernel", "category"] == "other"
    assert ops.loc[UNLINKED, "kernels"] == 1 and pd.isna(ops.loc[UNLINKED, "percent"])
    assert ops["percent"].sum() == pytest.approx(100.0)
    assert ops.loc["aten::mm", "percent"] == pytest.approx(100.0 * 30 / 40)
    assert kernels.loc["orphan_launch", "category"] == "runtime"
    assert kernels.loc["no_launch_record", "category"] == UNLINKED


def test_triton_kernels_of_a_compiled_graph_are_attributed_to_the_graph(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        _op("CompiledFunction", 0, 100),
        _op("## Call CompiledFxGraph fabc123 ##", 5, 90, cat="user_annotation"),
        _op("triton_poi_fused_add_0", 10, 10), _launch(11, 1), _kernel("triton_poi_fused_add_0", 200, 5, 1),
        _op("aten::mm", 30, 10), _launch(31, 2, name="cudaLaunchKernel"), _kernel("nvjet_tst_64x8", 210, 20, 2),
        _launch(50, 3), _kernel("triton_red_fused_sum_1", 240, 5, 3),  # bare launch inside the graph call
    ])

    trace = read_trace(path)
    summary = kernel_summary(trace).set_index("kernel")

    assert summary.loc["triton_poi_fused_add_0", "parent op"] == "CompiledFxGraph fabc123"
    assert summary.loc["triton_poi_fused_add_0", "category"] == "elementwise"
    assert summary.loc["triton_red_fused_sum_1", "parent op"] == "CompiledFxGraph fabc123"
    assert summary.loc["triton_red_fused_sum_1", "category"] == "reduction"
    # An extern GEMM in the graph keeps its ATen op (its shapes price it) and names the graph beside it.
    assert summary.loc["nvjet_tst_64x8", "parent op"] == "aten::mm"
    assert summary.loc["nvjet_tst_64x8", "graph"] == "CompiledFxGraph fabc123"
    assert ops_summary(trace).set_index("op").loc["CompiledFxGraph fabc123", "kernels"] == 2


def test_inductor_cpp_kernels_of_a_cpu_profile_map_to_their_graph() -> None:
    summary = kernel_summary(read_trace(CPU))

    cpp = summary[summary["kernel"].str.contains("cpp_fused_")]
    assert len(cpp) >= 3
    assert set(cpp["parent op"]) == {"CompiledFxGraph ftck26lq2uh2ab3f6yp6c32ywogw5sw5gvs4ownonqrbknrsjrss"}


def test_the_innermost_enclosing_interval_is_found_per_thread() -> None:
    # thread 1: [0, 100) ⊃ [10, 50) ⊃ [20, 30); [60, 70); thread 2: [0, 1000)
    starts = np.array([0, 10, 20, 60, 0], dtype=np.int64)
    ends = np.array([100, 50, 30, 70, 1000], dtype=np.int64)
    tids = np.array([1, 1, 1, 1, 2], dtype=np.int64)
    points = np.array([25, 30, 55, 65, 100, 500, 5], dtype=np.int64)
    point_tids = np.array([1, 1, 1, 1, 1, 2, 3], dtype=np.int64)

    found = innermost_enclosing(starts, ends, tids, points, point_tids)

    assert found.tolist() == [2, 1, 0, 3, -1, 4, -1]


def _innermost_by_definition(starts: np.ndarray, ends: np.ndarray, tids: np.ndarray, point: int,
                             point_tid: int) -> int:
    """The definition, one interval at a time: of the intervals on the point's thread holding it, the one that
    started last (ties: the shorter, then the later in the input)."""
    holding = [i for i in range(starts.size) if tids[i] == point_tid and starts[i] <= point < ends[i]]
    return max(holding, key=lambda i: (starts[i], -ends[i], i), default=-1)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 20), st.integers(0, 2)), max_size=25),
       st.lists(st.tuples(st.integers(-2, 70), st.integers(0, 3)), max_size=25))
def test_nested_overlapping_and_touching_intervals_give_the_innermost_by_its_definition(
        intervals: list[tuple[int, int, int]], queries: list[tuple[int, int]]) -> None:
    starts = np.array([s for s, _, _ in intervals], dtype=np.int64)
    ends = starts + np.array([d for _, d, _ in intervals], dtype=np.int64)
    tids = np.array([t for _, _, t in intervals], dtype=np.int64)
    points = np.array([p for p, _ in queries], dtype=np.int64)
    point_tids = np.array([t for _, t in queries], dtype=np.int64)

    found = innermost_enclosing(starts, ends, tids, points, point_tids)

    assert found.tolist() == [_innermost_by_definition(starts, ends, tids, p, t) for p, t in queries]
