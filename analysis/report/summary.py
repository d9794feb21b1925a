"""The machine-readable verdict (``report/summary.json``), the one-line verdict, and ``--fail-on``.

``summary.json`` is the contract for CI users and the benchmarks (``format_version`` `SUMMARY_FORMAT_VERSION`):

    {"format_version": 7,
     "verdict": "<one line>",          # a numerical failure first, then one sentence per family: models, time in
                                       # Inductor kernels (and the kernels that add most of it), dashboard checks,
                                       # numerics, control (`analysis.report.headline`)
     "kernels": {"verdict",            # improved | regressed | mixed | equivalent | inconclusive | identical
                 "headline": "step",   # which estimate the verdict leads with ("step": the time in Inductor kernels)
                 "step": {"speedup", "ci_low", "ci_high"},    # Σ base / Σ PR kernel time per step of every model
                 "geomean", "ci_low", "ci_high",              # geomean over the changed pairs (secondary)
                 "confidence", "n", "improved", "regressed", "equivalent", "inconclusive",   # changed pairs
                 "time_weighted", "rounds", "code_changed", "code_identical", "only_base", "only_pr",
                 "compiled_otherwise": {"pairs", "reason"} | null,   # C++ pairs of identical source the sides
                                       # build otherwise (torch build, flags, headers: analysis.kernels.cpp_build),
                                       # counted in code_changed, not the control
                 "paired_by": {"body_hash+shape_key": n, "legacy_key": n, ...},   # pairs each key made, in
                                       # the order the keys are tried (analysis.kernels.compare.MATCH_METHODS)
                 "detectable_pct",     # the headline's resolution: smallest change told apart from none, 80 %
                 "regressed_items": [{"name", "speedup", "ci_low", "ci_high", "step_share"}],
                                       # items' intervals at the report's one level (settings.confidence)
                 "control_verdicts": {"improved", ...}}   # the identical pairs' verdicts as their control
                                       # judged them, before any claim was withheld (improved + regressed = its
                                       # flagged; an A/A's evidence)
                | null,
     "models":  {the same keys but the kernel-only ones; "headline": "geomean"} | null,
     "not_timed": ["models"] | [],     # families the run timed no paired round of (a step of a bisect of a
                                       # kernel times no model); their block is null, the verdict says so
     "control": {"kernels": {"kind", "geomean", "ci_low", "ci_high", "n", "false_positive_share", "passed",
                             "available", "reason", "offset_corrected", "inflation",
                             "on_timer_step"} | null,   # identical pairs left out of n: times on the timer's
                                       # step (analysis.stats.verdict.on_timer_step)
                 "models": {...} | null,
                 "passed": bool, "resolution_pct": float},
     "gates": [{"name", "value", "ci_low", "ci_high", "limit", "bad_when", "status", "detail"}],
                                       # "compile time ratio": mean PR / mean base cold compile (the dashboard's)
     "numerics": {"models": {"compared", "passed", "failed", "not_compared": [model],
                             "worst": {"name", "check", "output", "elements", "max_abs", "max_rel", "mismatches",
                                       "nonfinite", "cosine", "identical"} | null,
                             "failed_items": [{the same keys as worst}]} | null,    # analysis.models.numerics
                  "kernels": null,
                  "tolerances": {dtype: {"rtol", "atol"}}} | null,
     "experiment": {"lines": ["<what was measured>"],    # one, or one per side when they differ
                    "base": {"models", "model_count", "size", "mode", "dtype", "device", "source", "use_runner",
                             "cpu_backend", "cudagraphs", "max_autotune_pointwise", "buffer_ops", "recipe",
                             "also"},   # analysis.report.sections.experiment
                    "pr": {the same keys}} | null,     # null: the run recorded no suite request
     "kernel_share": {"all_models", "models": {model: share}, "low_below", "low": [model]} | null,
                                       # base Inductor kernel time per step / compiled latency
                                       # (analysis.report.sections.projection.KernelShares); null without kernels and
                                       models
     "settings": {...}}

Numbers that do not exist (no interval with one round) are null. The version goes up when a key is removed or
renamed or its meaning changes; added keys keep it (readers ignore what they do not know).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.report.sections.gates import Gate
from analysis.stats.verdict import MIXED, NOTHING_CHANGED, ControlResult, Estimate, headline_verdict
from analysis.stats.verdict_settings import VERDICTS, VerdictSettings, percent
from foundation.atomic_io import write_json
from foundation.errors import UserError
from foundation.records import read_json

SUMMARY_FILE = "summary.json"
# 2: kernels lead with the step, changed and identical pairs apart; regressed items.
# 3: `numerics` (the numerical A/B), and `verdict` names a numerical failure before any speed.
# 4: `verdict` leads with the models; the compile-time gate is the dashboard's mean ratio of cold compiles (it was
#    the worst model's); items' intervals are at the report's one level.
# 5: `kernels.control_verdicts` are the identical pairs' verdicts as their control judged them (before claims
#    under a failed control's cut-off were withheld): their improved + regressed are the control's flagged.
# 6: `detectable_pct` is the headline's resolution, the smallest change told apart from none with 80 % power
#    (`analysis.stats.verdict.detectable_effect`); it was threshold + that, never below --threshold.
# 7: `kernels.code_changed` counts the C++ pairs of identical source that the sides build otherwise (another
#    torch build, compile flags or headers), and `code_identical` (the control) no longer does:
#    `kernels.compiled_otherwise` says how many and why.
SUMMARY_FORMAT_VERSION = 7


def _num(x: float) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def _x(x: float) -> str:
    return f"{x:.3f}×" if math.isfinite(x) else "–"


def change_pct(speedup: float) -> float:
    """PR time against base time in percent, the tables' convention: 0.80× is 25 % slower, 1.25× 20 % faster."""
    return (1.0 / speedup - 1.0) * 100.0


