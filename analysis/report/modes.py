"""The report of a run of several modes (``invoke compare --modes``): one verdict per mode, the worst mode first.

Each mode is a run of its own under ``<run>/modes/<mode>/`` with its own ``report/`` and ``summary.json``
(`analysis.report.summary`); this module reads those summaries and writes the run's ``report/report.md`` (a matrix
mode × models, kernels, compile, memory, numerics) and ``report/summary.json``:

    {"format_version": 1, "kind": "modes",
     "verdict": "<one line: the modes worst first, then the worst mode's own verdict>",
     "modes": [{"mode": "training+amp",            # worst first (`ORDER`, then the models' speedup)
                "settings": {"name", "parts", "suite", "inductor_config", "env"},   # foundation.formats.modes
                "verdict": "regressed",            # one of `ORDER`
                "line": "<the mode's own verdict line>",
                "cells": {"models": "regressed 0.961×", "kernels": ..., "compile": "pass 1.02×",
                          "memory": ..., "numerics": "passed"},
                "report": "modes/training.amp/report/report.md",      # relative to the run directory
                "summary": "modes/training.amp/report/summary.json"}]}

A mode's verdict is its worst family's: a numerical failure, then a regressed family or a failed dashboard check,
then a mixed one, then an inconclusive one; otherwise improved where a family improved, else equivalent, else
identical (nothing changed). ``--fail-on`` is each mode's own (`analysis.report.summary.fail_reasons`), over all
modes, each reason named by its mode. Kernels are paired within a mode only: the same kernel in two modes is two
items, one in each mode's report.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.rendering import md_code, md_text
from analysis.report.summary import SUMMARY_FILE, fail_reasons, numerics_reasons
from foundation import atomic_io
from foundation.formats.run_layout import REPORT_MD

MODES_SUMMARY_FORMAT_VERSION = 1
# A mode's verdict words, worst first: the order the matrix and the headline list the modes in.
ORDER = ("numerics failed", "regressed", "mixed", "inconclusive", "not measured", "equivalent", "identical",
         "improved")
FAMILIES = ("models", "kernels", "compile", "memory", "numerics")
_GATES = {"compile": "compile time ratio", "memory": "peak-memory compression ratio"}


@dataclass(frozen=True)
class ModeResult:
    """One mode's settings (`foundation.formats.modes.Mode.describe`), its summary.json and where its report is."""

    settings: dict[str, Any]
    summary: dict[str, Any]
    report: str  # report.md, relative to the run directory
    summary_path: str  # summary.json, likewise

    @property
    def name(self) -> str:
        return str(self.settings["name"])


@dataclass(frozen=True)
class ModesPaths:
    """What the modes report wrote, for the tasks to print."""

    report_md: Path
    summary_json: Path
    verdict: str
    summary: dict[str, Any]
    results: tuple[ModeResult, ...]  # what it was made from: ``--fail-on`` reads each mode's summary


def mode_verdict(summary: dict[str, Any]) -> str:
    """One word for a mode (see the module docstring)."""
    if numerics_reasons(summary):
        return "numerics failed"
    words = [block.get("verdict") for block in (summary.get("models"), summary.get("kernels")) if block]
    if "regressed" in words or any(g.get("status") == "fail" for g in summary.get("gates") or []):
        return "regressed"
    for word in ("mixed", "inconclusive", "improved", "equivalent", "identical"):
        if word in words:
            return word
    return "not measured"


def _x(value: Any) -> str:
    return f"{value:.3f}×" if isinstance(value, (int, float)) and math.isfinite(value) else "–"


def cells(summary: dict[str, Any]) -> dict[str, str]:
    """The matrix row of one mode: each family's verdict with its headline number."""
    out: dict[str, str] = {}
    models, kernels = summary.get("models"), summary.get("kernels")
    out["models"] = f"{models['verdict']} {_x(models.get('geomean'))}" if models else "–"
    out["kernels"] = (f"{kernels['verdict']} {_x((kernels.get('step') or {}).get('speedup'))}" if kernels else "–")
    gates = {g.get("name"): g for g in summary.get("gates") or []}
    for family, gate_name in _GATES.items():
        gate = gates.get(gate_name)
        out[family] = f"{gate['status']} {_x(gate.get('value'))}" if gate else "–"
    out["numerics"] = _numerics_cell(summary.get("numerics") or {})
    return out


def _numerics_cell(numerics: dict[str, Any]) -> str:
    blocks: dict[str, dict[str, Any]] = {f: numerics[f] for f in ("models", "kernels") if numerics.get(f)}
    if not blocks:
        return "–"
    failed = [f"{b['failed']} of {b['compared']} {family}" for family, b in blocks.items() if b.get("failed")]
    return "failed (" + ", ".join(failed) + ")" if failed else "passed"


