"""Tolerances of the numerical A/B (``--tolerance``): per dtype, defined once, checked at the door.

Free of numpy and pandas (``analysis.stats.verdict_settings`` validates the flag before anything heavy is imported).
The flag is ``DTYPE=RTOL[:ATOL],...`` (ATOL defaults to RTOL), e.g. ``bfloat16=0.05`` or
``float32=1e-4:1e-5,bfloat16=3e-2``; dtypes not named keep their defaults.

An element passes when ``|result - reference| <= atol + rtol * |reference|`` (``numpy.isclose``). The defaults
follow the dynamo runner's accuracy check in spirit: about ten units in the last place of the dtype's
precision for float32 (reduction order alone moves a float32 logit by 1e-6 relative; a dropped term moves it
by far more), and a few bfloat16/float16 roundings (bfloat16 keeps 8 significant bits: one rounding is 0.4 %).
A comparison that exceeds them can still pass on the float64 reference (``analysis.models.numerics``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from foundation.errors import UserError

FLAG = "--tolerance"


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float

    def describe(self) -> str:
        return f"rtol {self.rtol:g}, atol {self.atol:g}"


DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(1e-3, 1e-3),
    "bfloat16": Tolerance(2e-2, 2e-2),
    "float16": Tolerance(1e-2, 1e-2),
    # amp: float32 weights under autocast (bfloat16 on the CPU, float16 on a GPU): the looser of the two.
    "amp": Tolerance(2e-2, 2e-2),
}
FLAG_HELP = ("Numerical A/B tolerances per dtype, DTYPE=RTOL[:ATOL],... (ATOL defaults to RTOL), e.g. "
             "bfloat16=0.05; defaults: " + ", ".join(f"{d}={t.rtol:g}:{t.atol:g}" for d, t in
                                                     DEFAULT_TOLERANCES.items()))


def _positive(text: str, item: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise UserError(f"{FLAG} {item!r}: {text!r} is not a non-negative number")
    return value


def parse_tolerances(text: str) -> dict[str, Tolerance]:
    """``--tolerance`` text → the tolerance of every dtype (the defaults where not named)."""
    tolerances = dict(DEFAULT_TOLERANCES)
    for item in (part.strip() for part in (text or "").split(",")):
        if not item:
            continue
        dtype, sep, values = item.partition("=")
        dtype = dtype.strip()
        if not sep or dtype not in DEFAULT_TOLERANCES:
            raise UserError(f"{FLAG} {item!r}: expected DTYPE=RTOL[:ATOL] with DTYPE one of "
                            f"{', '.join(DEFAULT_TOLERANCES)}")
        rtol, _, atol = values.partition(":")
        tolerances[dtype] = Tolerance(_positive(rtol, item), _positive(atol or rtol, item))
    return tolerances


def tolerance_for(tolerances: dict[str, Tolerance], dtype: str) -> Tolerance:
    """The tolerance of a suite dtype (an unknown one gets the loosest: nothing is called wrong on a guess)."""
    if dtype in tolerances:
        return tolerances[dtype]
    return max(tolerances.values(), key=lambda t: (t.rtol, t.atol))
