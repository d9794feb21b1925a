"""A/A noise check: compare the installed torch with itself, so every change the comparison reports is false.

It reads what the comparison itself concluded (``report/summary.json`` of each run: per side the geomean, its
interval and the per-item verdicts; the run's own noise control; the one-line verdict) and checks, per run and
over repeats, for kernels and for models: does the interval contain 1.0, what share of the items is flagged
improved/regressed (false positives), what share is called equivalent, does the verdict line claim "faster" or
"slower", did the run's control pass. ``--positive-control`` also compares the quick start's example patch (short
reductions kept scalar: clearly slower kernels on every CPU) after each A/A: its kernel verdict must be "regressed"
every time.
``--max-flagged-share`` turns it into a gate (exit 1).

Inputs, either:
  python benchmarks/aa_noise.py --measure [--repeat N] [--rounds R] [--passes P] [--load] [--positive-control]
      [--models A,B] [--size tiny|small|full] [--mode inference|training] [--dtype D] [--recipe cpu-local]
      [--env KEY=VALUE ...] [--inductor-config KEY=VALUE ...]
                                               # runs `invoke compare --base=installed --pr=installed` now
  python benchmarks/aa_noise.py --run RUN_ID [--run RUN_ID ...] [--positive-run RUN_ID ...] [--runs-dir runs]
  python benchmarks/aa_noise.py --base-csv A/kernels.csv --pr-csv B/kernels.csv \
      [--samples-base A/kernel_samples.json --samples-pr B/kernel_samples.json]
(the CSV mode writes no run: it applies the report's analysis to the two kernel tables).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import re
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from background_load import BackgroundLoad

from analysis.report.sequential import check_rounds_flags
from analysis.stats.verdict_settings import FLAG_HELP, VERDICTS, VerdictSettings
from foundation import atomic_io
from foundation.errors import UserError
from foundation.flag_values import whole_number
from foundation.formats.suite_options import DTYPES, MODES, SIZES
from foundation.formats.suite_request import SuiteRequest
from prbench.commands.cli import OneLineParser
from prbench.inductor_options import check_inductor_config
from prbench.sides.variants import parse_assignments, parse_config_values

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_PATCH = ROOT / "examples" / "cpu-scalar-short-reductions.patch"  # changes code on every CPU
DEFAULT_MODELS = "BertForMaskedLM,GPT2ForSequenceClassification,T5Small,DistilBertForMaskedLM"
SIDES = ("kernels", "models")
CHANGE_WORDS = re.compile(r"\b(faster|slower)\b", re.IGNORECASE)
LOAD_MAX_SECONDS = 6 * 3600  # the load's own bound; the `with` block ends it long before


# --- one run's summary.json -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SideResult:
    """One side (kernels or models) of one comparison, as its report concluded."""

    verdict: str
    geomean: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    improved: int
    regressed: int
    equivalent: int
    inconclusive: int
    control_kind: str | None = None
    control_passed: bool | None = None
    control_false_positive_share: float | None = None
    # No kernel changed: the offset between the two sides' processes that the identical kernels measured (and
    # the comparison subtracts), shown beside the A/A's own interval (geomean, low, high)
    offset: tuple[float | None, float | None, float | None] | None = None
    rounds: int | None = None  # the rounds this kind ran (adaptive rounds stop when the verdicts settle)

    @property
    def ci_contains_one(self) -> bool | None:
        """None when the report has no interval (too few items or rounds)."""
        if self.ci_low is None or self.ci_high is None:
            return None
        return self.ci_low <= 1.0 <= self.ci_high

    @property
    def flagged_share(self) -> float:
        return (self.improved + self.regressed) / self.n if self.n else 0.0

    @property
    def equivalent_share(self) -> float:
        return self.equivalent / self.n if self.n else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ci_contains_one": self.ci_contains_one, "flagged_share": self.flagged_share,
                "equivalent_share": self.equivalent_share}


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    verdict_line: str
    kernels: SideResult | None
    models: SideResult | None
    control_passed: bool | None
    resolution_pct: float | None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def says_change(self) -> bool:
        return bool(CHANGE_WORDS.search(self.verdict_line))

    def side(self, name: str) -> SideResult | None:
        return self.kernels if name == "kernels" else self.models

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "verdict_line": self.verdict_line, "says_change": self.says_change,
                **{s: (r.to_json() if (r := self.side(s)) else None) for s in SIDES},
                "control_passed": self.control_passed, "resolution_pct": self.resolution_pct,
                "settings": self.settings}


def _number(block: dict[str, Any], key: str) -> float | None:
    value = block.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key}: expected a number, got {value!r}")
    return float(value) if math.isfinite(value) else None


def _count(block: dict[str, Any], key: str) -> int:
    value = block.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key}: expected a count, got {value!r}")
    return value


def _side(data: dict[str, Any], name: str) -> SideResult | None:
    block = data.get(name)
    if block is None:
        return None
    control = ((data.get("control") or {}).get(name)) or {}
    # A control that could not run (a split-half needs four rounds) says passed: nothing failed, nothing shown.
    passed = control.get("passed") if control.get("available", True) else None
    # With no kernel changed (an A/A is that case) the kernels' evidence is the controls: the split-half (base
    # against base, paired within rounds) for the interval, and each identical pair judged against the others for
    # the flagged share. The identical pairs' own summary is the offset between the sides' processes, which the
    # comparison subtracts: it is shown, not tested against 1.0 (an A/A under load measured 0.991× [0.987, 0.995]
    # between two processes of the same build).
    shown, counts, offset = block, block, None
    if block.get("verdict") == "identical":
        split = next((c for c in [control, *control.get("others", [])] if c.get("kind") == "split-half"), control)
        shown, counts = split, block.get("control_verdicts") or {}
        offset = (_number(control, "geomean"), _number(control, "ci_low"), _number(control, "ci_high"))
    return SideResult(
        verdict=str(block.get("verdict", "")), geomean=_number(shown, "geomean"), ci_low=_number(shown, "ci_low"),
        ci_high=_number(shown, "ci_high"), n=sum(_count(counts, v) for v in VERDICTS) if offset
        else _count(block, "n"), improved=_count(counts, "improved"),
        regressed=_count(counts, "regressed"), equivalent=_count(counts, "equivalent"),
        inconclusive=_count(counts, "inconclusive"), control_kind=control.get("kind"),
        control_passed=None if passed is None else bool(passed),
        control_false_positive_share=_number(control, "false_positive_share"), offset=offset,
        rounds=block.get("rounds") if isinstance(block.get("rounds"), int) else None,
    )


def parse_summary(data: Any, run_id: str) -> RunSummary:
    if not isinstance(data, dict) or not isinstance(data.get("verdict"), str):
        raise ValueError("expected an object with a 'verdict' line")
    control = data.get("control") or {}
    passed = control.get("passed")
    return RunSummary(
        run_id=run_id, verdict_line=" ".join(data["verdict"].split()), kernels=_side(data, "kernels"),
        models=_side(data, "models"), control_passed=None if passed is None else bool(passed),
        resolution_pct=_number(control, "resolution_pct"), settings=data.get("settings") or {},
    )


def summary_path(runs_dir: Path, run_id: str) -> Path:
    return Path(runs_dir) / run_id / "report" / "summary.json"


def read_summary(runs_dir: Path, run_id: str) -> RunSummary:
    path = summary_path(runs_dir, run_id)
    if not path.is_file():
        raise UserError(f"{path}: not found (is '{run_id}' a finished comparison? `invoke report {run_id}`)")
    try:
        return parse_summary(json.loads(path.read_text(encoding="utf-8")), run_id)
    except (ValueError, AttributeError, TypeError) as exc:
        raise UserError(f"{path}: not a report summary ({' '.join(str(exc).split())[:200]})") from None


# --- over repeats -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Repeat:
    number: int
    aa: RunSummary
    positive: RunSummary | None = None

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number, "aa": self.aa.to_json(),
                "positive": self.positive.to_json() if self.positive else None}


@dataclass(frozen=True)
class SideTotals:
    runs: int  # runs with data on this side
    ci_contains_one: int
    no_interval: int
    max_flagged_share: float
    mean_equivalent_share: float
    verdicts: dict[str, int]
    controls_passed: int
    controls_known: int


@dataclass(frozen=True)
class PositiveTotals:
    kernel_verdicts: list[str | None]  # one per repeat; None: that comparison had no kernel data

    @property
    def stable(self) -> bool:
        return bool(self.kernel_verdicts) and all(v == "regressed" for v in self.kernel_verdicts)

    def to_json(self) -> dict[str, Any]:
        return {"kernel_verdicts": self.kernel_verdicts, "stable": self.stable}


@dataclass(frozen=True)
class Totals:
    repeats: int
    sides: dict[str, SideTotals | None]
    says_change: int  # runs whose verdict line says faster/slower
    positive: PositiveTotals | None
    problems: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"repeats": self.repeats, **{s: (asdict(t) if t else None) for s, t in self.sides.items()},
                "verdict_says_change": self.says_change,
                "positive_control": self.positive.to_json() if self.positive else None, "problems": self.problems}


def side_totals(results: list[SideResult]) -> SideTotals | None:
    if not results:
        return None
    verdicts: dict[str, int] = {}
    for r in results:
        verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
    known = [r.control_passed for r in results if r.control_passed is not None]
    return SideTotals(
        runs=len(results), ci_contains_one=sum(r.ci_contains_one is True for r in results),
        no_interval=sum(r.ci_contains_one is None for r in results),
        max_flagged_share=max(r.flagged_share for r in results),
        mean_equivalent_share=sum(r.equivalent_share for r in results) / len(results),
        verdicts=verdicts, controls_passed=sum(known), controls_known=len(known),
    )


def problems_of(repeats: list[Repeat], max_flagged_share: float | None) -> list[str]:
    """Everything that says this machine's verdicts cannot be trusted, one line each."""
    problems = []
    for rep in repeats:
        where = f"repeat {rep.number} ({rep.aa.run_id})"
        for name in SIDES:
            side = rep.aa.side(name)
            if side is None:
                continue
            if side.ci_contains_one is False:
                problems.append(f"{where}: {name} CI {side.ci_low:.4f}-{side.ci_high:.4f} excludes 1.0")
            elif side.ci_contains_one is None:
                problems.append(f"{where}: {name} has no interval")
            if side.verdict in ("improved", "regressed"):
                problems.append(f"{where}: {name} verdict '{side.verdict}' in an A/A comparison")
            if max_flagged_share is not None and side.flagged_share > max_flagged_share:
                problems.append(f"{where}: {name} flagged share {side.flagged_share:.1%} above "
                                f"{max_flagged_share:.1%}")
        if rep.aa.says_change:
            problems.append(f"{where}: verdict line says faster/slower")
    positives = [rep.positive for rep in repeats]
    if any(p is not None for p in positives):
        verdicts = [p.kernels.verdict if p and p.kernels else None for p in positives]
        if not PositiveTotals(verdicts).stable:
            problems.append(f"positive control not stable 'regressed': kernel verdicts {verdicts}")
    return problems