def _sort_key(result: ModeResult) -> tuple[int, float, float]:
    """Worst first: the verdict's place in `ORDER`, then the lower speedup (models, then the kernels' step)."""
    summary = result.summary

    def speedup(block: Any, *keys: str) -> float:
        for key in keys:
            block = (block or {}).get(key)
        return float(block) if isinstance(block, (int, float)) and math.isfinite(block) else math.inf

    return (ORDER.index(mode_verdict(summary)), speedup(summary, "models", "geomean"),
            speedup(summary, "kernels", "step", "speedup"))


def worst_first(results: list[ModeResult]) -> list[ModeResult]:
    return sorted(results, key=_sort_key)


def _ranking(ranked: list[ModeResult]) -> str:
    return f"{len(ranked)} modes, worst first: " + ", ".join(f"{r.name} {mode_verdict(r.summary)}" for r in ranked)


def headline(results: list[ModeResult]) -> str:
    """"2 modes, worst first: training regressed, inference equivalent. training: <its own verdict line>"."""
    ranked = worst_first(results)
    return f"{_ranking(ranked)}. {ranked[0].name}: {ranked[0].summary.get('verdict', '')}".strip()


def modes_summary(results: list[ModeResult]) -> dict[str, Any]:
    return {"format_version": MODES_SUMMARY_FORMAT_VERSION, "kind": "modes", "verdict": headline(results),
            "modes": [{"mode": r.name, "settings": r.settings, "verdict": mode_verdict(r.summary),
                       "line": r.summary.get("verdict", ""), "cells": cells(r.summary), "report": r.report,
                       "summary": r.summary_path} for r in worst_first(results)]}


def modes_fail_reasons(results: list[ModeResult], fail_on: str) -> list[str]:
    """``--fail-on`` over every mode: each mode's own reasons, named by the mode."""
    return [f"{r.name}: {reason}" for r in worst_first(results) for reason in fail_reasons(r.summary, fail_on)]


def _settings_cell(values: dict[str, Any]) -> str:
    return ", ".join(md_code(f"{k}={v}") for k, v in values.items()) or "–"


def modes_markdown(results: list[ModeResult], title: str, out_dir: Path, run_root: Path) -> str:
    """report.md of the run: the headline, the matrix (worst first, each row linking its mode's report and
    summary.json relative to ``out_dir``), what each mode set, and each mode's own verdict line."""
    ranked = worst_first(results)

    def link(relative: str) -> str:
        return os.path.relpath(run_root / relative, out_dir)

    # A mode's verdict line is its own report's Markdown (names already made text there), shown as it renders.
    lines = [f"# {md_text(title)}", "", f"**{md_text(_ranking(ranked))}.** Worst, {md_code(ranked[0].name)}: "
             f"{_one_line(ranked[0].summary.get('verdict', ''))}", "",
             "| mode | verdict | " + " | ".join(FAMILIES) + " | report |",
             "|---|---|" + "---|" * len(FAMILIES) + "---|"]
    for r in ranked:
        row = cells(r.summary)
        lines.append(f"| {md_code(r.name)} | **{mode_verdict(r.summary)}** | "
                     + " | ".join(md_text(row[f]) for f in FAMILIES)
                     + f" | [report.md]({link(r.report)}) · [summary.json]({link(r.summary_path)}) |")
    lines += ["", "Modes worst first. *models*: their verdict and geomean speedup (base time / PR time, above 1 is "
              "faster); *kernels*: the time in Inductor kernels per step; *compile* and *memory*: the dashboard's "
              "compile-time ratio (limit 1.15×) and peak-memory compression ratio (limit 0.9×) checks; *numerics*: "
              "the numerical A/B. Kernels are paired within a mode only; each mode's report holds its tables.",
              "", "## What each mode set", "", "| mode | suite | Inductor config | environment |", "|---|---|---|---|"]
    for r in ranked:
        s = r.settings
        lines.append(f"| {md_code(r.name)} | {_settings_cell(s.get('suite') or {})} | "
                     f"{_settings_cell(s.get('inductor_config') or {})} | {_settings_cell(s.get('env') or {})} |")
    lines += ["", "A setting a mode does not name keeps the compare's default (flags, the recipe, invoke.yaml).",
              "", "## Each mode's verdict", ""]
    lines += [f"- {md_code(r.name)}: {_one_line(r.summary.get('verdict', ''))}" for r in ranked]
    return "\n".join(lines) + "\n"


def _one_line(markdown: Any) -> str:
    return " ".join(str(markdown).split())


def write_modes_report(results: list[ModeResult], title: str, run_root: Path, out_dir: Path) -> ModesPaths:
    """``out_dir``/report.md and summary.json of the run; report.md is written last."""
    summary = modes_summary(results)
    summary_json = out_dir / SUMMARY_FILE
    atomic_io.write_json(summary_json, summary)
    report_md = out_dir / REPORT_MD
    atomic_io.write_text(report_md, modes_markdown(results, title, out_dir, run_root))
    return ModesPaths(report_md=report_md, summary_json=summary_json, verdict=summary["verdict"], summary=summary,
                      results=tuple(results))
