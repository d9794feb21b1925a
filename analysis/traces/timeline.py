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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from analysis.traces.categories import is_communication
from analysis.traces.model import MEMCPY, TraceData

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


def gpu_timeline(trace: TraceData) -> Timeline:
    if not trace.has_timeline:
        return Timeline(0, 0, 0, 0, 0, 0, 0, 0)
    start, end = trace.start_ns, trace.end_ns
    comp, comm, memcpy = activity_groups(trace)

    def u(mask: np.ndarray) -> int:
        return union_length(start[mask], end[mask])

    all_mask = np.ones(start.size, dtype=bool)
    busy = u(all_mask)
    computation = u(comp)
    comp_or_comm = u(comp | comm)
    total = int(end.max() - start.min())
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
