"""report.md and its comment form: the tables a reviewer reads, rendered through ``report.md.j2``.

Two forms of one template: the **file** (``report.md``, any size: every section, the collapsed ones too, the
plots as images beside it) and the **comment** (``comment.md``, what ``invoke publish`` posts), at most
`COMMENT_LIMIT` characters: the head of the report up to the control and caveats, no image (a PR comment cannot
show a file next to it), and a line saying what the file adds. The comment is fitted by showing fewer rows
(`Caps.shrink`), then leaving whole sections out; a table is never cut mid-way (each says how many rows live in
which CSV).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.kernels.compare import KernelComparison
from analysis.markdown_fit import cut_markdown
from analysis.models.compare import ModelComparison
from analysis.rendering import (
    Column,
    ci_text,
    finite,
    fmt_delta_time,
    fmt_gb,
    fmt_num,
    fmt_p,
    fmt_pct,
    fmt_share,
    fmt_time,
    fmt_x,
    jinja_env,
    markdown_table,
)
from analysis.report.inputs import ReportInputs
from analysis.report.numerics import NumericsView, method_text, numerics_markdown
from analysis.report.numerics import failed as numerics_failed
from analysis.report.sections.environment import (
    environment_line,
    environment_table,
    flatten,
    lock_identity,
    with_lock_summaries,
)
from analysis.report.sections.experiment import report_lines
from analysis.report.sections.gates import Gate
from analysis.report.sections.kernel_details import KernelDetails
from analysis.report.sections.projection import Projection, kernel_shares, low_share_line
from analysis.report.sections.time_decomposition import Decomposition
from analysis.report.verdict_line import control_rows
from analysis.stats.verdict import called_effect
from analysis.stats.verdict_settings import percent
from foundation.formats.kernel_index import where_launched

COMMENT_LIMIT = 20_000  # the comment form: a reviewer reads it on the PR; the file holds everything
_NAME_WIDTH = 64  # kernel names can run to hundreds of characters; the CSV keeps them whole
_WHERE_WIDTH = 72  # a kernel shared by many models lists them all in the CSV's `graphs`
# The template's plot slots; a plot that could not be drawn (no kernel with timings on both sides) is None.
PLOT_SLOTS = ("distribution", "categories", "waterfall", "kernel_forest", "model_forest")
CONTRIBUTOR_COLUMNS_MD = [
    Column("kernel", "kernel (base → PR)", width=_NAME_WIDTH, code=True),
    Column("where", "models / graphs", width=_WHERE_WIDTH, code=True), Column("change", "what changed", width=60),
    Column("base_ms_per_step", "base per step", fmt_time),
    Column("delta_ms_per_step", "Δ per step", fmt_delta_time),
    Column("share_of_change", "share of the change", fmt_share), Column("speedup", "speedup", fmt_x),
    Column("ci", "CI"),
]

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
    Column("base_median_ms", "base", fmt_time), Column("pr_median_ms", "PR", fmt_time),
    Column("speedup", "speedup", fmt_x), Column("ci", "CI"), Column("q_value", "q", fmt_p),
    Column("base_calls", "calls", fmt_num), Column("verdict", "verdict"), Column("matched_by", "matched by"),
]
CATEGORY_COLUMNS_MD = [
    Column("category", "category"), Column("kernels", "kernels", fmt_num), Column("geomean", "geomean", fmt_x),
    Column("time_weighted", "time-weighted", fmt_x), Column("base_ms_per_step", "base per step", fmt_time),
    Column("pr_ms_per_step", "PR per step", fmt_time), Column("improved", "improved", fmt_num),
    Column("regressed", "regressed", fmt_num), Column("equivalent", "equivalent", fmt_num),
    Column("inconclusive", "inconclusive", fmt_num),
]
UNPAIRED_COLUMNS_MD = [
    Column("kernel_name", "kernel", width=_NAME_WIDTH, code=True),
    Column("where", "models / graphs", width=_WHERE_WIDTH, code=True),
    Column("category", "category"),
    Column("median_ms", "time", fmt_time), Column("calls", "calls", fmt_num),
    Column("ms_per_step", "per step", fmt_time),
]
MODEL_COLUMNS_MD = [
    Column("model", "model", width=40, code=True), Column("base_latency_ms", "base", fmt_time),
    Column("pr_latency_ms", "PR", fmt_time), Column("speedup", "speedup", fmt_x), Column("ci", "CI"),
    Column("base_speedup_vs_eager", "base vs eager", fmt_x), Column("pr_speedup_vs_eager", "PR vs eager", fmt_x),
    Column("compile_change_pct", "compile time", fmt_pct), Column("peak_change_pct", "peak memory", fmt_pct),
    Column("kernel_share", "kernel share", fmt_share), Column("q_value", "q", fmt_p), Column("verdict", "verdict"),
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
    Column("base_ms_per_step", "base per step", fmt_time), Column("pr_ms_per_step", "PR per step", fmt_time),
    Column("delta_ms_per_step", "Δ per step", fmt_delta_time), Column("shared_ops", "ops in common", width=60),
    Column("change", "change"),
]
DECOMPOSITION_COLUMNS_MD = [
    Column("model", "model", width=40, code=True), Column("base_ms", "base step", fmt_time),
    Column("measured_delta_ms", "measured Δ", fmt_delta_time), Column("measured_range", "measured Δ range"),
    Column("changed_code_ms", "code changed", fmt_delta_time),
    Column("identical_code_ms", "identical code (control)", fmt_delta_time),
    Column("fusion_kernels_ms", "fusion: kernels", fmt_delta_time), Column("launches", "launches base → PR"),
    Column("launch_ms", "fusion: launches × cost", fmt_delta_time), Column("remainder_ms", "remainder", fmt_delta_time),
    Column("remainder_range", "remainder range"),
]
RESOURCE_COLUMNS_MD = [
    Column("model", "model", width=40, code=True), Column("base_compile_s", "compile base s", fmt_num),
    Column("pr_compile_s", "PR s", fmt_num), Column("compile_ratio", "PR / base", fmt_x),
    Column("base_graph_cache", "graph cache hits / misses base"), Column("pr_graph_cache", "PR"),
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
    resources: pd.DataFrame | None = None  # analysis.report.sections.resources
    contributors: pd.DataFrame | None = None  # analysis.report.headline.kernel_contributors


@dataclass(frozen=True)
class ReportText:
    """The report's two forms (see the module docstring)."""

    file: str
    comment: str


