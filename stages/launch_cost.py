"""Stage ``launch_cost``: what one kernel launch costs a compiled graph of this environment, beyond the kernel.

    python -m stages.launch_cost --dir ORGANIZED --out FILE [--graphs 3] [--passes 200]

The report prices a change in the number of kernel launches per step (a fusion that merged two kernels saves one
launch) with this cost, so it is measured where the graphs run, on the variant's own graphs: each of up to
``--graphs`` C++ graph modules of ``ORGANIZED/graphs`` is run once to record its kernel calls
(`stages.support.cpp_replay.record_launches`), then the recorded calls are made ``--passes`` times, as the graph's
``call()`` makes them, each timed by the wall clock (the buffers it writes restored first, untimed, as the kernel
replay does), and the same passes again under the profiler for the kernels' own event time. The schema and the
arithmetic are `foundation.formats.launch_cost`'s. Triton graphs are not measured (a GPU launch is asynchronous: its
cost is not the wall time of a pass); the file then says so.

The stage also records in the side's Inductor cache how this environment compiles C++ kernels
(``stages.support.environment.record_cpp_build``): it is the side's one process in its own environment between the suite
and the paired kernel rounds, whose plan compares the two sides' records."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from foundation.errors import UserError
from foundation.formats.kernel_index import embedded_kernels, read_index
from foundation.formats.launch_cost import GraphLaunchCost, LaunchCost, write_launch_cost
from foundation.formats.run_layout import GRAPHS_DIR, INDEX_CSV
from stages.entry import StageArgumentParser, run_as_script
from stages.kernels import load_module, seeded_args
from stages.support import cpp_replay


def cpp_graphs(organized: Path, limit: int) -> list[Path]:
    """The graph modules holding the most C++ kernel launches first (they give the steadiest figure)."""
    counts: dict[str, int] = {}
    for row in read_index(organized / INDEX_CSV):
        if row.backend == "cpp" and row.source.startswith(f"{GRAPHS_DIR}/"):
            counts[row.source] = counts.get(row.source, 0) + max(row.calls, 1)
    ranked = sorted(counts, key=lambda source: (-counts[source], source))
    return [organized / source for source in ranked[:limit] if (organized / source).is_file()]


def _clock_overhead_ns(samples: int = 2000) -> float:
    """What one pair of ``perf_counter_ns`` calls adds to a timed call; subtracted from every launch."""
    gaps = []
    for _ in range(samples):
        start = time.perf_counter_ns()
        gaps.append(time.perf_counter_ns() - start)
    return float(statistics.median(gaps))


def _pass_wall_us(launches: list[cpp_replay.Launch], passes: int) -> float:
    """Median over passes of the summed wall time of the calls themselves (restores are not timed)."""
    clock_ns = _clock_overhead_ns()
    walls = []
    for _ in range(passes):
        total = 0
        for launch in launches:
            launch.restore()  # without it an in-place kernel runs on its own output: values drift
            start = time.perf_counter_ns()
            launch.function(*launch.args)
            total += time.perf_counter_ns() - start
        walls.append((total - clock_ns * len(launches)) / 1000.0)
    return float(statistics.median(walls))


def _pass_kernel_us(launches: list[cpp_replay.Launch], passes: int) -> float:
    """Median over passes of the kernels' own profiler-event time (the same calls on the same restored values),
    read from the raw events as the kernel rounds read them (`cpp_replay.kernel_samples`: 0.37-0.52 s per graph
    of README command 1 with ``prof.events()``, most of this stage after its imports)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(passes):
            for launch in launches:
                launch.replay()
    samples = cpp_replay.kernel_samples(prof.profiler.kineto_results.events())
    if not samples:
        return 0.0
    per_pass = [0.0] * passes
    for values in samples.values():
        if len(values) % passes:  # not the same launches in every pass: the mean is all that can be said
            return sum(v for vs in samples.values() for v in vs) * 1000.0 / passes
        size = len(values) // passes
        for i in range(passes):
            per_pass[i] += sum(values[i * size: (i + 1) * size]) * 1000.0
    return float(statistics.median(per_pass))


def measure_graph(path: Path, passes: int, index: int) -> GraphLaunchCost:
    module: Any = load_module(str(path), f"prbench_launch_cost_{index}")
    names = [k.variable for k in embedded_kernels(path.read_text(encoding="utf-8")) if k.backend == "cpp"]
    writable = cpp_replay.writable_arguments(str(path))
    launches = cpp_replay.record_launches(module, seeded_args(module), names, writable)
    if not launches:
        return GraphLaunchCost(path.stem, 0, 0.0, 0.0)
    for _ in range(max(passes // 10, 3)):  # warm-up: caches, branch predictors, the binding's first calls
        for launch in launches:
            launch.replay()
    wall = _pass_wall_us(launches, passes)
    kernel = _pass_kernel_us(launches, passes)
    return GraphLaunchCost(path.stem, len(launches), wall, kernel)


def measure(organized: Path, graphs: int, passes: int) -> LaunchCost:
    paths = cpp_graphs(organized, graphs)
    if not paths:
        return LaunchCost("triton", reason="no C++ graph in this run: the launch cost of Triton kernels is not "
                                           "measured (an asynchronous GPU launch is not the wall time of a pass)")
    results, skipped = [], []
    for i, path in enumerate(paths, 1):
        print(f"[launch_cost] {i}/{len(paths)} {path.name}", flush=True)
        try:
            results.append(measure_graph(path, passes, i))
        except Exception as exc:  # a graph that cannot be loaded or run here costs its figure, not the stage
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
            print(f"warning: {path.name}: not measured ({type(exc).__name__}: {reason})", flush=True)
            skipped.append(f"{path.name}: {type(exc).__name__}")
    return LaunchCost("cpp", results, reason="" if results else "no graph could be run: " + "; ".join(skipped))


def build_parser() -> StageArgumentParser:
    parser = StageArgumentParser(prog="python -m stages.launch_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="the organized directory (index.csv, graphs/)")
    parser.add_argument("--out", type=Path, required=True, help="where to write launch_cost.json")
    parser.add_argument("--graphs", type=int, default=3, help="how many C++ graphs to measure (most launches first)")
    parser.add_argument("--passes", type=int, default=200, help="back-to-back passes over a graph's launches")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.graphs < 1 or args.passes < 1:
        raise UserError("--graphs and --passes: expected whole numbers ≥ 1")
    from stages.support.environment import prepare_inductor, record_cpp_build

    prepare_inductor()
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        record_cpp_build(Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]))
    cost = measure(args.dir.resolve(), args.graphs, args.passes)
    write_launch_cost(args.out, cost)
    value = cost.per_launch_us
    said = f"{value:.3f} µs per launch" if value is not None else cost.reason
    print(f"launch_cost: {said} → {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    run_as_script(main)
