"""Benchmark: a side's suite stage when its precompiled C++ header is shared against when it builds its own.

    python benchmarks/shared_headers.py [--models BertForMaskedLM,GPT2ForSequenceClassification] [--repeat 3]
                                        [--load]

Inductor needs a precompiled header (150 MB) for the first C++ kernel a process compiles or loads, and keeps it
under TMPDIR. Every side and suite shard of a run has a TMPDIR of its own, so each built it again, and so did every
new run; local stages now share one directory (``$PRBENCH_INDUCTOR_HEADERS``, see ``stages.support.environment``).

Each round runs the suite stage twice, each time with a fresh Inductor cache and TMPDIR: ``shared`` with the
header directory an untimed first run filled (what every side but the very first now finds), ``own`` with the
variable empty (the header built under TMPDIR, what every side did before). The order alternates between rounds,
and the ratio quoted is the median of the rounds' shared / own, so a drift of the box's pace slows both alike.
CPU seconds are the stage's and its children's (``RUSAGE_CHILDREN``): the compile pool is off
(``TORCHINDUCTOR_COMPILE_THREADS=1``) so that every g++ is a child the stage waits for. ``--load`` runs it beside
``background_load.py --workers 1``.

Measured 2026-11-27 on the 2-core box (AMD EPYC), two tiny models, ``--repeat 3``: idle, shared / own 0.81x wall
(rounds 0.79x-0.83x; 25.3 s against 30.5 s) and 0.80x CPU; with ``--load``, 0.77x wall (0.74x-0.79x; 25.1 s
against 33.4 s) and 0.78x CPU. About 6 s of g++ per side, shard or new run that compiles or loads C++ kernels.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

from background_load import BackgroundLoad
from stage_process import stage_env, suite_args, timed


def run_stage(work: Path, models: str, header_dir: str) -> tuple[float, float]:
    """Wall and CPU seconds of one suite stage with a fresh cache and TMPDIR under ``work``."""
    env = stage_env(work, header_dir, TORCHINDUCTOR_COMPILE_THREADS="1")
    return timed([sys.executable, "-m", "stages.suite", *suite_args(work / "suite", models)], env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="BertForMaskedLM,GPT2ForSequenceClassification",
                        help="suite models, comma-separated (default: two tiny ones)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of one shared and one own run (default 3)")
    parser.add_argument("--load", action="store_true", help="run beside background_load.py --workers 1")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat: expected a whole number >= 1")
    results: dict[str, list[tuple[float, float]]] = {"shared": [], "own": []}
    with tempfile.TemporaryDirectory(prefix="shared-headers-") as scratch, \
            (BackgroundLoad(workers=1, quiet=True) if args.load else nullcontext()):
        root = Path(scratch)
        headers = root / "headers"
        run_stage(root / "first", args.models, str(headers))  # fills the shared directory, untimed
        for round_no in range(args.repeat):
            order = ("shared", "own") if round_no % 2 == 0 else ("own", "shared")
            for way in order:
                wall, cpu = run_stage(root / f"{way}-{round_no}", args.models, str(headers) if way == "shared" else "")
                results[way].append((wall, cpu))
                print(f"round {round_no + 1} {way:>6}: {wall:6.1f} s wall, {cpu:6.1f} s CPU", flush=True)
    for index, what in ((0, "wall"), (1, "CPU")):
        ratios = [s[index] / o[index] for s, o in zip(results["shared"], results["own"], strict=True)]
        print(f"{what}: shared / own = {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f}); "
              f"median {statistics.median(r[index] for r in results['shared']):.1f} s against "
              f"{statistics.median(r[index] for r in results['own']):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