def aggregate(repeats: list[Repeat], max_flagged_share: float | None = None) -> Totals:
    sides = {name: side_totals([r for rep in repeats if (r := rep.aa.side(name)) is not None]) for name in SIDES}
    positive = None
    if any(rep.positive is not None for rep in repeats):
        positive = PositiveTotals([rep.positive.kernels.verdict if rep.positive and rep.positive.kernels else None
                                   for rep in repeats])
    return Totals(repeats=len(repeats), sides=sides, says_change=sum(rep.aa.says_change for rep in repeats),
                  positive=positive, problems=problems_of(repeats, max_flagged_share))


# --- printing ---------------------------------------------------------------------------------------------


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def side_fragment(name: str, side: SideResult | None) -> str:
    if side is None:
        return f"{name} -"
    contains = {True: "1.0 in CI", False: "1.0 NOT in CI", None: "no CI"}[side.ci_contains_one]
    control = {True: "pass", False: "FAIL", None: "-"}[side.control_passed]
    offset = (f", offset between the sides {_x(side.offset[0])} [{_x(side.offset[1])}, {_x(side.offset[2])}] "
              "(subtracted)" if side.offset else "")
    return (f"{name} {side.verdict} {_x(side.geomean)} [{_x(side.ci_low)}, {_x(side.ci_high)}] {contains}, "
            f"flagged {side.flagged_share:.1%}, equivalent {side.equivalent_share:.0%} of {side.n}, control {control}"
            f"{offset}, {side.rounds if side.rounds is not None else '?'} round(s)")


