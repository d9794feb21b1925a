"""The verdict rules against a known truth: round-structured timings simulated and fed through the report's own
functions (``analysis.kernels.compare.compare_kernels``, ``analysis.report.verdict_line.summarize_comparison``,
``analysis.report.summary.fail_reasons``), scenario by scenario, many replicates each.

    python benchmarks/verdict_sim.py [--replicates 200] [--rounds 10 | --rounds auto [--device cpu|gpu]
        [--max-rounds N] [--resolution 2%|none]] [--scenarios aa,hidden,...] [--seed 0]
        [--components FILE.json [--family kernels|models]] [--passes P] [--reuse-workers K] [--out sim.json]

``--rounds auto`` stops the kernels' rounds with invoke compare's own policy (`analysis.report.sequential`:
``rounds_policies`` for the device's defaults, ``RoundsPolicy.after_look`` after every round).

The noise model has the levels a shared machine has (``analysis.stats.verdict``'s premise): per round an offset that
both sides share (a busy minute), per round and side a process offset (each round starts fresh workers), per
kernel, round and side its own wander, per visit (one ABBA block) a small scatter, heavy-tailed outliers (a
preempted block ×1.2–2), a step change inside a round (the machine slows from some pass on, both sides alike),
a steady drift over each round, and a start-order effect (the side that starts a block runs ``--order-effect``
slower: the first visit warms the caches). ``--components`` takes the four Gaussian levels and the passes from
what ``benchmarks/variance_components.py --json`` measured on a real run (its ``sim_noise`` of one family: round,
the process part every item of a worker shares, each item's own process part, a block's visits) and sets the step,
drift and order effect to 0 (the measured levels hold their spread); the outliers stay, as the measured levels are
robust (MAD) and leave them out. ``--passes P`` times each round in P passes instead (the measured levels of a
visit and within it do not depend on how many passes the measured run made: a round of another design).
``--reuse-workers K`` lets one pair of workers time K rounds in a row, so their
process and item offsets hold for K rounds instead of one. The two sides are timed in ABBA blocks as
``stages.paired`` times them, with its start-order parity (base first when block + round + pass is even), and the
blocks reach the comparison as ``PairedBlocks``.

Per scenario it prints, over the replicates:

* coverage: the share of runs whose headline interval (the step: Σ base / Σ PR with identical kernels unchanged)
  contains the true step effect of the PR's code (goal ≥ 93 %); control coverage: the same for the identical
  kernels' interval and the true offset between the sides (1.0 but where the PR's processes are faster); how often
  a control failed;
* per-item false positives: among changed-code kernels whose true effect is within ±threshold, the share called
  improved/regressed (goal ≤ 5 %), and among identical kernels (the control);
* power: among kernels truly changed by more than the threshold, the share called in the right direction;
* false "equivalent": among kernels truly 3 % slower, the share called equivalent (goal ≤ 2.5 %);
* the family verdicts seen, and how often ``--fail-on regression`` fires.

The functions it calls exist in earlier versions of the project too, so the same script measures "before":
run it with ``PYTHONPATH`` pointing at a checkout of the earlier commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere; an earlier checkout on PYTHONPATH comes first
    sys.path.append(str(ROOT))

from variance_components import FORMAT_VERSION as COMPONENTS_VERSION  # noqa: E402

from analysis.kernels.compare import KernelComparison, compare_kernels  # noqa: E402
from analysis.kernels.results import KERNEL_COLUMNS  # noqa: E402
from analysis.report.sequential import RoundsPolicy, check_rounds_flags, kernel_look, rounds_policies  # noqa: E402
from analysis.report.summary import fail_reasons  # noqa: E402
from analysis.report.verdict_line import summarize_comparison  # noqa: E402
from analysis.stats.verdict_settings import MIN_ROUNDS, VerdictSettings  # noqa: E402
from foundation.errors import UserError  # noqa: E402
from foundation.formats.paired_rounds import PairedBlocks  # noqa: E402
from foundation.records import read_json  # noqa: E402

CALLED = ("improved", "regressed")


@dataclass(frozen=True)
class Noise:
    round_sd: float = 0.03  # shared by both sides in a round
    process_sd: float = 0.01  # per round and side: fresh worker processes
    item_sd: float = 0.01  # per kernel, round and side
    visit_sd: float = 0.02  # per visit
    outlier_p: float = 0.02  # a visit preempted
    step_p: float = 0.3  # a round in which the machine slows from some pass on
    step_size: float = 0.08
    order_effect: float = 0.01  # the side that starts a block is this much slower
    drift: float = 0.003  # the machine slows this much per pass over a round, both sides alike
    passes: int = 8
    reuse: int = 1  # rounds one pair of workers times: their process and item offsets hold that long


@dataclass(frozen=True)
class Scenario:
    """``n`` kernels; ``changed[i]`` marks a new body, ``effect[i]`` the PR's true relative slowdown (0.05: 5 %
    slower); ``weights`` the launches per step; ``pr_side`` a constant factor on every PR visit (a faster clock)."""

    name: str
    what: str
    n: int
    changed: np.ndarray
    effect: np.ndarray
    true_ms: np.ndarray
    pr_side: float = 1.0


def _scenario(name: str, what: str, n: int, changed_idx: range | list[int], effect: float,
              share: float | None = None, pr_side: float = 1.0, seed: int = 7) -> Scenario:
    rng = np.random.default_rng(seed)
    changed = np.zeros(n, dtype=bool)
    changed[list(changed_idx)] = True
    effect_arr = np.where(changed, effect, 0.0)
    true_ms = np.exp(rng.uniform(np.log(0.05), np.log(1.0), n))
    if share is not None:  # the changed kernels hold this share of the step
        light = true_ms[~changed].sum()
        true_ms[changed] *= share / (1 - share) * light / true_ms[changed].sum()
    return Scenario(name, what, n, changed, effect_arr, true_ms, pr_side)


SCENARIOS = {
    "aa": _scenario("aa", "A/A: 100 kernels, none changed", 100, [], 0.0),
    "aa_changed": _scenario("aa_changed", "20 of 100 kernels with new code but no effect", 100, range(20), 0.0),
    "hidden": _scenario("hidden", "90 identical + 10 changed 15 % slower", 100, range(10), 0.15),
    "heavy_few": _scenario("heavy_few", "5 changed kernels holding ~95 % of the time 5.3 % slower", 100, range(5),
                           0.053, share=0.95),
    "side_offset": _scenario("side_offset", "PR processes 5 % faster on everything; 10 changed 5.3 % slower", 100,
                             range(10), 0.053, pr_side=1 / 1.05),
    "at_threshold": _scenario("at_threshold", "100 changed kernels exactly 2 % slower", 100, range(100), 0.02),
    "effect_1": _scenario("effect_1", "80 identical + 20 changed 1 % slower", 100, range(20), 0.01),
    "effect_3": _scenario("effect_3", "80 identical + 20 changed 3 % slower", 100, range(20), 0.03),
    "effect_10": _scenario("effect_10", "80 identical + 20 changed 10 % slower", 100, range(20), 0.10),
    "effect_30": _scenario("effect_30", "80 identical + 20 changed 30 % slower", 100, range(20), 0.30),
    "one_3pct": _scenario("one_3pct", "99 identical + 1 changed 3 % slower holding 5 % of the time", 100, [0], 0.03,
                          share=0.05),
}


def simulate(sc: Scenario, noise: Noise, rounds: int, rng: np.random.Generator
             ) -> tuple[pd.DataFrame, pd.DataFrame, dict, dict, PairedBlocks]:
    """Both sides' kernels.csv frames, per-round samples and paired blocks of one comparison."""
    n, passes = sc.n, noise.passes
    factor = {"base": np.ones(n), "pr": (1 + sc.effect) * sc.pr_side}
    paths = [f"k/{i}.py" for i in range(n)]
    samples: dict[str, dict[str, list[list[float]]]] = {"base": {p: [] for p in paths}, "pr": {p: [] for p in paths}}
    blocks: dict = {}
    process: dict[str, float] = {}
    item: dict[str, np.ndarray] = {}
    for k in range(rounds):
        shared = rng.normal(0, noise.round_sd)
        fresh = k % noise.reuse == 0  # fresh workers: their offsets are drawn anew (same draw order as ever)
        if fresh:
            process = {side: rng.normal(0, noise.process_sd) for side in factor}
        step_from = rng.integers(1, passes) if rng.random() < noise.step_p else passes
        for side in factor:
            if fresh:
                item[side] = rng.normal(0, noise.item_sd, n)
            # (n, passes) visits: block index = item, so the start parity is (item + round + pass) % 2.
            base_first = ((np.arange(n)[:, None] + k + np.arange(passes)[None, :]) % 2) == 0
            first = base_first if side == "base" else ~base_first
            logs = (np.log(sc.true_ms * factor[side])[:, None] + shared + process[side] + item[side][:, None]
                    + rng.normal(0, noise.visit_sd, (n, passes)) + np.where(first, noise.order_effect, 0.0)
                    + np.where(np.arange(passes)[None, :] >= step_from, noise.step_size, 0.0)
                    + noise.drift * np.arange(passes)[None, :])
            outliers = rng.random((n, passes)) < noise.outlier_p
            visits = np.exp(logs) * np.where(outliers, rng.uniform(1.2, 2.0, (n, passes)), 1.0)
            for i, path in enumerate(paths):
                samples[side][path].append(visits[i].tolist())
                blocks.setdefault((side, path), {})[k + 1] = {(p, i): [float(visits[i, p])] for p in range(passes)}
    frames = {side: _frame(sc, paths, samples[side], side) for side in factor}
    return frames["base"], frames["pr"], samples["base"], samples["pr"], PairedBlocks(list(range(1, rounds + 1)),
                                                                                      blocks)


