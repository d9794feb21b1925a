"""The verdict of a comparison in words and numbers: the one-line verdict, the A/A control table, the
``summary.json`` content, the xlsx Summary sheet and the lines ``invoke compare-kernels`` prints."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.kernels.compare import KernelComparison, KernelSummary
from analysis.models.compare import ModelComparison
from analysis.rendering import ci_text, fmt_share, fmt_x
from analysis.report.headline import headline
from analysis.report.sections.gates import Gate
from analysis.report.sections.projection import Projection
from analysis.report.summary import Item, build_summary, control_block, family_block, resolution_pct
from analysis.stats.verdict import ControlResult
from analysis.stats.verdict_settings import VerdictSettings


def _items(table: pd.DataFrame, name: str, verdict: str, rows: pd.Series | None = None) -> list[Item]:
    """The items of a comparison table with this verdict, largest share of the step first."""
    chosen = table[(table["verdict"] == verdict) & (True if rows is None else rows)]
    items = [Item(str(r[name]), float(r["speedup"]), float(r["ci_low"]), float(r["ci_high"]), float(r["step_share"]))
             for _, r in chosen.iterrows()]
    return sorted(items, key=lambda i: -i.step_share)


def kernel_items(kc: KernelComparison, verdict: str) -> list[Item]:
    """Changed kernel pairs with this verdict (identical pairs are the control, never the effect)."""
    return _items(kc.table, "base_name", verdict, kc.table["code_changed"] & kc.table["in_summary"])


def model_items(mc: ModelComparison, verdict: str) -> list[Item]:
    return _items(mc.table, "model", verdict)


def report_verdict(kc: KernelComparison | None, mc: ModelComparison | None, gates: list[Gate] | None = None,
                   contributors: pd.DataFrame | None = None, level: float | None = None, numerics: str = "",
                   models_timed: bool = True) -> str:
    """The verdict line (`analysis.report.headline`); intervals at ``level`` (default: the families' own)."""
    own = [f.settings.confidence for f in (kc, mc) if f is not None]
    return headline(kc, mc, gates or [], contributors, level if level is not None else max(own, default=0.95),
                    numerics, models_timed)


def control_rows(kc: KernelComparison | None, mc: ModelComparison | None) -> pd.DataFrame:
    """The in-run A/A controls as a table: what this run's noise floor looked like."""
    rows = []
    for family, comparison in (("kernels", kc), ("models", mc)):
        if comparison is None:
            continue
        for c in comparison.controls:
            est = c.summary
            rows.append({
                "family": family, "control": c.kind, "items": c.n if c.available else "–",
                "geomean": est.speedup, "ci": ci_text(est.ci_low, est.ci_high),
                "flagged": f"{c.flagged} ({fmt_share(c.false_positive_share)})" if c.available else "–",
                "result": _control_result(c, comparison.settings),
            })
    return pd.DataFrame(rows, columns=["family", "control", "items", "geomean", "ci", "flagged", "result"])


def _control_result(c: ControlResult, settings: VerdictSettings) -> str:
    if not c.available:
        return f"not available: {c.reason}"
    if not c.passed(settings):
        widened = f"; every interval widened ×{c.inflation:.2f}" if c.inflation > 1 else ""
        return f"**failed**{widened}"
    if c.offset_corrected:
        return "passed; the offset it measured between the sides is subtracted from every estimate"
    return "passed"


def _family_rows(label: str, geomean: Any, time_weighted: Any, method: str, verdict: str,
                 counts: dict[str, int]) -> list[tuple[str, Any]]:
    return [(f"{label} verdict", verdict), (f"{label} geomean speedup", geomean.speedup),
            (f"{label} geomean CI low", geomean.ci_low), (f"{label} geomean CI high", geomean.ci_high),
            (f"{label} time-weighted speedup", time_weighted.speedup),
            (f"{label} time-weighted CI low", time_weighted.ci_low),
            (f"{label} time-weighted CI high", time_weighted.ci_high), (f"{label} interval method", method),
            *((f"{label} {k}", v) for k, v in counts.items())]


def summary_frame(kc: KernelComparison | None, mc: ModelComparison | None, proj: Projection | None,
                  gates: list[Gate]) -> pd.DataFrame:
    """The Summary sheet of report.xlsx: one metric per row."""
    rows: list[tuple[str, Any]] = []
    if kc is not None:
        s = kc.summary
        rows += [("kernel pairs", s.n_pairs), ("kernels in summary", s.n_summarised),
                 ("pairs with changed code", s.code_changed), ("pairs with identical code", s.code_identical),
                 ("pairs of identical source compiled otherwise (changed)", s.compiled_otherwise),
                 *_family_rows("kernels", s.geomean, s.time_weighted, s.method, s.verdict, s.verdicts),
                 ("resolution of the kernel time: smallest change told apart from none (80 % power), %",
                  s.detectable_pct),
                 ("kernel time weighted by", s.weighted_by),
                 *((f"paired by {k}", v) for k, v in kc.pairing.by_method.items()),
                 ("only in base", kc.pairing.only_base), ("only in PR", kc.pairing.only_pr),
                 ("kernels failed", s.n_failed)]
    if mc is not None:
        ms = mc.summary
        rows += [("models compared", ms.n_compared),
                 *_family_rows("models", ms.geomean, ms.total_latency, ms.method, ms.verdict, ms.verdicts),
                 ("base geomean vs eager (HUD)", ms.base.hud_geomean), ("PR geomean vs eager (HUD)", ms.pr.hud_geomean),
                 ("base geomean vs eager (runner.py, clipped at 1)", ms.base.runner_geomean),
                 ("PR geomean vs eager (runner.py, clipped at 1)", ms.pr.runner_geomean)]
    rows += [(f"gate {g.name}", f"{g.status} ({fmt_x(g.value)}, limit {g.limit:g})") for g in gates]
    if proj is not None:
        rows.append(("projection method", proj.method))
    return pd.DataFrame(rows, columns=["metric", "value"])


def summarize_comparison(kc: KernelComparison | None, mc: ModelComparison | None, gates: list[Gate],
                         settings: VerdictSettings, verdict: str | None = None) -> dict[str, Any]:
    """The summary.json content (see analysis.report.summary); ``verdict``: the report's line when the caller
    made it (with the contributors, numerics and level only the report has)."""
    kernels = models = None
    if kc is not None:
        s = kc.summary
        kernels = {**family_block(s.verdict, s.geomean, s.time_weighted, s.verdicts, s.n_changed, s.rounds,
                                  kc.settings, "step", s.detectable_pct, kernel_items(kc, "regressed")),
                   "code_changed": s.code_changed, "code_identical": s.code_identical,
                   "compiled_otherwise": ({"pairs": s.compiled_otherwise, "reason": s.compiled_otherwise_why}
                                          if s.compiled_otherwise else None),
                   "paired_by": dict(kc.pairing.by_method),
                   "only_base": kc.pairing.only_base, "only_pr": kc.pairing.only_pr,
                   "control_verdicts": s.control_verdicts}
    if mc is not None:
        ms = mc.summary
        models = family_block(ms.verdict, ms.geomean, ms.total_latency, ms.verdicts, ms.n_compared, ms.rounds,
                              mc.settings, "geomean", ms.detectable_pct, model_items(mc, "regressed"))
    estimates = [e for e in ((kc.summary.time_weighted if kc else None), (mc.summary.geomean if mc else None))
                 if e is not None]
    resolutions = [c.resolution for c in (kc, mc) if c is not None]
    return build_summary(verdict or report_verdict(kc, mc, gates), kernels, models,
                         control_block(kc.controls, kc.settings) if kc else None,
                         control_block(mc.controls, mc.settings) if mc else None,
                         resolution_pct(estimates, resolutions), gates, settings)


def kernel_summary_lines(kc: KernelComparison) -> list[str]:
    s, p = kc.summary, kc.pairing
    by = ", ".join(f"{k} {v}" for k, v in p.by_method.items())
    return [
        f"paired {p.paired} kernels ({by}); only in base {p.only_base}, only in PR {p.only_pr}",
        f"code changed in {s.code_changed} pair(s), identical in {s.code_identical} (the control)"
        + (f"; {compiled_otherwise_words(s)}" if s.compiled_otherwise else ""),
        "changed pairs: " + ", ".join(f"{v} {n}" for v, n in s.verdicts.items()) + f", failed {s.n_failed}",
        f"time in Inductor kernels {s.verdict}: Σbase/Σpr {fmt_x(s.time_weighted.speedup)} "
        f"(CI {ci_text(s.time_weighted.ci_low, s.time_weighted.ci_high)}; weighted by {s.weighted_by}; {s.method})",
        f"geomean of the changed pairs {fmt_x(s.geomean.speedup)} (CI {ci_text(s.geomean.ci_low, s.geomean.ci_high)})",
        *(f"control ({c.kind}): " + (f"{c.flagged} of {c.n} flagged, geomean {fmt_x(c.summary.speedup)}, "
                                     f"CI {ci_text(c.summary.ci_low, c.summary.ci_high)}, "
                                     + ("passed" if c.passed(kc.settings) else "FAILED")
                                     if c.available else f"not available ({c.reason})") for c in kc.controls),
        *(f"note: {n}" for n in kc.notes),
    ]


def compiled_otherwise_words(s: KernelSummary) -> str:
    """How many changed pairs are identical C++ source the sides compile otherwise, and why, in words."""
    return (f"{s.compiled_otherwise} of the changed pairs are identical source, compiled otherwise: "
            f"{s.compiled_otherwise_why}")
