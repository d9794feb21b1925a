"""The statistical settings of a comparison, defined once and checked before any stage runs.

`invoke compare`, `invoke compare-kernels`, `invoke report` and the benchmarks all take these; the flags are
named after the fields (``--confidence``, ``--alpha``, ``--margin``, ``--threshold``, ``--noise``).
``validate`` raises a one-line UserError naming the flag, so a bad value costs seconds, not a whole suite.
Deliberately free of numpy/pandas imports: the CLI validates before anything heavy is loaded.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from analysis.stats.noise_rules import ROUND_SPREAD_LIMIT
from analysis.stats.numeric_tolerance import parse_tolerances
from foundation.errors import UserError
from foundation.flag_values import whole_number

VERDICTS = ("improved", "regressed", "equivalent", "inconclusive")  # of an item
# Of a family, also: "identical" (no item changed: nothing to measure) and "mixed" (the headline improved while
# an item holding at least --fail-share of the step regressed); see analysis.stats.verdict.family_verdict.
FAMILY_VERDICTS = (*VERDICTS, "identical", "mixed")
FAIL_ON = ("never", "regression", "inconclusive", "numerics")
MIN_ROUNDS = 3  # a t interval over rounds needs at least two degrees of freedom to mean anything


@dataclass(frozen=True)
class VerdictSettings:
    confidence: float = 0.95  # level of every interval the report shows
    alpha: float = 0.05  # false-discovery rate of the per-item tests (Benjamini–Hochberg)
    margin: float = 0.02  # equivalence margin: "equivalent" = the whole interval lies within ±margin
    threshold: float | None = None  # a change must be shown beyond it to be called one; None = the margin
    noise: float = ROUND_SPREAD_LIMIT  # robust relative spread of a side's round medians at which it is flagged noisy
    min_ms: float = 0.0  # kernels faster than this on both sides stay out of the summary
    fail_share: float = 0.01  # a regressed item holding at least this share of the step makes the family regress
    tolerance: str = ""  # the numerical A/B's per-dtype tolerances (`analysis.stats.numeric_tolerance`); "" = defaults

    @property
    def effect_floor(self) -> float:
        return self.margin if self.threshold is None else self.threshold

    def validate(self) -> VerdictSettings:
        _fraction("--confidence", self.confidence, "a level such as 0.95", low=0.5)
        _fraction("--alpha", self.alpha, "a probability such as 0.05")
        _fraction("--margin", self.margin, "a fraction such as 0.02 (±2 %)")
        if self.threshold is not None and not (_number(self.threshold) and 0 <= self.threshold < 1):
            raise UserError(f"--threshold {self.threshold}: expected a fraction in [0, 1) such as 0.02")
        _fraction("--noise", self.noise, "a fraction such as 0.10")
        if not (_number(self.min_ms) and self.min_ms >= 0):
            raise UserError(f"--min-ms {self.min_ms}: expected a non-negative number of milliseconds")
        if not (_number(self.fail_share) and 0 <= self.fail_share <= 1):
            raise UserError(f"--fail-share {self.fail_share}: expected a fraction of the step in [0, 1] such as 0.01")
        if not isinstance(self.tolerance, str):
            raise UserError(f"--tolerance {self.tolerance!r}: expected text such as bfloat16=0.05")
        parse_tolerances(self.tolerance)
        return self

    def describe(self) -> dict[str, Any]:
        out = asdict(self)
        out["threshold"] = self.effect_floor
        return out


_DEFAULTS = VerdictSettings()
# The help of every statistical flag, for `invoke compare`, `invoke report`, `invoke compare-kernels` and the
# benchmarks alike (keys are the fields; the flag is --<field> with '_' as '-').
FLAG_HELP = {
    "confidence": f"Level of every confidence interval in the report (default {_DEFAULTS.confidence})",
    "alpha": "False-discovery rate of the per-kernel and per-model tests, Benjamini-Hochberg "
             f"(default {_DEFAULTS.alpha})",
    "margin": "Equivalence margin: 'equivalent' means the whole interval lies within ±margin "
              f"(default {_DEFAULTS.margin})",
    "threshold": "Effect a change must be shown to exceed (a one-sided test, Benjamini-Hochberg over the changed "
                 "items) to be called improved/regressed (default: the margin)",
    "noise": f"Robust spread of a side's round medians at which it is flagged noisy (default {_DEFAULTS.noise:.2f})",
    "min_ms": f"Leave kernels faster than this many ms on both sides out of the summary (default {_DEFAULTS.min_ms:g})",
    "fail_share": "A regressed kernel or model holding at least this share of the step makes its family "
                  f"'regressed' and fails --fail-on regression, whatever the headline (default {_DEFAULTS.fail_share})",
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fraction(flag: str, value: Any, expected: str, low: float = 0.0) -> None:
    if not (_number(value) and low < value < 1):
        raise UserError(f"{flag} {value}: expected {expected} (strictly between {low:g} and 1)")


def check_rounds(value: Any, flag: str = "--rounds") -> int:
    """Timing rounds (fresh worker processes each): at least MIN_ROUNDS."""
    rounds = whole_number(flag, value)
    if rounds < MIN_ROUNDS:
        raise UserError(f"{flag} {rounds}: at least {MIN_ROUNDS} rounds are needed for an interval over rounds")
    return rounds


def check_fail_on(value: str) -> str:
    if value not in FAIL_ON:
        raise UserError(f"--fail-on {value!r}: expected one of {', '.join(FAIL_ON)}")
    return value


def percent(fraction: float) -> str:
    """A setting as the report writes it: 0.95 → "95 %", 0.975 → "97.5 %" (never rounded to another level)."""
    return f"{100 * fraction:.4g} %"
