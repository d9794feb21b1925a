"""Benchmark: stage processes ending through ``stages.entry.end_process`` against the same processes ending with
the interpreter's teardown (``sys.exit``).

    python benchmarks/stage_exit.py [--repeat 5] [--load] [--models DistilBertForMaskedLM]

A comparison starts dozens of Python processes that import torch, Dynamo and Inductor: each side's stages, and
per round a driver and a worker per side. Two of them are timed here, each run both ways in every round (the order
alternating between rounds):

- ``worker``: a round's model worker that starts, says it is ready and is told there is no job (stdin closed);
- ``suite``: the suite stage on one tiny model whose Inductor cache an untimed first run filled (a side whose
  graphs are cached: dynamo traces, loads the compiled graph, times it).

``teardown`` is the same module run through ``runpy`` with ``end_process`` replaced by ``sys.exit``: the same
imports and work, only the ending differs. CPU seconds are the process's and its children's
(``RUSAGE_CHILDREN``). The ratio quoted is the median of the rounds' end_process / teardown. ``--load`` runs it
beside ``background_load.py --workers 1``.

Measured 2026-11-27 on the 2-core box (AMD EPYC), ``--repeat 5``: idle, the worker 0.75x wall and CPU (2.64 s
against 3.61 s; rounds 0.61x-0.77x), the suite stage 0.89x wall and 0.90x CPU (12.0 s against 13.2 s); with
``--load``, the worker 0.77x (2.53 against 3.27 s), the suite stage 0.88x wall (12.1 against 13.5 s). About a
second per process; the README's test command went from 598 s to 553 s (``.ci/run`` in a fresh clone, one run
each).
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

WAYS = ("end_process", "teardown")
WITH_TEARDOWN = """
import runpy, sys
from stages import entry
entry.end_process = sys.exit
module, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def command(way: str, module: str, args: list[str]) -> list[str]:
    if way == "end_process":
        return [sys.executable, "-m", module, *args]
    return [sys.executable, "-c", WITH_TEARDOWN, module, *args]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="DistilBertForMaskedLM", help="the suite's models (default: one tiny)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds, each running every process both ways")
    parser.add_argument("--load", action="store_true", help="run beside background_load.py --workers 1")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat: expected a whole number >= 1")
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="stage-exit-") as scratch, \
            (BackgroundLoad(workers=1, quiet=True) if args.load else nullcontext()):
        root = Path(scratch)
        env = stage_env(root / "work", str(root / "headers"))
        timed(command("end_process", "stages.suite", suite_args(root / "first", args.models)), env)  # the cache
        processes = {"worker": ("stages.model_worker", lambda n: ["--worker", "--result-fd", "1"]),
                     "suite": ("stages.suite", lambda n: suite_args(root / f"suite-{n}", args.models))}
        runs = 0
        for round_no in range(args.repeat):
            order = WAYS if round_no % 2 == 0 else WAYS[::-1]
            for what, (module, module_args) in processes.items():
                for way in order:
                    runs += 1
                    wall, cpu = timed(command(way, module, module_args(runs)), env)
                    results.setdefault((what, way), []).append((wall, cpu))
                    print(f"round {round_no + 1} {what:>6} {way:>11}: {wall:5.2f} s wall, {cpu:5.2f} s CPU",
                          flush=True)
    print("| process | end_process wall s | teardown wall s | wall ratio | end_process CPU s | teardown CPU s "
          "| CPU ratio |\n|---|---:|---:|---:|---:|---:|---:|")
    for what in ("worker", "suite"):
        ours, theirs = results[(what, "end_process")], results[(what, "teardown")]
        cells = []
        for index in (0, 1):
            ratios = [o[index] / t[index] for o, t in zip(ours, theirs, strict=True)]
            cells += [f"{statistics.median(o[index] for o in ours):.2f}",
                      f"{statistics.median(t[index] for t in theirs):.2f}",
                      f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"]
        print(f"| {what} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
