"""Per (op, recorded arguments) tables, after TraceLens's ``ops_unique_args`` and ``unified_perf_summary``.

One row per distinct (op name, ``Input Dims``, ``Input type``, ``Input Strides``, ``Concrete Inputs``) among the
host ops that launched kernels (an op recorded without ``record_shapes`` has empty argument cells). An op call's
kernel time is the union of the intervals of the kernels it launched (TraceLens's direct kernel time, so kernels
that overlap count once); the statistics are over calls, in µs. ``percent`` is of the summed kernel time of all
rows. Kernels without a launching op are in no row (the ops tables count them).

``unified_perf_summary`` adds the work of one call from :func:`analysis.traces.analyses.roofline.op_work` (every family
it models: GEMM, CONV, SDPA forward and backward, elementwise, normalization, reduction, grouped GEMM, MoE, RoPE,
cross-entropy, SSM, causal conv1d, quantize, KV cache, MoE routing, mHC, Inductor Triton), or why an op stays unpriced
(:func:`analysis.traces.analyses.roofline.unpriced_reason`), and the achieved rates stated both ways:
``TFLOP/s`` = total FLOPs / total kernel time (this project's roofline), ``TFLOP/s mean of calls`` = the mean of
each call's FLOPs / its time (TraceLens's ``TFLOPS/s_mean``); ``TB/s`` likewise. MB and TB/s are decimal.
Attention over a KV cache is priced from the serving step around each call
(:mod:`analysis.traces.analyses.serving_steps`): its unified rows are split by the step's sums too (``serving step``),
so steps of different context are different rows. Columns: :data:`UNIQUE_ARGS_COLUMNS`, :data:`UNIFIED_COLUMNS`
(documented in docs/trace-reports.md).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from analysis.traces.analyses.ops import Attribution
from analysis.traces.analyses.roofline import (
    KV_ATTENTION_OPS,
    DevicePeaks,
    matrix_peak,
    op_work,
    unpriced_reason,
    versus_peak,
)
from analysis.traces.analyses.serving_steps import StepSums, call_steps
from analysis.traces.analyses.timeline import union_length_by_group
from analysis.traces.model import TraceData

ARG_COLUMNS = ["input dims", "input types", "input strides", "concrete inputs"]
STAT_COLUMNS = ["kernel time us sum", "kernel time us mean", "kernel time us median", "kernel time us std",
                "kernel time us min", "kernel time us max"]
UNIQUE_ARGS_COLUMNS = ["op", "category", *ARG_COLUMNS, "calls", *STAT_COLUMNS, "kernels", "percent",
                       "cumulative percent"]
UNIFIED_COLUMNS = ["op", "category", "family", *ARG_COLUMNS, "serving step", "calls", "cpu time us mean", *STAT_COLUMNS,
                   "GFLOP per call", "MB per call", "FLOP/byte", "TFLOP/s", "TFLOP/s mean of calls", "TB/s",
                   "TB/s mean of calls", "peak TFLOP/s", "bound", "% of roofline", "has model", "unpriced because",
                   "kernels", "percent", "cumulative percent"]
KERNEL_NAME_CHARS = 64  # kernel names in the ``kernels`` cell are cut to this many characters, as TraceLens's


def _text(value: Any) -> str:
    """An argument list as JSON text (no Python reprs in a cell); empty when not recorded."""
    return json.dumps(list(value)) if value else ""


def _calls(trace: TraceData, attr: Attribution) -> pd.DataFrame:
    """One row per launching op call: name id, shape id, category, kernel time (union, ns), host time (ns)."""
    ops = trace.ops
    n = len(ops)
    linked = attr.op_index >= 0
    kernel_ns = union_length_by_group(np.where(linked, attr.op_index, -1), trace.start_ns, trace.end_ns, n)
    category = np.full(n, "", dtype=object)
    if linked.any():
        # The category of a call is that of its first kernel's row (the scheme decides it per launcher).
        first = np.flatnonzero(linked)[::-1]
        category[attr.op_index[first]] = attr.category[first]
    launched = np.zeros(n, dtype=bool)
    launched[attr.op_index[linked]] = True
    frame = pd.DataFrame({"name_id": ops.name_id, "shape_id": ops.shape_id, "category": category,
                          "kernel_ns": kernel_ns, "cpu_ns": ops.dur_ns if ops.dur_ns.size == n else np.nan,
                          "call": np.arange(n), "step": ""})
    return frame[launched]


def serving_steps_of(trace: TraceData, calls: np.ndarray) -> dict[int, StepSums | str]:
    """The serving step (its sums, or why none) of each call among ``calls`` (indices into ``trace.ops``) that is
    attention over a KV cache; looked up only when the trace has such calls (the other ops need no step)."""
    name_ids = trace.ops.name_id[calls]
    kv_ids = [i for i in np.unique(name_ids).tolist() if trace.names[i] in KV_ATTENTION_OPS]
    return call_steps(trace, calls[np.isin(name_ids, kv_ids)].tolist()) if kv_ids else {}


def _step_key(step: StepSums | str) -> str:
    return step.text() if isinstance(step, StepSums) else step


def _kernels_cell(trace: TraceData, attr: Attribution, call_group: np.ndarray) -> dict[int, str]:
    """Per group: its kernels as JSON ``[{"name", "count", "total us"}]``, longest first, names cut short."""
    linked = attr.op_index >= 0
    events = pd.DataFrame({"group": call_group[attr.op_index[linked]], "name_id": trace.name_id[linked],
                           "dur": trace.dur_ns[linked]})
    cells = {}
    for group, g in events.groupby("group", sort=False):
        per = g.groupby("name_id")["dur"].agg(["size", "sum"]).sort_values("sum", ascending=False)
        cells[int(group)] = json.dumps([{"name": trace.names[i][:KERNEL_NAME_CHARS], "count": int(c),
                                         "total us": round(float(t) / 1e3, 3)}
                                        for i, c, t in zip(per.index, per["size"], per["sum"], strict=True)])
    return cells


def _grouped(trace: TraceData, attr: Attribution, by_step: bool = False) -> pd.DataFrame:
    """The calls grouped by (op, arguments) and, with ``by_step``, by the sums of the serving step around
    attention over a KV cache (``step``: the sums' text, or why there are none; empty for the other ops)."""
    calls = _calls(trace, attr)
    if calls.empty:
        return calls
    steps = serving_steps_of(trace, calls["call"].to_numpy()) if by_step else {}
    if steps:
        calls["step"] = [_step_key(steps[c]) if c in steps else "" for c in calls["call"]]
    keys = ["name_id", "shape_id", "step"]
    calls["group"] = calls.groupby(keys, sort=False).ngroup()
    call_group = np.full(len(trace.ops), -1, dtype=np.int64)
    call_group[calls["call"].to_numpy()] = calls["group"].to_numpy()
    us = calls["kernel_ns"] / 1e3
    stats = us.groupby(calls["group"]).agg(["size", "sum", "mean", "median", "std", "min", "max"])
    first = calls.groupby("group").first()
    out = pd.DataFrame({"name_id": first["name_id"], "shape_id": first["shape_id"], "category": first["category"],
                        "step_of": [steps.get(int(c)) for c in first["call"]],
                        "calls": stats["size"], "cpu time us mean": (calls["cpu_ns"] / 1e3).groupby(
                            calls["group"]).mean()})
    for col, stat in zip(STAT_COLUMNS, ("sum", "mean", "median", "std", "min", "max"), strict=True):
        out[col] = stats[stat]
    out["kernels"] = out.index.map(_kernels_cell(trace, attr, call_group))
    out["call_times"] = calls.groupby("group")["kernel_ns"].apply(lambda s: s.to_numpy())
    out["op"] = [trace.names[i] for i in out["name_id"]]
    for col, field in zip(ARG_COLUMNS, ("dims", "types", "strides", "concrete"), strict=True):
        out[col] = [_text(getattr(trace.ops.shapes[s], field)) if s >= 0 else "" for s in out["shape_id"]]
    out = out.sort_values(["kernel time us sum", "op"], ascending=[False, True], kind="stable")
    total = out["kernel time us sum"].sum()
    out["percent"] = 100.0 * out["kernel time us sum"] / total if total else np.nan
    out["cumulative percent"] = out["percent"].cumsum()
    return out.reset_index(drop=True)


def ops_unique_args(trace: TraceData, attr: Attribution) -> pd.DataFrame:
    """One row per (op, recorded arguments): calls, kernel time per call, the kernels it launched."""
    grouped = _grouped(trace, attr)
    return pd.DataFrame(columns=UNIQUE_ARGS_COLUMNS) if grouped.empty else grouped[UNIQUE_ARGS_COLUMNS]


def unified_perf_summary(trace: TraceData, attr: Attribution, peaks: DevicePeaks | None) -> pd.DataFrame:
    """:func:`ops_unique_args` with each row's work and roofline where a model prices the op."""
    grouped = _grouped(trace, attr, by_step=True)
    if grouped.empty:
        return pd.DataFrame(columns=UNIFIED_COLUMNS)
    rows = []
    for row in grouped.itertuples(index=False):
        shape_id = int(row.shape_id)
        shape = trace.ops.shapes[shape_id] if shape_id >= 0 else None
        step = row.step_of
        work = op_work(row.op, shape, step) if shape is not None else None
        perf: dict[str, Any] = {"family": "", "has model": work is not None,
                                "serving step": step.text() if isinstance(step, StepSums) else "",
                                "unpriced because": "" if work is not None else unpriced_reason(row.op, shape, step)}
        times = row.call_times[row.call_times > 0] / 1e9  # s
        if work is not None and times.size:
            seconds = float(times.sum())
            tflops, tbs = work.flops * times.size / seconds / 1e12, work.bytes * times.size / seconds / 1e12
            peak = matrix_peak(work, peaks)
            roof = versus_peak(work, tflops, tbs, peak, peaks, seconds / times.size)
            perf.update({
                "family": work.family, "GFLOP per call": work.flops / 1e9, "MB per call": work.bytes / 1e6,
                "FLOP/byte": work.flops / work.bytes if work.bytes else np.nan, "TFLOP/s": tflops,
                "TFLOP/s mean of calls": float(np.mean(work.flops / times)) / 1e12, "TB/s": tbs,
                "TB/s mean of calls": float(np.mean(work.bytes / times)) / 1e12,
                "peak TFLOP/s": peak if peak is not None else np.nan, "bound": roof["bound"],
                "% of roofline": roof["% of roofline"],
            })
        rows.append(perf)
    perf_frame = pd.DataFrame(rows, index=grouped.index)
    return pd.concat([grouped.drop(columns=["family"], errors="ignore"), perf_frame], axis=1) \
        .reindex(columns=UNIFIED_COLUMNS)


SHORT_KERNEL_US = 10.0
SHORT_KERNELS_COLUMNS = ["parent op", *[c for c in ARG_COLUMNS if c != "input types"], "kernel", "count",
                         "total us", "mean us", "percent of total time"]


def short_kernels_summary(trace: TraceData, attr: Attribution, total_ns: int,
                          threshold_us: float = SHORT_KERNEL_US) -> pd.DataFrame:
    """Kernels shorter than ``threshold_us`` per (parent op, its recorded arguments, kernel name), after
    TraceLens's short_kernels_summary: count, time, and the share of the timeline's total time. Kernels without
    a launching op are kept, under their launcher (:data:`analysis.traces.analyses.ops.NO_OP` or the runtime call)."""
    from analysis.traces.model import CPU_KERNEL, KERNEL

    short = np.isin(trace.kind, (KERNEL, CPU_KERNEL)) & (trace.dur_ns < threshold_us * 1e3)
    if not short.any():
        return pd.DataFrame(columns=SHORT_KERNELS_COLUMNS)
    op = attr.op_index[short]
    shape = np.where(op >= 0, trace.ops.shape_id[np.maximum(op, 0)] if len(trace.ops) else -1, -1)
    frame = pd.DataFrame({"parent op": attr.launcher[short], "shape_id": shape, "name_id": trace.name_id[short],
                          "dur": trace.dur_ns[short]})
    g = frame.groupby(["parent op", "shape_id", "name_id"], sort=False)["dur"].agg(["size", "sum"]).reset_index()
    out = pd.DataFrame({"parent op": g["parent op"]})
    for col, field in (("input dims", "dims"), ("input strides", "strides"), ("concrete inputs", "concrete")):
        out[col] = [_text(getattr(trace.ops.shapes[s], field)) if s >= 0 else "" for s in g["shape_id"]]
    out["kernel"] = [trace.names[i] for i in g["name_id"]]
    out["count"] = g["size"]
    out["total us"] = g["sum"] / 1e3
    out["mean us"] = out["total us"] / out["count"]
    out["percent of total time"] = 100.0 * g["sum"] / total_ns if total_ns else np.nan
    return out.sort_values(["total us", "kernel"], ascending=[False, True], kind="stable") \
        .reset_index(drop=True)[SHORT_KERNELS_COLUMNS]