@dataclass(frozen=True)
class Item:
    """A kernel or model named in the verdict: its speedup, interval and share of the step."""

    name: str
    speedup: float
    ci_low: float
    ci_high: float
    step_share: float

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "speedup": _num(self.speedup), "ci_low": _num(self.ci_low),
                "ci_high": _num(self.ci_high), "step_share": _num(self.step_share)}


def family_block(verdict: str, est: Estimate, time_weighted: Estimate, counts: dict[str, int], n: int,
                 rounds: int, settings: VerdictSettings, headline: str, detectable_pct: float,
                 regressed: list[Item]) -> dict[str, Any]:
    return {"verdict": verdict, "headline": headline,
            "step": {"speedup": _num(time_weighted.speedup), "ci_low": _num(time_weighted.ci_low),
                     "ci_high": _num(time_weighted.ci_high)},
            "geomean": _num(est.speedup), "ci_low": _num(est.ci_low), "ci_high": _num(est.ci_high),
            "confidence": settings.confidence, "alpha": settings.alpha, "n": n,
            **{v: int(counts.get(v, 0)) for v in VERDICTS},
            "time_weighted": _num(time_weighted.speedup), "rounds": rounds, "detectable_pct": _num(detectable_pct),
            "regressed_items": [item.as_dict() for item in regressed]}


def _control_dict(control: ControlResult, settings: VerdictSettings) -> dict[str, Any]:
    est = control.summary
    return {"kind": control.kind, "geomean": _num(est.speedup), "ci_low": _num(est.ci_low),
            "ci_high": _num(est.ci_high), "n": control.n, "false_positive_share": _num(control.false_positive_share),
            "passed": control.passed(settings), "available": control.available, "reason": control.reason,
            "offset_corrected": control.offset_corrected, "inflation": control.inflation,
            "on_timer_step": control.on_timer_step}


def control_block(controls: list[ControlResult], settings: VerdictSettings) -> dict[str, Any] | None:
    """The control that speaks for a family (the identical-items one when available, else split-half); the
    family's control passes only when every control does."""
    if not controls:
        return None
    main = next((c for c in controls if c.available), controls[0])
    return {**_control_dict(main, settings), "passed": all(c.passed(settings) for c in controls),
            "others": [_control_dict(c, settings) for c in controls if c is not main]}


def resolution_pct(estimates: list[Estimate], resolutions: list[float]) -> float:
    """The smallest effect the run resolves: the widest summary half-width or what a failed control produced."""
    widths = [e.half_width_pct for e in estimates if e.has_interval]
    return max([*widths, *(100 * r for r in resolutions if r > 0)], default=math.nan)  # 0: no failed control


def _ci(est: Estimate, settings: VerdictSettings) -> str:
    return (f"{percent(settings.confidence)} CI {_x(est.ci_low)}–{_x(est.ci_high)}" if est.has_interval
            else "no interval")


def effect_words(label: str, est: Estimate, settings: VerdictSettings, resolution: float) -> str:
    """What one estimate shows, in the tables' convention: "<label> 4.1 % slower (0.961×, 95 % CI …)"."""
    own = headline_verdict(est, settings, resolution)
    numbers = f"{_x(est.speedup)}, {_ci(est, settings)}"
    if own in ("improved", "regressed"):
        return f"{label} {abs(change_pct(est.speedup)):.1f} % {'faster' if own == 'improved' else 'slower'} ({numbers})"
    if own == "equivalent":
        return f"{label} neutral within ±{percent(settings.margin)} ({numbers})"
    return f"{label} inconclusive ({numbers}){_why(est, settings, resolution)}"


