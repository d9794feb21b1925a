"""Where a paired round's time goes: worker start, imports, loading, first calls, warm-up, timed visits.

A paired round (``stages.paired``) starts a fresh worker per side, which imports torch (and transformers), then
prepares every item — a model is built and compiled from the side's warm Inductor cache, its first call and
warm-up run; a kernel module is loaded — and only then times the visits. This splits every round of a finished
run into those phases, from what the round files record (``pair/<kind>/round-*.json``: each worker start with
its ready time, its own import time and each prepare job's seconds; each visit's start and samples), and prints
each phase as seconds per round and as a share of the round's wall time, for model rounds and kernel rounds.

    python benchmarks/round_cost.py --run RUN_ID [--run RUN_ID ...] [--runs-dir runs]
    python benchmarks/round_cost.py --measure [--repeat N] [--rounds R] [--models A,B] [--load] [--runs-dir DIR]

``--measure`` runs ``invoke compare --base=installed --pr=installed`` now (two tiny models by default), ``--repeat``
times, each a fresh run, and splits each; ``--load`` runs it under benchmarks/background_load.py.

Both sides start and prepare at the same time (two threads, on every CPU), so a setup window's wall time is the
slower side's; it is split into the phases in proportion to the two sides' mean phase times. Timed visits are split
into the samples themselves and the rest of the visit (the job's untimed warm-up calls, argument setup, the
round trip). A round cut into shards (``--devices``) is split shard by shard, each on its own clock (each shard
counts as one round). Rounds recorded before the start-up timestamps existed only split into "before the first
visit" and "timed visits".
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aa_noise import background_load, maybe_load, pipeline_output

from foundation.errors import UserError
from foundation.formats.paired_rounds import PAIRED_DIR, ROUND_KINDS, RoundRecord, read_round
from foundation.records import is_number
from prbench.commands.cli import OneLineParser

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = "BertForMaskedLM,T5Small"
DEFAULT_ROUNDS = 3

# The phases, in the order a round goes through them.
START = "worker start (interpreter, until ready)"
IMPORTS = "imports (torch, transformers, Inductor setup)"
BUILD = "building models (random weights)"
LOAD = "loading kernel modules (C++ graphs: their launches recorded)"
FIRST = "first calls (compiled graphs loaded from the warm cache)"
WARMUP = "prepare warm-up calls"
SETUP_OTHER = "other setup (round trips, pinning)"
BEFORE_VISITS = "before the first visit (old record: not split)"
SAMPLES = "timed visits: the samples"
VISIT_REST = "timed visits: warm-up and overhead"
REST = "other (stopping workers)"
PHASES = (START, IMPORTS, BUILD, LOAD, FIRST, WARMUP, SETUP_OTHER, BEFORE_VISITS, SAMPLES, VISIT_REST, REST)


@dataclass
class RoundCost:
    kind: str
    round: int
    wall_s: float
    phases: dict[str, float] = field(default_factory=dict)  # phase → seconds of the round's wall time

    def share(self, phase: str) -> float:
        return self.phases.get(phase, 0.0) / self.wall_s if self.wall_s > 0 else 0.0


def _side_phases(startup: dict[str, Any], kind: str) -> dict[str, float]:
    """One worker start's own phase times (s): what the worker and its prepare jobs reported."""
    out: dict[str, float] = dict.fromkeys(PHASES, 0.0)
    ready = _number(startup.get("ready_s"))
    imports = min(_number(startup.get("imports_s")), ready)
    out[START], out[IMPORTS] = ready - imports, imports
    prepared = 0.0
    for prepare in startup.get("prepares", []):
        wall = _number(prepare.get("wall_s"))
        prepared += wall
        if kind == "models":
            build, first, warmup = (_number(prepare.get(k)) for k in ("build_s", "compile_s", "warmup_s"))
            out[BUILD] += build
            out[FIRST] += first
            out[WARMUP] += warmup
            out[SETUP_OTHER] += max(0.0, wall - build - first - warmup)
        else:
            out[LOAD] += wall
    if is_number(startup.get("pinned_at_s")):
        spent = _number(startup.get("pinned_at_s")) - _number(startup.get("at_s"))
        out[SETUP_OTHER] += max(0.0, spent - ready - prepared)
    return out


