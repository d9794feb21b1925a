"""Op-level attribution: which PyTorch op launched each kernel, and the tables built on it.

A kernel links to its runtime launch call by correlation id (``cudaLaunchKernel``, ``cuLaunchKernel``,
``cudaLaunchKernelExC``, ``hipLaunchKernel``, ``hipExtModuleLaunchKernel``, ``hipModuleLaunchKernel``, graph
launches, memcpy/memset calls), and the launch to its parent op: the innermost ``cpu_op`` on the same thread
whose [start, end) holds the launch's start. The reader resolves both links while streaming
(:func:`innermost_enclosing`) and keeps only the launching ops; this module turns them into the ops summary, the
ops-by-category table and the kernel summary. Kernels without a launching op stay in every table, under
:data:`NO_OP`, and are counted.

Inductor-compiled regions: a kernel whose launching op is the compiled region itself, or Inductor's per-kernel
record function (``triton_*``, ``*cpp_fused_*``), is attributed to the graph (``CompiledFxGraph <hash>``).

Two category schemes (:data:`CATEGORY_SCHEMES`, the ``--categories`` flag):

- ``prbench`` (default): this project's op categories (:func:`analysis.traces.analyses.categories.launch_category`);
every
  device event counts, an op's kernel time is the sum of its kernels' durations;
- ``tracelens``: TraceLens's (:func:`analysis.traces.analyses.categories.tracelens_op_category`) and its linked-kernel
  rule: the launcher of a kernel is its op, else (no op around the launch) the runtime call itself; a call's time
  is the union of its kernels' intervals; communication kernels and kernels no launch call links to are left
  out of the op tables' totals and shown in rows of their own (:data:`UNLINKED`, :data:`COMM_ROW`).

Each table's legend (:data:`LEGENDS`) says, in one line, which definitions it follows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.traces.analyses.breakdown import launch_index
from analysis.traces.analyses.categories import (
    COMPILED_REGION,
    is_communication,
    launch_category,
    tracelens_launcher_category,
    tracelens_op_category,
)
from analysis.traces.analyses.timeline import union_length_by_group
from analysis.traces.model import KERNEL, TraceData

NO_OP = "(no launching op)"
CATEGORY_SCHEMES = ("prbench", "tracelens")
# Rows of their own under the tracelens scheme: kernels no launch call links to (TraceLens leaves them out), and
# communication kernels (TraceLens's op tables leave out NCCL/RCCL kernels).
UNLINKED = "(no launch event)"
COMM_ROW = "(communication kernels)"
# The prbench scheme counts kernels without a launching op under their kernel name's category, and shows them
# again, outside the totals, in this row.
UNLINKED_SHARE = f"of which {NO_OP}"
OUTSIDE_TOTALS = (COMM_ROW, UNLINKED, UNLINKED_SHARE)
_INDUCTOR_KERNEL_OP = re.compile(r"^triton_|cpp_fused_")
OPS_COLUMNS = ["op", "category", "calls", "kernels", "kernel time ms", "percent", "cumulative percent"]
CATEGORY_COLUMNS = ["category", "calls", "kernels", "kernel time ms", "percent", "cumulative percent"]
KERNEL_SUMMARY_COLUMNS = ["category", "parent op", "graph", "stream", "kernel", "count", "total ms", "mean us",
                          "min us", "max us", "percent", "cumulative percent", "percent of total time"]
# One line per table and scheme: what counts, how time is measured, what the percentages divide by.
LEGENDS = {
    "prbench": {
        "ops_by_category": "prbench categories: every device event counts (kernels without an op under their kernel "
                           f"name's category, and again in the row {UNLINKED_SHARE!r} outside the totals); an op "
                           "call's time is the sum of its kernels' durations; softmax is reduction, copies are "
                           "copy/memory, flash attention is SDPA (--categories tracelens: TraceLens's).",
        "ops_summary": "Every device event counts, kernels without a launching op in the row "
                       f"{NO_OP}; an op's time is the sum of its kernels' durations.",
        "kernel_summary": "Rows per (category, parent op, graph, stream, kernel); percent: of all device time "
                          "(kernels, memcpy, memset); percent of total time: of the span of all device events.",
    },
    "tracelens": {
        "ops_by_category": "TraceLens categories: a launcher call's time is the union of its kernels' intervals; "
                           f"kernels no launch call links to (row {UNLINKED}) and communication kernels (row "
                           f"{COMM_ROW}) are shown but not in the percentages, as TraceLens leaves them out.",
        "ops_summary": "TraceLens launchers: the op around the launch call, else the runtime call itself; time: "
                       f"union of each call's kernels; {UNLINKED} and {COMM_ROW} outside the percentages.",
        "kernel_summary": "TraceLens kernel_summary: kernels only (no memcpy/memset), rows per (category, parent "
                          "op, stream, kernel); percent: of all kernel time; percent of total time: of the span "
                          "of the device events a launch call links to.",
    },
}


def graph_label(region_name: str) -> str:
    """``## Call CompiledFxGraph abc ##`` → ``CompiledFxGraph abc``; other region names as they are."""
    m = COMPILED_REGION.match(region_name)
    return f"CompiledFxGraph {m.group(1)}" if m and m.group(1) else region_name