# The sections the comment form leaves out whole, in this order, when fewer rows are not enough.
_COMMENT_DROPS = ("top_diff", "decomposition_table", "contributors_table", "models_table")


def render_markdown(inputs: ReportInputs, kc: KernelComparison | None, mc: ModelComparison | None,
                    proj: Projection | None, plots: dict[str, str], gates: list[Gate], verdict: str,
                    explanations: Explanations | None = None, numerics: NumericsView | None = None) -> ReportText:
    """Render report.md (every section) and its comment form (fitted under `COMMENT_LIMIT`)."""
    explanations = explanations or Explanations()
    template = jinja_env().get_template("report.md.j2")
    level = inputs.settings.stats.validate().confidence
    env = environment_table(*with_lock_summaries(inputs.base_env, inputs.pr_env, inputs.lock))
    gate_rows = pd.DataFrame([{**g.as_dict(), "ci": ci_text(g.ci_low, g.ci_high),
                               "limit": f"{'<' if g.bad_when == 'below' else '>'} {g.limit:g}×"} for g in gates])
    base_ctx = {"title": inputs.title, "verdict": verdict, "level": percent(level),
                "experiment": report_lines(*inputs.experiments) if inputs.experiments else [],
                "env_line": environment_line(inputs.base_env, inputs.lock, inputs.manifest),
                "numerics_method": method_text(numerics) if numerics else None,
                "numerics_failed": numerics is not None and numerics_failed(numerics),
                "kc": kc, "mc": mc, "proj": proj, "models_timed": inputs.models_timed,
                "plots": {**dict.fromkeys(PLOT_SLOTS), **plots}, "method": _method(inputs, kc, mc, level),
                "lock": flatten(inputs.lock),
                "model_geomean": mc.summary.geomean.at_level(level) if mc else None,
                "kernel_time": kc.summary.time_weighted.at_level(level) if kc else None,
                "kernel_called": called_effect(kc.summary.detectable_pct / 100, kc.settings) if kc else None,
                "kernel_time_line": _kernel_time_line(kc, explanations.contributors, level),
                "controls_table": markdown_table(control_rows(kc, mc), CONTROL_COLUMNS_MD, 10, None),
                "gates_table": markdown_table(gate_rows, GATE_COLUMNS_MD, 10, None) if gates else None,
                "decomposition": explanations.decomposition, "mean_peak": _mean_peaks(mc),
                "graph_cache": _graph_cache(mc),
                "kernel_share_line": (low_share_line(kernel_shares(proj), inputs.experiments[0].size
                                                     if inputs.experiments else None) if proj else None),
                "caveats": [*(kc.notes if kc else []), *(mc.notes if mc else [])],
                "kernel_gap": _kernel_gap(kc), **_renamed(kc)}
    details = _details(inputs, kc)

    def render(form: str, caps: Caps, dropped: tuple[str, ...] = ()) -> str:
        ctx = {**base_ctx, **_defaults(), **_sections(inputs, kc, mc, proj, env, caps),
               "numerics": numerics_markdown(numerics, caps.models) if numerics else None,
               **_explained(explanations, details, caps, inputs.kernels_asked), "form": form}
        for name in dropped:
            ctx[name] = "_Left out of the comment to fit: it is in the full report._" if ctx.get(name) else None
        ctx["file_adds"] = _file_adds(ctx, dropped)
        return template.render(ctx)

    text = render("file", Caps())
    caps = Caps(top=10, models=30, diff_lines=40)
    dropped: tuple[str, ...] = ()
    comment = render("comment", caps)
    while len(comment) > COMMENT_LIMIT:
        if not caps.shrink():
            if len(dropped) == len(_COMMENT_DROPS):
                comment = cut_markdown(comment, COMMENT_LIMIT, "_Comment cut to fit: the full report has the rest._")
                break
            dropped = _COMMENT_DROPS[:len(dropped) + 1]
        comment = render("comment", caps, dropped)
    return ReportText(text, comment)


