"""Interval lengths computed the plain way (a sorted merge loop and a two-pointer subtraction), as an
independent reference for the timeline's union arithmetic in numpy."""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[float, float]


def merged(intervals: Iterable[Interval]) -> list[Interval]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def union(intervals: Iterable[Interval]) -> float:
    return sum(e - s for s, e in merged(intervals))


def minus(a: Iterable[Interval], b: Iterable[Interval]) -> float:
    """Length of (∪a) − (∪b): walk each merged interval of a and cut out the merged intervals of b."""
    cut = merged(b)
    total, j = 0.0, 0
    for s, e in merged(a):
        while j < len(cut) and cut[j][1] <= s:
            j += 1
        cursor, k = s, j
        while k < len(cut) and cut[k][0] < e:
            if cut[k][0] > cursor:
                total += cut[k][0] - cursor
            cursor = max(cursor, cut[k][1])
            k += 1
        total += max(0.0, e - cursor)
    return total