def innermost_enclosing(starts: np.ndarray, ends: np.ndarray, tids: np.ndarray,
                        points: np.ndarray, point_tids: np.ndarray) -> np.ndarray:
    """For each point, the index of the innermost interval on the same thread with start ≤ point < end, or −1.

    Innermost is the latest-started interval still open at the point (ties: the shorter, then the later in the
    input). With the intervals sorted by (thread, start, longest first), that is the last position j ≤ k with
    end[j] > point, k being the last interval of the point's thread that starts at or before it. Every point is
    answered at once: a table of running maxima of ``ends`` over blocks of 2^l positions lets each point jump
    back over whole blocks that closed before it, widest first (a binary search per point, in numpy).
    """
    out = np.full(points.size, -1, dtype=np.int64)
    if starts.size == 0 or points.size == 0:
        return out
    order = np.lexsort((-ends, starts, tids))
    s_sorted, e_sorted, t_sorted = starts[order], ends[order], tids[order]
    first = np.searchsorted(t_sorted, point_tids, side="left")  # the thread's first interval
    last = _last_starting_at_or_before(t_sorted, s_sorted, point_tids, points)
    maxima = [e_sorted]  # maxima[l][i] = max(ends[i − 2^l + 1 .. i])
    while (1 << len(maxima)) <= e_sorted.size:
        prev, width = maxima[-1], 1 << (len(maxima) - 1)
        maxima.append(np.concatenate([prev[:width], np.maximum(prev[width:], prev[:-width])]))
    cur = last.copy()
    for level in range(len(maxima) - 1, -1, -1):
        width = 1 << level
        inside = cur - width + 1 >= first
        at = np.flatnonzero(inside)
        closed = maxima[level][cur[at]] <= points[at]
        cur[at[closed]] -= width
    found = (cur >= first) & (cur >= 0)
    found[found] = e_sorted[cur[found]] > points[found]
    out[found] = order[cur[found]]
    return out


def _last_starting_at_or_before(t_sorted: np.ndarray, s_sorted: np.ndarray, point_tids: np.ndarray,
                                points: np.ndarray) -> np.ndarray:
    """Position of the last interval (sorted by thread, then start) on the point's thread starting at or before
    the point; below the thread's first position when there is none."""
    n = t_sorted.size
    # Merge points into the sorted intervals by (thread, time), an interval before a point at the same time.
    keys_tid = np.concatenate([t_sorted, point_tids])
    keys_time = np.concatenate([s_sorted, points])
    is_point = np.concatenate([np.zeros(n, dtype=np.int8), np.ones(points.size, dtype=np.int8)])
    merged = np.lexsort((is_point, keys_time, keys_tid))
    intervals_before = np.cumsum(is_point[merged] == 0)  # intervals up to and including each merged position
    last = np.empty(points.size, dtype=np.int64)
    point_at = merged >= n
    last[merged[point_at] - n] = intervals_before[point_at] - 1
    return last


