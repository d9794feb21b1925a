"""What a comparison report is made from (`ReportInputs`), and reading it from a run directory.

`load_report_inputs` reads ``base/`` and ``pr/`` as laid out in docs/architecture.md, ``lock.json`` and the
manifest's settings, so a report can be re-rendered without re-running anything. A file only one side has is a
`UserError`: the two sides could not be compared. Whether the sides build C++ kernels alike is read from each
side's record in its Inductor cache (`analysis.kernels.cpp_build`): identical C++ source built otherwise is
changed code, not the control (`analysis.kernels.compare`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.kernels.compare import read_kernels_csv
from analysis.kernels.cpp_build import cpp_build_difference
from analysis.models.compare import read_suite_frame
from analysis.report.sections.experiment import Experiment, recorded_experiment
from analysis.report.sequential import RoundsUsed, read_rounds_used
from analysis.stats.verdict_settings import VerdictSettings
from foundation.errors import UserError
from foundation.formats.dynamo_csv import read_suite_samples
from foundation.formats.launch_cost import LaunchCost, read_launch_cost
from foundation.formats.paired_rounds import (
    PairedBlocks,
    RoundSamples,
    models_timed,
    read_paired_blocks,
    read_round_samples,
    read_rounds,
    side_compiles,
)
from foundation.formats.run_layout import SIDES, TRACE_DIFF_MD, RunLayout, VariantLayout
from foundation.records import open_regular, read_bytes, read_json, reading

MAX_TRACE_DIFF_BYTES = 64 << 20  # trace_diff.md as trace-diff writes it: its tables are cut to --top rows


@dataclass(frozen=True)
class ReportSettings:
    warmup: int | None = None  # None: taken from suite.csv when it has the column
    iterations: int | None = None
    rounds: int | None = None  # paired timing rounds (None: not recorded)
    passes: int | None = None  # ABBA blocks per item and round (None: not recorded)
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
    rounds_used: list[RoundsUsed] = field(default_factory=list)  # per kind: the rounds it ran and why no more
    base_model_rounds: RoundSamples = field(default_factory=dict)  # suite/paired_samples.json
    pr_model_rounds: RoundSamples = field(default_factory=dict)
    kernel_blocks: PairedBlocks | None = None  # pair/kernels/round-*.json, visit by visit
    model_blocks: PairedBlocks | None = None  # pair/models/round-*.json
    base_env: dict[str, Any] = field(default_factory=dict)
    pr_env: dict[str, Any] = field(default_factory=dict)
    lock: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)  # the run's manifest.json (the environment line's facts)
    settings: ReportSettings = field(default_factory=ReportSettings)
    trace_diff_md: str | None = None
    title: str = "prbench: performance of this PR"
    base_organized: Path | None = None  # <side>/organized: the kernel sources the diffs are made from
    pr_organized: Path | None = None
    base_launch_cost: LaunchCost | None = None  # <side>/launch_cost.json
    pr_launch_cost: LaunchCost | None = None
    base_compiles: dict[str, list[float]] = field(default_factory=dict)  # model → first-call s of each round
    pr_compiles: dict[str, list[float]] = field(default_factory=dict)
    kernels_asked: tuple[str, ...] = ()  # kernels whose code diff the user asked for (`invoke report --kernel`)
    suite_dirs: tuple[Path, Path] | None = None  # base and PR <side>/suite: their outputs/ (`analysis.models.numerics`)
    kernel_output_dirs: tuple[Path, Path] | None = None  # base and PR <side>/kernel_outputs (`kernel_numerics`)
    # What each side measured, from the manifest's suite request and its env.json (None: not recorded)
    experiments: tuple[Experiment, Experiment] | None = None
    # Why the sides build C++ kernels otherwise (`cpp_build_difference`); None: alike, or not read (no run directory)
    cpp_build: str | None = None
    # False: the run timed no model round (a bisect of a kernel's step; its manifest's settings.timed): the report
    # says so instead of judging the models from the suite's one-off timings
    models_timed: bool = True

    def stats_for(self, kind: str) -> VerdictSettings:
        """The level a kind's verdicts are stated at: its rounds record's (the strict level after an early stop,
        `analysis.report.sequential`), else the run's."""
        stats = self.settings.stats.validate()
        used = next((u for u in self.rounds_used if u.kind == kind), None)
        return used.stated(stats) if used is not None else stats



