"""The numerical A/B in the report: the Numerics section, its lead in the verdict line, summary.json's block.

The comparison itself is ``analysis.models.numerics``; this module only words it. A numerical failure is named before
any speed in the one-line verdict: a faster PR that computes something else is a regression.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis.kernels.compare import KernelComparison
from analysis.kernels.numerics import KernelDifference, KernelsNumerics, compare_kernel_outputs
from analysis.models.numerics import CHECKS, Check, Difference, ModelsNumerics, compare_model_outputs, recording_seconds
from analysis.rendering import Column, fmt_x, markdown_table, md_code
from analysis.report.inputs import ReportInputs
from analysis.stats.numeric_tolerance import Tolerance
from foundation.formats.kernel_index import where_launched

VERDICT_PREFIX = "**Verdict:** "
NUMERICS_COLUMNS_MD = [
    Column("model", "model", code=True), Column("dtype", "dtype"),
    *(Column(check, check, markup=True) for check in CHECKS),
    Column("result", "result", markup=True),
]
KERNEL_NUMERICS_COLUMNS_MD = [
    Column("kernel", "kernel (base → PR)", width=60, code=True),
    Column("where", "models / graphs", width=72, code=True), Column("code", "code"),
    Column("inputs", "inputs"), Column("max_abs", "max abs"), Column("max_rel", "max rel"),
    Column("max_ulp", "max ULP"), Column("differing", "elements differing"),
    Column("speedup", "speedup", fmt_x), Column("result", "result", markup=True),
]


@dataclass(frozen=True)
class NumericsView:
    """What the report shows of the numerical A/B (models; None where nothing was recorded)."""

    models: ModelsNumerics | None
    tolerances: dict[str, Tolerance]
    kernels: KernelsNumerics | None = None
    speedups: dict[tuple[str, str], float] = field(default_factory=dict)  # (base path, PR path) → speedup
    where: dict[tuple[str, str], str] = field(default_factory=dict)  # (base path, PR path) → its models / graphs
    recording_s: float = 0.0  # what recording the models' outputs cost both suites

    def summary_block(self) -> dict[str, Any]:
        kernels = self.kernels.block() if self.kernels is not None else None
        if kernels is not None:  # a kernel that is faster and computes something else is the case to look at
            kernels["faster_and_different"] = [d["name"] for d in kernels["failed_items"]
                                               if self.speedups.get((d["base_path"], d["pr_path"]), math.nan) > 1]
        return {"models": self.models.block() if self.models is not None else None, "kernels": kernels,
                "tolerances": {d: {"rtol": t.rtol, "atol": t.atol} for d, t in self.tolerances.items()}}


def numerics_view(inputs: ReportInputs, kc: KernelComparison | None, tolerances: dict[str, Tolerance]
                  ) -> NumericsView | None:
    """The models' and the paired kernels' numerical A/B of a run (None: neither could be looked for)."""
    models = compare_model_outputs(*inputs.suite_dirs, tolerances) if inputs.suite_dirs else None
    kernels, speedups, where = None, {}, {}
    if kc is not None and inputs.kernel_output_dirs and inputs.base_organized and inputs.pr_organized:
        t = kc.table
        pairs = list(zip(t["base_name"], t["pr_name"], t["base_path"], t["pr_path"],
                         t["code_changed"].astype(bool), strict=True))
        kernels = compare_kernel_outputs(*inputs.kernel_output_dirs, inputs.base_organized, inputs.pr_organized,
                                         pairs, tolerances)
        # keyed by the pair's paths: two pairs may have the same names (the same kernel in other models)
        speedups = {(b, p): float(x) for b, p, x in zip(t["base_path"], t["pr_path"], t["speedup"], strict=True)}
        where = {(b, p): where_launched(f"{bg};{pg}") for b, p, bg, pg in zip(t["base_path"], t["pr_path"],
                                                                             t["base_graphs"], t["pr_graphs"],
                                                                             strict=True)}
    if inputs.suite_dirs is None and kernels is None:
        return None
    recording = recording_seconds(inputs.suite_dirs) if inputs.suite_dirs else 0.0
    return NumericsView(models, tolerances, kernels, speedups, where, recording)


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


def _kernel_row(p: KernelDifference, speedup: float, where: str) -> dict[str, Any]:
    name = p.base if p.base == p.pr else f"{p.base} → {p.pr}"
    row: dict[str, Any] = {"kernel": name, "where": where, "code": "changed" if p.code_changed else "identical",
                           "inputs": p.inputs, "speedup": speedup}
    if not p.compared:
        return {**row, "max_abs": "–", "max_rel": "–", "max_ulp": "–", "differing": "–", "result": "–"}
    if p.passed:
        result = "bit-identical" if p.bit_identical else "within tolerance"
    else:
        result = "**FAIL**" + (" **faster and different**" if speedup > 1 else "") + (
            f" ({p.problem})" if p.problem else "")
    return {**row, "max_abs": _g(p.max_abs), "max_rel": _g(p.max_rel), "max_ulp": str(p.max_ulp),
            "differing": f"{p.differing}/{p.elements}" + (f", {p.nonfinite} NaN/inf" if p.nonfinite else ""),
            "result": result}


def kernels_markdown(view: NumericsView, max_rows: int | None) -> str:
    kernels = view.kernels
    if kernels is None:
        return ""
    identical = [p for p in kernels.compared if not p.code_changed]
    changed = [p for p in kernels.compared if p.code_changed]
    passed = len(kernels.compared) - len(kernels.failed)
    head = (f"Kernels (base and PR kernel on identical inputs, every output buffer): **{passed} "
            f"of {len(kernels.compared)} passed**" + (f", **{len(kernels.failed)} failed**" if kernels.failed else "")
            + f"; {sum(p.bit_identical for p in changed)} of {len(changed)} changed kernel(s) bit-identical, "
            f"{sum(p.bit_identical for p in identical)} of {len(identical)} identical kernel(s) bit-identical "
            "(the harness's own check)"
            + (f"; {len(kernels.pairs) - len(kernels.compared)} pair(s) not compared (their inputs differ: an "
               "upstream kernel changed them; the models' outputs cover them)" if len(kernels.compared) <
               len(kernels.pairs) else "") + ".\n\n")
    shown = [p for p in kernels.pairs if p.code_changed or not p.passed]  # identical code that passes: counted
    table = pd.DataFrame([_kernel_row(p, view.speedups.get((p.base_path, p.pr_path), math.nan),
                                      view.where.get((p.base_path, p.pr_path), "–")) for p in shown])
    return head + markdown_table(table, KERNEL_NUMERICS_COLUMNS_MD, max_rows, "summary.json (numerics)")


def numerics_markdown(view: NumericsView, max_rows: int | None) -> str:
    """The Numerics section's body (its heading is the template's)."""
    kernels = kernels_markdown(view, max_rows)
    models = view.models
    if models is None:
        return ("_Models: not recorded: the suites left no model outputs (a run from before the numerical A/B, or "
                "the upstream suite)._\n\n" + kernels)
    head = (f"Models: **{len(models.models) - len(models.failed)} of {len(models.models)} passed**"
            + (f", **{len(models.failed)} failed**" if models.failed else "") + ". ")
    identical = sum(1 for m in models.models if m.checks[0].identical)
    head += (f"{identical} of {len(models.models)} model(s) gave bit-identical compiled outputs on both sides "
             f"(PR vs base).\n\n")
    lines = [head, markdown_table(numerics_table(models), NUMERICS_COLUMNS_MD, max_rows, "summary.json (numerics)")]
    if models.not_compared:
        lines.append("Not compared: " + "; ".join(f"{md_code(m)} ({why})" for m, why in models.not_compared)
                     + ".\n")
    return "\n".join([*lines, kernels])


def numerics_phrase(view: NumericsView) -> str:
    """The verdict line's lead when the numbers are wrong ("" when they are not)."""
    parts = []
    models = view.models
    if models is not None and models.failed:
        first = models.failed[0]
        check, diff = first.failures()[0] if first.failures() else (first.checks[0], None)
        what = f"{check.name}, {difference_text(diff)}" if diff is not None else check.name
        names = ", ".join(md_code(m.model) for m in models.failed[:3]) + (" …" if len(models.failed) > 3 else "")
        parts.append(f"{len(models.failed)} of {len(models.models)} model(s) compute other results ({names}; "
                     f"{md_code(first.model)} {what})")
    kernels = view.kernels
    if kernels is not None and kernels.failed:
        worst = max(kernels.failed, key=lambda p: (p.nonfinite, p.max_abs))
        parts.append(f"{len(kernels.failed)} of {len(kernels.compared)} kernel pair(s) differ on identical inputs "
                     f"(worst {md_code(worst.pr)}: max abs {_g(worst.max_abs)}, {worst.max_ulp} ULP)")
    if not parts:
        return ""
    return f"numerics **FAILED**: {'; '.join(parts)}, so no speedup below is a win"


