"""One line per step of benchmarks/gpu_check.sh: what a lent GPU machine's step measured, read from its outputs.

A lent machine's call returns only the end of its output and a few files, so each step of the script ends with
one line that holds its numbers, written here from the step's own outputs (never from its log):

    python benchmarks/gpu_check_summary.py compare RUN_DIR      # models, sizes, kernels per side, wall per phase,
                                                               # rounds, verdicts, the numerical A/B
    python benchmarks/gpu_check_summary.py numerics RUN_DIR     # the numerical A/B of the run, per family
    python benchmarks/gpu_check_summary.py round-cost RUN_DIR   # per round kind: wall per round, largest phases
    python benchmarks/gpu_check_summary.py aa AA_JSON           # per family and repeat: geomean, CI, flagged
    python benchmarks/gpu_check_summary.py busy UTIL_CSV RUN_DIR [RUN_DIR ...]   # the kernel stage's GPU busy share
    python benchmarks/gpu_check_summary.py ir IR_DIR            # the Triton IR kept (triton_ir_fixtures.py)

Each prints exactly one line that starts with the step's name, and exits 2 with one ``error:`` line when the
outputs it needs are missing or unreadable (a step that failed before writing them).
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gpu_busy_by_stage  # noqa: E402
import round_cost  # noqa: E402
from triton_ir_fixtures import read_kept_pairs  # noqa: E402

from foundation.errors import UserError  # noqa: E402
from foundation.formats.paired_rounds import ROUND_KINDS  # noqa: E402
from foundation.formats.run_layout import SIDES, RunLayout  # noqa: E402
from foundation.records import read_json  # noqa: E402
from prbench.commands.cli import OneLineParser  # noqa: E402

ROUND_STAGE = "pair/{kind}-round-"  # manifest stage names of the paired rounds: pair/models-round-1, ...
TOP_PHASES = 3  # the largest phases a round-cost line names


def _x(value: Any) -> str:
    return f"{value:.3f}x" if isinstance(value, int | float) and math.isfinite(value) else "-"


def _manifest(run: Path) -> dict[str, Any]:
    data = read_json(RunLayout(run).manifest, "a run's manifest.json")
    if not isinstance(data, dict) or not isinstance(data.get("stages"), dict):
        raise UserError(f"{RunLayout(run).manifest}: not a run manifest (no stages)")
    return data


def _summary(run: Path) -> dict[str, Any] | None:
    path = RunLayout(run).report / "summary.json"
    if not path.is_file():
        return None
    data = read_json(path, "a report's summary.json")
    return data if isinstance(data, dict) else None


def stage_seconds(manifest: dict[str, Any]) -> dict[str, float]:
    """Every stage that ran, with its wall seconds."""
    return {name: float(stage["duration_s"]) for name, stage in manifest["stages"].items()
            if isinstance(stage, dict) and isinstance(stage.get("duration_s"), int | float)}


def run_wall_s(manifest: dict[str, Any]) -> float | None:
    """From the first stage's start to the last stage's end (start + duration: a round's ``finished`` is rewritten
    when the last round ends)."""
    spans = gpu_busy_by_stage.manifest_spans(manifest)
    return max(end for _, _, end in spans) - min(start for _, start, _ in spans) if spans else None


def phase_walls(manifest: dict[str, Any]) -> list[str]:
    """The compare's wall time phase by phase: suite per side, organize and launch cost, each kind's rounds,
    profile, report."""
    seconds = stage_seconds(manifest)
    parts = []
    suites = [seconds[f"{side}/suite"] for side in SIDES if f"{side}/suite" in seconds]
    if suites:
        parts.append("suite " + "/".join(f"{s:.0f}" for s in suites) + " s")
    prepare = sum(seconds.get(f"{side}/{stage}", 0.0) for side in SIDES for stage in ("organize", "launch_cost"))
    if prepare:
        parts.append(f"organize+launch cost {prepare:.0f} s")
    for kind in ROUND_KINDS:
        # Only finished rounds: a round cut off by a limit records its time since all rounds were planned.
        rounds = [s for name, s in seconds.items() if name.startswith(ROUND_STAGE.format(kind=kind))
                  and manifest["stages"][name].get("status") == "done"]
        if rounds:
            parts.append(f"{kind} rounds {len(rounds)} x {statistics.median(rounds):.0f} s (sum {sum(rounds):.0f} s)")
    profiles = [seconds[f"{side}/profile"] for side in SIDES if f"{side}/profile" in seconds]
    if profiles:
        parts.append("profile " + "/".join(f"{s:.0f}" for s in profiles) + " s")
    if "report" in seconds:
        parts.append(f"report {seconds['report']:.0f} s")
    wall = run_wall_s(manifest)
    if wall is not None:
        parts.append(f"run {wall:.0f} s")
    return parts


def kernel_counts(run: Path) -> str:
    """Kernels per side, as organize indexed them: all, and how many are Triton kernels."""
    counts = []
    for side in SIDES:
        index = RunLayout(run).variant(side).organized / "index.csv"
        if not index.is_file():
            counts.append(f"{side} -")
            continue
        with index.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        triton = sum(row.get("backend") == "triton" for row in rows)
        counts.append(f"{side} {len(rows)} ({triton} triton)")
    return "kernels " + ", ".join(counts)


def family_text(name: str, block: Any) -> str:
    if not isinstance(block, dict):
        return f"{name} -"
    step = block.get("step") if isinstance(block.get("step"), dict) else None
    lead = (f"step {_x(step.get('speedup'))} (CI {_x(step.get('ci_low'))}-{_x(step.get('ci_high'))}), "
            if step else "")
    return (f"{name} {block.get('verdict', '?')}: {lead}geomean {_x(block.get('geomean'))} "
            f"(CI {_x(block.get('ci_low'))}-{_x(block.get('ci_high'))}), {block.get('rounds', '?')} rounds, "
            f"n {block.get('n', '?')}")


def numerics_text(summary: dict[str, Any] | None) -> str:
    """The numerical A/B: per family compared/passed/failed and the worst failure."""
    numerics = (summary or {}).get("numerics")
    if not isinstance(numerics, dict):
        return "numerics not recorded"
    parts = []
    for family in ("models", "kernels"):
        block = numerics.get(family)
        if not isinstance(block, dict):
            parts.append(f"{family} -")
            continue
        text = f"{family} {block.get('passed', '?')}/{block.get('compared', '?')} passed"
        if family == "kernels" and block.get("identical_code_compared"):
            text += (f" ({block.get('identical_code_bit_identical', '?')}/{block['identical_code_compared']} "
                     "identical-code pairs bit-identical)")
        worst = block.get("worst")
        if isinstance(worst, dict):
            text += (f", worst {worst.get('name', '?')} {worst.get('check', '')} {worst.get('output', '')} "
                     f"max abs {worst.get('max_abs', '?')}").rstrip()
        parts.append(text)
    return "numerics " + "; ".join(parts)


def suite_settings(manifest: dict[str, Any]) -> str:
    suite = (manifest.get("settings") or {}).get("suite") or {}
    return (f"{suite.get('models', '?')} ({suite.get('size', '?')}, {suite.get('mode', '?')}, "
            f"{suite.get('dtype', '?')})")


def compare_line(run: Path) -> str:
    manifest = _manifest(run)
    summary = _summary(run)
    failed = [name for name, stage in manifest["stages"].items()
              if isinstance(stage, dict) and stage.get("status") not in ("done", None)]
    parts = [f"compare {run.name}: {suite_settings(manifest)}", kernel_counts(run),
             "wall " + ", ".join(phase_walls(manifest))]
    if summary is None:
        parts.append("no report")
    else:
        parts += [family_text("kernels", summary.get("kernels")), family_text("models", summary.get("models")),
                  numerics_text(summary)]
    if failed:
        parts.append("not done: " + ", ".join(failed))
    return "; ".join(parts)


def numerics_line(run: Path) -> str:
    manifest = _manifest(run)
    summary = _summary(run)
    if summary is None:
        raise UserError(f"{RunLayout(run).report / 'summary.json'}: not found (the run has no report)")
    tolerances = (summary.get("numerics") or {}).get("tolerances") or {}
    dtype = ((manifest.get("settings") or {}).get("suite") or {}).get("dtype", "?")
    tolerance = tolerances.get(dtype)
    shown = f", rtol {tolerance['rtol']} atol {tolerance['atol']}" if isinstance(tolerance, dict) else ""
    return f"numerics {run.name}: {suite_settings(manifest)}{shown}; {numerics_text(summary)}"


def round_cost_line(run: Path) -> str:
    costs = round_cost.run_costs(run)
    parts = []
    for kind in ROUND_KINDS:
        rounds = [c for c in costs if c.kind == kind]
        if not rounds:
            continue
        share = {phase: statistics.median(c.share(phase) for c in rounds) for phase in round_cost.PHASES}
        top = sorted((s, p) for p, s in share.items() if s > 0)[::-1][:TOP_PHASES]
        named = ", ".join(f"{phase.split(' (')[0]} {s:.0%}" for s, phase in top)
        walls = [c.wall_s for c in rounds]
        parts.append(f"{kind} {len(rounds)} rounds, {statistics.median(walls):.1f} s per round "
                     f"({min(walls):.1f}-{max(walls):.1f}): {named}")
    return f"round-cost {run.name}: " + "; ".join(parts)


def aa_line(path: Path) -> str:
    data = read_json(path, "benchmarks/aa_noise.py --json output")
    if not isinstance(data, dict) or not isinstance(data.get("repeats"), list):
        raise UserError(f"{path}: not benchmarks/aa_noise.py --json output (no repeats)")
    parts = []
    for family in ("kernels", "models"):
        shown = []
        for repeat in data["repeats"]:
            side = (repeat.get("aa") or {}).get(family)
            if not isinstance(side, dict) or not isinstance(side.get("geomean"), int | float):
                shown.append("-")
                continue
            deviation = (side["geomean"] - 1.0) * 100
            shown.append(f"{_x(side['geomean'])} ({deviation:+.1f} %, CI {_x(side.get('ci_low'))}-"
                         f"{_x(side.get('ci_high'))}, flagged {side.get('flagged_share', 0):.0%} of "
                         f"{side.get('n', '?')})")
        parts.append(f"{family} " + " | ".join(shown))
    says = sum(bool((r.get("aa") or {}).get("says_change")) for r in data["repeats"])
    stopped = (data.get("input") or {}).get("stopped")
    tail = f"; stopped {stopped}" if stopped else ""
    return (f"aa: {len(data['repeats'])} repeats; " + "; ".join(parts)
            + f"; verdict lines saying faster/slower {says}/{len(data['repeats'])}{tail}")


def busy_line(utilization: Path, runs: list[Path]) -> str:
    samples = gpu_busy_by_stage.read_samples(utilization)
    if not samples:
        raise UserError(f"{utilization}: no nvidia-smi samples")
    parts = []
    for run in runs:
        rows = {row.stage: row for row in gpu_busy_by_stage.run_busy(run, samples)}
        kernel = rows.get(gpu_busy_by_stage.KERNEL_STAGE)
        whole = gpu_busy_by_stage.busy(samples, [(s, e) for _, s, e in gpu_busy_by_stage.stage_spans(run)])
        shown = "no kernel rounds" if kernel is None or kernel.busy_percent is None else (
            f"kernel stage {kernel.busy_percent:.1f} % ({kernel.samples} samples)")
        overall = "" if whole[1] is None else f", all stages {whole[1]:.1f} %"
        parts.append(f"{run.name} {shown}{overall}")
    return "busy: " + "; ".join(parts)


def ir_line(directory: Path) -> str:
    kept = read_kept_pairs(directory)
    versions = sum(len(p.base_versions) + len(p.pr_versions) for p in kept.pairs)
    size = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
    return (f"ir {kept.run}: {len(kept.pairs)} of {kept.changed} changed Triton pairs kept, {versions} compiled "
            f"versions, {size / 1e6:.1f} MB")


COMMANDS: dict[str, Callable[[list[Path]], str]] = {
    "compare": lambda paths: compare_line(paths[0]),
    "numerics": lambda paths: numerics_line(paths[0]),
    "round-cost": lambda paths: round_cost_line(paths[0]),
    "aa": lambda paths: aa_line(paths[0]),
    "busy": lambda paths: busy_line(paths[0], paths[1:]),
    "ir": lambda paths: ir_line(paths[0]),
}
ARITY = {"busy": 2}  # the least number of paths each command takes (default 1)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=sorted(COMMANDS), help="which step's outputs to read")
    parser.add_argument("paths", type=Path, nargs="+", help="the step's outputs (see the module's doc)")
    args = parser.parse_args(argv)
    try:
        if len(args.paths) < ARITY.get(args.step, 1) or (args.step not in ARITY and len(args.paths) > 1):
            raise UserError(f"{args.step}: expected {'UTIL_CSV RUN_DIR...' if args.step == 'busy' else 'one path'}")
        for path in args.paths:
            if not path.exists():
                raise UserError(f"{path}: not found (the step wrote nothing there)")
        print(COMMANDS[args.step](args.paths))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