def first_rounds(sc: Scenario, samples: dict[str, dict[str, list[list[float]]]], blocks: PairedBlocks, n: int
                 ) -> tuple[pd.DataFrame, pd.DataFrame, dict, dict, PairedBlocks]:
    """The same comparison as it stood after its first ``n`` rounds (what an adaptive look sees)."""
    cut = {side: {path: rounds[:n] for path, rounds in by_path.items()} for side, by_path in samples.items()}
    paths = list(cut["base"])
    kept = PairedBlocks(blocks.rounds[:n], {key: {r: b for r, b in by_round.items() if r <= n}
                                            for key, by_round in blocks.samples.items()})
    return (_frame(sc, paths, cut["base"], "base"), _frame(sc, paths, cut["pr"], "pr"), cut["base"], cut["pr"],
            kept)


def compare_adaptive(sc: Scenario, samples: dict, blocks: PairedBlocks, policy: RoundsPolicy,
                     settings: VerdictSettings) -> tuple[KernelComparison, int]:
    """Look after every round from the minimum on, as `invoke compare` does by default (the product's
    ``RoundsPolicy.after_look``: settled, and fine enough for its resolution target); the comparison as the report
    states it (at the strict level after an early stop, else at the run level), and how many rounds that took."""
    run_level, strict = policy.run_settings(settings), policy.strict_settings(settings)
    for n in range(policy.min_rounds, policy.max_rounds + 1):
        base, pr, sb, sp, kept = first_rounds(sc, samples, blocks, n)
        kc = compare_kernels(base, pr, sb, sp, run_level, kept)
        if n == policy.max_rounds == policy.min_rounds:  # no early look (as invoke compare)
            return kc, n
        at_strict = compare_kernels(base, pr, sb, sp, strict, kept)
        decision = policy.after_look(kernel_look(kc, at_strict), n, 0.0)
        if decision.stop:
            return (at_strict if policy.stated_strictly(n, decision.settled) else kc), n
    raise AssertionError("unreachable: the last look always stops")