def repeat_line(rep: Repeat) -> str:
    parts = [f"#{rep.number} {rep.aa.run_id}:", " | ".join(side_fragment(s, rep.aa.side(s)) for s in SIDES)]
    if rep.positive is not None:
        k = rep.positive.kernels
        parts.append(f"| positive {rep.positive.run_id}: kernels {k.verdict if k else '-'} "
                     f"{_x(k.geomean if k else None)}")
    parts.append(f"| verdict: {rep.aa.verdict_line.removeprefix('**Verdict:**').strip()}")
    return " ".join(parts)


def summary_block(totals: Totals) -> list[str]:
    lines = [f"A/A over {totals.repeats} run(s):"]
    for name, t in totals.sides.items():
        if t is None:
            lines.append(f"  {name}: no data")
            continue
        verdicts = ", ".join(f"{v or '?'} {n}" for v, n in sorted(t.verdicts.items()))
        no_ci = f" ({t.no_interval} without one)" if t.no_interval else ""
        lines.append(f"  {name}: CI contains 1.0 in {t.ci_contains_one}/{t.runs} runs{no_ci}; max flagged "
                     f"{t.max_flagged_share:.1%}; mean equivalent {t.mean_equivalent_share:.1%}; verdicts "
                     f"{verdicts}; control passed {t.controls_passed}/{t.controls_known}")
    lines.append(f"  verdict lines saying faster/slower: {totals.says_change}/{totals.repeats}")
    if totals.positive is not None:
        shown = ", ".join(v or "-" for v in totals.positive.kernel_verdicts)
        lines.append(f"  positive control kernel verdicts: {shown} -> stable 'regressed': "
                     f"{'yes' if totals.positive.stable else 'NO'}")
    lines += [f"  problem: {p}" for p in totals.problems]
    return lines


