"""Scale-out of the kernel timing rounds: throughput with 1, 2, 4 CPU "devices", the local pool vs a local Ray
cluster, and the scheduling overhead per shard.

    python benchmarks/scale.py [--devices 1,2,4] [--shards 8] [--blocks 4] [--passes 2] [--busy-ms 100]
                               [--executors local,ray] [--out scale.json]

What it measures: one kernel round of ``--shards × --blocks`` paired kernel jobs, cut into ``--shards`` shards,
run by ``prbench.compare.round_sharding.run_shards`` exactly as ``invoke compare`` runs them: a ``stages.paired``
process per shard with fresh base and PR workers, both pinned to the shard's CPU device, ABBA blocks walked ``--passes``
times. The workers are ``benchmarks/busy_worker.py``: each visit computes for ``--busy-ms`` of CPU time, so the work is
known and CPU-bound. For Ray, a one-node cluster on 127.0.0.1 is started per device count with that many fake GPUs
(``ray start --head --num-gpus N``; each actor is then a CPU device with its share of the CPUs) and stopped after.

* throughput: visits' CPU work done per second of wall time (the round's wall, from the first shard handed to the
  executor to the last one back; Ray's cluster start and actor start-up are not in it), and its ratio to one
  device of the local pool. Goal: N devices ≥ 0.9·N where the machine has N cores.
* overhead per shard: the device time not spent inside the shards' rounds, ``(N·wall − Σ round wall) / shards``,
  where a round's wall (``stages.paired``'s own ``wall_s``: starting both workers and timing every visit) is the
  shard's work. It holds the executor's scheduling, the stage process's start, writing and reading its record, and
  devices idle at the end. Goal: ≤ 1 % of a shard's work.

Measured 2026-11-26 on the idle 2-core box (nothing else running), ``--devices 1,2 --shards 4 --blocks 40`` (a
shard is 32 s of work): local pool 1.00× / 2.00× (overhead per shard 0.42 % / 0.42 %), Ray 1.00× / 1.93× (0.54 % /
0.83 %). With the defaults (3.2 s shards), twice: 2 devices 1.96–1.98× local and 1.89–2.04× Ray, but 2.6–6.9 % per
shard: what a shard costs beyond its round is about fixed (0.08–0.28 s: the stage process starting, its record
written and read), so shards need a few seconds of work or more. Four devices need four cores: not measured here.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from foundation import atomic_io
from foundation.errors import UserError
from foundation.flag_values import whole_number
from foundation.formats.paired_rounds import read_round
from foundation.formats.stage_records import Plan, SidePlan, write_plan
from prbench.commands.cli import OneLineParser
from prbench.compare.round_sharding import RoundShards, SideRunner, round_shards, run_shards
from prbench.executors import Executor, RunnerSpec, ShardOutcome
from prbench.executors.local_pool import LocalPool

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Workload:
    shards: int
    blocks: int  # per shard
    passes: int
    busy_ms: float  # CPU time of one visit

    def visit_work_s(self) -> float:
        return self.shards * self.blocks * self.passes * 4 * self.busy_ms / 1000  # 4 visits per ABBA block


@dataclass(frozen=True)
class Measurement:
    executor: str
    devices: int
    wall_s: float
    work_s: float  # the visits' CPU work
    shard_work_s: list[float]  # each shard's round wall (its stage's own wall_s)
    throughput: float = 0.0  # work_s / wall_s
    speedup: float = 0.0  # throughput / throughput of one local device
    overhead_per_shard_s: float = 0.0
    overhead_share: float = 0.0  # overhead per shard / mean shard work


def the_round(directory: Path, workload: Workload) -> RoundShards:
    """A plan of busy kernel jobs and its first round cut into shards, under ``directory``."""
    env: dict[str, str | None] = {"PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), str(ROOT)])}
    sides = {side: SidePlan(env=env, log=str(directory / f"{side}-workers.log")) for side in ("base", "pr")}

    def job(i: int) -> dict[str, Any]:
        return {"path": f"/busy/k{i}.py", "kernels": {f"k{i}": f"busy/k{i}.py"}, "busy_ms": workload.busy_ms,
                "iterations": 5, "timeout_s": 600.0}

    count = workload.shards * workload.blocks
    plan = directory / "plan.json"
    write_plan(plan, Plan(kind="kernels", worker="busy_worker", device="cpu", sides=sides, passes=workload.passes,
                          blocks=[{"base": job(i), "pr": job(i)} for i in range(count)], platform="cpu"))
    local = RunnerSpec("local", platform="cpu", python=sys.executable)
    return round_shards("kernels", 1, "scale", directory / "pair" / "kernels", plan, count, workload.blocks,
                        [SideRunner("base", local), SideRunner("pr", local)], apart=False,
                        logs=directory / "pair" / "logs")


def measure(executor: Executor, devices: int, workload: Workload) -> Measurement:
    with tempfile.TemporaryDirectory(prefix="prbench-scale-") as tmp:
        shards = the_round(Path(tmp), workload)
        outcomes: list[ShardOutcome] = []
        started = time.monotonic()
        run_shards([shards], executor, lambda line: None, outcomes.append)
        wall = time.monotonic() - started
        shard_work = [read_round(shards.files(i)[0]).wall_s for i in range(len(shards.shards))]
    idle = devices * wall - sum(shard_work)
    per_shard = idle / len(shard_work)
    return Measurement(executor.name, devices, round(wall, 3), workload.visit_work_s(),
                       [round(w, 3) for w in shard_work], throughput=round(workload.visit_work_s() / wall, 4),
                       overhead_per_shard_s=round(per_shard, 3),
                       overhead_share=round(per_shard / statistics.mean(shard_work), 4))


def on_ray(devices: int, workload: Workload) -> Measurement:
    from local_ray_cluster import local_cluster  # shared with the tests

    from prbench.executors.ray_cluster import RayExecutor

    with local_cluster(gpus=devices) as address:
        executor = RayExecutor(address, platform="cpu", say=lambda line: None)
        try:
            _warm_up(executor)
            return measure(executor, devices, workload)
        finally:
            executor.close()


def _warm_up(executor: Executor) -> None:
    """Let every actor start before the clock runs (a cluster's actors stay up between rounds and runs)."""
    import ray

    from prbench.executors.ray_cluster import RayExecutor

    assert isinstance(executor, RayExecutor)
    executor.start_actors()
    ray.get([actor.handle.where.remote() for actor in executor.actors])
    for actor in executor.actors:
        actor.slot, actor.pid, actor.node_id = ray.get(actor.handle.where.remote())


def run(executors: list[str], device_counts: list[int], workload: Workload) -> list[Measurement]:
    results: list[Measurement] = []
    for name in executors:
        for devices in device_counts:
            print(f"scale: {name} executor, {devices} device(s) ...", flush=True)
            if name == "local":
                result = measure(LocalPool(["cpu"] * devices, say=lambda line: None, stream_output=False), devices,
                                 workload)
            else:
                result = on_ray(devices, workload)
            results.append(result)
            print(f"scale: {name} {devices}: wall {result.wall_s:.1f} s, overhead/shard "
                  f"{result.overhead_per_shard_s:.3f} s ({result.overhead_share:.1%} of its work)", flush=True)
    one = next((r.throughput for r in results if r.executor == "local" and r.devices == 1), None)
    return [Measurement(**{**asdict(r), "speedup": round(r.throughput / one, 3) if one else 0.0}) for r in results]


def table(results: list[Measurement], cores: int) -> str:
    lines = [f"CPU cores available: {cores}",
             "| executor | devices | wall s | throughput (work s / s) | vs 1 local device | goal | overhead per shard "
             "| share of a shard's work |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        goal = f"≥ {0.9 * r.devices:.1f}" if r.devices <= cores else f"cores: ≤ {cores}"
        lines.append(f"| {r.executor} | {r.devices} | {r.wall_s:.1f} | {r.throughput:.3f} | {r.speedup:.2f}× | {goal} "
                     f"| {r.overhead_per_shard_s:.3f} s | {r.overhead_share:.2%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python benchmarks/scale.py", description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1,2,4", help="CPU device counts to measure (default 1,2,4)")
    parser.add_argument("--executors", default="local,ray", help="local, ray or both (default local,ray)")
    parser.add_argument("--shards", default="8", help="shards in the round (default 8)")
    parser.add_argument("--blocks", default="4", help="ABBA blocks (kernel jobs) per shard (default 4)")
    parser.add_argument("--passes", default="2", help="walks over the blocks per round (default 2)")
    parser.add_argument("--busy-ms", default="100", help="CPU milliseconds of one visit (default 100)")
    parser.add_argument("--out", type=Path, default=None, help="also write the measurements here (JSON)")
    args = parser.parse_args(argv)
    executors = [e.strip() for e in args.executors.split(",") if e.strip()]
    if not executors or set(executors) - {"local", "ray"}:
        parser.error(f"--executors {args.executors!r}: expected local, ray or local,ray")
    try:
        counts = [whole_number("--devices", d, minimum=1) for d in args.devices.split(",")]
        workload = Workload(shards=whole_number("--shards", args.shards, minimum=1),
                            blocks=whole_number("--blocks", args.blocks, minimum=1),
                            passes=whole_number("--passes", args.passes, minimum=1),
                            busy_ms=float(whole_number("--busy-ms", args.busy_ms, minimum=1)))
    except UserError as exc:
        parser.error(str(exc))
    results = run(executors, counts, workload)
    print(table(results, len(os.sched_getaffinity(0))))
    if args.out:
        atomic_io.write_json(args.out, {"workload": asdict(workload), "cores": len(os.sched_getaffinity(0)),
                                        "results": [asdict(r) for r in results]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
