"""The comparison report: ``report.md`` (GitHub-flavoured, pasted into the PR), CSVs, ``report.xlsx`` and PNG plots.

`render_report` takes everything in memory (`ReportInputs`) and writes ``out_dir``; `load_report_inputs` reads
a run directory (``base/`` and ``pr/`` as in docs/architecture.md) so a report can be re-rendered without
re-running anything. GitHub rejects comments over 65 536 characters, so the Markdown is fitted under
`MAX_MARKDOWN_CHARS`: tables are cut by priority (regressions first) and say how many rows live in which CSV.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import atomic_io
from analysis.dynamo_csv import read_suite_samples
from analysis.errors import UserError
from analysis.gates import Gate, model_gates
from analysis.kernel_compare import KernelComparison, compare_kernels, read_kernels_csv
from analysis.model_compare import ModelComparison, compare_models
from analysis.model_compare import read_suite_frame as read_suite_csv
from analysis.paired_rounds import RoundSamples, read_round_samples
from analysis.projection import Projection, project
from analysis.verdict import ControlResult
from analysis.verdict_settings import VerdictSettings, percent
from analysis.verdict_summary import (
    build_summary,
    control_block,
    family_block,
    phrase,
    resolution_pct,
    verdict_line,
    write_summary,
)

MAX_MARKDOWN_CHARS = 65_000
XLSX_KERNEL_COLUMNS = ("verdict", "speedup", "ci_low", "ci_high", "change_pct", "q_value", "base_median_ms",
                       "pr_median_ms", "base_spread", "pr_spread", "rounds", "control", "base_calls", "category",
                       "base_name", "pr_name", "matched_by", "body_hash", "shape_key", "in_summary")
TEMPLATE_DIR = Path(__file__).parent / "templates"
_NAME_WIDTH = 64  # kernel names can run to hundreds of characters; the CSV keeps them whole


@dataclass(frozen=True)
class ReportSettings:
    warmup: int | None = None  # None: taken from suite.csv when it has the column
    iterations: int | None = None
    rounds: int | None = None  # paired timing rounds (None: not recorded)
    stats: VerdictSettings = field(default_factory=VerdictSettings)


@dataclass
class ReportInputs:
    base_kernels: pd.DataFrame | None = None
    pr_kernels: pd.DataFrame | None = None
    base_kernel_samples: RoundSamples = field(default_factory=dict)
    pr_kernel_samples: RoundSamples = field(default_factory=dict)
    base_suite: pd.DataFrame | None = None
    pr_suite: pd.DataFrame | None = None
    base_suite_samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    pr_suite_samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    base_model_rounds: RoundSamples = field(default_factory=dict)  # suite/paired_samples.json
    pr_model_rounds: RoundSamples = field(default_factory=dict)
    base_env: dict[str, Any] = field(default_factory=dict)
    pr_env: dict[str, Any] = field(default_factory=dict)
    lock: dict[str, Any] = field(default_factory=dict)
    settings: ReportSettings = field(default_factory=ReportSettings)
    trace_diff_md: str | None = None
    title: str = "prbench: performance of this PR"


@dataclass(frozen=True)
class ReportPaths:
    out_dir: Path
    report_md: Path
    xlsx: Path
    kernels_csv: Path | None
    models_csv: Path | None
    csvs: list[Path]
    plots: list[Path]
    characters: int  # length of report.md
    verdict: str
    summary_json: Path
    summary: dict[str, Any]
    kernel_comparison: KernelComparison | None = None  # the analyses behind the files, for callers to print
    model_comparison: ModelComparison | None = None
    projection: Projection | None = None


# --- loading a run directory -----------------------------------------------------------------------------


def _pair_of(run_dir: Path, rel: str) -> tuple[Path, Path] | None:
    """Both variants' copies of a file; None when neither has it; a UserError when only one does."""
    base, pr = run_dir / "base" / rel, run_dir / "pr" / rel
    if base.exists() != pr.exists():
        missing = pr if base.exists() else base
        raise UserError(f"{missing}: file not found (the other variant has it, so the two cannot be compared)")
    return (base, pr) if base.exists() else None


