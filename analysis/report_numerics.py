"""The numerical A/B in the report: the Numerics section, its lead in the verdict line, summary.json's block.

The comparison itself is ``analysis.numerics``; this module only words it. A numerical failure is named before
any speed in the one-line verdict: a faster PR that computes something else is a regression.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.numeric_tolerance import Tolerance
from analysis.numerics import CHECKS, Check, Difference, ModelsNumerics
from analysis.rendering import Column, markdown_table, md_code

VERDICT_PREFIX = "**Verdict:** "
NUMERICS_COLUMNS_MD = [
    Column("model", "model", code=True), Column("dtype", "dtype"),
    *(Column(check, check, markup=True) for check in CHECKS),
    Column("result", "result", markup=True),
]


@dataclass(frozen=True)
class NumericsView:
    """What the report shows of the numerical A/B (models; None where nothing was recorded)."""

    models: ModelsNumerics | None
    tolerances: dict[str, Tolerance]

    def summary_block(self) -> dict[str, Any]:
        return {"models": self.models.block() if self.models is not None else None, "kernels": None,
                "tolerances": {d: {"rtol": t.rtol, "atol": t.atol} for d, t in self.tolerances.items()}}


def _g(x: float) -> str:
    return f"{x:.3g}"


def difference_text(d: Difference) -> str:
    """"logits: max abs 0.41, max rel 0.09, 310/4096 outside" (prbench's words; the output name as code)."""
    if d.how and d.how != "float64 reference":
        return f"{md_code(d.output)}: {d.how}"
    text = (f"{md_code(d.output)}: max abs {_g(d.max_abs)}, max rel {_g(d.max_rel)}, "
            f"{d.mismatches}/{d.elements} outside")
    if d.nonfinite:
        text += f", {d.nonfinite} NaN/inf"
    return text + (" (within 2× eager's float64 error)" if d.how == "float64 reference" else "")


def check_cell(check: Check) -> str:
    if check.skipped:
        return f"skipped: {check.skipped}" if len(check.skipped) < 60 else "skipped (see summary.json)"
    worst = check.worst
    if check.identical:
        return "bit-identical"
    if worst is None:
        return "–"
    if not check.passed:
        return f"**fail** {difference_text(worst)}"
    return f"ok, max abs {_g(worst.max_abs)}" + (" (float64 reference)" if worst.how else "")


def numerics_table(models: ModelsNumerics) -> pd.DataFrame:
    rows = []
    for m in sorted(models.models, key=lambda m: m.passed):  # failures first
        cells = {c.name: check_cell(c) for c in m.checks}
        rows.append({"model": m.model, "dtype": m.dtype, **cells, "result": "pass" if m.passed else "**FAIL**"})
    return pd.DataFrame(rows)


def numerics_markdown(view: NumericsView, max_rows: int | None) -> str:
    """The Numerics section's body (its heading is the template's)."""
    models = view.models
    if models is None:
        return ("_Not recorded: the suites left no model outputs (a run from before the numerical A/B, or the "
                "upstream suite)._\n")
    head = (f"Models: **{len(models.models) - len(models.failed)} of {len(models.models)} passed**"
            + (f", **{len(models.failed)} failed**" if models.failed else "") + ". ")
    identical = sum(1 for m in models.models if m.checks[0].identical)
    head += (f"{identical} of {len(models.models)} model(s) gave bit-identical compiled outputs on both sides "
             f"(PR vs base).\n\n")
    lines = [head, markdown_table(numerics_table(models), NUMERICS_COLUMNS_MD, max_rows, "summary.json (numerics)")]
    if models.not_compared:
        lines.append("Not compared: " + "; ".join(f"{md_code(m)} ({why})" for m, why in models.not_compared)
                     + ".\n")
    return "\n".join(lines)


def numerics_phrase(view: NumericsView) -> str:
    """The verdict line's lead when the numbers are wrong ("" when they are not)."""
    models = view.models
    if models is None or not models.failed:
        return ""
    first = models.failed[0]
    check, diff = first.failures()[0] if first.failures() else (first.checks[0], None)
    what = f"{check.name}, {difference_text(diff)}" if diff is not None else check.name
    names = ", ".join(md_code(m.model) for m in models.failed[:3]) + (" …" if len(models.failed) > 3 else "")
    return (f"numerics **FAILED**: {len(models.failed)} of {len(models.models)} model(s) compute other "
            f"results ({names}; {md_code(first.model)} {what}), so no speedup below is a win")


def lead_with_numerics(verdict: str, view: NumericsView) -> str:
    """The one-line verdict with a numerical failure named first."""
    phrase = numerics_phrase(view)
    if not phrase:
        return verdict
    rest = verdict[len(VERDICT_PREFIX):] if verdict.startswith(VERDICT_PREFIX) else verdict
    return f"{VERDICT_PREFIX}{phrase} — {rest}"


def method_text(view: NumericsView) -> str:
    """The method section's paragraph: what was compared, with which tolerances."""
    tolerances = "; ".join(f"{d}: {t.describe()}" for d, t in view.tolerances.items())
    return ("**Numerics.** Each side's suite ran every model once more on the seeded inputs and weights both "
            "sides build, eagerly, compiled (the kernels it timed) and eagerly in float64 where affordable, the "
            "random generator reseeded before each call; the outputs (inference: the model's output tensors; "
            "training: the loss and the gradients of four fixed parameters) are compared PR vs base, each side's "
            "compiled vs its eager, and eager PR vs base (the harness's check that both sides ran the same "
            "inputs). An element passes when |result − reference| ≤ atol + rtol·|reference| "
            f"({tolerances}; `--tolerance`); NaN or inf where the reference differs always fails; an output "
            "outside the tolerance still passes when its root-mean-square error against the float64 result is at "
            "most twice the reference's plus atol/10, as the dynamo runner's accuracy check does. Training with "
            "dropout is compared PR vs base only (Inductor draws other random numbers than eager).")
