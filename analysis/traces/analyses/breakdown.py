"""Where device time goes: per-kernel and per-category tables, kernels per profiler step, short kernels.

Kernel "time" here is the sum of kernel durations (what a kernel costs wherever it runs); the timeline module
holds the overlap-aware unions. Summary-only inputs (stats CSVs, nsys sums, ``-p`` tables) have aggregates
instead of events and still give the per-kernel and per-category tables. The totals of a trace's events are
:mod:`analysis.traces.analyses.kernel_totals`'s (without numpy or pandas); this module makes the tables.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.traces.analyses.categories import kernel_category
from analysis.traces.analyses.kernel_totals import category_totals, kernel_totals
from analysis.traces.analyses.timeline import union_length
from analysis.traces.model import CPU_KERNEL, KERNEL, MEMCPY, MEMSET, TraceData

KERNEL_COLUMNS = ["name", "category", "count", "total ms", "mean us", "min us", "max us", "percent",
                  "cumulative percent"]
CATEGORY_COLUMNS = ["category", "count", "time ms", "percent", "cumulative percent"]
_KIND_CODES = {"kernel": KERNEL, "memcpy": MEMCPY, "memset": MEMSET, "cpu_kernel": CPU_KERNEL}


def _with_percent(df: pd.DataFrame, time_col: str) -> pd.DataFrame:
    df = df.sort_values([time_col, df.columns[0]], ascending=[False, True], kind="stable").reset_index(drop=True)
    total = df[time_col].sum()
    df["percent"] = 100.0 * df[time_col] / total if total else 0.0
    df["cumulative percent"] = df["percent"].cumsum()
    return df


def kernel_table(trace: TraceData) -> pd.DataFrame:
    """One row per kernel name, sorted by total time, with percent of all kernel time and cumulative %."""
    if trace.has_timeline:
        totals = kernel_totals(trace)
        df = pd.DataFrame({
            "name": [k.name for k in totals],
            "category": [k.category for k in totals],
            "count": np.array([k.count for k in totals], dtype=np.int64),
            "total ms": [k.total_ns / 1e6 for k in totals],
            "mean us": [k.total_ns / k.count / 1e3 for k in totals],
            "min us": [k.min_ns / 1e3 for k in totals],
            "max us": [k.max_ns / 1e3 for k in totals],
        })
    elif trace.aggregates:
        aggs = trace.aggregates
        df = pd.DataFrame({
            "name": [a.name for a in aggs],
            "category": [kernel_category(a.name, _KIND_CODES.get(a.kind, KERNEL)) for a in aggs],
            "count": [a.calls for a in aggs],
            "total ms": [a.total_ns / 1e6 for a in aggs],
            "mean us": [a.total_ns / a.calls / 1e3 if a.calls else np.nan for a in aggs],
            "min us": [a.min_ns / 1e3 if a.min_ns is not None else np.nan for a in aggs],
            "max us": [a.max_ns / 1e3 if a.max_ns is not None else np.nan for a in aggs],
        })
        # Summary formats can list the same kernel more than once (e.g. per grid size in nsys).
        df = df.groupby(["name", "category"], as_index=False, sort=False).agg(
            {"count": "sum", "total ms": "sum", "min us": "min", "max us": "max"})
        df["mean us"] = df["total ms"] * 1e3 / df["count"].where(df["count"] > 0)
    else:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    return _with_percent(df, "total ms")[KERNEL_COLUMNS]


def top_kernels(trace: TraceData, n: int | None = 20) -> pd.DataFrame:
    table = kernel_table(trace)
    return table if n is None else table.head(n)


def category_table(trace: TraceData, kernels: pd.DataFrame | None = None) -> pd.DataFrame:
    kernels = kernel_table(trace) if kernels is None else kernels
    if kernels.empty:
        return pd.DataFrame(columns=CATEGORY_COLUMNS)
    totals = category_totals(zip(kernels["category"], kernels["count"].tolist(), kernels["total ms"], strict=True))
    df = pd.DataFrame({"category": [c.category for c in totals],
                       "count": np.array([c.count for c in totals], dtype=np.int64),
                       "time ms": [c.time for c in totals]})
    return _with_percent(df, "time ms")[CATEGORY_COLUMNS]


def launch_index(trace: TraceData) -> np.ndarray:
    """For each device event, the index of the runtime call that launched it (same correlation id), or −1."""
    n = trace.n_events
    out = np.full(n, -1, dtype=np.int64)
    rt_corr = trace.rt_correlation
    valid = np.flatnonzero(rt_corr >= 0)
    if n == 0 or valid.size == 0:
        return out
    order = valid[np.argsort(rt_corr[valid], kind="stable")]
    sorted_corr = rt_corr[order]
    pos = np.searchsorted(sorted_corr, trace.correlation)
    pos = np.clip(pos, 0, sorted_corr.size - 1)
    hit = (sorted_corr[pos] == trace.correlation) & (trace.correlation >= 0)
    out[hit] = order[pos[hit]]
    return out


def kernels_per_step(trace: TraceData) -> pd.DataFrame:
    """Device activities per ``ProfilerStep#N``.

    A kernel belongs to the step during which it was *launched* (its runtime call, joined by correlation id),
    which also works for ROCm's stream 0 where HTA's ``stream > 0`` rule drops kernels. Without a launch
    record the kernel's own start time is used, against the GPU-side step windows when the trace has them.
    """
    columns = ["step", "kernels", "memcpy/memset", "kernel time ms", "busy ms", "step ms"]
    host_steps = [s for s in trace.steps if not s.on_device]
    device_steps = [s for s in trace.steps if s.on_device]
    if not trace.has_timeline or not (host_steps or device_steps):
        return pd.DataFrame(columns=columns)
    launch = launch_index(trace)
    linked = launch >= 0
    key = trace.start_ns.copy()
    windows = host_steps or device_steps
    if host_steps:
        key[linked] = trace.rt_start_ns[launch[linked]]
        if device_steps:
            # Unlinked kernels are placed by their own start in the GPU-side projection of the steps.
            key[~linked] = _map_between(trace.start_ns[~linked], device_steps, host_steps)
    step_of = _assign(key, windows)
    rows = []
    for i, step in enumerate(windows):
        mask = step_of == i
        is_kernel = np.isin(trace.kind[mask], (KERNEL, CPU_KERNEL))
        rows.append({
            "step": step.name,
            "kernels": int(is_kernel.sum()),
            "memcpy/memset": int((~is_kernel).sum()),
            "kernel time ms": float(trace.dur_ns[mask].sum()) / 1e6,
            "busy ms": union_length(trace.start_ns[mask], trace.end_ns[mask]) / 1e6,
            "step ms": (step.end_ns - step.start_ns) / 1e6,
        })
    return pd.DataFrame(rows, columns=columns)


def _assign(key: np.ndarray, windows: list) -> np.ndarray:
    starts = np.array([w.start_ns for w in windows], dtype=np.int64)
    ends = np.array([w.end_ns for w in windows], dtype=np.int64)
    idx = np.searchsorted(starts, key, side="right") - 1
    ok = (idx >= 0) & (key < ends[np.clip(idx, 0, None)])
    return np.where(ok, idx, -1)


def _map_between(times: np.ndarray, device_steps: list, host_steps: list) -> np.ndarray:
    """Translate GPU-side times into the host step with the same name (so both kinds of keys agree)."""
    by_name = {s.name: s for s in host_steps}
    out = np.full(times.size, -1, dtype=np.int64)
    idx = _assign(times, device_steps)
    for i, dev in enumerate(device_steps):
        host = by_name.get(dev.name)
        if host is not None:
            out[idx == i] = host.start_ns
    return out


def short_kernel_histogram(trace: TraceData, threshold_us: float = 10.0, bins: int = 100) -> pd.DataFrame:
    """Histogram of kernels shorter than ``threshold_us`` in ``bins`` equal bins from 0 (TraceLens' short-kernel
    study has 100 bins, over the range of the short kernels' durations)."""
    kernels = np.isin(trace.kind, (KERNEL, CPU_KERNEL))
    durs_us = trace.dur_ns[kernels] / 1e3
    short = durs_us[durs_us < threshold_us]
    counts, edges = np.histogram(short, bins=bins, range=(0.0, threshold_us))
    return pd.DataFrame({"bin_start us": edges[:-1], "bin_end us": edges[1:], "count": counts})


def short_kernel_share(trace: TraceData, threshold_us: float = 10.0) -> tuple[int, int]:
    """(number of kernels shorter than the threshold, number of kernels)."""
    kernels = np.isin(trace.kind, (KERNEL, CPU_KERNEL))
    durs = trace.dur_ns[kernels]
    return int((durs < threshold_us * 1e3).sum()), int(durs.size)