def _json_dict(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def _manifest_settings(run_dir: Path) -> ReportSettings:
    settings = _json_dict(run_dir / "manifest.json").get("settings", {}) or {}
    suite = settings.get("suite", {}) if isinstance(settings.get("suite"), dict) else {}

    def pick(key: str, *sources: dict[str, Any]) -> Any:
        return next((s[key] for s in sources if s.get(key) is not None), None)

    stats = settings.get("stats", {}) if isinstance(settings.get("stats"), dict) else {}
    known = {f for f in VerdictSettings.__dataclass_fields__}
    try:
        verdict_settings = VerdictSettings(**{k: v for k, v in stats.items() if k in known}).validate()
    except (TypeError, UserError) as exc:
        raise UserError(f"{run_dir / 'manifest.json'}: settings.stats: {exc}") from None
    return ReportSettings(warmup=pick("warmup", settings, suite), iterations=pick("iterations", settings, suite),
                          rounds=pick("rounds", settings), stats=verdict_settings)


def load_report_inputs(run_dir: Path) -> ReportInputs:
    """Read ``<run>/base`` and ``<run>/pr`` (kernels, samples, suite, env), ``lock.json`` and manifest settings."""
    run_dir = Path(run_dir)
    for side in ("base", "pr"):
        if not (run_dir / side).is_dir():
            raise UserError(f"{run_dir / side}: no such directory (a comparison run has base/ and pr/)")
    inputs = ReportInputs(settings=_manifest_settings(run_dir), lock=_json_dict(run_dir / "lock.json"),
                          base_env=_json_dict(run_dir / "base" / "env.json"),
                          pr_env=_json_dict(run_dir / "pr" / "env.json"))
    kernels = _pair_of(run_dir, "kernels.csv")
    if kernels:
        inputs.base_kernels, inputs.pr_kernels = (read_kernels_csv(p) for p in kernels)
        samples = _pair_of(run_dir, "kernel_samples.json")
        if samples:
            inputs.base_kernel_samples, inputs.pr_kernel_samples = (read_round_samples(p) for p in samples)
    suite = _pair_of(run_dir, "suite/suite.csv")
    if suite:
        inputs.base_suite, inputs.pr_suite = (read_suite_csv(p) for p in suite)
        samples = _pair_of(run_dir, "suite/samples.json")
        if samples:
            inputs.base_suite_samples, inputs.pr_suite_samples = (read_suite_samples(p) for p in samples)
        paired = _pair_of(run_dir, "suite/paired_samples.json")
        if paired:
            inputs.base_model_rounds, inputs.pr_model_rounds = (read_round_samples(p) for p in paired)
    if not kernels and not suite:
        raise UserError(f"{run_dir}: nothing to compare (no kernels.csv or suite/suite.csv under base/ and pr/)")
    trace = run_dir / "report" / "trace_diff.md"
    if trace.exists():
        inputs.trace_diff_md = trace.read_text(encoding="utf-8")
    return inputs


# --- formatting ------------------------------------------------------------------------------------------


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and math.isfinite(float(x))


def fmt_x(x: Any) -> str:
    return f"{float(x):.3f}×" if _finite(x) else "–"


def fmt_ms(x: Any) -> str:
    if not _finite(x):
        return "–"
    x = float(x)
    return f"{x:.4f}" if abs(x) < 1 else f"{x:.3f}" if abs(x) < 100 else f"{x:.1f}"


def fmt_pct(x: Any) -> str:
    return f"{float(x):+.1f} %" if _finite(x) else "–"


def fmt_share(x: Any) -> str:
    return f"{100 * float(x):.1f} %" if _finite(x) else "–"


def fmt_p(x: Any) -> str:
    if not _finite(x):
        return "–"
    return f"{float(x):.2g}" if float(x) < 0.001 else f"{float(x):.3f}"


def fmt_num(x: Any) -> str:
    if not _finite(x):
        return fmt_text(x)
    return f"{int(x)}" if float(x).is_integer() else f"{float(x):.4g}"


def _cell(x: Any, width: int = 0) -> str:
    """Make a value safe inside a Markdown table cell (pipes, newlines), optionally shortened in the middle."""
    text = "" if x is None else str(x)
    text = text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")
    if width and len(text) > width:
        half = (width - 1) // 2
        text = text[:half] + "…" + text[-(width - 1 - half):]
    return text


def fmt_text(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    fmt: Callable[[Any], str] = fmt_text
    width: int = 0


def md_table(frame: pd.DataFrame, columns: list[Column], max_rows: int, csv_name: str | None) -> str:
    """A GitHub table of the first ``max_rows`` rows, then a line naming the file that has the rest."""
    if frame.empty:
        return "_none_\n"
    lines = ["| " + " | ".join(c.header for c in columns) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    for row in frame.head(max_rows).to_dict("records"):
        cells = [_cell(c.fmt(row.get(c.key)), c.width) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    rest = len(frame) - max_rows
    if rest > 0:
        where = f" in {csv_name}" if csv_name else ""
        lines.append(f"\n_{rest} more rows{where}_")
    return "\n".join(lines) + "\n"


# --- environment -----------------------------------------------------------------------------------------

_ENV_PRIORITY = ("commit", "sha", "ref", "digest", "image", "device", "gpu", "cpu", "rocm", "hip", "cuda", "torch",
                 "triton", "driver", "python", "platform", "recipe", "overlay")


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts → dotted keys; lists and scalars become short strings."""
    out: dict[str, str] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(data, list) and all(not isinstance(v, (dict, list)) for v in data):
        out[prefix] = ", ".join(str(v) for v in data)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out.update(flatten(value, f"{prefix}[{i}]"))
    else:
        out[prefix] = "" if data is None else str(data)
    return out


def environment_table(base_env: dict[str, Any], pr_env: dict[str, Any]) -> pd.DataFrame:
    """One row per setting of either side; identity-bearing keys (commits, digests, device, versions) first."""
    base, pr = flatten(base_env), flatten(pr_env)
    keys = list(dict.fromkeys([*base, *pr]))

    def rank(key: str) -> tuple[int, str]:
        low = key.lower()
        hits = [i for i, word in enumerate(_ENV_PRIORITY) if word in low]
        return (min(hits) if hits else len(_ENV_PRIORITY), key)

    rows = [{"setting": k, "base": base.get(k, "–"), "pr": pr.get(k, "–"), "same": _sameness(base.get(k), pr.get(k))}
            for k in sorted(keys, key=rank) if k != "name"]
    return pd.DataFrame(rows, columns=["setting", "base", "pr", "same"])


def _sameness(base: str | None, pr: str | None) -> str:
    if base == pr:
        return "✓"
    # Caches and temp dirs live in each side's own directory of the run: the same setting, not a difference.
    if base and pr and base.replace("/base/", "/pr/") == pr:
        return "✓ (own directory)"
    return "**differs**"


def lock_identity(lock: dict[str, Any]) -> pd.DataFrame:
    """The lock entries that identify an environment (commits, digests, versions), most telling first."""
    rows = [(k, v) for k, v in flatten(lock).items() if any(word in k.lower() for word in _ENV_PRIORITY)]
    return pd.DataFrame(rows, columns=["key", "value"])


# --- the verdict -----------------------------------------------------------------------------------------


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
                "geomean": est.speedup, "ci": _ci_text(est.ci_low, est.ci_high),
                "flagged": f"{c.flagged} ({fmt_share(c.false_positive_share)})" if c.available else "–",
                "result": ("passed" if c.passed(settings) else "**failed**") if c.available
                else f"not available: {c.reason}",
            })
    return pd.DataFrame(rows, columns=["family", "control", "items", "geomean", "ci", "flagged", "result"])


def _ci_text(low: Any, high: Any) -> str:
    return f"{fmt_x(low)}–{fmt_x(high)}" if _finite(low) and _finite(high) else "–"


# --- tables shown in the Markdown ------------------------------------------------------------------------


def _with_ci(frame: pd.DataFrame) -> pd.DataFrame:
    shown = frame.copy()
    shown["ci"] = [_ci_text(lo, hi) for lo, hi in zip(shown["ci_low"], shown["ci_high"], strict=True)]
    return shown


def _kernel_display(table: pd.DataFrame) -> pd.DataFrame:
    shown = _with_ci(table)
    renamed = shown["base_name"] != shown["pr_name"]
    shown["kernel"] = shown["base_name"].where(~renamed, shown["base_name"] + " → " + shown["pr_name"])
    return shown


KERNEL_COLUMNS_MD = [
    Column("kernel", "kernel (base → PR)", width=_NAME_WIDTH), Column("category", "category"),
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
    Column("kernel_name", "kernel", width=_NAME_WIDTH), Column("category", "category"),
    Column("median_ms", "ms", fmt_ms), Column("calls", "calls", fmt_num), Column("ms_per_step", "ms/step", fmt_ms),
]
MODEL_COLUMNS_MD = [
    Column("model", "model", width=40), Column("base_latency_ms", "base ms", fmt_ms),
    Column("pr_latency_ms", "PR ms", fmt_ms), Column("speedup", "speedup", fmt_x), Column("ci", "CI"),
    Column("base_speedup_vs_eager", "base vs eager", fmt_x), Column("pr_speedup_vs_eager", "PR vs eager", fmt_x),
    Column("compile_change_pct", "compile time", fmt_pct), Column("peak_change_pct", "peak memory", fmt_pct),
    Column("q_value", "q", fmt_p), Column("verdict", "verdict"),
]
CONTROL_COLUMNS_MD = [
    Column("family", "family"), Column("control", "control"), Column("items", "items", fmt_num),
    Column("geomean", "geomean", fmt_x), Column("ci", "CI"), Column("flagged", "flagged improved/regressed"),
    Column("result", "result"),
]
GATE_COLUMNS_MD = [
    Column("name", "check"), Column("value", "value", fmt_x), Column("ci", "CI"), Column("limit", "limit"),
    Column("status", "result"), Column("detail", "detail", width=90),
]
PROJECTION_COLUMNS_MD = [
    Column("model", "model", width=40), Column("share", "kernel share", fmt_share),
    Column("kernel_speedup", "kernel speedup", fmt_x), Column("projected_speedup", "projected", fmt_x),
    Column("measured_speedup", "measured", fmt_x), Column("kernels_base", "kernels", fmt_num),
    Column("note", "note"),
]
LOCK_COLUMNS_MD = [Column("key", "lock entry", width=64), Column("value", "value", width=96)]
ENV_COLUMNS_MD = [Column("setting", "setting", width=48), Column("base", "base", width=72),
                  Column("pr", "PR", width=72), Column("same", "")]


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

    def shrink(self) -> bool:
        """Cut the least important content first; False when nothing is left to cut."""
        for name, floor in (("details_kernels", 0), ("unpaired", 5), ("details_models", 0), ("trace_chars", 2000),
                            ("categories", 10), ("env", 15), ("projection", 10), ("models", 10), ("top", 5)):
            value = getattr(self, name)
            if value > floor:
                setattr(self, name, max(floor, int(value * 0.5)))
                return True
        return False


def _truncate_markdown(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit)
    return text[: cut if cut > 0 else limit] + "\n\n_Trace diff truncated: the full text is in trace_diff.md_\n"


def _kernel_views(kc: KernelComparison) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """All pairs for display, and the regressions / improvements worst / best first (cached per comparison,
    because the Markdown is rendered several times while it is fitted under the size limit)."""
    cached = getattr(kc, "_views", None)
    if cached is None:
        shown = _kernel_display(kc.table)
        used = shown[shown["in_summary"]]
        cached = (shown, used[used["verdict"] == "regressed"].sort_values("speedup", kind="stable"),
                  used[used["verdict"] == "improved"].sort_values("speedup", ascending=False, kind="stable"))
        kc._views = cached  # type: ignore[attr-defined]
    return cached


def _sections(inputs: ReportInputs, kc: KernelComparison | None, mc: ModelComparison | None,
              proj: Projection | None, env: pd.DataFrame, caps: Caps) -> dict[str, Any]:
    ctx: dict[str, Any] = {"env_table": md_table(env, ENV_COLUMNS_MD, caps.env, "report.xlsx (Environment)"),
                           "lock_table": md_table(lock_identity(inputs.lock), LOCK_COLUMNS_MD, caps.env,
                                                  "report.xlsx (Lock)") if inputs.lock else None}
    if kc is not None:
        shown, regressed, improved = _kernel_views(kc)
        ctx.update(
            top_regressions=md_table(regressed, KERNEL_COLUMNS_MD, caps.top, "kernels_compare.csv"),
            top_improvements=md_table(improved, KERNEL_COLUMNS_MD, caps.top, "kernels_compare.csv"),
            category_table=md_table(kc.categories, CATEGORY_COLUMNS_MD, caps.categories, "kernel_categories.csv"),
            all_kernels=md_table(shown, KERNEL_COLUMNS_MD, caps.details_kernels, "kernels_compare.csv"),
            only_base=md_table(kc.only_base, UNPAIRED_COLUMNS_MD, caps.unpaired, "kernels_only_base.csv"),
            only_pr=md_table(kc.only_pr, UNPAIRED_COLUMNS_MD, caps.unpaired, "kernels_only_pr.csv"),
        )
    if mc is not None:
        models = _with_ci(mc.table)
        ctx["models_table"] = md_table(models, MODEL_COLUMNS_MD, caps.models, "models_compare.csv")
        ctx["all_models"] = md_table(models, MODEL_COLUMNS_MD, caps.details_models, "models_compare.csv")
    if proj is not None:
        ctx["projection_table"] = md_table(proj.table, PROJECTION_COLUMNS_MD, caps.projection, "projection.csv")
    if inputs.trace_diff_md:
        ctx["trace_diff"] = _truncate_markdown(inputs.trace_diff_md, caps.trace_chars)
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
    rounds = s.rounds or max((c.summary.rounds for c in (kc, mc) if c is not None), default=0)
    return {"warmup": fmt_num(s.warmup) if s.warmup is not None else from_suite("warmup"),
            "iterations": fmt_num(s.iterations) if s.iterations is not None else from_suite("n"),
            "kernel_n": kernel_n, "rounds": rounds, "confidence": percent(s.stats.confidence),
            "alpha": s.stats.alpha, "margin": percent(s.stats.margin), "threshold": percent(s.stats.effect_floor),
            "noise": percent(s.stats.noise), "min_ms": s.stats.min_ms}


def render_markdown(inputs: ReportInputs, kc: KernelComparison | None, mc: ModelComparison | None,
                    proj: Projection | None, plots: dict[str, str], gates: list[Gate]) -> str:
    """Render report.md, shrinking tables until it fits under MAX_MARKDOWN_CHARS."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    jenv = Environment(loader=FileSystemLoader(TEMPLATE_DIR), undefined=StrictUndefined, keep_trailing_newline=True,
                       trim_blocks=True, lstrip_blocks=True, autoescape=False)
    jenv.filters.update(x=fmt_x, ms=fmt_ms, pct=fmt_pct, share=fmt_share, num=fmt_num)
    template = jenv.get_template("report.md.j2")
    env = environment_table(inputs.base_env, inputs.pr_env)
    stats = inputs.settings.stats
    gate_rows = pd.DataFrame([{**g.as_dict(), "ci": _ci_text(g.ci_low, g.ci_high),
                               "limit": f"{'<' if g.bad_when == 'below' else '>'} {g.limit:g}×"} for g in gates])
    base_ctx = {"title": inputs.title, "verdict": report_verdict(kc, mc, stats), "kc": kc, "mc": mc, "proj": proj,
                "plots": plots, "method": _method(inputs, kc, mc), "lock": flatten(inputs.lock),
                "max_chars": MAX_MARKDOWN_CHARS, "confidence": percent(stats.confidence),
                "controls_table": md_table(control_rows(kc, mc, stats), CONTROL_COLUMNS_MD, 10, None),
                "gates_table": md_table(gate_rows, GATE_COLUMNS_MD, 10, None) if gates else None,
                **_renamed(kc)}
    caps = Caps()
    while True:
        text = template.render({**base_ctx, **_defaults(), **_sections(inputs, kc, mc, proj, env, caps)})
        if len(text) <= MAX_MARKDOWN_CHARS:
            return text
        if not caps.shrink():
            # Only pathological inputs (a huge environment) get here; cut hard rather than exceed GitHub's limit.
            note = "\n\n_Report cut to fit GitHub's comment limit: see the CSVs and report.xlsx._\n"
            return text[: MAX_MARKDOWN_CHARS - len(note)] + note


def _renamed(kc: KernelComparison | None) -> dict[str, Any]:
    """How many pairs changed name between base and PR, and which key matched them."""
    if kc is None:
        return {"renamed": 0, "renamed_by": ""}
    renamed = kc.table[kc.table["base_name"] != kc.table["pr_name"]]
    counts = renamed["matched_by"].value_counts()
    return {"renamed": len(renamed), "renamed_by": ", ".join(f"`{k}` {v}" for k, v in counts.items())}


def _defaults() -> dict[str, Any]:
    keys = ("top_regressions", "top_improvements", "category_table", "all_kernels", "only_base", "only_pr",
            "models_table", "all_models", "projection_table", "trace_diff")
    return dict.fromkeys(keys)


# --- plots -----------------------------------------------------------------------------------------------


def _figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # Agg: no display, no global pyplot state
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save_png(fig, path: Path) -> Path:
    fig.tight_layout()
    with atomic_io.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    return path


def plot_distribution(kc: KernelComparison, path: Path) -> Path:
    speedups = kc.table.loc[kc.table["in_summary"], "speedup"].astype(float)
    fig = _figure()
    ax = fig.add_subplot()
    ax.hist(np.log2(speedups), bins=min(60, max(10, len(speedups) // 20)), color="#4c72b0")
    ax.axvline(0.0, color="black", linewidth=1)
    if _finite(kc.summary.geomean.speedup):
        ax.axvline(math.log2(kc.summary.geomean.speedup), color="#c44e52", linestyle="--",
                   label=f"geomean {kc.summary.geomean.speedup:.3f}×")
        ax.legend()
    ax.set_xlabel("log2(speedup) = log2(base ms / PR ms); > 0 means the PR is faster")
    ax.set_ylabel("kernels")
    ax.set_title(f"Per-kernel speedups ({len(speedups)} kernels)")
    return _save_png(fig, path)


def plot_categories(kc: KernelComparison, path: Path) -> Path:
    cats = kc.categories.head(20).iloc[::-1]
    fig = _figure()
    ax = fig.add_subplot()
    values = cats["geomean"].astype(float)
    ax.barh(cats["category"].astype(str), values - 1.0, left=1.0,
            color=["#55a868" if v >= 1 else "#c44e52" for v in values])
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlabel("geomean speedup (base / PR)")
    ax.set_title("Per-category geomean speedup")
    return _save_png(fig, path)


# --- files -----------------------------------------------------------------------------------------------


def _write_csv(frame: pd.DataFrame, path: Path) -> Path:
    with atomic_io.atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
    return path


def _xlsx_value(x: Any) -> Any:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    if isinstance(x, np.generic):
        x = x.item()
        return None if isinstance(x, float) and not math.isfinite(x) else x
    return x if isinstance(x, (int, float, str, bool)) else str(x)


def sheet_name(name: str, used: set[str]) -> str:
    """Excel sheet names: ≤ 31 characters, none of []:*?/\\, unique."""
    clean = "".join("_" if ch in "[]:*?/\\" else ch for ch in name)[:31] or "Sheet"
    candidate, i = clean, 2
    while candidate.lower() in used:
        suffix = f" ({i})"
        candidate, i = clean[: 31 - len(suffix)] + suffix, i + 1
    used.add(candidate.lower())
    return candidate


def write_xlsx(sheets: Iterable[tuple[str, pd.DataFrame]], path: Path) -> Path:
    from openpyxl import Workbook

    wb = Workbook(write_only=True)  # streaming: thousands of kernel rows without building a cell tree
    used: set[str] = set()
    for name, frame in sheets:
        ws = wb.create_sheet(sheet_name(name, used))
        ws.append([str(c) for c in frame.columns])
        for row in frame.itertuples(index=False):
            ws.append([_xlsx_value(v) for v in row])
    with atomic_io.atomic_path(path) as tmp:
        wb.save(tmp)
    return path


def _family_rows(label: str, geomean: Any, time_weighted: Any, method: str, verdict: str,
                 counts: dict[str, int]) -> list[tuple[str, Any]]:
    return [(f"{label} verdict", verdict), (f"{label} geomean speedup", geomean.speedup),
            (f"{label} geomean CI low", geomean.ci_low), (f"{label} geomean CI high", geomean.ci_high),
            (f"{label} time-weighted speedup", time_weighted.speedup), (f"{label} interval method", method),
            *((f"{label} {k}", v) for k, v in counts.items())]


def _summary_frame(kc: KernelComparison | None, mc: ModelComparison | None, proj: Projection | None,
                   gates: list[Gate]) -> pd.DataFrame:
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


def render_report(inputs: ReportInputs, out_dir: Path) -> ReportPaths:
    """Compare what ``inputs`` holds (kernels and/or suites) and write the report files into ``out_dir``."""
    out_dir = Path(out_dir)
    has_kernels = inputs.base_kernels is not None and inputs.pr_kernels is not None
    has_suite = inputs.base_suite is not None and inputs.pr_suite is not None
    if not has_kernels and not has_suite:
        raise UserError("report: nothing to compare (need kernels tables or suite tables for both base and PR)")
    stats = inputs.settings.stats.validate()
    kc = compare_kernels(inputs.base_kernels, inputs.pr_kernels, inputs.base_kernel_samples,
                         inputs.pr_kernel_samples, stats) if has_kernels else None
    mc = compare_models(inputs.base_suite, inputs.pr_suite, inputs.base_suite_samples, inputs.pr_suite_samples,
                        stats, inputs.base_model_rounds, inputs.pr_model_rounds) if has_suite else None
    gates = model_gates(mc, stats.confidence) if mc is not None else []
    proj = None
    if kc is not None and mc is not None:
        from analysis.kernel_compare import check_kernels_frame
        from analysis.model_compare import check_suite_frame

        proj = project(check_kernels_frame(inputs.base_kernels, "base kernels"),
                       check_kernels_frame(inputs.pr_kernels, "PR kernels"),
                       check_suite_frame(inputs.base_suite, "base suite"),
                       check_suite_frame(inputs.pr_suite, "PR suite"))

    csvs: list[Path] = []
    sheets: list[tuple[str, pd.DataFrame]] = [("Summary", _summary_frame(kc, mc, proj, gates))]
    plots: dict[str, str] = {}
    if kc is not None:
        for name, frame, sheet in (("kernels_compare.csv", kc.table, "Kernels"),
                                   ("kernel_categories.csv", kc.categories, "Categories"),
                                   ("kernels_only_base.csv", kc.only_base, "Only in base"),
                                   ("kernels_only_pr.csv", kc.only_pr, "Only in PR")):
            csvs.append(_write_csv(frame, out_dir / name))
            # openpyxl writes ~50k cells/s without lxml: the Kernels sheet keeps the columns a reader sorts by;
            # kernels_compare.csv has them all.
            sheets.append((sheet, frame[[c for c in XLSX_KERNEL_COLUMNS if c in frame.columns]]
                           if sheet == "Kernels" else frame))
        if kc.summary.n_summarised:
            plots["distribution"] = plot_distribution(kc, out_dir / "speedup_distribution.png").name
            if len(kc.categories):
                plots["categories"] = plot_categories(kc, out_dir / "category_speedups.png").name
    if mc is not None:
        csvs.append(_write_csv(mc.table, out_dir / "models_compare.csv"))
        sheets.append(("Models", mc.table))
    if proj is not None:
        csvs.append(_write_csv(proj.table, out_dir / "projection.csv"))
        sheets.append(("Projection", proj.table))
    sheets.append(("Environment", environment_table(inputs.base_env, inputs.pr_env)))
    if inputs.lock:
        sheets.append(("Lock", pd.DataFrame(list(flatten(inputs.lock).items()), columns=["key", "value"])))
    if inputs.trace_diff_md:
        atomic_io.write_text(out_dir / "trace_diff.md", inputs.trace_diff_md)

    summary = summarize_comparison(kc, mc, gates, stats)
    summary_json = write_summary(out_dir, summary)
    xlsx = write_xlsx(sheets, out_dir / "report.xlsx")
    text = render_markdown(inputs, kc, mc, proj, plots, gates)
    report_md = out_dir / "report.md"
    atomic_io.write_text(report_md, text)
    return ReportPaths(out_dir=out_dir, report_md=report_md, xlsx=xlsx,
                       kernels_csv=out_dir / "kernels_compare.csv" if kc is not None else None,
                       models_csv=out_dir / "models_compare.csv" if mc is not None else None,
                       csvs=csvs, plots=[out_dir / p for p in plots.values()], characters=len(text),
                       verdict=summary["verdict"], summary_json=summary_json, summary=summary,
                       kernel_comparison=kc, model_comparison=mc, projection=proj)


# --- the compare-kernels command -------------------------------------------------------------------------


def compare_kernel_files(base_csv: Path, pr_csv: Path, samples_base: Path | None = None,
                         samples_pr: Path | None = None, semantics: str = "prbench",
                         settings: ReportSettings | None = None, out_dir: Path | None = None) -> list[str]:
    """What ``invoke compare-kernels`` does; returns the lines to print, ``geomean: <value>`` last."""
    from analysis.kernel_compare import read_seed_csv, seed_compare

    settings = settings or ReportSettings()
    if semantics == "seed":
        result = seed_compare(read_seed_csv(base_csv), read_seed_csv(pr_csv))
        lines = [f"seed semantics (kernel_perf_simple.py): {result.n_ref} ref and {result.n_opt} opt pointwise rows "
                 f"after filters, {len(result.merged)} merged rows"]
        if samples_base or samples_pr:
            lines.append("note: --samples-* are ignored with --semantics seed (the seed compares single numbers)")
        if out_dir is not None:
            target = Path(out_dir) / "seed_compare.csv"
            _write_csv(result.merged, target)
            lines.append(f"Saved output to {target}")
        return [*lines, f"geomean: {result.geomean!r}"]
    if semantics != "prbench":
        raise UserError(f"--semantics {semantics!r}: expected 'prbench' or 'seed'")
    inputs = ReportInputs(base_kernels=read_kernels_csv(base_csv), pr_kernels=read_kernels_csv(pr_csv),
                          base_kernel_samples=read_round_samples(samples_base) if samples_base else {},
                          pr_kernel_samples=read_round_samples(samples_pr) if samples_pr else {},
                          settings=settings, title="prbench: kernel comparison")
    if out_dir is not None:
        paths = render_report(inputs, Path(out_dir))
        kc = paths.kernel_comparison
        extra = [f"report: {paths.report_md} ({paths.characters} characters); all pairs in {paths.kernels_csv}"]
    else:
        kc = compare_kernels(inputs.base_kernels, inputs.pr_kernels, inputs.base_kernel_samples,
                             inputs.pr_kernel_samples, settings.stats)
        extra = []
    assert kc is not None
    return [*kernel_summary_lines(kc), *extra, f"geomean: {kc.summary.geomean.speedup!r}"]


def kernel_summary_lines(kc: KernelComparison) -> list[str]:
    s, p = kc.summary, kc.pairing
    by = ", ".join(f"{k} {v}" for k, v in p.by_method.items())
    return [
        f"paired {p.paired} kernels ({by}); only in base {p.only_base}, only in PR {p.only_pr}",
        ", ".join(f"{v} {n}" for v, n in s.verdicts.items()) + f", failed {s.n_failed}",
        f"kernels {s.verdict}: geomean speedup {fmt_x(s.geomean.speedup)} "
        f"(CI {_ci_text(s.geomean.ci_low, s.geomean.ci_high)}: {s.method})",
        f"time-weighted speedup Σbase/Σpr {fmt_x(s.time_weighted.speedup)} "
        f"(CI {_ci_text(s.time_weighted.ci_low, s.time_weighted.ci_high)}; weighted by {s.weighted_by})",
        *(f"control ({c.kind}): " + (f"{c.flagged} of {c.n} flagged, geomean {fmt_x(c.summary.speedup)}, "
                                     f"CI {_ci_text(c.summary.ci_low, c.summary.ci_high)}, "
                                     + ("passed" if c.passed(kc.settings) else "FAILED")
                                     if c.available else f"not available ({c.reason})") for c in kc.controls),
        *(f"note: {n}" for n in kc.notes),
    ]
