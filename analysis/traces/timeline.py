"""GPU timeline breakdown with TraceLens' definitions (interval unions, not sums of durations).

Device activities are split into computation (kernels and memsets that are not communication), communication
(rccl/nccl kernels) and memcpy. With |X| the length of the union of the intervals in X:

    total_time            = last end − first start over all activities
    busy_time             = |ALL|
    computation_time      = |COMP|
    exposed_comm_time     = |COMM − COMP|            = |COMM ∪ COMP| − |COMP|
    exposed_memcpy_time   = |(MEMCPY − COMP) − COMM| = |ALL| − |COMP ∪ COMM|
    idle_time             = total_time − busy_time
    total_comm_time       = |COMM|, total_memcpy_time = |MEMCPY|

so computation + exposed comm + exposed memcpy + idle = total. Set differences are written as differences
of unions, which keeps everything a sort plus a running maximum in numpy.

The measured window (:func:`measured_window`): by default the span of all device activity, as above. With the
``steps`` rule and a trace that has GPU-side step annotations (``ProfilerStep#N`` as ``gpu_user_annotation``),
the window is the union W of those step windows instead: every quantity is then measured inside W
(|X ∩ W| = |X| + |W| − |X ∪ W|) and total_time = |W|.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from analysis.traces.categories import is_communication
from analysis.traces.model import MEMCPY, TraceData

WINDOW_RULES = ("steps", "span")

TIMELINE_ROWS = ("computation_time", "exposed_comm_time", "exposed_memcpy_time", "busy_time", "idle_time",
                 "total_time", "total_comm_time", "total_memcpy_time")


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) intervals as sorted disjoint intervals; touching intervals coalesce."""
    if starts.size == 0:
        return starts.astype(np.int64), ends.astype(np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new_group = np.empty(s.size, dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new_group)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], reach[last]


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    s, e = merge_intervals(starts, ends)
    return int((e - s).sum())