def _frame(sc: Scenario, paths: list[str], samples: dict[str, list[list[float]]], side: str) -> pd.DataFrame:
    rows = []
    for i, path in enumerate(paths):
        body = f"body{i}" + ("-new" if side == "pr" and sc.changed[i] else "")
        rows.append({"category": "pointwise", "kernel_name": f"triton_poi_fused_op{i}_{i}", "body_hash": body,
                     "shape_key": "x1024_r1", "legacy_key": f"triton_poi_fused_op{i}_x1024_r1", "path": path,
                     "calls": 1, "graphs": "M/graph_0", "backend": "triton", "source": path, "n": 1,
                     "median_ms": float(np.median([np.median(r) for r in samples[path]])), "mean_ms": 0.0,
                     "std_ms": 0.0, "min_ms": 0.0, "gb": 0.0, "gb_per_s": 0.0, "status": "ok", "error": ""})
    return pd.DataFrame(rows, columns=list(KERNEL_COLUMNS))


@dataclass
class Tally:
    runs: int = 0
    covered: int = 0
    with_interval: int = 0
    null_items: int = 0  # changed-code kernels within ±threshold of no change
    null_called: int = 0
    control_items: int = 0
    control_called: int = 0
    real_items: int = 0  # changed beyond the threshold
    real_found: int = 0
    three_pct_items: int = 0
    three_pct_equivalent: int = 0
    fail_on: int = 0
    rounds_used: int = 0  # summed over runs
    control_runs: int = 0  # runs whose identical-kernel control has an interval
    control_covered: int = 0  # ... that contains the true offset between the sides (1 / the PR side's factor)
    control_failed: int = 0  # runs in which any control failed
    family: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def row(self) -> dict:
        def share(a: int, b: int) -> float | None:
            return a / b if b else None
        return {"runs": self.runs, "coverage": share(self.covered, self.with_interval),
                "control_coverage": share(self.control_covered, self.control_runs),
                "control_failed": share(self.control_failed, self.runs),
                "item_false_positive": share(self.null_called, self.null_items),
                "control_false_positive": share(self.control_called, self.control_items),
                "power": share(self.real_found, self.real_items),
                "false_equivalent_3pct": share(self.three_pct_equivalent, self.three_pct_items),
                "fail_on_regression": share(self.fail_on, self.runs), "family_verdicts": dict(self.family),
                "mean_rounds": self.rounds_used / self.runs if self.runs else None,
                "seconds_per_run": self.seconds / self.runs if self.runs else None}


