"""The machine-readable verdict (``report/summary.json``), the one-line verdict, and ``--fail-on``.

``summary.json`` is the contract for CI users and the benchmarks:

    {"verdict": "<one line>",
     "kernels": {"verdict", "geomean", "ci_low", "ci_high", "confidence", "n",
                 "improved", "regressed", "equivalent", "inconclusive", "time_weighted", "rounds"} | null,
     "models":  {same keys} | null,
     "control": {"kernels": {"kind", "geomean", "ci_low", "ci_high", "n", "false_positive_share", "passed",
                             "available", "reason"} | null, "models": {...} | null,
                 "passed": bool, "resolution_pct": float},
     "gates": [{"name", "value", "ci_low", "ci_high", "limit", "bad_when", "status", "detail"}],
     "settings": {...}}

Numbers that do not exist (no interval with one round) are null.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from analysis.atomic_io import write_json
from analysis.errors import UserError
from analysis.gates import Gate
from analysis.verdict import ControlResult, Estimate
from analysis.verdict_settings import VERDICTS, VerdictSettings, percent

SUMMARY_FILE = "summary.json"


def _num(x: float) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def _x(x: float) -> str:
    return f"{x:.3f}×" if math.isfinite(x) else "–"


def family_block(verdict: str, est: Estimate, time_weighted: Estimate, counts: dict[str, int], n: int,
                 rounds: int, settings: VerdictSettings) -> dict[str, Any]:
    return {"verdict": verdict, "geomean": _num(est.speedup), "ci_low": _num(est.ci_low),
            "ci_high": _num(est.ci_high), "confidence": settings.confidence, "n": n,
            **{v: int(counts.get(v, 0)) for v in VERDICTS},
            "time_weighted": _num(time_weighted.speedup), "rounds": rounds}


def _control_dict(control: ControlResult, settings: VerdictSettings) -> dict[str, Any]:
    est = control.summary
    return {"kind": control.kind, "geomean": _num(est.speedup), "ci_low": _num(est.ci_low),
            "ci_high": _num(est.ci_high), "n": control.n, "false_positive_share": _num(control.false_positive_share),
            "passed": control.passed(settings), "available": control.available, "reason": control.reason}


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


def phrase(label: str, verdict: str, est: Estimate, counts: dict[str, int], n: int, settings: VerdictSettings,
           resolution: float) -> str:
    """One family's part of the verdict line."""
    level = percent(settings.confidence)
    ci = f"{level} CI {_x(est.ci_low)}–{_x(est.ci_high)}" if est.has_interval else "no interval"
    tally = ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS if counts.get(v, 0)) or "none"
    numbers = f"geomean {_x(est.speedup)}, {ci}; {tally} of {n}"
    if verdict == "equivalent":
        margin = percent(settings.margin)
        return f"{label} neutral within ±{margin} ({numbers})"
    if verdict in ("improved", "regressed"):
        pct = abs(est.speedup - 1) * 100 if verdict == "improved" else abs(1 - est.speedup) * 100
        return f"{label} {pct:.1f} % {'faster' if verdict == 'improved' else 'slower'} ({numbers})"
    why = ""
    floors = [x for x in (resolution * 100, est.half_width_pct) if math.isfinite(x) and x > 0]
    if resolution == 0 and est.has_interval and not est.contains(1.0):
        why = f": a change, but not shown to exceed ±{percent(settings.effect_floor)}"
    elif floors:  # resolution 0 means "no control failed", not "resolves everything"
        why = f": this run cannot resolve effects below {max(floors):.1f} %"
    elif not est.has_interval:
        why = ": no replication (one round per side)"
    return f"{label} inconclusive ({numbers}){why}"


def verdict_line(parts: list[str], controls_passed: bool) -> str:
    line = "; ".join(parts) if parts else "nothing to compare"
    if not controls_passed:
        line += " — the in-run control failed: smaller effects were not called changes"
    return f"**Verdict:** {line}."


def build_summary(verdict: str, kernels: dict[str, Any] | None, models: dict[str, Any] | None,
                  kernel_control: dict[str, Any] | None, model_control: dict[str, Any] | None, resolution: float,
                  gates: list[Gate], settings: VerdictSettings) -> dict[str, Any]:
    passed = all(c["passed"] for c in (kernel_control, model_control) if c is not None)
    return {"verdict": verdict, "kernels": kernels, "models": models,
            "control": {"kernels": kernel_control, "models": model_control, "passed": passed,
                        "resolution_pct": _num(resolution)},
            "gates": [g.as_dict() for g in gates], "settings": settings.describe()}


def write_summary(out_dir: Path, summary: dict[str, Any]) -> Path:
    path = Path(out_dir) / SUMMARY_FILE
    write_json(path, summary)
    return path


def read_summary(path: Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: file not found (expected a report's summary.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict) or "verdict" not in data:
        raise UserError(f"{path}: not a prbench summary.json (no verdict)")
    return data


def fail_reasons(summary: dict[str, Any], fail_on: str) -> list[str]:
    """Why ``--fail-on`` should fail this comparison ([] = pass). ``never`` never fails."""
    if fail_on == "never":
        return []
    reasons = []
    bad = {"regressed"} | ({"inconclusive"} if fail_on == "inconclusive" else set())
    for family in ("kernels", "models"):
        block = summary.get(family)
        if block and block.get("verdict") in bad:
            reasons.append(f"{family}: {block['verdict']}")
    bad_gates = {"fail"} | ({"inconclusive"} if fail_on == "inconclusive" else set())
    reasons += [f"gate {g['name']}: {g['status']}" for g in summary.get("gates", []) if g.get("status") in bad_gates]
    control = summary.get("control") or {}
    if fail_on == "inconclusive" and control.get("passed") is False:
        reasons.append("in-run control failed")
    return reasons