@dataclass(frozen=True)
class Attribution:
    """Per device event: launching op (name, or :data:`NO_OP`), its compiled graph ("" if none), category."""

    launcher: np.ndarray  # object array of names
    graph: np.ndarray  # object array: the compiled graph around the launch, "" if none
    category: np.ndarray  # object array
    op_index: np.ndarray  # index into trace.ops, −1 when unlinked
    unlinked: int
    unlinked_ns: int
    total_ns: int
    scheme: str = "prbench"
    call: np.ndarray | None = None  # tracelens: the launcher call of each event (−1: none, see UNLINKED)
    counted: np.ndarray | None = None  # tracelens: whether the event is in the op tables' totals

    @property
    def unlinked_percent(self) -> float:
        return 100.0 * self.unlinked_ns / self.total_ns if self.total_ns else 0.0


def attribute(trace: TraceData, scheme: str = "prbench") -> Attribution:
    """Launching op and category of every device event under ``scheme`` (one of :data:`CATEGORY_SCHEMES`)."""
    if scheme == "tracelens":
        return _attribute_tracelens(trace)
    n = trace.n_events
    names = np.asarray(trace.names, dtype=object)
    op_index = trace.event_op.astype(np.int64) if trace.event_op.size == n else np.full(n, -1, dtype=np.int64)
    linked = op_index >= 0
    launcher = np.full(n, NO_OP, dtype=object)
    graph = np.full(n, "", dtype=object)
    if trace.event_graph.size == n:
        labels = {g: graph_label(trace.names[g]) for g in np.unique(trace.event_graph[trace.event_graph >= 0]).tolist()}
        graph = np.array([labels.get(g, "") for g in trace.event_graph.tolist()], dtype=object)
    if len(trace.ops) and linked.any():
        launcher[linked] = names[trace.ops.name_id][op_index[linked]]
        # Inductor's region markers and per-kernel record functions say "this graph", not an ATen op.
        to_graph = np.array([bool(g) and (bool(COMPILED_REGION.match(o)) or bool(_INDUCTOR_KERNEL_OP.search(o)))
                             for o, g in zip(launcher.tolist(), graph.tolist(), strict=True)], dtype=bool)
        launcher[to_graph] = graph[to_graph]
    kernel_names = names[trace.name_id] if n else np.empty(0, dtype=object)
    known: dict[tuple[str, str, int], str] = {}
    category = np.empty(n, dtype=object)
    for i, key in enumerate(zip(launcher.tolist(), kernel_names.tolist(), trace.kind.tolist(), strict=True)):
        found = known.get(key)
        if found is None:
            op, kernel, kind = key
            found = known[key] = launch_category(None if op == NO_OP else op, kernel, kind)
        category[i] = found
    return Attribution(launcher=launcher, graph=graph, category=category, op_index=op_index,
                       unlinked=int((~linked).sum()), unlinked_ns=int(trace.dur_ns[~linked].sum()),
                       total_ns=int(trace.dur_ns.sum()))


def _attribute_tracelens(trace: TraceData) -> Attribution:
    """TraceLens's launchers: the op around the launch call, else the launch call itself (a kernel no launch call
    links to has none); the category of a launcher call from its name and its first kernel."""
    n = trace.n_events
    names = np.asarray(trace.names, dtype=object)
    op_index = trace.event_op.astype(np.int64) if trace.event_op.size == n else np.full(n, -1, dtype=np.int64)
    launch = launch_index(trace)
    by_op = op_index >= 0
    by_runtime = ~by_op & (launch >= 0)
    n_ops = len(trace.ops)
    call = np.full(n, -1, dtype=np.int64)
    call[by_op] = op_index[by_op]
    call[by_runtime] = n_ops + launch[by_runtime]
    launcher = np.full(n, UNLINKED, dtype=object)
    if by_op.any():
        launcher[by_op] = names[trace.ops.name_id][op_index[by_op]]
    if by_runtime.any():
        launcher[by_runtime] = names[trace.rt_name_id[launch[by_runtime]]]
    kernel_names = names[trace.name_id] if n else np.empty(0, dtype=object)
    category = np.full(n, UNLINKED, dtype=object)
    linked = np.flatnonzero(call >= 0)
    if linked.size:
        order = linked[np.lexsort((trace.start_ns[linked], call[linked]))]
        starts = np.ones(order.size, dtype=bool)
        starts[1:] = call[order][1:] != call[order][:-1]
        firsts = order[starts]  # the first kernel of each call
        of_call = np.empty(int(call.max()) + 1, dtype=object)
        of_call[call[firsts]] = [tracelens_op_category(launcher[i], kernel_names[i]) for i in firsts.tolist()]
        category[linked] = of_call[call[linked]]
    comm_name = np.array([is_communication(name) for name in trace.names], dtype=bool)
    comm = comm_name[trace.name_id] if n else np.zeros(0, dtype=bool)
    unlinked = call < 0
    return Attribution(launcher=launcher, graph=np.full(n, "", dtype=object), category=category,
                       op_index=op_index, unlinked=int(unlinked.sum()), unlinked_ns=int(trace.dur_ns[unlinked].sum()),
                       total_ns=int(trace.dur_ns.sum()), scheme="tracelens", call=call, counted=~unlinked & ~comm)


