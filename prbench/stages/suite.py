"""Host side of the ``suite`` stage: validate the settings, run it for one variant (``prbench.stages.command_lines``
builds its command).

``invoke suite`` = one ``base`` variant (recipe + optional Python overlay + env / Inductor config) in a run
directory; the stage runs through the pipeline (skipped when done with the same inputs, resumable when
interrupted), then a summary table is printed from ``<variant>/suite/suite.csv``.

The suite has two sources with the same outputs: ``builtin`` (``stages.suite``, our HF models) and
``upstream`` (``stages.upstream_suite``: PyTorch's own ``benchmarks/dynamo`` harness, run from a PyTorch
source tree inside the environment).
"""

from __future__ import annotations

import math
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from foundation.errors import UserError
from foundation.formats.dynamo_csv import STATUS_OK, Row, read_suite_csv
from foundation.formats.run_layout import RunLayout, VariantLayout
from foundation.formats.suite_request import HF_SCRIPT, SuiteRequest
from prbench.runners import StageCommand
from prbench.sides.variants import Variant
from prbench.stages.command_lines import suite_source_command

STAGE = "suite"


def device_for(platform: str) -> str:
    """ROCm builds of torch expose their GPUs as ``cuda`` too."""
    return "cpu" if platform == "cpu" else "cuda"


def suite_outputs(variant_dir: Path) -> list[Path]:
    files = VariantLayout(variant_dir)
    return [files.suite_csv, files.suite_samples, files.graph_models, files.cache_archive]


def upstream_tree(settings: SuiteRequest, recipe: Any, upstream_src: Path | None) -> Path | None:
    """The PyTorch source tree the upstream harness runs from, as the environment sees it (None: builtin).

    Docker images hold the tree at ``PYTORCH_SRC_IN_IMAGE`` (it cannot be checked from the host); a local
    recipe needs a tree on this machine.
    """
    if settings.source != "upstream":
        if upstream_src is not None:
            raise UserError("--upstream-src: only used with --suite-source upstream")
        return None
    if recipe.is_docker:
        from prbench.images.build_plan import PYTORCH_SRC_IN_IMAGE

        if recipe.is_wheel and upstream_src is None:
            raise UserError(f"--upstream-src: recipe {recipe.name} installs a torch wheel, whose image holds no "
                            "PyTorch source tree; give the path of one inside the image, or use the builtin suite")
        tree = upstream_src or Path(PYTORCH_SRC_IN_IMAGE)
        if not tree.is_absolute():
            raise UserError(f"--upstream-src {tree}: a docker recipe needs the absolute path inside the image")
        return tree
    if upstream_src is None:
        raise UserError(f"--upstream-src: required with --suite-source upstream and the local recipe "
                        f"{recipe.name} (a PyTorch source tree with {HF_SCRIPT})")
    tree = upstream_src.resolve()
    if not (tree / HF_SCRIPT).is_file():
        raise UserError(f"--upstream-src {upstream_src}: no {HF_SCRIPT} there (a PyTorch source tree is needed)")
    return tree


def stage_inputs(settings: SuiteRequest, upstream_src: Path | None) -> dict[str, Any]:
    """The suite stage's inputs: its settings, and the harness's tree when the source is upstream."""
    inputs = settings.inputs()
    if upstream_src is not None:
        inputs["upstream_src"] = str(upstream_src)
    return inputs


def clear_outputs(variant_dir: Path) -> None:
    """For ``--force``: the stage resumes from suite.csv, so redoing it means removing what it wrote."""
    files = VariantLayout(variant_dir)
    shutil.rmtree(files.suite, ignore_errors=True)
    files.cache_archive.unlink(missing_ok=True)


def summarize(variant_dir: Path) -> dict[str, Any]:
    """What the manifest records about a finished suite: counts and the geomean speedup of ok models."""
    rows = read_suite_csv(VariantLayout(variant_dir).suite_csv)
    ok = [r for r in rows if r["status"] == STATUS_OK]
    speedups = [float(r["speedup"]) for r in ok if float(r["speedup"]) > 0]
    summary: dict[str, Any] = {"models": len(rows), "ok": len(ok), "failed": len(rows) - len(ok)}
    if speedups:
        summary["geomean_speedup"] = round(math.exp(sum(map(math.log, speedups)) / len(speedups)), 3)
    return summary


def kept_models(variant_dir: Path, settings: SuiteRequest) -> str:
    """What a resumed suite keeps from its stopped attempt, in the user's words: the models it finished (an ``ok``
    row; the stage redoes the rest), e.g. ``38 of 54 models kept from the stopped run`` ("" when none)."""
    if settings.source != "builtin":
        return ""  # the upstream harness names its models itself ("all")
    wanted = settings.validate()
    finished = {r["name"] for r in read_suite_csv(VariantLayout(variant_dir).suite_csv) if r["status"] == STATUS_OK}
    kept = sum(1 for name in wanted if name in finished)
    return f"{kept} of {len(wanted)} models kept from the stopped run" if kept else ""


