"""Values typed on a command line, checked at the door: one function per kind of value.

invoke hands a flag through as text (or as the default's type), so every task and stage CLI turns its flags
into values here; a typo or an out-of-range value is a one-line ``UserError`` naming the flag, raised before
anything is imported, created or run.
"""

from __future__ import annotations

import math
import re
from typing import Any

from foundation.errors import UserError

# Every whole-number flag fits a C int: counts reach numpy arrays, subprocess arguments and sleep/alarm calls.
MAX_WHOLE = 2**31 - 1
# Calls per kernel or model (warm-up, iterations, --rep): a million 1 µs calls is a second, while each sample is
# kept (kernel_samples.json, ~20 bytes each) and a million samples of every kernel of a suite would not fit a disk.
MAX_CALLS = 1_000_000
# Seconds a stage or a kernel may run before it is stopped: up to a day. Deadlines are taken as monotonic clock +
# timeout and shown as wall-clock times (datetime), which overflow long before 1e308 s ("timestamp out of range").
MAX_TIMEOUT_S = 86_400.0


def whole_number(flag: str, value: Any, minimum: int | None = None, maximum: int = MAX_WHOLE) -> int:
    """An integer flag (``--iterations 30``), at least ``minimum`` when given and at most ``maximum``."""
    if isinstance(value, bool):
        raise UserError(f"{flag} {value!r}: expected a whole number")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UserError(f"{flag} {value!r}: expected a whole number") from None
    if isinstance(value, float) and value != number:
        raise UserError(f"{flag} {value!r}: expected a whole number")
    if minimum is not None and number < minimum:
        raise UserError(f"{flag} {number}: expected at least {minimum}")
    if number > maximum:
        raise UserError(f"{flag} {number}: expected at most {maximum:,}")
    return number


def call_count(flag: str, value: Any, minimum: int) -> int:
    """Warm-up or timed calls (``--iterations``, ``--warmup``, ``--rep``): ``minimum`` to `MAX_CALLS`."""
    return whole_number(flag, value, minimum=minimum, maximum=MAX_CALLS)


def timeout_seconds(flag: str, value: Any) -> float:
    """A timeout in seconds: above 0, at most `MAX_TIMEOUT_S` (a day)."""
    return real_number(flag, value, above=0, maximum=MAX_TIMEOUT_S)


def real_number(flag: str, value: Any, *, above: float | None = None, minimum: float | None = None,
                maximum: float | None = None) -> float:
    """A finite number flag; ``above`` is an exclusive lower bound (a timeout), ``minimum`` an inclusive one,
    ``maximum`` an inclusive upper one."""
    if isinstance(value, bool):
        raise UserError(f"{flag} {value!r}: expected a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{flag} {value!r}: expected a number") from None
    if not math.isfinite(number):
        raise UserError(f"{flag} {value!r}: expected a finite number")
    if above is not None and number <= above:
        raise UserError(f"{flag} {value}: expected a number above {above:g}")
    if minimum is not None and number < minimum:
        raise UserError(f"{flag} {value}: expected at least {minimum:g}")
    if maximum is not None and number > maximum:
        raise UserError(f"{flag} {value}: expected at most {maximum:g}")
    return number


def regular_expression(flag: str, value: str) -> re.Pattern[str]:
    """A regex flag, compiled once here so a bad pattern is named before any work starts."""
    try:
        return re.compile(value)
    except re.error as exc:
        raise UserError(f"{flag} {value!r}: not a valid regular expression ({exc})") from None