def _tracelens_rows(trace: TraceData, attr: Attribution, key: np.ndarray, key_name: str) -> pd.DataFrame:
    """Per value of ``key`` over the counted events: calls, kernels, kernel time (union per call); then the rows
    of the events left out of the totals, their time a plain sum and their percent empty."""
    assert attr.call is not None and attr.counted is not None
    counted = attr.counted
    n_calls = int(attr.call.max()) + 1 if attr.call.size else 0
    per_call = union_length_by_group(np.where(counted, attr.call, -1), trace.start_ns, trace.end_ns, n_calls)
    frame = pd.DataFrame({key_name: key[counted], "call": attr.call[counted]})
    rows = []
    for value, g in frame.groupby(key_name, sort=False):
        calls = np.unique(g["call"].to_numpy())
        rows.append({key_name: value, "calls": calls.size, "kernels": len(g),
                     "kernel time ms": float(per_call[calls].sum()) / 1e6})
    df = _with_percent(pd.DataFrame(rows, columns=[key_name, "calls", "kernels", "kernel time ms"]),
                       "kernel time ms", key_name)
    comm = ~counted & (attr.call >= 0)
    extra = [{key_name: label, "calls": int(np.unique(attr.call[mask]).size) if label == COMM_ROW else int(mask.sum()),
              "kernels": int(mask.sum()), "kernel time ms": float(trace.dur_ns[mask].sum()) / 1e6,
              "percent": np.nan, "cumulative percent": np.nan}
             for label, mask in ((COMM_ROW, comm), (UNLINKED, attr.call < 0)) if mask.any()]
    return pd.concat([df, pd.DataFrame(extra, columns=df.columns)], ignore_index=True) if extra else df


def _with_percent(df: pd.DataFrame, time_col: str, key: str) -> pd.DataFrame:
    df = df.sort_values([time_col, key], ascending=[False, True], kind="stable").reset_index(drop=True)
    total = df[time_col].sum()
    df["percent"] = 100.0 * df[time_col] / total if total else 0.0
    df["cumulative percent"] = df["percent"].cumsum()
    return df


def _frame(trace: TraceData, attr: Attribution) -> pd.DataFrame:
    return pd.DataFrame({"op": attr.launcher, "category": attr.category, "graph": attr.graph,
                         "op_index": attr.op_index, "dur": trace.dur_ns, "name_id": trace.name_id})


def _calls(frame: pd.DataFrame) -> pd.Series:
    """Distinct op calls that launched the rows (unlinked kernels: one "call" each, there is nothing to join)."""
    key = frame["op_index"].where(frame["op_index"] >= 0, -1 - frame.index.to_series())
    return key.nunique()


def ops_summary(trace: TraceData, attr: Attribution | None = None) -> pd.DataFrame:
    """One row per launching op (graphs count as ops): calls, kernels, kernel time and share of all of it."""
    if not trace.has_timeline:
        return pd.DataFrame(columns=OPS_COLUMNS)
    attr = attr or attribute(trace)
    if attr.scheme == "tracelens":
        df = _tracelens_rows(trace, attr, attr.launcher, "op")
        category = pd.DataFrame({"op": attr.launcher, "category": attr.category, "dur": trace.dur_ns}) \
            .groupby(["op", "category"])["dur"].sum().reset_index() \
            .sort_values("dur", ascending=False, kind="stable").drop_duplicates("op").set_index("op")["category"]
        df.insert(1, "category", df["op"].map(category).fillna(df["op"]))
        return df[OPS_COLUMNS]
    frame = _frame(trace, attr)
    rows = []
    for op, g in frame.groupby("op", sort=False):
        # One row per op; its kernels can fall in several categories (unlinked ones, or an op no rule knows):
        # the row shows the one holding most of its time, the ops_by_category table splits them exactly.
        category = g.groupby("category")["dur"].sum().idxmax()
        rows.append({"op": op, "category": category, "calls": _calls(g), "kernels": len(g),
                     "kernel time ms": g["dur"].sum() / 1e6})
    return _with_percent(pd.DataFrame(rows, columns=OPS_COLUMNS[:5]), "kernel time ms", "op")[OPS_COLUMNS]