# --- measuring --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasurePlan:
    prefix: str
    repeat: int
    rounds: int | None  # fixed rounds; None: adaptive (``auto``, as invoke compare's default) up to the device's
    auto: bool
    passes: int | None
    models: str
    recipe: str
    runs_dir: Path
    stats: VerdictSettings
    load: bool
    positive: bool
    verbose: bool
    size: str = "tiny"  # the suite's model size, mode and dtype, as invoke compare's --size, --mode and --dtype
    dtype: str = "float32"
    mode: str = "inference"
    # As invoke compare's --env (over the recipe's [suite.env]) and --inductor-config: an A/A of the experiment a
    # compare runs (the seed's: pointwise autotuning, cudagraphs off) has to run it with the same settings.
    env: dict[str, str] = field(default_factory=dict)
    inductor_config: dict[str, Any] = field(default_factory=dict)

    def run_id(self, kind: str, number: int) -> str:
        return f"{self.prefix}-{kind}{number}"


def measure(plan: MeasurePlan) -> Iterator[Repeat]:
    """Fresh A/A comparisons (and positive controls), one repeat at a time."""
    from prbench.compare.driver import CompareRequest, run_compare
    from prbench.sides.recipes import load_recipe
    from prbench.stages.suite import device_for

    recipe = load_recipe(plan.recipe, ROOT / "recipes")
    suite = SuiteRequest(models=plan.models, size=plan.size, mode=plan.mode, dtype=plan.dtype,
                         device=device_for(recipe.platform))
    suite.validate()
    log = plan.runs_dir / f"{plan.prefix}.log"

    def compare(pr: str, run_id: str) -> RunSummary:
        request = CompareRequest(base="installed", pr=pr, recipe=recipe, runs_dir=plan.runs_dir, run_id=run_id,
                                 suite=suite, rounds=plan.rounds, auto_rounds=plan.auto, passes=plan.passes,
                                 stats=plan.stats, env={**recipe.suite.env, **plan.env},
                                 inductor_config=plan.inductor_config)
        with pipeline_output(log, plan.verbose) as console, maybe_load(plan.load):
            run_compare(request, console)
        return read_summary(plan.runs_dir, run_id)

    for number in range(1, plan.repeat + 1):
        aa = compare("installed", plan.run_id("aa", number))
        positive = compare(str(EXAMPLE_PATCH), plan.run_id("pc", number)) if plan.positive else None
        yield Repeat(number, aa, positive)


