"""Columns of decoded JSON events, pulled out and checked a run of events at a time.

The Kineto reader's hot path: ``map(dict.get, events, repeat(key))`` takes one field of every event without a
Python frame per event, ``set(map(type, values))`` checks a whole column's types at once and ``min``, ``max`` and
``sum`` range-check it, all at C speed and without numpy (whose import alone costs most of the read of a 10 MB
trace). Each check answers ``None`` (or False) unless the whole column is well-formed; the reader then reads that
run one event at a time, which decides and words every irregular case as it always did.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

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


def of_dicts(events: Sequence[Any], keys: tuple[str, ...], defaults: tuple[Any, ...]) -> list[Sequence[Any]] | None:
    """:func:`fields` (or :func:`field` for one key) when every event is a JSON object, else None: ``dict.get``
    and ``itemgetter`` refuse anything else with a TypeError, so no pass of its own checks the events' type."""
    try:
        return [field(events, keys[0], defaults[0])] if len(keys) == 1 else fields(events, keys, defaults)
    except TypeError:
        return None


def all_of(values: Sequence[Any], types: frozenset[type]) -> bool:
    """Whether every value's exact type is one of ``types`` (True for no values)."""
    return set(map(type, values)) <= types


def times(ts: Sequence[Any], dur: Sequence[Any], limit: float, nan_free: bool = False
          ) -> tuple[Sequence[float], Sequence[float]] | None:
    """(ts, dur) as they are when every ts is a number in (−limit, limit) and every dur one in [0, limit). A NaN
    makes the column's sum NaN, so it is refused too (``min`` and ``max`` may skip it); ``nan_free``: the values
    cannot be NaN (a fast decoder refuses it), so that test is left out."""
    if not (all_of(ts, NUMBER_TYPES) and all_of(dur, NUMBER_TYPES)):
        return None
    if ts and not (-limit < min(ts) and max(ts) < limit and min(dur) >= 0 and max(dur) < limit
                   and (nan_free or not (math.isnan(sum(ts)) or math.isnan(sum(dur))))):
        return None
    return ts, dur


def ids(values: Sequence[Any], bits: int = 64) -> Sequence[int] | None:
    """The values as they are when all are whole numbers that fit a signed ``bits``-bit column, else None."""
    if not all_of(values, INT_TYPES):
        return None
    limit = 1 << (bits - 1)
    if values and (min(values) < -limit or max(values) >= limit):
        return None
    return values
