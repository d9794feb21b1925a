"""Values typed on a command line, checked at the door: one function per kind of value.

invoke hands a flag through as text (or as the default's type), so every task and stage CLI turns its flags
into values here; a typo or an out-of-range value is a one-line ``UserError`` naming the flag, raised before
anything is imported, created or run.
"""

from __future__ import annotations

import math
import re
from typing import Any

from analysis.errors import UserError


def whole_number(flag: str, value: Any, minimum: int | None = None) -> int:
    """An integer flag (``--iterations 30``), at least ``minimum`` when given."""
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
    return number


def real_number(flag: str, value: Any, *, above: float | None = None, minimum: float | None = None) -> float:
    """A finite number flag; ``above`` is an exclusive lower bound (a timeout), ``minimum`` an inclusive one."""
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
    return number


def regular_expression(flag: str, value: str) -> re.Pattern[str]:
    """A regex flag, compiled once here so a bad pattern is named before any work starts."""
    try:
        return re.compile(value)
    except re.error as exc:
        raise UserError(f"{flag} {value!r}: not a valid regular expression ({exc})") from None
