"""Columns of decoded JSON events, pulled out and checked a run of events at a time.

The Kineto reader's hot path: ``map(dict.get, events, repeat(key))`` takes one field of every event without a
Python frame per event, ``set(map(type, values))`` checks a whole column's types at once and numpy converts and
range-checks it. Each check answers ``None`` (or False) unless the whole column is well-formed; the reader then
reads that run one event at a time, which decides and words every irregular case as it always did.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

_GET = dict.get
NUMBER_TYPES = frozenset({int, float})  # exact types: a JSON true/false is a bool, which is not a time
INT_TYPES = frozenset({int})
STR_TYPES = frozenset({str})
DICT_TYPES = frozenset({dict})


def field(events: Sequence[Any], key: str, default: Any = None) -> list[Any]:
    """``[ev.get(key, default) for ev in events]``, at C speed."""
    return list(map(_GET, events, repeat(key), repeat(default)))


def fields(events: Sequence[Any], keys: tuple[str, ...], defaults: tuple[Any, ...]) -> list[Sequence[Any]]:
    """:func:`field` of several keys (at least two): one pass with ``itemgetter`` when every event has every key
    (the common case), else one :func:`field` per key with its default."""
    try:
        rows = list(map(itemgetter(*keys), events))
    except KeyError:
        return [field(events, key, default) for key, default in zip(keys, defaults, strict=True)]
    if not rows:
        return [() for _ in keys]
    return list(zip(*rows, strict=True))


def all_of(values: Sequence[Any], types: frozenset[type]) -> bool:
    """Whether every value's exact type is one of ``types`` (True for no values)."""
    return set(map(type, values)) <= types


def times(ts: Sequence[Any], dur: Sequence[Any], limit: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(ts, dur) as float64 when every ts is a number in (−limit, limit) and every dur one in [0, limit); NaN
    fails the comparisons, so it is refused too."""
    if not (all_of(ts, NUMBER_TYPES) and all_of(dur, NUMBER_TYPES)):
        return None
    try:
        start = np.fromiter(ts, dtype=np.float64, count=len(ts))
        length = np.fromiter(dur, dtype=np.float64, count=len(dur))
    except OverflowError:  # an integer beyond the float range (only the standard library decodes those)
        return None
    if not (((start > -limit) & (start < limit)).all() and ((length >= 0) & (length < limit)).all()):
        return None
    return start, length


def ids(values: Sequence[Any], bits: int = 64) -> np.ndarray | None:
    """Whole numbers that fit a signed ``bits``-bit column, as int64; None if any value is something else."""
    if not all_of(values, INT_TYPES):
        return None
    try:
        column = np.fromiter(values, dtype=np.int64, count=len(values))
    except OverflowError:
        return None
    if bits < 64 and column.size:
        limit = 1 << (bits - 1)
        if column.min() < -limit or column.max() >= limit:
            return None
    return column
