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
of unions, which keeps everything one sort plus a running maximum per union, in plain Python at C speed
(``sorted``, ``itertools.accumulate``, ``map``) over the trace's ``array`` columns: the timeline of a trace just
read imports neither numpy nor pandas (see :mod:`analysis.traces.model`); on 380 000 kernels it takes about 0.3 s.

The measured window (:func:`measured_window`): by default the span of all device activity, as above. With the
``steps`` rule and a trace that has GPU-side step annotations (``ProfilerStep#N`` as ``gpu_user_annotation``),
the window is the union W of those step windows instead: every quantity is then measured inside W
(|X ∩ W| = |X| + |W| − |X ∪ W|) and total_time = |W|.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import accumulate, compress, islice, repeat
from operator import add, gt, sub
from typing import TYPE_CHECKING, Any

from analysis.traces.analyses.categories import is_communication
from analysis.traces.model import MEMCPY, TraceData

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

WINDOW_RULES = ("steps", "span")

TIMELINE_ROWS = ("computation_time", "exposed_comm_time", "exposed_memcpy_time", "busy_time", "idle_time",
                 "total_time", "total_comm_time", "total_memcpy_time")


def _values(column: Any) -> list[int]:
    """A numpy array, an ``array`` or a sequence of whole numbers as a list of ints."""
    return column.tolist() if hasattr(column, "tolist") else list(column)


def _by_start(starts: Any, ends: Any) -> tuple[list[int], list[int]]:
    s, e = _values(starts), _values(ends)
    order = sorted(range(len(s)), key=s.__getitem__)
    return list(map(s.__getitem__, order)), list(map(e.__getitem__, order))


def _merge_sorted(s: Sequence[int], e: Sequence[int]) -> tuple[list[int], list[int]]:
    """:func:`merge_intervals` of intervals sorted by start."""
    if not s:
        return [], []
    reach = list(accumulate(e, max))  # the furthest end of each interval and all that start before it
    first = [0, *compress(range(1, len(s)), map(gt, s[1:], reach))]  # starts beyond every earlier end
    last = [*map(sub, first[1:], repeat(1)), len(s) - 1]
    return list(map(s.__getitem__, first)), list(map(reach.__getitem__, last))


def merge_intervals(starts: Any, ends: Any) -> tuple[list[int], list[int]]:
    """Union of [start, end) intervals as sorted disjoint intervals; touching intervals coalesce."""
    return _merge_sorted(*_by_start(starts, ends))


def _sorted_union_length(s: Sequence[int], e: Sequence[int]) -> int:
    """|union| of intervals sorted by start: from the first start to the furthest end, less the gaps (a start
    beyond every earlier end)."""
    if not s:
        return 0
    reach = list(accumulate(e, max))
    after = list(map(sub, islice(s, 1, None), reach))  # each start less the furthest end before it
    return reach[-1] - s[0] - sum(compress(after, map(gt, after, repeat(0))))


def union_length(starts: Any, ends: Any) -> int:
    return _sorted_union_length(*_by_start(starts, ends))


def union_length_by_group(group: np.ndarray, starts: np.ndarray, ends: np.ndarray, groups: int) -> np.ndarray:
    """|union of the intervals of group g| for g in 0..groups−1 (``group`` < 0: the interval belongs to none).

    Sorted by (group, start), an interval adds what it reaches beyond the furthest end of the earlier intervals
    of its group (a running maximum that restarts at each group)."""
    import numpy as np  # here: the ops tables that call this use numpy already; the timeline needs none

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
        import pandas as pd  # here: the timeline itself needs no pandas (see the module docstring)

        values = asdict(self)
        return pd.DataFrame({
            "type": list(TIMELINE_ROWS),
            "time ms": [values[r] / 1e6 for r in TIMELINE_ROWS],
            "percent": [self.percent(r) for r in TIMELINE_ROWS],
        })


COMPUTATION, COMMUNICATION, MEMCPY_GROUP = range(3)
ALL_GROUPS = frozenset({COMPUTATION, COMMUNICATION, MEMCPY_GROUP})


def activity_groups(trace: TraceData) -> list[int]:
    """The group of each of the trace's device activities: COMPUTATION, COMMUNICATION or MEMCPY_GROUP."""
    columns = trace.columns
    by_name = [COMPUTATION] * len(trace.names)
    for name_id in set(columns.name_id):  # decided once per name
        if is_communication(trace.names[name_id]):
            by_name[name_id] = COMMUNICATION
    group = list(map(by_name.__getitem__, columns.name_id))
    for i in compress(range(len(group)), map(MEMCPY.__eq__, columns.kind)):  # (few)
        group[i] = MEMCPY_GROUP
    return group


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
    import numpy as np  # here: the span rule, the default of a trace without GPU steps, needs none

    merged = merge_intervals([s.start_ns for s in device_steps], [s.end_ns for s in device_steps])
    ws, we = (np.array(v, dtype=np.int64) for v in merged)
    # An activity is fully inside when one window holds both its start and its end.
    idx = np.searchsorted(ws, trace.start_ns, side="right") - 1
    inside = (idx >= 0) & (trace.end_ns <= we[np.clip(idx, 0, None)])
    return Window("steps", ws, we, len(device_steps), int((~inside).sum()))


def gpu_timeline(trace: TraceData, window: Window | None = None) -> Timeline:
    if not trace.has_timeline:
        return Timeline(0, 0, 0, 0, 0, 0, 0, 0)
    columns = trace.columns
    # Sorted by start once; each union below takes its activities from this order.
    order = sorted(range(trace.n_events), key=columns.start_ns.__getitem__)
    start = list(map(columns.start_ns.__getitem__, order))
    end = list(map(add, start, map(columns.dur_ns.__getitem__, order)))
    group = list(map(activity_groups(trace).__getitem__, order))
    present = frozenset(group)
    unions: dict[frozenset[int], int] = {}  # by the groups present: e.g. without communication, COMP ∪ COMM = COMP
    ws = _values(window.starts) if window is not None and window.starts is not None else None
    we = _values(window.ends) if window is not None and window.ends is not None else None

    def u(groups: frozenset[int]) -> int:
        key = groups & present
        if key not in unions:
            unions[key] = within_window(key)
        return unions[key]

    def within_window(groups: frozenset[int]) -> int:
        if groups == present:
            s, e = start, end
        else:
            chosen = list(map(groups.__contains__, group))
            s, e = list(compress(start, chosen)), list(compress(end, chosen))
        own = _sorted_union_length(s, e)
        if ws is None or we is None:
            return own
        # |X ∩ W| = |X| + |W| − |X ∪ W|, all three unions of intervals.
        return own + union_length(ws, we) - union_length(s + ws, e + we)

    busy = u(ALL_GROUPS)
    computation = u(frozenset({COMPUTATION}))
    comp_or_comm = u(frozenset({COMPUTATION, COMMUNICATION}))
    total = union_length(ws, we) if ws is not None and we is not None else max(end) - min(start)
    return Timeline(
        computation_time=computation,
        exposed_comm_time=comp_or_comm - computation,
        exposed_memcpy_time=busy - comp_or_comm,
        busy_time=busy,
        idle_time=total - busy,
        total_time=total,
        total_comm_time=u(frozenset({COMMUNICATION})),
        total_memcpy_time=u(frozenset({MEMCPY_GROUP})),
    )