def union_length_by_group(group: np.ndarray, starts: np.ndarray, ends: np.ndarray, groups: int) -> np.ndarray:
    """|union of the intervals of group g| for g in 0..groups−1 (``group`` < 0: the interval belongs to none).

    Sorted by (group, start), an interval adds what it reaches beyond the furthest end of the earlier intervals
    of its group (a running maximum that restarts at each group)."""
    out = np.zeros(groups, dtype=np.int64)
    keep = group >= 0
    if not keep.any():
        return out
    g, s, e = group[keep], starts[keep], ends[keep]
    order = np.lexsort((s, g))
    g, s, e = g[order], s[order], e[order]
    first = np.ones(g.size, dtype=bool)
    first[1:] = g[1:] != g[:-1]
    # Restart the running maximum at each group: lift each group above every earlier one by a constant offset
    # (in slices of groups small enough that the offsets stay within int64).
    span = int(e.max() - s.min()) + 1
    rank = np.cumsum(first) - 1
    per_slice = max(1, (1 << 62) // span)
    reach = np.empty(g.size, dtype=np.int64)
    for lo in range(0, int(rank[-1]) + 1, per_slice):
        at = slice(*np.searchsorted(rank, [lo, lo + per_slice]))
        offset = (rank[at] - lo).astype(np.int64) * span
        reach[at] = np.maximum.accumulate(e[at] - s.min() + offset) - offset + s.min()
    before = np.empty(g.size, dtype=np.int64)
    before[0] = s[0]
    before[1:] = reach[:-1]
    before[first] = s[first]
    added = np.maximum(e - np.maximum(s, before), 0)
    np.add.at(out, g, added)
    return out


@dataclass(frozen=True)
class Timeline:
    """Timeline quantities in ns; ``to_frame`` gives TraceLens' ``type, time ms, percent`` table."""

    computation_time: int
    exposed_comm_time: int
    exposed_memcpy_time: int
    busy_time: int
    idle_time: int
    total_time: int
    total_comm_time: int
    total_memcpy_time: int

    def percent(self, row: str) -> float:
        return 100.0 * getattr(self, row) / self.total_time if self.total_time else 0.0

    def to_frame(self) -> pd.DataFrame:
        values = asdict(self)
        return pd.DataFrame({
            "type": list(TIMELINE_ROWS),
            "time ms": [values[r] / 1e6 for r in TIMELINE_ROWS],
            "percent": [self.percent(r) for r in TIMELINE_ROWS],
        })


def activity_groups(trace: TraceData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boolean masks (computation, communication, memcpy) over the trace's device activities."""
    comm_names = np.fromiter((is_communication(n) for n in trace.names), dtype=bool, count=len(trace.names))
    comm = comm_names[trace.name_id] if trace.n_events else np.zeros(0, dtype=bool)
    memcpy = trace.kind == MEMCPY
    comm &= ~memcpy
    comp = ~(comm | memcpy)
    return comp, comm, memcpy


@dataclass(frozen=True)
class Window:
    """The time the timeline is measured over: ``starts``/``ends`` are disjoint sorted intervals in ns, or
    ``None`` for the span of all device activity."""

    rule: str  # "steps" or "span": the rule applied (a "steps" request without GPU steps falls back to span)
    starts: np.ndarray | None = None
    ends: np.ndarray | None = None
    steps: int = 0
    outside: int = 0  # device activities that start or end outside the window (partly or wholly not counted)

    def describe(self) -> str:
        if self.starts is None:
            return "span of all GPU events (first start to last end)"
        return (f"union of {self.steps} GPU-side ProfilerStep window(s) (gpu_user_annotation); "
                f"{self.outside} device activities lie partly or wholly outside and count only inside")


def measured_window(trace: TraceData, rule: str = "steps") -> Window:
    """The ``steps`` rule uses the GPU-side ProfilerStep windows when the trace has them, else the span."""
    if rule not in WINDOW_RULES:
        raise ValueError(f"window rule {rule!r}; expected one of {WINDOW_RULES}")
    device_steps = [s for s in trace.steps if s.on_device and s.end_ns > s.start_ns]
    if rule == "span" or not device_steps or not trace.has_timeline:
        return Window("span")
    ws, we = merge_intervals(np.array([s.start_ns for s in device_steps], dtype=np.int64),
                             np.array([s.end_ns for s in device_steps], dtype=np.int64))
    # An activity is fully inside when one window holds both its start and its end.
    idx = np.searchsorted(ws, trace.start_ns, side="right") - 1
    inside = (idx >= 0) & (trace.end_ns <= we[np.clip(idx, 0, None)])
    return Window("steps", ws, we, len(device_steps), int((~inside).sum()))


def gpu_timeline(trace: TraceData, window: Window | None = None) -> Timeline:
    if not trace.has_timeline:
        return Timeline(0, 0, 0, 0, 0, 0, 0, 0)
    start, end = trace.start_ns, trace.end_ns
    comp, comm, memcpy = activity_groups(trace)
    ws = window.starts if window is not None else None
    we = window.ends if window is not None else None

    def u(mask: np.ndarray) -> int:
        own = union_length(start[mask], end[mask])
        if ws is None or we is None:
            return own
        # |X ∩ W| = |X| + |W| − |X ∪ W|, all three unions of intervals.
        return own + union_length(ws, we) - union_length(np.concatenate([start[mask], ws]),
                                                         np.concatenate([end[mask], we]))

    all_mask = np.ones(start.size, dtype=bool)
    busy = u(all_mask)
    computation = u(comp)
    comp_or_comm = u(comp | comm)
    total = union_length(ws, we) if ws is not None and we is not None else int(end.max() - start.min())
    return Timeline(
        computation_time=computation,
        exposed_comm_time=comp_or_comm - computation,
        exposed_memcpy_time=busy - comp_or_comm,
        busy_time=busy,
        idle_time=total - busy,
        total_time=total,
        total_comm_time=u(comm),
        total_memcpy_time=u(memcpy),
    )