def _kernel_time_line(kc: KernelComparison | None, contributors: pd.DataFrame | None, level: float) -> str:
    """The kernel section's first line: the time it is about, and how the table below splits its change."""
    if kc is None or contributors is None:
        return ""
    from analysis.report.headline import kernel_times

    base, pr = kernel_times(kc, contributors)
    return (f"Σ standalone time of the Inductor kernels in one step of every model: {fmt_time(base)} → "
            f"{fmt_time(pr)} ({fmt_delta_time(pr - base)}). Below, every kernel whose code changed and every fusion "
            "group, by the time it adds per step (a pair: its base time × (1 / speedup − 1); "
            f"{percent(level)} intervals); the identical pairs are the control.")


def _file_adds(ctx: dict[str, Any], dropped: tuple[str, ...]) -> str:
    """What the full report adds to the comment form, for its last line."""
    parts = [what for key, what in (
        ("numerics", "the numerics tables"), ("resources_table", "compile time and peak memory per model"),
        ("projection_table", "the projection per model"),
        ("top_regressions", "the kernel summary (top regressions and improvements with their code diffs, fusion "
                            "changes, categories, pairing)"),
        ("trace_diff", "the trace diff")) if ctx.get(key)]
    parts += ["the method", "every environment setting"]
    if ctx.get("kc"):
        parts.append("every kernel pair")
    if ctx.get("mc"):
        parts.append("every model")
    plots = [p for p in ("model_forest", "kernel_forest", "waterfall") if ctx["plots"].get(p)]
    if plots:
        parts.append("the plots (" + ", ".join(p.replace("_", " ") for p in plots) + ")")
    left = [name.replace("_table", "").replace("_", " ") for name in dropped]
    return ("**The full report** (`report.md` with its CSVs, `summary.json` and `report.xlsx`, in the run's "
            "`report/` and in `report.tar.gz`) adds: " + ", ".join(parts)
            + (f"; and what this comment left out to fit: {', '.join(left)}" if left else "") + ".")


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
        # ci_low/ci_high at the report's one level; the PR's time as base / the paired speedup, so that a row's two
        # times divide to its speedup (each side's own median over rounds taken under different loads does not:
        # README command 1 under load showed 1.70 → 3.90 ms beside 0.591×). models_compare.csv keeps the medians.
        models = _with_ci(mc.table).assign(pr_latency_ms=lambda t: t["base_latency_ms"] / t["speedup"])
        if proj is not None:  # each model's base kernels / its step: how much a kernel change can show in it
            models["kernel_share"] = models["model"].map(kernel_shares(proj).models)
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


def _method(inputs: ReportInputs, kc: KernelComparison | None, mc: ModelComparison | None, level: float
            ) -> dict[str, Any]:
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
    left_out = sum(c.on_timer_step for c in kc.controls) if kc is not None else 0
    return {"rounds_used": [u.describe() for u in inputs.rounds_used if u.mode == "auto"],
            "timer_step": f"{left_out} pair{'s' if left_out != 1 else ''}" if left_out else "",
            "resolution": any(u.resolution_pct is not None for u in inputs.rounds_used),
            "warmup": fmt_num(s.warmup) if s.warmup is not None else from_suite("warmup"),
            "iterations": fmt_num(s.iterations) if s.iterations is not None else from_suite("n"),
            "kernel_n": kernel_n, "rounds": rounds, "passes": s.passes,
            "confidence": percent(level), "levels": _levels(kc, mc, level),
            "alpha": f"{s.stats.alpha:.3g}", "margin": percent(s.stats.margin),
            "threshold": percent(s.stats.effect_floor),
            "fail_share": percent(s.stats.fail_share),
            "noise": percent(s.stats.noise), "min_ms": s.stats.min_ms}