def _number(value: Any) -> float:
    return float(value) if is_number(value) and value >= 0 else 0.0


def round_cost(record: RoundRecord) -> RoundCost:
    """Split one round's wall time into its phases."""
    cost = RoundCost(record.kind, record.round, record.wall_s, dict.fromkeys(PHASES, 0.0))
    starts = [w.get("startups") for w in record.workers.values()]
    recorded = bool(starts) and all(isinstance(s, list) and s for s in starts)
    windows: list[tuple[float, float]] = []  # (start, end) of each setup, s since the round started
    if recorded:
        for index in range(min(len(s) for s in starts)):  # type: ignore[arg-type]
            ups = [s[index] for s in starts]  # type: ignore[index]
            begin = min(_number(u.get("at_s")) for u in ups)
            end = max(_number(u.get("pinned_at_s", u.get("at_s"))) for u in ups)
            windows.append((begin, end))
            per_side = [_side_phases(u, record.kind) for u in ups]
            mean = {p: statistics.fmean(side[p] for side in per_side) for p in PHASES}
            total = sum(mean.values())
            for phase, seconds in mean.items():
                if total > 0:
                    cost.phases[phase] += (end - begin) * seconds / total
    elif record.visits:
        first = min(v.started_s for v in record.visits)
        windows.append((0.0, first))
        cost.phases[BEFORE_VISITS] = first
    starts_at = sorted({v.started_s for v in record.visits})
    boundaries = sorted([b for b, _ in windows] + [record.wall_s])
    samples_s = sum(sum(v.samples) for v in record.visits if not v.error) / 1000.0
    visits_s = 0.0
    for i, started in enumerate(starts_at):
        following = [t for t in starts_at[i + 1:i + 2] + boundaries if t > started]
        visits_s += (min(following) if following else record.wall_s) - started
    cost.phases[SAMPLES] = min(samples_s, visits_s)
    cost.phases[VISIT_REST] = visits_s - cost.phases[SAMPLES]
    setup_s = sum(end - begin for begin, end in windows)
    cost.phases[REST] = max(0.0, record.wall_s - setup_s - visits_s)
    return cost


def shard_records(record: RoundRecord) -> list[RoundRecord]:
    """A round merged from several shards (``--devices``) as one record per shard, each on its own clock."""
    if len(record.shards) <= 1:
        return [record]
    out = []
    for index, shard in enumerate(record.shards):
        blocks = set(shard.get("blocks", []))
        workers = {side: {**w, "startups": [u for u in w.get("startups", []) if u.get("shard") == index]}
                   for side, w in record.workers.items()}
        out.append(RoundRecord(kind=record.kind, round=record.round, sides=list(shard.get("sides", record.sides)),
                               started_at=str(shard.get("started_at", "")), wall_s=_number(shard.get("wall_s")),
                               workers=workers, visits=[v for v in record.visits if v.block in blocks]))
    return out


def run_costs(run_dir: Path) -> list[RoundCost]:
    """Every round of a finished run, model rounds then kernel rounds."""
    paths = [p for kind in ROUND_KINDS for p in sorted((run_dir / PAIRED_DIR / kind).glob("round-*.json"))]
    if not paths:
        raise UserError(f"--run {run_dir.name}: expected a run with paired rounds ({run_dir / PAIRED_DIR}/"
                        "<kind>/round-*.json), found none")
    return [round_cost(shard) for p in paths for shard in shard_records(read_round(p))]


