"""The verdict of a comparison in words and numbers: the one-line verdict, the A/A control table, the
``summary.json`` content, the xlsx Summary sheet and the lines ``invoke compare-kernels`` prints."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.gates import Gate
from analysis.kernel_compare import KernelComparison
from analysis.model_compare import ModelComparison
from analysis.projection import Projection
from analysis.rendering import ci_text, fmt_share, fmt_x
from analysis.verdict import ControlResult
from analysis.verdict_settings import VerdictSettings
from analysis.verdict_summary import build_summary, control_block, family_block, phrase, resolution_pct, verdict_line


def report_verdict(kc: KernelComparison | None, mc: ModelComparison | None, settings: VerdictSettings) -> str:
    parts = []
    if kc is not None:
        s = kc.summary
        parts.append(phrase("kernels", s.verdict, s.geomean, s.verdicts, s.n_summarised, settings, kc.resolution))
    if mc is not None:
        ms = mc.summary
        parts.append(phrase("models", ms.verdict, ms.geomean, ms.verdicts, ms.n_compared, settings, mc.resolution))
    return verdict_line(parts, all(c.passed(settings) for c in _controls(kc, mc)))


def _controls(kc: KernelComparison | None, mc: ModelComparison | None) -> list[ControlResult]:
    return [*(kc.controls if kc else []), *(mc.controls if mc else [])]


def control_rows(kc: KernelComparison | None, mc: ModelComparison | None, settings: VerdictSettings
                 ) -> pd.DataFrame:
    """The in-run A/A controls as a table: what this run's noise floor looked like."""
    rows = []
    for family, comparison in (("kernels", kc), ("models", mc)):
        for c in comparison.controls if comparison else []:
            est = c.summary
            rows.append({
                "family": family, "control": c.kind, "items": c.n if c.available else "–",
                "geomean": est.speedup, "ci": ci_text(est.ci_low, est.ci_high),
                "flagged": f"{c.flagged} ({fmt_share(c.false_positive_share)})" if c.available else "–",
                "result": ("passed" if c.passed(settings) else "**failed**") if c.available
                else f"not available: {c.reason}",
            })
    return pd.DataFrame(rows, columns=["family", "control", "items", "geomean", "ci", "flagged", "result"])


def _family_rows(label: str, geomean: Any, time_weighted: Any, method: str, verdict: str,
                 counts: dict[str, int]) -> list[tuple[str, Any]]:
    return [(f"{label} verdict", verdict), (f"{label} geomean speedup", geomean.speedup),
            (f"{label} geomean CI low", geomean.ci_low), (f"{label} geomean CI high", geomean.ci_high),
            (f"{label} time-weighted speedup", time_weighted.speedup), (f"{label} interval method", method),
            *((f"{label} {k}", v) for k, v in counts.items())]


def summary_frame(kc: KernelComparison | None, mc: ModelComparison | None, proj: Projection | None,
                  gates: list[Gate]) -> pd.DataFrame:
    """The Summary sheet of report.xlsx: one metric per row."""
    rows: list[tuple[str, Any]] = []
    if kc is not None:
        s = kc.summary
        rows += [("kernel pairs", s.n_pairs), ("kernels in summary", s.n_summarised),
                 *_family_rows("kernels", s.geomean, s.time_weighted, s.method, s.verdict, s.verdicts),
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
                         settings: VerdictSettings) -> dict[str, Any]:
    """The summary.json content (see analysis.verdict_summary)."""
    kernels = models = None
    if kc is not None:
        s = kc.summary
        kernels = family_block(s.verdict, s.geomean, s.time_weighted, s.verdicts, s.n_summarised, s.rounds, settings)
    if mc is not None:
        ms = mc.summary
        models = family_block(ms.verdict, ms.geomean, ms.total_latency, ms.verdicts, ms.n_compared, ms.rounds,
                              settings)
    estimates = [c.summary.geomean for c in (kc, mc) if c is not None]
    resolutions = [c.resolution for c in (kc, mc) if c is not None]
    return build_summary(report_verdict(kc, mc, settings), kernels, models,
                         control_block(kc.controls, settings) if kc else None,
                         control_block(mc.controls, settings) if mc else None,
                         resolution_pct(estimates, resolutions), gates, settings)



def kernel_summary_lines(kc: KernelComparison) -> list[str]:
    s, p = kc.summary, kc.pairing
    by = ", ".join(f"{k} {v}" for k, v in p.by_method.items())
    return [
        f"paired {p.paired} kernels ({by}); only in base {p.only_base}, only in PR {p.only_pr}",
        ", ".join(f"{v} {n}" for v, n in s.verdicts.items()) + f", failed {s.n_failed}",
        f"kernels {s.verdict}: geomean speedup {fmt_x(s.geomean.speedup)} "
        f"(CI {ci_text(s.geomean.ci_low, s.geomean.ci_high)}: {s.method})",
        f"time-weighted speedup Σbase/Σpr {fmt_x(s.time_weighted.speedup)} "
        f"(CI {ci_text(s.time_weighted.ci_low, s.time_weighted.ci_high)}; weighted by {s.weighted_by})",
        *(f"control ({c.kind}): " + (f"{c.flagged} of {c.n} flagged, geomean {fmt_x(c.summary.speedup)}, "
                                     f"CI {ci_text(c.summary.ci_low, c.summary.ci_high)}, "
                                     + ("passed" if c.passed(kc.settings) else "FAILED")
                                     if c.available else f"not available ({c.reason})") for c in kc.controls),
        *(f"note: {n}" for n in kc.notes),
    ]