@contextlib.contextmanager
def pipeline_output(log: Path, verbose: bool) -> Iterator[Any]:
    """The pipeline's progress and the stages' output: on the terminal with --verbose, else appended to a log."""
    from rich.console import Console

    if verbose:
        yield Console()
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as handle, contextlib.redirect_stdout(handle):
        yield Console(file=handle, width=120)


def background_load() -> BackgroundLoad:
    """The load ``--load`` runs: the header and the JSON describe this one."""
    return BackgroundLoad(max_seconds=LOAD_MAX_SECONDS, quiet=True)


@contextlib.contextmanager
def maybe_load(enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    with background_load():
        yield


def _check_fields() -> None:
    """Fail in a second, not after a suite, if this checkout's compare has no paired rounds yet."""
    import dataclasses

    from prbench.compare.driver import CompareRequest

    missing = {"rounds", "stats"} - {f.name for f in dataclasses.fields(CompareRequest)}
    if missing:
        raise UserError(f"prbench.compare.driver.CompareRequest has no {', '.join(sorted(missing))} field: this "
                        "checkout's compare predates paired timing rounds")


def _has_avx512() -> bool | None:
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return None
    return "avx512f" in flags


# --- the CSV mode (no run: the report's analysis applied to two kernel tables) -----------------------------


def csv_repeat(args: argparse.Namespace, stats: VerdictSettings) -> Repeat:
    """The summary a report of these two kernel tables would write, as a single repeat."""
    from analysis.kernels.compare import compare_kernels, read_kernels_csv
    from analysis.report.verdict_line import summarize_comparison
    from foundation.formats.paired_rounds import read_round_samples

    comparison = compare_kernels(
        read_kernels_csv(args.base_csv), read_kernels_csv(args.pr_csv),
        read_round_samples(args.samples_base) if args.samples_base else None,
        read_round_samples(args.samples_pr) if args.samples_pr else None, stats)
    pairing = comparison.pairing
    # in an A/A comparison every kernel should pair; leftovers point at non-deterministic code generation
    print(f"A/A from kernel tables: {comparison.summary.n_pairs} pairs, {pairing.only_base} only in base, "
          f"{pairing.only_pr} only in PR")
    for note in comparison.notes:
        print(f"note: {note}")
    return Repeat(1, parse_summary(summarize_comparison(comparison, None, [], stats), f"{args.base_csv.parent.name}"
                                   f"/{args.base_csv.name} vs {args.pr_csv.parent.name}/{args.pr_csv.name}"))


# --- command line -----------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    defaults = VerdictSettings()
    p = OneLineParser(description=__doc__.splitlines()[0])
    src = p.add_argument_group("input (one of)")
    src.add_argument("--measure", action="store_true",
                     help="compare the installed torch with itself now, through `invoke compare`'s pipeline")
    src.add_argument("--run", action="append", default=[], metavar="RUN_ID",
                     help="a finished A/A run to read (repeatable: one repeat each); with --measure, the prefix "
                          "of the new run ids (<prefix>-aa<i>, <prefix>-pc<i>; an existing id is resumed)")
    src.add_argument("--base-csv", type=Path, help="kernels.csv of the first run of the variant (CSV mode)")
    src.add_argument("--pr-csv", type=Path, help="kernels.csv of the second run of the same variant (CSV mode)")
    src.add_argument("--samples-base", type=Path, help="kernel_samples.json of the first run (CSV mode)")
    src.add_argument("--samples-pr", type=Path, help="kernel_samples.json of the second run (CSV mode)")
    m = p.add_argument_group("measuring (--measure)")
    m.add_argument("--repeat", type=int, default=1, help="independent A/A comparisons, a fresh run each (default 1)")
    m.add_argument("--rounds", default=None,
                   help="paired timing rounds per comparison, fresh processes each: auto (adaptive, invoke "
                   "compare's default) or a number")
    m.add_argument("--passes", default=None,
                   help="ABBA blocks per item and round (default: invoke compare's)")
    m.add_argument("--models", default=DEFAULT_MODELS, help=f"suite models (default: {DEFAULT_MODELS})")
    m.add_argument("--size", default=None, help=f"model size: {' or '.join(SIZES)} (default: {SIZES[0]})")
    m.add_argument("--mode", default=None, help=f"suite mode: {' or '.join(MODES)} (default: {MODES[0]})")
    m.add_argument("--dtype", default=None, help=f"model dtype: {', '.join(DTYPES)} (default: {DTYPES[0]})")
    m.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment variable for the stages, as invoke compare's --env (repeatable)")
    m.add_argument("--inductor-config", action="append", default=[], metavar="KEY=VALUE",
                   help="torch._inductor.config override, as invoke compare's --inductor-config (repeatable)")
    m.add_argument("--recipe", default="cpu-local", help="local recipe (default: cpu-local)")
    m.add_argument("--load", action="store_true",
                   help="run every comparison under a varying background CPU load (benchmarks/background_load.py)")
    m.add_argument("--positive-control", action="store_true",
                   help=f"after each A/A, compare {EXAMPLE_PATCH.relative_to(ROOT)} the same way: its kernel "
                        "verdict must be 'regressed' every time")
    m.add_argument("--verbose", action="store_true",
                   help="show the pipeline's output (default: appended to <runs-dir>/<prefix>.log)")
    st = p.add_argument_group("statistics (--measure and the CSV mode; a --run keeps its own)")
    for name in ("confidence", "alpha", "margin", "threshold", "noise"):
        st.add_argument(f"--{name}", type=float, default=getattr(defaults, name), help=FLAG_HELP[name])
    p.add_argument("--positive-run", action="append", default=[], metavar="RUN_ID",
                   help="with --run: a finished positive-control run, in the order of the --run ids (repeatable)")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="directory that holds runs (default: runs)")
    p.add_argument("--max-flagged-share", type=float, default=None,
                   help="gate: exit 1 when a run flags more than this share of items, an interval misses 1.0, a "
                        "verdict line says faster/slower or the positive control is not stably 'regressed'")
    p.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    return p