def _why(est: Estimate, settings: VerdictSettings, resolution: float) -> str:
    floors = [x for x in (resolution * 100, est.half_width_pct) if math.isfinite(x) and x > 0]
    if resolution == 0 and est.has_interval and not est.contains(1.0):
        return f": a change, but not shown to exceed ±{percent(settings.effect_floor)}"
    if floors:  # resolution 0 means "no control failed", not "resolves everything"
        return f": this run cannot resolve effects below {max(floors):.1f} %"
    if not est.has_interval:
        return ": no replication (one round per side)"
    return ""


def unchanged_phrase(label: str, identical: int, pairs: int) -> str:
    return (f"{label} **{NOTHING_CHANGED}**: no generated kernel changed ({identical} of {pairs} identical), "
            "so the PR's kernels have nothing to measure")


def build_summary(verdict: str, kernels: dict[str, Any] | None, models: dict[str, Any] | None,
                  kernel_control: dict[str, Any] | None, model_control: dict[str, Any] | None, resolution: float,
                  gates: list[Gate], settings: VerdictSettings) -> dict[str, Any]:
    passed = all(c["passed"] for c in (kernel_control, model_control) if c is not None)
    return {"format_version": SUMMARY_FORMAT_VERSION, "verdict": verdict, "kernels": kernels, "models": models,
            "control": {"kernels": kernel_control, "models": model_control, "passed": passed,
                        "resolution_pct": _num(resolution)},
            "gates": [g.as_dict() for g in gates], "settings": settings.describe()}


def write_summary(out_dir: Path, summary: dict[str, Any]) -> Path:
    path = Path(out_dir) / SUMMARY_FILE
    write_json(path, summary)
    return path


def read_summary(path: Path) -> dict[str, Any]:
    path = Path(path)
    data = read_json(path, "a report's summary.json")
    if not isinstance(data, dict) or "verdict" not in data:
        raise UserError(f"{path}: not a prbench summary.json (no verdict)")
    return data


def fail_reasons(summary: dict[str, Any], fail_on: str) -> list[str]:
    """Why ``--fail-on`` should fail this comparison ([] = pass). ``never`` never fails.

    ``regression``: a family whose headline regressed, or any of its items that regressed beyond the threshold
    holding at least ``fail_share`` of the step (the family verdict is then "regressed" or "mixed"), or a
    failed dashboard gate. ``inconclusive`` adds inconclusive families and gates and a failed control. Both
    include ``numerics``: a family whose outputs failed the numerical A/B (alone, with ``--fail-on numerics``).
    """
    if fail_on == "never":
        return []
    reasons = numerics_reasons(summary)
    if fail_on == "numerics":
        return reasons
    share = (summary.get("settings") or {}).get("fail_share", 0.0)
    bad = {"regressed", MIXED} | ({"inconclusive"} if fail_on == "inconclusive" else set())
    for family in ("kernels", "models"):
        block = summary.get(family)
        if block and block.get("verdict") in bad:
            heavy = [i for i in block.get("regressed_items", []) if (i.get("step_share") or 0.0) >= share]
            names = ", ".join(f"{i['name']} {_x(i['speedup'] or math.nan)}" for i in heavy[:3])
            reasons.append(f"{family}: {block['verdict']}" + (f" ({names})" if names else ""))
    bad_gates = {"fail"} | ({"inconclusive"} if fail_on == "inconclusive" else set())
    reasons += [f"gate {g['name']}: {g['status']}" for g in summary.get("gates", []) if g.get("status") in bad_gates]
    control = summary.get("control") or {}
    if fail_on == "inconclusive" and control.get("passed") is False:
        reasons.append("in-run control failed")
    return reasons


def numerics_reasons(summary: dict[str, Any]) -> list[str]:
    """"numerics: models 1 of 2 failed (worst: M, PR vs base, logits max abs 0.41)"; "numerics: kernels 1 of 9
    failed (worst: K, 3100 ULP, max abs 0.2)": one per failing family."""
    numerics = summary.get("numerics") or {}
    reasons = []
    for family in ("models", "kernels"):
        block = numerics.get(family)
        if not block or not block.get("failed"):
            continue
        worst = block.get("worst") or {}
        what = (f"{worst.get('check')}, {worst.get('output')}" if family == "models"
                else f"{worst.get('max_ulp')} ULP,")
        where = f" (worst: {worst.get('name')}, {what} max abs {_g(worst.get('max_abs'))})" if worst else ""
        reasons.append(f"numerics: {family} {block['failed']} of {block['compared']} failed{where}")
    return reasons


def _g(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) else "non-finite"
