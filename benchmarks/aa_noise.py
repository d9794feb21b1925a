"""A/A noise check: compare a variant with itself, so every kernel the comparison flags is a false positive.

It reports how far the geomean strays from 1.0, whether its CI contains 1.0, and the share of kernels flagged
improved/regressed (false-positive rate of the test + threshold) or noisy. Run it on a machine before trusting
its A/B reports; ``--max-flagged-share`` turns it into a gate (exit 1 when exceeded).

Inputs, either:
  python benchmarks/aa_noise.py --measure [--models A,B] [--recipe cpu-local]   # runs the variant twice now
  python benchmarks/aa_noise.py --run RUN_ID [--runs-dir runs]     # a run whose base/ and pr/ are the same variant
  python benchmarks/aa_noise.py --base-csv A/kernels.csv --pr-csv B/kernels.csv \
      [--samples-base A/kernel_samples.json --samples-pr B/kernel_samples.json]
(``--measure`` is ``invoke compare --base=installed --pr=installed`` through the same pipeline).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from analysis import atomic_io
from analysis.errors import UserError
from analysis.kernel_compare import (
    CompareSettings,
    KernelComparison,
    compare_kernels,
    read_kernels_csv,
    read_samples_json,
)


@dataclass(frozen=True)
class AANoise:
    n_pairs: int
    n_summarised: int
    geomean: float
    ci_low: float
    ci_high: float
    ci_contains_one: bool
    deviation_pct: float  # |geomean − 1| in percent: the bias an A/B report could show with no change at all
    time_weighted: float
    flagged: int  # improved + regressed: false positives
    flagged_share: float
    noisy: int
    noisy_share: float
    only_base: int  # in an A/A run every kernel should pair; leftovers point at non-deterministic codegen
    only_pr: int


def aa_noise(comparison: KernelComparison) -> AANoise:
    s = comparison.summary
    n = max(s.n_summarised, 1)
    flagged = s.verdicts["improved"] + s.verdicts["regressed"]
    return AANoise(
        n_pairs=s.n_pairs, n_summarised=s.n_summarised, geomean=s.ci.geomean, ci_low=s.ci.low, ci_high=s.ci.high,
        ci_contains_one=bool(s.ci.contains(1.0)), deviation_pct=abs(s.ci.geomean - 1.0) * 100.0,
        time_weighted=s.time_weighted, flagged=flagged, flagged_share=flagged / n, noisy=s.verdicts["noisy"],
        noisy_share=s.verdicts["noisy"] / n, only_base=comparison.pairing.only_base,
        only_pr=comparison.pairing.only_pr,
    )


def measure(args: argparse.Namespace) -> str:
    """Run the same variant on both sides of a comparison; return the run id."""
    from prbench.compare import CompareRequest, run_compare
    from prbench.recipes import load_recipe
    from prbench.suite_stage import SuiteSettings, device_for

    root = Path(__file__).resolve().parents[1]
    recipe = load_recipe(args.recipe, root / "recipes")
    request = CompareRequest(
        base="installed", pr="installed", recipe=recipe, runs_dir=Path(args.runs_dir), run_id=args.run,
        suite=SuiteSettings(models=args.models, device=device_for(recipe.platform)),
    )
    run, _ = run_compare(request)
    return run.run_id


def _inputs(args: argparse.Namespace) -> tuple[Path, Path, Path | None, Path | None]:
    if args.run:
        root = Path(args.runs_dir) / args.run
        samples = [root / side / "kernel_samples.json" for side in ("base", "pr")]
        return (root / "base" / "kernels.csv", root / "pr" / "kernels.csv",
                *(p if p.exists() else None for p in samples))
    if not (args.base_csv and args.pr_csv):
        raise UserError("give --base-csv and --pr-csv, or --run")
    return args.base_csv, args.pr_csv, args.samples_base, args.samples_pr


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-csv", type=Path, help="kernels.csv of the first run of the variant")
    parser.add_argument("--pr-csv", type=Path, help="kernels.csv of the second run of the same variant")
    parser.add_argument("--samples-base", type=Path, help="kernel_samples.json of the first run")
    parser.add_argument("--samples-pr", type=Path, help="kernel_samples.json of the second run")
    parser.add_argument("--run", help="run id of an A/A run (base/ and pr/ hold the same variant)")
    parser.add_argument("--measure", action="store_true",
                        help="run the comparison of the installed torch with itself now (into --run, or a new run)")
    parser.add_argument("--models", default="tiny-default", help="suite models for --measure (default: tiny-default)")
    parser.add_argument("--recipe", default="cpu-local", help="local recipe for --measure (default: cpu-local)")
    parser.add_argument("--runs-dir", default="runs", help="directory that holds runs (default: runs)")
    parser.add_argument("--threshold", type=float, default=0.05, help="effect threshold (default: 0.05)")
    parser.add_argument("--alpha", type=float, default=0.05, help="Mann-Whitney alpha (default: 0.05)")
    parser.add_argument("--max-flagged-share", type=float, default=None,
                        help="exit 1 when more than this share of kernels is flagged or the CI misses 1.0")
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    try:
        if args.measure:
            args.run = measure(args)
        base_csv, pr_csv, samples_base, samples_pr = _inputs(args)
        comparison = compare_kernels(
            read_kernels_csv(base_csv), read_kernels_csv(pr_csv),
            read_samples_json(samples_base) if samples_base else None,
            read_samples_json(samples_pr) if samples_pr else None,
            CompareSettings(threshold=args.threshold, alpha=args.alpha))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = aa_noise(comparison)
    print(f"A/A: {result.n_pairs} pairs ({result.only_base} only in base, {result.only_pr} only in PR)")
    print(f"geomean {result.geomean:.4f} (CI {result.ci_low:.4f}-{result.ci_high:.4f}, contains 1.0: "
          f"{result.ci_contains_one}); deviation {result.deviation_pct:.2f} %; "
          f"time-weighted {result.time_weighted:.4f}")
    print(f"flagged improved/regressed: {result.flagged} ({result.flagged_share:.1%}); "
          f"noisy: {result.noisy} ({result.noisy_share:.1%})")
    for note in comparison.notes:
        print(f"note: {note}")
    if args.json:
        atomic_io.write_json(args.json, asdict(result))
    if args.max_flagged_share is not None and (result.flagged_share > args.max_flagged_share
                                               or not result.ci_contains_one):
        print(f"A/A check failed: flagged share above {args.max_flagged_share:.1%} or CI excludes 1.0")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
