"""report.md: the tables a reviewer reads, rendered through ``report.md.j2`` and fitted under GitHub's limit.

GitHub rejects comments over 65 536 characters, so the Markdown is fitted under `MAX_MARKDOWN_CHARS`: tables are
cut by priority (regressions first; `Caps.shrink`) and say how many rows live in which CSV.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.kernels.compare import KernelComparison
from analysis.kernels.index import where_launched
from analysis.markdown_fit import cut_markdown
from analysis.models.compare import ModelComparison
from analysis.rendering import (
    Column,
    ci_text,
    finite,
    fmt_delta_ms,
    fmt_gb,
    fmt_ms,
    fmt_num,
    fmt_p,
    fmt_pct,
    fmt_share,
    fmt_x,
    jinja_env,
    markdown_table,
)
from analysis.report.environment import environment_table, flatten, lock_identity, with_lock_summaries
from analysis.report.experiment import report_lines
from analysis.report.gates import Gate
from analysis.report.inputs import ReportInputs
from analysis.report.kernel_details import KernelDetails
from analysis.report.numerics import NumericsView, lead_with_numerics, method_text, numerics_markdown
from analysis.report.projection import Projection
from analysis.report.time_decomposition import Decomposition
from analysis.report.verdict_line import control_rows, report_verdict
from analysis.stats.verdict_settings import percent

MAX_MARKDOWN_CHARS = 65_000
_NAME_WIDTH = 64  # kernel names can run to hundreds of characters; the CSV keeps them whole
_WHERE_WIDTH = 72  # a kernel shared by many models lists them all in the CSV's `graphs`
# The template's plot slots; a plot that could not be drawn (no kernel with timings on both sides) is None.
PLOT_SLOTS = ("distribution", "categories", "waterfall")

def _with_ci(frame: pd.DataFrame) -> pd.DataFrame:
    shown = frame.copy()
    shown["ci"] = [ci_text(lo, hi) for lo, hi in zip(shown["ci_low"], shown["ci_high"], strict=True)]
    return shown


def _kernel_display(table: pd.DataFrame) -> pd.DataFrame:
    shown = _with_ci(table)
    renamed = shown["base_name"] != shown["pr_name"]
    shown["kernel"] = shown["base_name"].where(~renamed, shown["base_name"] + " → " + shown["pr_name"])
    shown["where"] = [where_launched(f"{b};{p}") for b, p in zip(shown["base_graphs"], shown["pr_graphs"],
                                                                  strict=True)]
    return shown


def _unpaired_display(frame: pd.DataFrame) -> pd.DataFrame:
    shown = frame.copy()
    shown["where"] = [where_launched(g) for g in shown["graphs"]]
    return shown


KERNEL_COLUMNS_MD = [
    Column("kernel", "kernel (base → PR)", width=_NAME_WIDTH, code=True),
    Column("where", "models / graphs", width=_WHERE_WIDTH, code=True),
    Column("category", "category"),
    Column("base_median_ms", "base ms", fmt_ms), Column("pr_median_ms", "PR ms", fmt_ms),
    Column("speedup", "speedup", fmt_x), Column("ci", "CI"), Column("q_value", "q", fmt_p),
    Column("base_calls", "calls", fmt_num), Column("verdict", "verdict"), Column("matched_by", "matched by"),
]
CATEGORY_COLUMNS_MD = [
    Column("category", "category"), Column("kernels", "kernels", fmt_num), Column("geomean", "geomean", fmt_x),
    Column("time_weighted", "time-weighted", fmt_x), Column("base_ms_per_step", "base ms/step", fmt_ms),
    Column("pr_ms_per_step", "PR ms/step", fmt_ms), Column("improved", "improved", fmt_num),
    Column("regressed", "regressed", fmt_num), Column("equivalent", "equivalent", fmt_num),
    Column("inconclusive", "inconclusive", fmt_num),
]
UNPAIRED_COLUMNS_MD = [
    Column("kernel_name", "kernel", width=_NAME_WIDTH, code=True),
    Column("where", "models / graphs", width=_WHERE_WIDTH, code=True),
    Column("category", "category"),
    Column("median_ms", "ms", fmt_ms), Column("calls", "calls", fmt_num), Column("ms_per_step", "ms/step", fmt_ms),
]
MODEL_COLUMNS_MD = [
    Column("model", "model", width=40, code=True), Column("base_latency_ms", "base ms", fmt_ms),
    Column("pr_latency_ms", "PR ms", fmt_ms), Column("speedup", "speedup", fmt_x), Column("ci", "CI"),
    Column("base_speedup_vs_eager", "base vs eager", fmt_x), Column("pr_speedup_vs_eager", "PR vs eager", fmt_x),
    Column("compile_change_pct", "compile time", fmt_pct), Column("peak_change_pct", "peak memory", fmt_pct),
    Column("q_value", "q", fmt_p), Column("verdict", "verdict"),
]
CONTROL_COLUMNS_MD = [
    Column("family", "family"), Column("control", "control"), Column("items", "items", fmt_num),
    Column("geomean", "geomean", fmt_x), Column("ci", "CI"), Column("flagged", "flagged improved/regressed"),
    Column("result", "result", markup=True),
]
GATE_COLUMNS_MD = [
    Column("name", "check"), Column("value", "value", fmt_x), Column("ci", "CI"), Column("limit", "limit"),
    Column("status", "result"), Column("detail", "detail", width=90),
]
PROJECTION_COLUMNS_MD = [
    Column("model", "model", width=40, code=True), Column("share", "kernel share", fmt_share),
    Column("kernel_speedup", "kernel speedup", fmt_x), Column("projected_speedup", "projected", fmt_x),
    Column("projected_ci", "projected CI"), Column("measured_speedup", "measured", fmt_x),
    Column("kernels_base", "kernels", fmt_num),
    Column("note", "note"),
]
FUSION_COLUMNS_MD = [
    Column("group", "group", fmt_num), Column("graphs", "models / graphs", width=_WHERE_WIDTH, code=True),
    Column("base_kernels", "base kernels", width=_NAME_WIDTH * 2, code=True),
    Column("pr_kernels", "PR kernels", width=_NAME_WIDTH * 2, code=True),
    Column("base_launches", "launches base", fmt_num), Column("pr_launches", "PR", fmt_num),
    Column("base_ms_per_step", "base ms/step", fmt_ms), Column("pr_ms_per_step", "PR ms/step", fmt_ms),
    Column("delta_ms_per_step", "Δ ms/step", fmt_delta_ms), Column("shared_ops", "ops in common", width=60),
    Column("change", "change"),
]
DECOMPOSITION_COLUMNS_MD = [
    Column("model", "model", width=40, code=True), Column("base_ms", "base ms", fmt_ms),
    Column("measured_delta_ms", "measured Δ", fmt_delta_ms), Column("measured_range", "measured Δ range"),
    Column("changed_code_ms", "code changed", fmt_delta_ms),
    Column("identical_code_ms", "identical code (control)", fmt_delta_ms),
    Column("fusion_kernels_ms", "fusion: kernels", fmt_delta_ms), Column("launches", "launches base → PR"),
    Column("launch_ms", "fusion: launches × cost", fmt_delta_ms), Column("remainder_ms", "remainder", fmt_delta_ms),
    Column("remainder_range", "remainder range"),
]
RESOURCE_COLUMNS_MD = [
    Column("model", "model", width=40, code=True), Column("base_compile_s", "compile base s", fmt_num),
    Column("pr_compile_s", "PR s", fmt_num), Column("compile_ratio", "PR / base", fmt_x),
    Column("base_repeat_s", "repeated compiles base"), Column("pr_repeat_s", "repeated compiles PR"),
    Column("compile_verdict", "compile time"), Column("base_peak", "peak base"), Column("pr_peak", "peak PR"),
    Column("compression_ratio", "compression PR / base", fmt_x), Column("memory_verdict", "memory"),
]
LOCK_COLUMNS_MD = [Column("key", "lock entry", width=64), Column("value", "value", width=96)]
ENV_COLUMNS_MD = [Column("setting", "setting", width=48), Column("base", "base", width=72),
                  Column("pr", "PR", width=72), Column("same", "", markup=True)]


@dataclass
class Caps:
    """How many rows each Markdown table may show; shrunk step by step until the report fits."""

    top: int = 15
    categories: int = 40
    models: int = 60
    projection: int = 60
    env: int = 40
    details_kernels: int = 500
    details_models: int = 300
    unpaired: int = 50
    trace_chars: int = 20_000
    diffs: int = 5  # top regressions and top improvements that get their code diff
    diff_lines: int = 80  # lines of each diff shown
    fusion: int = 30

    def shrink(self) -> bool:
        """Cut the least important content first; False when nothing is left to cut."""
        for name, floor in (("details_kernels", 0), ("unpaired", 5), ("diff_lines", 12), ("fusion", 5),
                            ("diffs", 2), ("details_models", 0), ("trace_chars", 2000),
                            ("categories", 10), ("env", 15), ("projection", 10), ("models", 10), ("top", 5)):
            value = getattr(self, name)
            if value > floor:
                setattr(self, name, max(floor, int(value * 0.5)))
                return True
        return False


@dataclass(frozen=True)
class Explanations:
    """What explains the numbers (each None when its inputs are missing)."""

    fusion: pd.DataFrame | None = None  # analysis.kernels.fusion_changes
    decomposition: Decomposition | None = None
    resources: pd.DataFrame | None = None  # analysis.report.resources


def render_markdown(inputs: ReportInputs, kc: KernelComparison | None, mc: ModelComparison | None,
                    proj: Projection | None, plots: dict[str, str], gates: list[Gate],
                    explanations: Explanations | None = None, numerics: NumericsView | None = None) -> str:
    """Render report.md, shrinking tables until it fits under MAX_MARKDOWN_CHARS."""
    explanations = explanations or Explanations()
    template = jinja_env().get_template("report.md.j2")
    env = environment_table(*with_lock_summaries(inputs.base_env, inputs.pr_env, inputs.lock))
    gate_rows = pd.DataFrame([{**g.as_dict(), "ci": ci_text(g.ci_low, g.ci_high),
                               "limit": f"{'<' if g.bad_when == 'below' else '>'} {g.limit:g}×"} for g in gates])
    verdict = report_verdict(kc, mc)
    base_ctx = {"title": inputs.title, "verdict": lead_with_numerics(verdict, numerics) if numerics else verdict,
                "experiment": report_lines(*inputs.experiments) if inputs.experiments else [],
                "numerics_method": method_text(numerics) if numerics else None,
                "kc": kc, "mc": mc, "proj": proj,
                "plots": {**dict.fromkeys(PLOT_SLOTS), **plots}, "method": _method(inputs, kc, mc),
                "lock": flatten(inputs.lock),
                "max_chars": MAX_MARKDOWN_CHARS,
                "kc_confidence": percent(kc.settings.confidence) if kc else None,
                "mc_confidence": percent(mc.settings.confidence) if mc else None,
                "controls_table": markdown_table(control_rows(kc, mc), CONTROL_COLUMNS_MD, 10, None),
                "gates_table": markdown_table(gate_rows, GATE_COLUMNS_MD, 10, None) if gates else None,
                "decomposition": explanations.decomposition, "mean_peak": _mean_peaks(mc),
                "kernel_gap": _kernel_gap(kc), **_renamed(kc)}
    details = _details(inputs, kc)
    caps = Caps()
    while True:
        text = template.render({**base_ctx, **_defaults(), **_sections(inputs, kc, mc, proj, env, caps),
                                "numerics": numerics_markdown(numerics, caps.models) if numerics else None,
                                **_explained(explanations, details, caps, inputs.kernels_asked)})
        if len(text) <= MAX_MARKDOWN_CHARS:
            return text
        if not caps.shrink():
            # Only pathological inputs (a huge environment) get here; cut hard rather than exceed GitHub's limit.
            return cut_markdown(text, MAX_MARKDOWN_CHARS,
                                "_Report cut to fit GitHub's comment limit: see the CSVs and report.xlsx._")


def _ranges(low: pd.Series, high: pd.Series, fmt: Any) -> list[str]:
    """An interval per row as "low … high" ("–" where it does not exist)."""
    return [f"{fmt(lo)} … {fmt(hi)}" if finite(lo) and finite(hi) else "–" for lo, hi in zip(low, high, strict=True)]


def _kernel_views(kc: KernelComparison) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """All pairs for display, and the regressions / improvements worst / best first (cached per comparison,
    because the Markdown is rendered several times while it is fitted under the size limit)."""
    cached = getattr(kc, "_views", None)
    if cached is None:
        shown = _kernel_display(kc.table)
        used = shown[shown["in_summary"] & shown["code_changed"]]  # identical pairs are the control, not effects
        cached = (shown, used[used["verdict"] == "regressed"].sort_values("speedup", kind="stable"),
                  used[used["verdict"] == "improved"].sort_values("speedup", ascending=False, kind="stable"))
        kc._views = cached  # type: ignore[attr-defined]
    return cached


def _sections(inputs: ReportInputs, kc: KernelComparison | None, mc: ModelComparison | None,
              proj: Projection | None, env: pd.DataFrame, caps: Caps) -> dict[str, Any]:
    ctx: dict[str, Any] = {"env_table": markdown_table(env, ENV_COLUMNS_MD, caps.env, "report.xlsx (Environment)"),
                           "lock_table": markdown_table(lock_identity(inputs.lock), LOCK_COLUMNS_MD, caps.env,
                                                  "report.xlsx (Lock)") if inputs.lock else None}
    if kc is not None:
        shown, regressed, improved = _kernel_views(kc)
        ctx.update(
            top_regressions=markdown_table(regressed, KERNEL_COLUMNS_MD, caps.top, "kernels_compare.csv"),
            top_improvements=markdown_table(improved, KERNEL_COLUMNS_MD, caps.top, "kernels_compare.csv"),
            category_table=markdown_table(kc.categories, CATEGORY_COLUMNS_MD, caps.categories, "kernel_categories.csv"),
            all_kernels=markdown_table(shown, KERNEL_COLUMNS_MD, caps.details_kernels, "kernels_compare.csv"),
            only_base=markdown_table(_unpaired_display(kc.only_base), UNPAIRED_COLUMNS_MD, caps.unpaired,
                                     "kernels_only_base.csv"),
            only_pr=markdown_table(_unpaired_display(kc.only_pr), UNPAIRED_COLUMNS_MD, caps.unpaired,
                                   "kernels_only_pr.csv"),
        )
    if mc is not None:
        models = _with_ci(mc.table)
        ctx["models_table"] = markdown_table(models, MODEL_COLUMNS_MD, caps.models, "models_compare.csv")
        ctx["all_models"] = markdown_table(models, MODEL_COLUMNS_MD, caps.details_models, "models_compare.csv")
    if proj is not None:
        ends = proj.table["projected_low"], proj.table["projected_high"]
        shown = proj.table.assign(projected_ci=_ranges(*ends, fmt_x))
        ctx["projection_table"] = markdown_table(shown, PROJECTION_COLUMNS_MD, caps.projection, "projection.csv")
    if inputs.trace_diff_md:
        ctx["trace_diff"] = cut_markdown(inputs.trace_diff_md, caps.trace_chars,
                                         "_Trace diff truncated: the full text is in trace_diff.md_")
    return ctx


def _method(inputs: ReportInputs, kc: KernelComparison | None, mc: ModelComparison | None) -> dict[str, Any]:
    """The numbers the method section quotes: the settings if given, else what the tables recorded."""
    s = inputs.settings

    def from_suite(col: str) -> str:
        frames = [f for f in (inputs.base_suite, inputs.pr_suite) if f is not None and col in f.columns]
        values = sorted({fmt_num(v) for f in frames for v in f[col].dropna().unique()})
        return ", ".join(values) if values else "not recorded"

    kernel_n = "not recorded"
    if kc is not None:
        ns = pd.concat([kc.table["base_n"], kc.table["pr_n"]]).dropna()
        if len(ns):
            kernel_n = f"median {fmt_num(ns.median())} (range {fmt_num(ns.min())}–{fmt_num(ns.max())})"
    rounds: int | str = s.rounds or max((c.summary.rounds for c in (kc, mc) if c is not None), default=0)
    if inputs.rounds_used:  # each kind ran as many rounds as it needed
        rounds = ", ".join(f"{u.rounds} ({u.kind})" for u in inputs.rounds_used)
    return {"rounds_used": [u.describe() for u in inputs.rounds_used if u.mode == "auto"],
            "warmup": fmt_num(s.warmup) if s.warmup is not None else from_suite("warmup"),
            "iterations": fmt_num(s.iterations) if s.iterations is not None else from_suite("n"),
            "kernel_n": kernel_n, "rounds": rounds, "passes": s.passes,
            "confidence": percent(s.stats.confidence),
            "alpha": f"{s.stats.alpha:.3g}", "margin": percent(s.stats.margin),
            "threshold": percent(s.stats.effect_floor),
            "fail_share": percent(s.stats.fail_share),
            "noise": percent(s.stats.noise), "min_ms": s.stats.min_ms}


def _kernel_gap(kc: KernelComparison | None) -> str | None:
    """What the kernel section cannot compute, and why: no pair has timings on both sides (a side whose kernels
    all failed, or rows with an unknown status)."""
    if kc is None or kc.summary.n_summarised or not len(kc.table):
        return None
    failed = {side: int((~kc.table[f"{side}_ok"].astype(bool)).sum()) for side in ("base", "pr")}
    return (f"_No kernel pair has timings on both sides (failed or without timing: base {failed['base']}, PR "
            f"{failed['pr']} of {len(kc.table)} pairs), so no speedup, interval or plot can be computed; each "
            "pair's status and error are in kernels_compare.csv._")


def _renamed(kc: KernelComparison | None) -> dict[str, Any]:
    """How many pairs changed name between base and PR, and which key matched them."""
    if kc is None:
        return {"renamed": 0, "renamed_by": ""}
    renamed = kc.table[kc.table["base_name"] != kc.table["pr_name"]]
    counts = renamed["matched_by"].value_counts()
    return {"renamed": len(renamed), "renamed_by": ", ".join(f"`{k}` {v}" for k, v in counts.items())}


def _defaults() -> dict[str, Any]:
    keys = ("top_regressions", "top_improvements", "category_table", "all_kernels", "only_base", "only_pr",
            "models_table", "all_models", "projection_table", "trace_diff", "fusion_table", "decomposition_table",
            "resources_table")
    return {**dict.fromkeys(keys), "regression_diffs": [], "improvement_diffs": [], "asked_diffs": []}


def _mean_peaks(mc: ModelComparison | None) -> tuple[str, str]:
    if mc is None:
        return "–", "–"
    return fmt_gb(mc.summary.base.mean_peak_gb), fmt_gb(mc.summary.pr.mean_peak_gb)


def _details(inputs: ReportInputs, kc: KernelComparison | None) -> KernelDetails:
    shown = _kernel_views(kc)[0] if kc is not None else None
    return KernelDetails(inputs.base_organized, inputs.pr_organized, kc, shown)


def asked_kernel_texts(inputs: ReportInputs, kc: KernelComparison | None) -> list[str]:
    """The kernels the user asked for (`--kernel`), each as plain text with its whole diff (for a terminal)."""
    return _details(inputs, kc).asked_texts(inputs.kernels_asked)


def _explained(explanations: Explanations, details: KernelDetails, caps: Caps, asked: tuple[str, ...]
               ) -> dict[str, Any]:
    ctx: dict[str, Any] = {}
    if details.kc is not None:
        _, regressed, improved = _kernel_views(details.kc)
        ctx["regression_diffs"] = details.blocks(regressed, caps.diffs, caps.diff_lines)
        ctx["improvement_diffs"] = details.blocks(improved, caps.diffs, caps.diff_lines)
        ctx["asked_diffs"] = details.asked_blocks(asked, caps.diff_lines)
    if explanations.fusion is not None:
        ctx["fusion_table"] = markdown_table(explanations.fusion, FUSION_COLUMNS_MD, caps.fusion, "fusion_changes.csv")
    if explanations.decomposition is not None:
        table = explanations.decomposition.table.copy()
        table["measured_range"] = _ranges(table["measured_low_ms"], table["measured_high_ms"], fmt_delta_ms)
        table["remainder_range"] = _ranges(table["remainder_low_ms"], table["remainder_high_ms"], fmt_delta_ms)
        table["launches"] = [f"{fmt_num(b)} → {fmt_num(p)}" for b, p in zip(table["base_launches"],
                                                                             table["pr_launches"], strict=True)]
        ctx["decomposition_table"] = markdown_table(table, DECOMPOSITION_COLUMNS_MD, caps.models,
                                                    "time_decomposition.csv")
    if explanations.resources is not None:
        ctx["resources_table"] = markdown_table(explanations.resources, RESOURCE_COLUMNS_MD, caps.models,
                                                "model_resources.csv")
    return ctx

