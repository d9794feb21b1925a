"""Benchmark: what each group of the test suite makes the whole machine spend, in compares.

    python benchmarks/testsuite_cost.py [--repeat 2] [--keep-images] [--whole] [GROUP ...]

The README's test command is CPU-bound on two cores (vmstat every 5 s over one 862 s run: 79 % user, 18 % system,
3 % idle), so its wall time is at least the machine's CPU seconds over its cores, and a group of tests costs what
it makes the whole machine spend: its pytest process tree, and the work the Docker engine's containers and a Ray
cluster's daemons do for it, which no rusage of pytest sees. Each group runs alone (``pytest -p no:cacheprovider
-m "not gpu" FILES``, one process, no ``-n``), after the project's Docker images are removed as on a fresh CI
machine (``--keep-images``: left); the machine's busy time is read from ``/proc/stat``, the pytest tree's from
``RUSAGE_CHILDREN``, and "outside" is the difference (engine, containers, clusters, and any other process of the
machine: run it on a quiet one).

The baseline is measured in every round: the session's one compare (``tests/test_compare_e2e.py``, the run that
several modules read). A group is quoted in compares: the median over rounds of its CPU over the baseline's CPU of
the same round; a group that includes the baseline's module (it reads that compare) is quoted beyond it.
``--whole`` also times the README's test command (``pytest -n 2 -m "not gpu"``) and prints its CPU over the
cores: the wall time no scheduling can beat.

Measured 2026-11-30 on the 2-core box (AMD EPYC, idle), one round: the compare 94 CPU s in 68 s; in compares,
the Docker pair 2.63 (215 of its 248 s outside pytest), numerics-example 1.17, the Docker stand-ins 1.18, bisect 1.04,
triton-ab 0.91, suite-stage 0.89, suite-shards 0.82, triton-overlay 0.78, ray-rounds 0.63, kernels-integration 0.58,
ray-executor 0.57, ray-node-loss 0.38, repro 0.37: with the baseline, 1,319 CPU s, about 80 % of the whole test
command's (862 s wall for about 1,660 CPU s: vmstat; 1,179 of them in pytest's tree). docs/cost-model.md has the
table and what it means for the 10-minute goal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass

from stage_process import timed

BASELINE = "tests/test_compare_e2e.py"
GROUPS: dict[str, tuple[str, ...]] = {
    "docker-compare": ("tests/test_docker_compare.py",),
    "docker-standins": ("tests/test_docker_lock.py", "tests/test_docker_build.py", "tests/test_triton_ab.py",
                        "tests/test_store_docker.py", "tests/test_docker_wheel_requirements.py",
                        "tests/test_docker_runner.py"),
    "ray-rounds": (BASELINE, "tests/test_compare_ray.py"),
    "ray-node-loss": (BASELINE, "tests/test_ray_node_loss.py"),
    "numerics-example": (BASELINE, "tests/test_numerics_example.py"),
    "triton-overlay": (BASELINE, "tests/test_triton_overlay_compare.py"),
    "repro": (BASELINE, "tests/test_repro.py"),
    "triton-ab": ("tests/test_triton_ab_compare.py",),
    "bisect": ("tests/test_bisect_integration.py",),
    "ray-executor": ("tests/test_ray_executor.py", "tests/test_ray_containers.py", "tests/test_kernel_shards.py"),
    "suite-shards": ("tests/test_suite_shards.py",),
    "suite-stage": ("tests/test_suite_stage.py",),
    "kernels-integration": ("tests/test_kernels_integration.py",),
}
WHOLE = ("-n", "2", "-m", "not gpu")


@dataclass(frozen=True)
class Cost:
    wall_s: float
    machine_s: float  # every process of the machine, from /proc/stat
    tree_s: float  # pytest and the children it waited for

    @property
    def outside_s(self) -> float:
        return max(self.machine_s - self.tree_s, 0.0)


def busy_seconds(stat_line: str, ticks_per_s: float) -> float:
    """The CPU time a ``/proc/stat`` ``cpu`` line counts as busy: user, nice, system, irq and softirq (not idle,
    iowait or steal)."""
    fields = stat_line.split()
    if not fields or fields[0] != "cpu":
        raise ValueError(f"not the total cpu line of /proc/stat: {stat_line[:40]!r}")
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    return (user + nice + system + irq + softirq) / ticks_per_s


def machine_busy_s() -> float:
    with open("/proc/stat", encoding="ascii") as handle:
        return busy_seconds(handle.readline(), os.sysconf("SC_CLK_TCK"))


def measure(command: list[str], busy: Callable[[], float] = machine_busy_s) -> Cost:
    """Run ``command`` from the project root and say what it cost (``stage_process.timed``: wall, and the CPU of
    its process tree); a failing command ends the benchmark (a group whose tests failed did not do the work it
    would be quoted for)."""
    machine0 = busy()
    wall, tree = timed(command, dict(os.environ))
    return Cost(wall, busy() - machine0, tree)


def remove_project_images() -> None:
    """The project's images (``prbench/...``), so a group builds what a fresh CI machine builds; the tests' local
    base (``prbench-test/...``) stays. Nothing to do without a reachable engine."""
    try:
        import docker

        client = docker.from_env()
        images = client.images.list()
    except Exception:  # no engine here: the Docker groups skip their tests, and say so in their cost
        return
    for tag in (tag for image in images for tag in image.tags if tag.startswith("prbench/")):
        client.images.remove(tag)  # by tag: an image another was built on goes with the prune below
    client.images.prune()


def in_compares(group: list[Cost], baseline: list[Cost], includes_baseline: bool) -> float:
    """The median over rounds of the group's machine CPU (beyond the baseline's when it includes the baseline's
    module) over the baseline's machine CPU of the same round."""
    return statistics.median((g.machine_s - (b.machine_s if includes_baseline else 0.0)) / b.machine_s
                             for g, b in zip(group, baseline, strict=True))