def true_step(sc: Scenario) -> float:
    """Σ base / Σ PR of one step of the PR's code (the side factor is the machine's, not the PR's)."""
    return float(sc.true_ms.sum() / (sc.true_ms * (1 + sc.effect)).sum())


def run_scenario(sc: Scenario, noise: Noise, rounds: int, replicates: int, settings: VerdictSettings,
                 seed: int, policy: RoundsPolicy | None = None) -> Tally:
    rng = np.random.default_rng(seed)
    tally, truth, floor = Tally(), true_step(sc), settings.margin if settings.threshold is None else settings.threshold
    started = time.perf_counter()
    for _ in range(replicates):
        base, pr, sb, sp, blocks = simulate(sc, noise, rounds, rng)
        if policy is None:
            kc, used = compare_kernels(base, pr, sb, sp, settings, blocks), rounds
        else:
            kc, used = compare_adaptive(sc, {"base": sb, "pr": sp}, blocks, policy, settings)
        tally.runs += 1
        tally.rounds_used += used
        step = kc.summary.time_weighted
        if step.has_interval and step.ci_high > step.ci_low:
            tally.with_interval += 1
            tally.covered += step.ci_low <= truth <= step.ci_high
        table = kc.table.set_index("base_path")
        verdict = table["verdict"].reindex([f"k/{i}.py" for i in range(sc.n)]).to_numpy()
        code_changed = (table["matched_by"] != "body_hash+shape_key").reindex(
            [f"k/{i}.py" for i in range(sc.n)]).to_numpy()
        called = np.isin(verdict, CALLED)
        null = code_changed & (np.abs(sc.effect) <= floor)
        real = sc.effect > floor
        tally.null_items += int(null.sum())
        tally.null_called += int((called & null).sum())
        tally.control_items += int((~code_changed).sum())
        tally.control_called += int((called & ~code_changed).sum())
        tally.real_items += int(real.sum())
        tally.real_found += int(((verdict == "regressed") & real).sum())
        three = np.isclose(sc.effect, 0.03)
        tally.three_pct_items += int(three.sum())
        tally.three_pct_equivalent += int(((verdict == "equivalent") & three).sum())
        identical = kc.controls[0].summary
        if identical.has_interval:
            tally.control_runs += 1
            tally.control_covered += identical.ci_low <= 1 / sc.pr_side <= identical.ci_high
        tally.control_failed += not all(c.passed(kc.settings) for c in kc.controls)
        summary = summarize_comparison(kc, None, [], kc.settings)
        tally.fail_on += bool(fail_reasons(summary, "regression"))
        tally.family[kc.summary.verdict] += 1
    tally.seconds = time.perf_counter() - started
    return tally


def measured_noise(paths: list[Path], family: str, reuse: int) -> Noise:
    """The noise levels ``benchmarks/variance_components.py --json`` measured for one family; from several runs,
    each level's median over them (the passes: the first run's)."""
    runs = [_levels(path, family) for path in paths]

    def level(key: str) -> float:
        return float(statistics.median(levels[key] or 0.0 for levels in runs))

    return Noise(round_sd=level("round_sd"), process_sd=level("process_sd"), item_sd=level("item_sd"),
                 visit_sd=level("visit_sd"), passes=int(runs[0]["passes"]), step_p=0.0, drift=0.0,
                 order_effect=0.0, reuse=reuse)