def _levels(kc: KernelComparison | None, mc: ModelComparison | None, level: float) -> str:
    """Where a verdict rests on another level than the one the body shows: a kind stated at a strict level after
    an early stop, and the items called changed (their intervals adjusted for the selection)."""
    words = []
    for name, family in (("kernel", kc), ("model", mc)):
        if family is None:
            continue
        own = family.settings.confidence
        if abs(own - level) > 1e-9:
            words.append(f"the {name} verdicts are stated at {percent(own)} (their rounds stopped early)")
        selected = family.summary.selection_level
        if selected == selected:  # NaN: nothing was called a change
            words.append(f"the {name}s called improved or regressed rest on intervals at {percent(selected)}, "
                         "adjusted for their selection")
    return ("Where the verdicts rest on other levels: " + "; ".join(words) + ".") if words else (
        "Every verdict rests on that level.")


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
    keys = ("contributors_table", "top_diff", "top_regressions", "top_improvements", "category_table",
            "all_kernels", "only_base", "only_pr", "models_table", "all_models", "projection_table", "trace_diff",
            "fusion_table", "decomposition_table", "resources_table")
    return {**dict.fromkeys(keys), "regression_diffs": [], "improvement_diffs": [], "asked_diffs": []}


def _mean_peaks(mc: ModelComparison | None) -> tuple[str, str]:
    if mc is None:
        return "–", "–"
    return fmt_gb(mc.summary.base.mean_peak_gb), fmt_gb(mc.summary.pr.mean_peak_gb)


def _graph_cache(mc: ModelComparison | None) -> tuple[str, str]:
    """Each side's FX-graph cache hits / misses in its cold compiles (a hit is a graph not compiled there)."""
    if mc is None:
        return "–", "–"
    return _cache_cell(mc.summary.base.graph_cache), _cache_cell(mc.summary.pr.graph_cache)


def _cache_cell(counts: tuple[int, int] | None) -> str:
    return "not recorded" if counts is None else f"{counts[0]} / {counts[1]}"


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
    if explanations.contributors is not None and details.kc is not None:
        top = _with_ci(explanations.contributors.head(caps.top))
        top["change"] = [_what_changed(details, row) for row in top.to_dict("records")]
        ctx["contributors_table"] = (markdown_table(top, CONTRIBUTOR_COLUMNS_MD) + _more_rows(
            len(explanations.contributors) - len(top), "kernel_contributors.csv"))
        ctx["top_diff"] = _top_diff(explanations.contributors, details, caps.diff_lines)
    if explanations.fusion is not None:
        ctx["fusion_table"] = markdown_table(explanations.fusion, FUSION_COLUMNS_MD, caps.fusion, "fusion_changes.csv")
    if explanations.decomposition is not None:
        table = explanations.decomposition.table.copy()
        table["measured_range"] = _ranges(table["measured_low_ms"], table["measured_high_ms"], fmt_delta_time)
        table["remainder_range"] = _ranges(table["remainder_low_ms"], table["remainder_high_ms"], fmt_delta_time)
        table["launches"] = [f"{fmt_num(b)} → {fmt_num(p)}" for b, p in zip(table["base_launches"],
                                                                             table["pr_launches"], strict=True)]
        ctx["decomposition_table"] = markdown_table(table, DECOMPOSITION_COLUMNS_MD, caps.models,
                                                    "time_decomposition.csv")
    if explanations.resources is not None:
        ctx["resources_table"] = markdown_table(explanations.resources, RESOURCE_COLUMNS_MD, caps.models,
                                                "model_resources.csv")
    return ctx



_VECTOR_TYPES = re.compile(r", vector types [^→;]*?(?= →|$)")  # the list of types: the diff has it


def _what_changed(details: KernelDetails, row: dict[str, Any]) -> str:
    """A contributor's change in one phrase: its code's own (``vector step 8 → scalar loops``) where the sources
    are there, else how it was paired; a fusion group's as `fusion_changes` words it."""
    if details.kc is None or row["pair"] is None or row["pair"] != row["pair"]:
        return str(row["change"])
    index = int(row["pair"])
    detail = details.detail(_kernel_views(details.kc)[0].loc[index].to_dict(), index)
    code = _VECTOR_TYPES.sub("", detail.what_changed.split("; ")[0]) if detail.what_changed else ""
    renamed = " (renamed in place)" if "renamed in place" in str(row["change"]) else ""
    return f"{code}{renamed}" if code else str(row["change"])


def _more_rows(rest: int, where: str) -> str:
    return f"\n_{rest} more rows in {where}_\n" if rest > 0 else ""


def _top_diff(contributors: pd.DataFrame, details: KernelDetails, lines: int) -> str | None:
    """The code diff of the changed pair that adds (or saves) the most time; None when a fusion group leads."""
    if not len(contributors) or details.kc is None or not contributors["pair"].notna().iloc[0]:
        return None
    shown = _kernel_views(details.kc)[0]
    return details.blocks(shown.loc[[int(contributors["pair"].iloc[0])]], 1, lines)[0]