def failed(view: NumericsView) -> bool:
    """Some model or kernel pair computes something else."""
    return bool((view.models is not None and view.models.failed) or (view.kernels is not None and view.kernels.failed))


def numerics_sentence(view: NumericsView | None) -> str:
    """The verdict's numerics sentence when nothing failed (a failure leads the verdict instead)."""
    if view is None or failed(view):
        return ""
    parts = []
    if view.models is not None:
        parts.append(f"{len(view.models.models)} of {len(view.models.models)} models")
    if view.kernels is not None:
        parts.append(f"{len(view.kernels.compared)} of {len(view.kernels.compared)} kernel pairs compared")
    return f"Numerics: {' and '.join(parts)} within tolerance." if parts else ""


def lead_with_numerics(verdict: str, view: NumericsView | None) -> str:
    """The one-line verdict with a numerical failure named first."""
    phrase = numerics_phrase(view) if view is not None else ""
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
            "training: the whole timed step from the same weights, recorded as the loss, the gradients of four "
            "fixed parameters and those parameters after the optimizer step) are compared PR vs base, each side's "
            "compiled vs its eager, and eager PR vs base (the harness's check that both sides ran the same "
            "inputs). An element passes when |result − reference| ≤ atol + rtol·|reference| "
            f"({tolerances}; `--tolerance`); NaN or inf where the reference differs always fails; an output "
            "outside the tolerance still passes when its root-mean-square error against the float64 result is at "
            "most twice the reference's plus atol/10, as the dynamo runner's accuracy check does. Training with "
            "dropout is compared PR vs base only (Inductor draws other random numbers than eager). Kernels: "
            "each side's kernel workers record, once per run, every paired kernel's first launch in its graph "
            "(its tensor arguments before, what it may write after), and the PR's kernel runs again on base's "
            "recorded inputs; every output buffer is compared with the same tolerances (max abs and rel error, "
            "the largest distance in units in the last place of its dtype, the elements that differ at all); "
            "kernels whose code is identical must give bit-identical outputs."
            + (f" Recording the models' outputs took {view.recording_s:.1f} s of the two suites." if view.recording_s
               else ""))