def check_args(args: argparse.Namespace) -> None:
    csv = bool(args.base_csv or args.pr_csv)
    if sum((args.measure, bool(args.run) and not args.measure, csv)) != 1:
        raise UserError("give exactly one input: --measure, --run RUN_ID, or --base-csv with --pr-csv")
    if csv and not (args.base_csv and args.pr_csv):
        raise UserError("--base-csv and --pr-csv go together")
    if not args.measure:
        used = [flag for flag, on in (("--repeat", args.repeat != 1), ("--rounds", args.rounds is not None),
                                      ("--passes", args.passes is not None),
                                      ("--size", args.size is not None), ("--mode", args.mode is not None),
                                      ("--dtype", args.dtype is not None), ("--env", bool(args.env)),
                                      ("--inductor-config", bool(args.inductor_config)),
                                      ("--load", args.load), ("--positive-control", args.positive_control)) if on]
        if used:
            raise UserError(f"{used[0]}: only with --measure")
    if args.measure and len(args.run) > 1:
        raise UserError("--run: with --measure, give one prefix for the new run ids")
    if args.positive_run and (args.measure or len(args.positive_run) != len(args.run)):
        raise UserError("--positive-run: with --run only, one per --run id")
    if args.repeat < 1:
        raise UserError(f"--repeat {args.repeat}: expected at least 1")
    if args.max_flagged_share is not None and not 0 <= args.max_flagged_share <= 1:
        raise UserError(f"--max-flagged-share {args.max_flagged_share}: expected a share between 0 and 1")


def stats_from(args: argparse.Namespace) -> VerdictSettings:
    return VerdictSettings(confidence=args.confidence, alpha=args.alpha, margin=args.margin,
                           threshold=args.threshold, noise=args.noise).validate()