def ops_by_category(trace: TraceData, attr: Attribution | None = None) -> pd.DataFrame:
    if not trace.has_timeline:
        return pd.DataFrame(columns=CATEGORY_COLUMNS)
    attr = attr or attribute(trace)
    if attr.scheme == "tracelens":
        return _tracelens_rows(trace, attr, attr.category, "category")[CATEGORY_COLUMNS]
    frame = _frame(trace, attr)
    rows = [{"category": category, "calls": _calls(g), "kernels": len(g), "kernel time ms": g["dur"].sum() / 1e6}
            for category, g in frame.groupby("category", sort=False)]
    df = _with_percent(pd.DataFrame(rows, columns=CATEGORY_COLUMNS[:4]), "kernel time ms", "category")
    if attr.unlinked:
        row = {"category": UNLINKED_SHARE, "calls": attr.unlinked, "kernels": attr.unlinked,
               "kernel time ms": attr.unlinked_ns / 1e6, "percent": np.nan, "cumulative percent": np.nan}
        df = pd.concat([df, pd.DataFrame([row], columns=df.columns)], ignore_index=True)
    return df[CATEGORY_COLUMNS]


def kernel_summary(trace: TraceData, attr: Attribution | None = None) -> pd.DataFrame:
    """One row per (category, parent op, graph, kernel name), after TraceLens' kernel_summary."""
    if not trace.has_timeline:
        return pd.DataFrame(columns=KERNEL_SUMMARY_COLUMNS)
    attr = attr or attribute(trace)
    frame = _frame(trace, attr)
    frame["stream"] = trace.stream
    span_of = np.ones(trace.n_events, dtype=bool)
    if attr.scheme == "tracelens":
        assert attr.call is not None
        # TraceLens's kernel_summary: kernels only; a kernel without an op is the graph's or the runtime's.
        by_runtime = (attr.op_index < 0) & (attr.call >= 0)
        frame.loc[by_runtime, "category"] = [tracelens_launcher_category(r) for r in attr.launcher[by_runtime]]
        span_of = attr.call >= 0  # TraceLens's timeline leaves the unlinked kernels out
        frame = frame[trace.kind == KERNEL]
    g = frame.groupby(["category", "op", "graph", "stream", "name_id"], sort=False)["dur"] \
        .agg(["size", "sum", "min", "max"]).reset_index()
    df = pd.DataFrame({
        "category": g["category"], "parent op": g["op"], "graph": g["graph"], "stream": g["stream"],
        "kernel": [trace.names[i] for i in g["name_id"]],
        "count": g["size"], "total ms": g["sum"] / 1e6, "mean us": g["sum"] / g["size"] / 1e3,
        "min us": g["min"] / 1e3, "max us": g["max"] / 1e3,
    })
    df = _with_percent(df, "total ms", "kernel")
    span = int(trace.end_ns[span_of].max() - trace.start_ns[span_of].min()) if span_of.any() else 0
    df["percent of total time"] = 100.0 * df["total ms"] * 1e6 / span if span else np.nan
    return df[KERNEL_SUMMARY_COLUMNS]


def unlinked_sentence(trace: TraceData, attr: Attribution) -> str:
    """The line every report carries about kernels without a launching op."""
    if not trace.has_host_ops:
        return (f"The trace has no host ops (cpu_op events), so no kernel can be linked to a launching op; "
                f"all {trace.n_events} kernels are listed under {NO_OP}.")
    return (f"{attr.unlinked} kernels ({attr.unlinked_percent:.1f} % of kernel time) have no launching op "
            f"(out of {trace.n_events}; kernel time counts kernels, memcpy and memset).")