def pytest_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="*", metavar="GROUP", help=f"groups to measure (default: all of "
                        f"{', '.join(GROUPS)})")
    parser.add_argument("--repeat", type=int, default=2, help="rounds, each measuring the baseline and every group")
    parser.add_argument("--keep-images", action="store_true", help="leave the project's Docker images in place")
    parser.add_argument("--whole", action="store_true", help="also run the README's test command once per round")
    args = parser.parse_args(argv)
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown or args.repeat < 1:
        parser.error(f"unknown group(s) {', '.join(unknown)}" if unknown else f"--repeat {args.repeat}: expected >= 1")
    names = args.groups or list(GROUPS)
    runs: dict[str, list[Cost]] = {name: [] for name in ["baseline", *names, *(["whole"] if args.whole else [])]}
    for number in range(1, args.repeat + 1):
        for name in runs:
            if not args.keep_images:
                remove_project_images()
            files = (BASELINE,) if name == "baseline" else GROUPS.get(name, ())
            command = pytest_command(*WHOLE) if name == "whole" else pytest_command("-m", "not gpu", *files)
            cost = measure(command)
            runs[name].append(cost)
            print(f"round {number} {name}: {cost.wall_s:.0f} s wall, {cost.machine_s:.0f} CPU s "
                  f"({cost.outside_s:.0f} outside pytest)", flush=True)
    print(f"\n{'group':18} {'wall s':>7} {'CPU s':>7} {'outside':>8} {'compares':>9}")
    for name, costs in runs.items():
        wall = statistics.median(c.wall_s for c in costs)
        cpu = statistics.median(c.machine_s for c in costs)
        outside = statistics.median(c.outside_s for c in costs)
        ratio = in_compares(costs, runs["baseline"], BASELINE in GROUPS.get(name, ()))
        print(f"{name:18} {wall:7.0f} {cpu:7.0f} {outside:8.0f} {ratio:9.2f}")
        if name == "whole":
            cores = os.cpu_count() or 1
            print(f"{'':18} the test command's CPU over {cores} cores: {cpu / cores:.0f} s, the least wall time "
                  f"for its work ({wall / (cpu / cores):.2f}x that here)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