@dataclass
class SuiteOutcome:
    run_root: Path
    variant_dir: Path
    skipped: bool


def run_suite_stage(
    *,
    settings: SuiteRequest,
    recipe: Any,
    runs_dir: Path,
    run_id: str | None,
    overlay_path: Path | None = None,
    env: dict[str, str] | None = None,
    inductor_config: dict[str, Any] | None = None,
    force: bool = False,
    console: Console | None = None,
    python: str | None = None,
    upstream_src: Path | None = None,
) -> SuiteOutcome:
    """Create or open the run, prepare the ``base`` variant and run the suite stage (resumable)."""
    from prbench import __version__
    from prbench.runners.local import LocalRunner
    from prbench.runs.pipeline import Pipeline, StageSpec
    from prbench.runs.run_store import RunStore
    from prbench.sides.overlay import PythonOverlay

    console = console or Console()
    settings.validate()  # before anything is written: a bad flag leaves no run directory behind
    if recipe.is_docker:
        raise UserError(f"--recipe {recipe.name}: the suite task runs local recipes; "
                        "docker recipes run through the build/compare pipeline")
    tree = upstream_tree(settings, recipe, upstream_src)
    overlay = PythonOverlay.from_patch_file(overlay_path) if overlay_path else None
    variant = Variant(name="base", recipe=recipe, overlay_sha256=overlay.sha256 if overlay else None,
                      env=dict(env or {}), inductor_config=dict(inductor_config or {}))
    inputs = stage_inputs(settings, tree)
    with RunStore(runs_dir).create_or_open(run_id, settings={"suite": inputs, "recipe": recipe.name},
                                           version=__version__) as run:
        pipeline = Pipeline(run, LocalRunner(), console=console, force={STAGE} if force else ())
        prepared = pipeline.prepare(variant, overlay, python or sys.executable)
        directory = prepared.directory
        ran = {"value": False}

        def command() -> StageCommand:
            ran["value"] = True
            return suite_source_command(directory, settings, tree)

        spec = StageSpec(name=STAGE, inputs=inputs, outputs=suite_outputs(directory), command=command,
                         summarize=lambda: summarize(directory), reset=lambda: clear_outputs(directory),
                         kept=lambda: kept_models(directory, settings))
        pipeline.run_stage(prepared, spec)
    return SuiteOutcome(run_root=run.root, variant_dir=directory, skipped=not ran["value"])


def _cell(text: str, spec: str) -> str:
    """A number cell, blank where the suite has none (the upstream harness keeps no eager median)."""
    return spec.format(float(text)) if text else ""


def summary_table(rows: list[Row], title: str) -> Table:
    table = Table(title=title)
    for column, justify in (("model", "left"), ("status", "left"), ("eager ms", "right"),
                            ("compiled ms", "right"), ("speedup", "right"), ("compile s", "right"),
                            ("peak GB e/c", "right"), ("flags / error", "left")):
        table.add_column(column, justify=justify, no_wrap=column == "model")  # type: ignore[arg-type]
    for row in rows:
        if row["status"] == STATUS_OK:
            table.add_row(row["name"], "[green]ok[/]", _cell(row["eager_median_ms"], "{:.3f}"),
                          _cell(row["compiled_median_ms"] or row["abs_latency"], "{:.3f}"),
                          f"{float(row['speedup']):.2f}x",
                          f"{float(row['compilation_latency']):.1f}",
                          f"{float(row['eager_peak_mem']):.4f}/{float(row['dynamo_peak_mem']):.4f}",
                          row["flags"])
        else:
            table.add_row(row["name"], "[red]fail[/]", "", "", "", "", "", row["error"])
    return table


def print_suite_summary(outcome: SuiteOutcome, console: Console) -> None:
    files = VariantLayout(outcome.variant_dir)
    csv_path = files.suite_csv
    rows = read_suite_csv(csv_path)
    summary = summarize(outcome.variant_dir)
    title = f"suite: {summary['ok']} ok, {summary['failed']} failed"
    if "geomean_speedup" in summary:
        title += f", geomean speedup {summary['geomean_speedup']:.2f}x"
    if not console.is_terminal:
        console.width = max(console.width, 150)  # logs and CI: a full-width table rather than 80 columns
    console.print(summary_table(rows, title))
    if outcome.skipped:
        console.print("[dim]suite was already done with the same inputs (use --force to redo it)[/]")
    for label, path in (("suite.csv", csv_path), ("samples", files.suite_samples),
                        ("inductor cache", files.cache_archive), ("stage log", files.log(STAGE)),
                        ("manifest", RunLayout(outcome.run_root).manifest)):
        console.print(f"{label:15} {path}")