def _pair_of(run_dir: Path, file: Callable[[VariantLayout], Path]) -> tuple[Path, Path] | None:
    """Both variants' copies of a file; None when neither has it; a UserError when only one does."""
    base, pr = (file(RunLayout(run_dir).variant(side)) for side in SIDES)
    if base.exists() != pr.exists():
        missing = pr if base.exists() else base
        raise UserError(f"{missing}: file not found (the other variant has it, so the two cannot be compared)")
    return (base, pr) if base.exists() else None


def _json_dict(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data = read_json(path, "a JSON object")
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def _manifest_settings(run_dir: Path) -> ReportSettings:
    settings = _json_dict(RunLayout(run_dir).manifest).get("settings", {}) or {}
    suite = settings.get("suite", {}) if isinstance(settings.get("suite"), dict) else {}

    def pick(key: str, *sources: dict[str, Any]) -> Any:
        return next((s[key] for s in sources if s.get(key) is not None), None)

    stats = settings.get("stats", {}) if isinstance(settings.get("stats"), dict) else {}
    known = set(VerdictSettings.__dataclass_fields__)
    try:
        verdict_settings = VerdictSettings(**{k: v for k, v in stats.items() if k in known}).validate()
    except (TypeError, UserError) as exc:
        raise UserError(f"{run_dir / 'manifest.json'}: settings.stats: {exc}") from None
    return ReportSettings(warmup=pick("warmup", settings, suite), iterations=pick("iterations", settings, suite),
                          rounds=pick("rounds", settings), passes=pick("passes", settings), stats=verdict_settings)


def _blocks(run_dir: Path, kind: str, inputs: ReportInputs) -> PairedBlocks | None:
    """A kind's paired blocks over the rounds it ran (its rounds.json; else the run's --rounds) and, for the
    method section, how many ran and why."""
    directory = RunLayout(run_dir).paired_kind(kind)
    used = read_rounds_used(directory)
    if used is not None:
        inputs.rounds_used.append(used)
    return read_paired_blocks(directory, used.rounds if used is not None else inputs.settings.rounds)


def load_report_inputs(run_dir: Path, settings: ReportSettings | None = None) -> ReportInputs:
    """Read ``<run>/base`` and ``<run>/pr`` (kernels, samples, suite, env) and ``lock.json``; the settings are
    the caller's (a comparison passes its own down) or, for a re-render, the ones the manifest recorded."""
    run_dir = Path(run_dir)
    layout = RunLayout(run_dir)
    for side in SIDES:
        if not layout.variant(side).root.is_dir():
            raise UserError(f"{layout.variant(side).root}: no such directory (a comparison run has base/ and pr/)")
    inputs = ReportInputs(settings=settings or _manifest_settings(run_dir), lock=_json_dict(layout.lock),
                          manifest=_json_dict(layout.manifest),
                          base_env=_json_dict(layout.variant("base").env_json),
                          pr_env=_json_dict(layout.variant("pr").env_json))
    inputs.models_timed = models_timed(inputs.manifest.get("settings"))
    kernels = _pair_of(run_dir, lambda v: v.kernels_csv)
    if kernels:
        inputs.base_kernels, inputs.pr_kernels = (read_kernels_csv(p) for p in kernels)
        inputs.cpp_build = cpp_build_difference(layout.variant("base").inductor_cache,
                                                layout.variant("pr").inductor_cache)
        samples = _pair_of(run_dir, lambda v: v.kernel_samples)
        if samples:
            inputs.base_kernel_samples, inputs.pr_kernel_samples = (read_round_samples(p) for p in samples)
            inputs.kernel_blocks = _blocks(run_dir, "kernels", inputs)
    suite = _pair_of(run_dir, lambda v: v.suite_csv)
    if suite:
        inputs.base_suite, inputs.pr_suite = (read_suite_frame(p) for p in suite)
        inputs.suite_dirs = (suite[0].parent, suite[1].parent)
        samples = _pair_of(run_dir, lambda v: v.suite_samples)
        if samples:
            inputs.base_suite_samples, inputs.pr_suite_samples = (read_suite_samples(p) for p in samples)
        # Untimed models: a paired_samples.json there (a bisect step's base side, taken from a step that timed them)
        # is not this run's result.
        paired = _pair_of(run_dir, lambda v: v.paired_samples) if inputs.models_timed else None
        if paired:
            inputs.base_model_rounds, inputs.pr_model_rounds = (read_round_samples(p) for p in paired)
            inputs.model_blocks = _blocks(run_dir, "models", inputs)
    if not kernels and not suite:
        raise UserError(f"{run_dir}: nothing to compare (no kernels.csv or suite/suite.csv under base/ and pr/)")
    _add_provenance(run_dir, inputs)
    inputs.experiments = _experiments(layout, inputs)
    trace = layout.report / TRACE_DIFF_MD
    if trace.exists():
        with reading(trace, "the trace diff (Markdown)"):
            inputs.trace_diff_md = read_bytes(trace, "the trace diff (Markdown)", MAX_TRACE_DIFF_BYTES).decode("utf-8")
    return inputs



def _experiments(layout: RunLayout, inputs: ReportInputs) -> tuple[Experiment, Experiment] | None:
    """Both sides' experiments as the run recorded them (the manifest's settings, each side's env.json)."""
    settings = _json_dict(layout.manifest).get("settings")
    if not isinstance(settings, dict):
        return None
    base, pr = (recorded_experiment(settings, env) for env in (inputs.base_env, inputs.pr_env))
    return (base, pr) if base is not None and pr is not None else None


def _add_provenance(run_dir: Path, inputs: ReportInputs) -> None:
    """What explains the numbers: the kernel sources, each side's launch cost and the rounds' repeated compiles."""
    layout = RunLayout(run_dir)
    organized = [layout.variant(side).organized for side in SIDES]
    if all(d.is_dir() for d in organized):
        inputs.base_organized, inputs.pr_organized = organized
        inputs.kernel_output_dirs = (layout.variant("base").kernel_outputs, layout.variant("pr").kernel_outputs)
    inputs.base_launch_cost = read_launch_cost(layout.variant("base").launch_cost)
    inputs.pr_launch_cost = read_launch_cost(layout.variant("pr").launch_cost)
    rounds = sorted(layout.paired_kind("models").glob("round-*.json"))
    if rounds:
        records = read_rounds(rounds)
        inputs.base_compiles, inputs.pr_compiles = (side_compiles(records, side) for side in ("base", "pr"))


def check_kernels_asked(run_dir: Path, names: tuple[str, ...]) -> None:
    """Every kernel asked for (`--kernel`) is named in ``base/`` or ``pr/kernels.csv`` of the run. A table that
    cannot be read is left to the report's own reading, which says what is wrong with it."""
    if not names:
        return
    known: set[str] = set()
    for side in SIDES:
        path = RunLayout(Path(run_dir)).variant(side).kernels_csv
        try:
            with io.TextIOWrapper(open_regular(path, "a kernels.csv"), newline="", encoding="utf-8") as handle:
                known.update(row.get("kernel_name") or "" for row in csv.DictReader(handle))
        except (OSError, UnicodeDecodeError, csv.Error, UserError):
            return
    for name in names:
        if name not in known:
            raise UserError(f"--kernel {name}: no kernel of this name in the run (see kernels_compare.csv for the "
                            "names)")
