"""The verdict a reviewer reads first: one sentence per family, in the words the dashboard and a reviewer use.

In order: the **models** (the effect a user sees: geomean with its interval, how many regressed and improved);
the **time in Inductor kernels** (Σ standalone kernel time per step of every model, base → PR; never called
"the step", which a reader takes for a model's step) with the few kernels that add (or save) most of it, by time,
renamed and re-fused ones included (`kernel_contributors`); the **dashboard checks** that failed; the
**numerics**; and the **control**: what it covered, the cut-off below which it withheld claims, which identical
kernel made it fail, and what that does to each family. A numerical failure is put before all of it by
`analysis.report.numerics.lead_with_numerics`.

Every interval here is at the report's one level (`Estimate.at_level`); the level each verdict was decided at (after an
early stop, or for items selected as changes) is stated once, in the method.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from analysis.kernels.compare import IDENTICAL_CODE, KernelComparison
from analysis.models.compare import ModelComparison
from analysis.rendering import fmt_delta_time, fmt_time, fmt_x, md_code, md_text
from analysis.report.sections.gates import Gate
from analysis.report.summary import change_pct, effect_words, unchanged_phrase
from analysis.stats.verdict import NOTHING_CHANGED, Estimate
from analysis.stats.verdict_settings import percent
from foundation.formats.kernel_index import where_launched

CONTRIBUTOR_COLUMNS = ("kernel", "where", "change", "speedup", "ci_low", "ci_high", "base_ms_per_step",
                       "delta_ms_per_step", "share_of_change", "pair")  # pair: its row in kernels_compare.csv
MOST_OF = 0.8  # the headline names kernels until they hold this share of the added (or saved) time ...
MAX_NAMED = 3  # ... or this many
# A run without model rounds (`analysis.report.inputs.ReportInputs.models_timed`): only a bisect of a kernel asks
MODELS_NOT_TIMED = ("Models: not timed in this run (a step of a bisect of a kernel: the models were compiled for "
                    "their kernels, and no model round ran).")


def _ci(est: Estimate, level: float) -> str:
    return (f"{percent(level)} CI {fmt_x(est.ci_low)}–{fmt_x(est.ci_high)}" if est.has_interval
            else "no interval")


def _slower_faster(speedup: float) -> str:
    pct = change_pct(speedup)
    return f"{abs(pct):.1f} % {'slower' if pct > 0 else 'faster'}" if math.isfinite(pct) else "not measured"


_PAIRED_BY = {IDENTICAL_CODE: "same Inductor source, compiled by each side's Triton",
              "legacy_key": "paired by name and shapes", "ops+shape_key": "paired by fused ops and shapes",
              "graphs+shape_key": "renamed in place", "kernel_name": "paired by name only"}


def _pair_change(row: pd.Series) -> str:
    """What changed in a pair, in one phrase (the report puts the code's own change in front where it has it)."""
    how = _PAIRED_BY.get(str(row["matched_by"]), str(row["matched_by"]))
    return f"code changed ({how})" if row["base_name"] == row["pr_name"] or how == "renamed in place" \
        else f"code changed, renamed ({how})"


def kernel_contributors(kc: KernelComparison, fusion: pd.DataFrame | None) -> pd.DataFrame:
    """Every changed pair and every fusion group with the time per step it adds (+) or saves (−), in the
    direction of the total change first, the largest first (columns `CONTRIBUTOR_COLUMNS`). A pair's change is
    its base time per step × (1 / speedup − 1), the paired estimate the tables show; identical pairs are the
    control and add nothing by definition."""
    t = kc.table[kc.table["code_changed"].astype(bool) & kc.table["in_summary"].astype(bool)]
    rows = []
    for index, r in t.iterrows():
        speedup = float(r["speedup"])
        base = float(r["base_ms_per_step"])
        delta = (base * (1 / speedup - 1) if math.isfinite(speedup) and speedup > 0
                 else float(r["pr_ms_per_step"]) - base)
        name = r["base_name"] if r["base_name"] == r["pr_name"] else f"{r['base_name']} → {r['pr_name']}"
        rows.append({"kernel": name, "where": where_launched(f"{r['base_graphs']};{r['pr_graphs']}"),
                     "change": _pair_change(r), "speedup": speedup, "ci_low": float(r["ci_low"]),
                     "ci_high": float(r["ci_high"]), "base_ms_per_step": base, "delta_ms_per_step": delta,
                     "pair": index})
    for _, g in (fusion if fusion is not None else pd.DataFrame()).iterrows():
        name = (f"{g['base_kernels']} → {g['pr_kernels']}" if g["base_kernels"] and g["pr_kernels"]
                else g["base_kernels"] or g["pr_kernels"])
        base, delta = float(g["base_ms_per_step"]), float(g["delta_ms_per_step"])
        pr = base + delta
        rows.append({"kernel": name, "where": g["graphs"] or "–", "change": f"fusion: {g['change']}",
                     "speedup": base / pr if base > 0 and pr > 0 else math.nan, "ci_low": math.nan,
                     "ci_high": math.nan, "base_ms_per_step": base, "delta_ms_per_step": delta, "pair": None})
    frame = pd.DataFrame(rows, columns=[c for c in CONTRIBUTOR_COLUMNS if c != "share_of_change"])
    total = float(frame["delta_ms_per_step"].sum())
    frame.insert(len(frame.columns) - 1, "share_of_change",
                 frame["delta_ms_per_step"] / total if total else np.nan)
    sign = -1.0 if total >= 0 else 1.0
    frame = frame.assign(_key=sign * frame["delta_ms_per_step"]).sort_values(["_key", "kernel"], kind="stable")
    return frame.drop(columns="_key").reset_index(drop=True)


def kernel_times(kc: KernelComparison, contributors: pd.DataFrame) -> tuple[float, float]:
    """Σ time in Inductor kernels per step of every model, base and PR (ms): the timed pairs and the kernels
    found on one side only; the PR's is base's plus every contributor's change."""
    used = kc.table[kc.table["in_summary"].astype(bool)]
    base = float(used["base_ms_per_step"].sum()) + kc.summary.base_ms_only
    return base, base + float(contributors["delta_ms_per_step"].sum())


def _named(contributors: pd.DataFrame, adds: bool) -> str:
    mine = contributors[(contributors["delta_ms_per_step"] > 0) == adds]
    picked: list[str] = []
    held = 0.0
    for _, r in mine.iterrows():
        if len(picked) == MAX_NAMED or held >= MOST_OF:
            break
        held += float(r["share_of_change"]) if math.isfinite(r["share_of_change"]) else 0.0
        what = "renamed" if "renamed" in r["change"] else "fusion" if r["change"].startswith("fusion") else None
        share = f"{100 * r['share_of_change']:.0f} % of it" if math.isfinite(r["share_of_change"]) else ""
        extra = ", ".join(x for x in (share, what) if x)
        picked.append(f"{md_code(r['kernel'])} {fmt_delta_time(r['delta_ms_per_step'])}"
                      + (f" ({extra})" if extra else ""))
    return ", ".join(picked)


def kernel_sentence(kc: KernelComparison, contributors: pd.DataFrame, level: float) -> str:
    s = kc.summary
    if s.verdict == NOTHING_CHANGED:
        return unchanged_phrase("Time in Inductor kernels", s.code_identical, s.n_pairs) + "."
    base, pr = kernel_times(kc, contributors)
    est = s.time_weighted.at_level(level)
    if s.verdict in ("regressed", "improved", "mixed"):
        effect = f"{_slower_faster(est.speedup)}; {fmt_x(est.speedup)}, {_ci(est, level)}"
    else:  # "neutral within ±2 % (…)" or "inconclusive (…): this run cannot resolve effects below 9.7 %"
        effect = effect_words("Σ base / Σ PR", est, replace(kc.settings, confidence=level), kc.resolution)
    lead = (f"Time in Inductor kernels **{s.verdict}**: {fmt_time(base)} → {fmt_time(pr)} per step of every model "
            f"({fmt_delta_time(pr - base)}; {effect})")
    adds = pr >= base
    named = _named(contributors, adds)
    return lead + (f"; most of the {'added' if adds else 'saved'} time: {named}" if named else "") + "."


def model_sentence(mc: ModelComparison, level: float) -> str:
    s = mc.summary
    est = s.geomean.at_level(level)
    v = s.verdicts
    counts = (f"{v.get('regressed', 0)} regressed, {v.get('improved', 0)} improved, "
              f"{v.get('equivalent', 0)} equivalent, {v.get('inconclusive', 0)} inconclusive"
              + (f", {s.failed} failed" if s.failed else ""))
    if s.verdict in ("regressed", "improved", "mixed"):
        effect = f"{_slower_faster(est.speedup)} (geomean {fmt_x(est.speedup)}, {_ci(est, level)})"
    else:  # "neutral within ±2 % (…)" or "inconclusive (…): this run cannot resolve effects below 5.9 %"
        effect = effect_words("geomean", est, replace(mc.settings, confidence=level), mc.resolution)
    return f"Models **{s.verdict}**: {effect} over {s.n_compared} model(s); {counts}."


def gates_sentence(gates: list[Gate]) -> str:
    bad = [g for g in gates if g.status != "pass"]
    if not gates:
        return ""
    if not bad:
        return "Dashboard checks passed (" + ", ".join(g.name for g in gates) + ")."
    words = []
    for g in bad:
        limit = f"{'<' if g.bad_when == 'below' else '>'} {g.limit:g}×"
        worst = md_text(g.detail.split("worst model ", 1)[1]) if "worst model " in g.detail else ""
        words.append(f"{g.name} {fmt_x(g.value)} {g.status} ({limit}" + (f"; worst {worst}" if worst else "") + ")")
    failed = any(g.status == "fail" for g in bad)
    return f"Dashboard checks {'**failed**' if failed else 'not settled'}: " + "; ".join(words) + "."


def control_sentence(kc: KernelComparison | None, mc: ModelComparison | None, level: float) -> str:
    """The control's scope, cut-off and consequence in words."""
    parts = []
    for family, comparison in (("kernel", kc), ("model", mc)):
        if comparison is None:
            continue
        failed = [c for c in comparison.controls if c.available and not c.passed(comparison.settings)]
        if not failed:
            continue
        if comparison.resolution > 0:
            parts.append(f"{family} claims under {100 * comparison.resolution:.1f} % withheld"
                         + (f": {_offender(kc, level)}" if family == "kernel" and kc is not None else ""))
        for c in failed:
            if c.inflation > 1:
                parts.append(f"{family} intervals widened ×{c.inflation:.2f} (split-half control failed)")
    if not parts:
        checked = [(f"{c.n} identical kernel pairs" + (f", {c.on_timer_step} on the timer's step left out"
                                                        if c.on_timer_step else ""))
                   if c.kind == "identical kernels" else f"{family}' split-half"
                   for family, f in (("kernels", kc), ("models", mc)) if f is not None
                   for c in f.controls if c.available]
        return f"In-run control passed ({', '.join(checked)})." if checked else ""
    unaffected = [name for name, f in (("model", mc), ("kernel", kc)) if f is not None and f.resolution == 0
                  and all(c.passed(f.settings) for c in f.controls)]
    return ("In-run control **failed**: " + "; ".join(parts)
            + (f"; the {' and '.join(unaffected)} verdict is unaffected" if unaffected else "") + ".")


def _offender(kc: KernelComparison, level: float) -> str:
    """The identical kernel whose run made the control fail (the flagged one with the largest effect: what set the
    cut-off), else the identical pairs' summary."""
    control = next(c for c in kc.controls if c.available and c.test_alpha is None)
    t = kc.table[kc.table["control"].astype(bool) & kc.table["speedup"].notna()]
    if control.flagged and len(t):
        effect = np.expm1(np.abs(np.log(t["speedup"].astype(float))))
        row = t.loc[(effect - control.flagged_effect).abs().idxmin()]
        return (f"identical {md_code(row['base_name'])} ran {fmt_x(row['speedup'])} "
                f"({percent(level)} CI {fmt_x(row['ci_low'])}–{fmt_x(row['ci_high'])})")
    est = control.summary.at_level(level)
    return f"the {control.n} identical pairs together ran {fmt_x(est.speedup)} ({_ci(est, level)})"


def headline(kc: KernelComparison | None, mc: ModelComparison | None, gates: list[Gate],
             contributors: pd.DataFrame | None, level: float, numerics: str = "", models_timed: bool = True) -> str:
    """The verdict line: ``**Verdict:** `` and one sentence per family (see the module docstring); a run that
    timed no model (``models_timed`` False) says so where the models' sentence would be."""
    sentences = []
    if mc is not None:
        sentences.append(model_sentence(mc, level))
    elif not models_timed:
        sentences.append(MODELS_NOT_TIMED)
    if kc is not None:
        sentences.append(kernel_sentence(kc, contributors if contributors is not None
                                         else kernel_contributors(kc, None), level))
    sentences += [gates_sentence(gates), numerics, control_sentence(kc, mc, level)]
    return "**Verdict:** " + (" ".join(s for s in sentences if s) or "nothing to compare.")