def _levels(path: Path, family: str) -> dict[str, Any]:
    data = read_json(path, "variance components (benchmarks/variance_components.py --json)")
    if not isinstance(data, dict) or data.get("format_version") != COMPONENTS_VERSION:
        raise UserError(f"--components {path}: expected format_version {COMPONENTS_VERSION} of "
                        "benchmarks/variance_components.py --json")
    levels = data.get("families", {}).get(family, {}).get("sim_noise")
    if not isinstance(levels, dict):
        raise UserError(f"--components {path}: no {family} rounds measured (families: "
                        f"{', '.join(data.get('families', {})) or 'none'})")
    return levels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicates", type=int, default=200)
    parser.add_argument("--rounds", default="10", help="rounds per comparison, or auto: adaptive rounds from "
                        f"{MIN_ROUNDS}, stopped as invoke compare stops the kernels' rounds on --device (its "
                        "default most rounds and resolution target, or --max-rounds and --resolution)")
    parser.add_argument("--max-rounds", help="--rounds auto: at most this many (default: the device's for kernels)")
    parser.add_argument("--resolution", help="--rounds auto: the resolution target, e.g. 2%% or none (default: the "
                        "device's for kernels)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="--rounds auto: whose default rounds policy (default cpu)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--order-effect", type=float, default=Noise.order_effect)
    parser.add_argument("--components", type=Path, nargs="+",
                        help="noise levels measured by benchmarks/variance_components.py --json (its sim_noise), "
                             "instead of the built-in ones; from several runs, each level's median over them")
    parser.add_argument("--family", choices=("kernels", "models"), default="kernels",
                        help="--components: which family's levels (default kernels)")
    parser.add_argument("--passes", type=int, help="walks over the blocks per round (default: the measured run's "
                        f"with --components, else {Noise.passes})")
    parser.add_argument("--reuse-workers", type=int, default=1,
                        help="rounds one pair of workers times before fresh ones start (default 1: fresh every round)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    names = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown or args.replicates < 1 or args.reuse_workers < 1 or (args.passes is not None and args.passes < 1):
        parser.error(f"--scenarios: unknown {', '.join(unknown)} (known: {', '.join(SCENARIOS)})" if unknown
                     else "--replicates ≥ 1, --reuse-workers ≥ 1 and --passes ≥ 1")
    try:  # the flags as invoke compare checks them, and the kernels' policy it would run
        flags = check_rounds_flags(args.rounds, args.max_rounds, None, args.resolution)
    except UserError as exc:
        parser.error(str(exc))
    auto = flags.auto
    policy = rounds_policies("cpu" if args.device == "cpu" else "0", flags.rounds, auto, flags.max_rounds,
                             None, flags.resolution_pct)["kernels"]
    rounds = policy.max_rounds
    noise = Noise(order_effect=args.order_effect, reuse=args.reuse_workers)
    if args.components:
        try:
            noise = measured_noise(args.components, args.family, args.reuse_workers)
        except UserError as exc:
            parser.error(str(exc))
    if args.passes is not None:
        noise = replace(noise, passes=args.passes)
    settings = VerdictSettings()
    target = f", resolution target {policy.resolution_pct:g} %" if policy.resolution_pct is not None else ""
    print(f"verdict simulation: {args.replicates} replicates, "
          f"{f'adaptive rounds up to {rounds}{target}' if auto else f'{rounds} rounds'}, {noise}")
    results = {}
    for i, name in enumerate(names):
        sc = SCENARIOS[name]
        row = run_scenario(sc, noise, rounds, args.replicates, settings, args.seed + i,
                           policy if auto else None).row()
        results[name] = {"what": sc.what, **row}
        print(f"{name:13s} {sc.what}")
        shown = {k: v for k, v in row.items()
                 if k not in ("runs", "family_verdicts", "seconds_per_run", "mean_rounds")}
        print("    " + "  ".join(f"{k} {_fmt(v)}" for k, v in shown.items())
              + f"  verdicts {row['family_verdicts']}  mean rounds {row['mean_rounds']:.1f}"
              + f"  ({row['seconds_per_run']:.3f} s a run)", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"replicates": args.replicates, "rounds": args.rounds, "max_rounds": rounds,
                                        "resolution_pct": policy.resolution_pct if auto else None,
                                        "components": str(args.components) if args.components else None,
                                        "noise": noise.__dict__, "results": results}, indent=1))
    return 0


def _fmt(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.1f}%"


if __name__ == "__main__":
    sys.exit(main())