def table(costs: list[RoundCost], title: str) -> list[str]:
    """Per kind: mean seconds per round and the median share of the round's wall time, phase by phase."""
    lines = [title]
    for kind in ROUND_KINDS:
        rounds = [c for c in costs if c.kind == kind]
        if not rounds:
            continue
        walls = [c.wall_s for c in rounds]
        lines.append(f"  {kind}: {len(rounds)} rounds, wall {statistics.median(walls):.1f} s per round "
                     f"(median; {min(walls):.1f}-{max(walls):.1f})")
        for phase in PHASES:
            seconds = [c.phases.get(phase, 0.0) for c in rounds]
            if max(seconds) <= 0:
                continue
            shares = [c.share(phase) for c in rounds]
            lines.append(f"    {phase:<58} {statistics.fmean(seconds):8.2f} s  {statistics.median(shares):6.1%}"
                         f"  (share {min(shares):.1%}-{max(shares):.1%})")
    return lines


def measure(args: argparse.Namespace) -> list[tuple[str, list[RoundCost]]]:
    """Fresh A/A comparisons of the installed torch, one per repeat, each split."""
    from foundation.formats.suite_request import SuiteRequest
    from prbench.compare.driver import CompareRequest, run_compare
    from prbench.sides.recipes import load_recipe
    from prbench.stages.suite import device_for

    recipe = load_recipe(args.recipe, ROOT / "recipes")
    suite = SuiteRequest(models=args.models, device=device_for(recipe.platform))
    suite.validate()
    prefix = f"round-cost-{dt.datetime.now():%Y%m%d-%H%M%S}"
    out = []
    for number in range(1, args.repeat + 1):
        run_id = f"{prefix}-{number}"
        request = CompareRequest(base="installed", pr="installed", recipe=recipe, runs_dir=args.runs_dir,
                                 run_id=run_id, suite=suite, rounds=args.rounds)
        with pipeline_output(args.runs_dir / f"{prefix}.log", args.verbose) as console, maybe_load(args.load):
            run_compare(request, console)
        costs = run_costs(args.runs_dir / run_id)
        print("\n".join(table(costs, f"repeat {number} ({run_id})")), flush=True)
        out.append((run_id, costs))
    return out


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", action="append", default=[], metavar="RUN_ID", help="a finished run to split (repeatable)")
    p.add_argument("--measure", action="store_true", help="run small A/A comparisons now and split their rounds")
    p.add_argument("--repeat", type=int, default=1, help="--measure: fresh comparisons (default 1)")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                   help=f"--measure: paired rounds per comparison (default {DEFAULT_ROUNDS})")
    p.add_argument("--models", default=DEFAULT_MODELS, help=f"--measure: suite models (default {DEFAULT_MODELS})")
    p.add_argument("--recipe", default="cpu-local", help="--measure: local recipe (default cpu-local)")
    p.add_argument("--load", action="store_true", help="--measure: under a varying background CPU load")
    p.add_argument("--verbose", action="store_true", help="--measure: show the pipeline's output")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="directory that holds runs (default: runs)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return split(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def split(args: argparse.Namespace) -> int:
    if args.measure == bool(args.run):
        raise UserError("give exactly one input: --measure, or --run RUN_ID")
    if args.repeat < 1 or args.rounds < 1:
        raise UserError(f"--repeat {args.repeat} --rounds {args.rounds}: expected at least 1 each")
    if args.measure:
        load = f"background load ({background_load().settings.describe()})" if args.load else "no background load"
        print(f"round cost: {args.repeat} x installed vs installed, {args.rounds} rounds, models {args.models}, "
              f"{load}", flush=True)
        runs = measure(args)
    else:
        runs = [(run_id, run_costs(args.runs_dir / run_id)) for run_id in args.run]
        for run_id, costs in runs:
            print("\n".join(table(costs, f"run {run_id}")))
    if len(runs) > 1:
        print("\n".join(table([c for _, costs in runs for c in costs], f"all {len(runs)} runs together")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