def plan_from(args: argparse.Namespace) -> MeasurePlan:
    stats = stats_from(args)
    prefix = args.run[0] if args.run else f"aa-{dt.datetime.now():%Y%m%d-%H%M%S}"
    rounds = check_rounds_flags(args.rounds, None, None)
    passes = None if args.passes is None else whole_number("--passes", args.passes, minimum=1)
    size, mode, dtype = args.size or SIZES[0], args.mode or MODES[0], args.dtype or DTYPES[0]
    SuiteRequest(models=args.models, size=size, mode=mode, dtype=dtype).validate()  # at the door, not after a suite
    env = parse_assignments(args.env, "--env")
    inductor_config = parse_config_values(parse_assignments(args.inductor_config, "--inductor-config"))
    check_inductor_config(inductor_config, "--inductor-config")
    return MeasurePlan(prefix=prefix, repeat=args.repeat, rounds=rounds.rounds, auto=rounds.auto,
                       passes=passes, models=args.models,
                       recipe=args.recipe, runs_dir=args.runs_dir, stats=stats, load=args.load,
                       positive=args.positive_control, verbose=args.verbose, size=size, dtype=dtype, mode=mode,
                       env=env, inductor_config=inductor_config)


def header(plan: MeasurePlan) -> str:
    load = f"background load ({background_load().settings.describe()})" if plan.load else "no background load"
    positive = f", positive control {EXAMPLE_PATCH.name}" if plan.positive else ""
    timing = f"{'adaptive' if plan.auto else plan.rounds} rounds, {plan.passes or 'default'} passes"
    settings = "".join(f", {key}={value}" for key, value in {**plan.env, **plan.inductor_config}.items())
    return (f"A/A: {plan.repeat} x installed vs installed, {timing}, models {plan.models} ({plan.size}, "
            f"{plan.mode}, {plan.dtype}{settings}), recipe "
            f"{plan.recipe}, {load}{positive}; runs {plan.runs_dir}/{plan.prefix}-*, pipeline output "
            f"{'shown' if plan.verbose else plan.runs_dir / (plan.prefix + '.log')}")


def collect(args: argparse.Namespace) -> tuple[list[Repeat], dict[str, Any]]:
    """Measure now, read the runs named, or compare two kernel tables; a repeat's line is printed when it is known.

    Returns the repeats and a description of where they came from (for --json)."""
    if args.base_csv:
        stats = stats_from(args)
        source: Iterator[Repeat] | list[Repeat] = [csv_repeat(args, stats)]
        origin: dict[str, Any] = {"mode": "csv", "base_csv": str(args.base_csv), "pr_csv": str(args.pr_csv),
                                  "stats": asdict(stats)}
    elif args.measure:
        plan = plan_from(args)
        origin = {"mode": "measure", **asdict(plan), "runs_dir": str(plan.runs_dir),
                  "load": background_load().settings.describe() if plan.load else None}
        _check_fields()
        print(header(plan), flush=True)
        if plan.positive and _has_avx512() is False:
            print("note: this CPU has no AVX-512, so the example patch changes no kernel and cannot regress")
        source = measure(plan)
    else:
        positives = args.positive_run or [None] * len(args.run)
        source = [Repeat(i, read_summary(args.runs_dir, run), read_summary(args.runs_dir, pc) if pc else None)
                  for i, (run, pc) in enumerate(zip(args.run, positives, strict=True), start=1)]
        origin = {"mode": "run", "runs_dir": str(args.runs_dir)}
    repeats: list[Repeat] = []
    try:
        for rep in source:
            print(repeat_line(rep), flush=True)
            repeats.append(rep)
    except UserError as exc:
        if not repeats:
            raise
        origin["stopped"] = f"after {len(repeats)} repeat(s): {exc}"  # the finished repeats still count
        print(f"error: {exc}", file=sys.stderr)
    return repeats, origin


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_args(args)
        repeats, origin = collect(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    totals = aggregate(repeats, args.max_flagged_share)
    print("\n".join(summary_block(totals)))
    gated = args.max_flagged_share is not None
    if args.json:
        atomic_io.write_json(args.json, {"input": origin, "repeats": [r.to_json() for r in repeats],
                                         "totals": totals.to_json(),
                                         "gate": {"max_flagged_share": args.max_flagged_share,
                                                  "passed": not totals.problems}})
    if gated:
        print(f"A/A gate {'passed' if not totals.problems else f'FAILED ({len(totals.problems)} problem(s))'}")
    if origin.get("stopped"):
        print(f"stopped {origin['stopped']}")
        return 2
    return 1 if gated and totals.problems else 0


if __name__ == "__main__":
    sys.exit(main())
