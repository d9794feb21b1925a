"""The Ray executor on a real Ray cluster on this machine (two fake GPUs, the actors on the CPU): the kernel and
model rounds spread over the actors and give the round files of the local pool; an actor killed mid-run costs only
its shard, which runs again elsewhere; Ctrl-C stops the cluster's work and keeps what finished."""

from __future__ import annotations

import _thread
import threading
import time
from pathlib import Path

import pytest

from foundation.formats.paired_rounds import read_round
from prbench.compare.round_sharding import run_shards
from prbench.executors import ShardOutcome
from prbench.executors.local_pool import LocalPool
from tests.support.ray_support import NEEDS_RAY
from tests.support.shard_support import kernel_block, model_block, round_shape, shards_of, write_fake_plan

# A real cluster: out of the unit tier; under ``pytest -n`` the group's tests share one worker, and so one cluster.
pytestmark = [pytest.mark.integration, pytest.mark.ray, pytest.mark.xdist_group("ray-executor"), NEEDS_RAY]


def on_ray(address: str, rounds, lines: list[str] | None = None) -> list[ShardOutcome]:
    from prbench.executors.ray_cluster import RayExecutor

    said = lines if lines is not None else []
    outcomes: list[ShardOutcome] = []
    executor = RayExecutor(address, platform="cpu", say=said.append)
    try:
        run_shards(rounds, executor, said.append, outcomes.append)
    finally:
        executor.close()
    for shards in rounds:
        shards.merge()
    return outcomes


def on_local_pool(rounds) -> None:
    run_shards(rounds, LocalPool(["cpu"], say=lambda line: None), lambda line: None)
    for shards in rounds:
        shards.merge()


def files_under(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*.json"))


def test_kernel_and_model_rounds_spread_over_the_actors_and_match_the_local_pool(ray_cluster: str,
                                                                                tmp_path: Path) -> None:
    kernels = [kernel_block(f"k{i}") for i in range(4)]
    models = [model_block(m) for m in ("ModelA", "ModelB")]
    runs = {}
    for executor in ("local", "ray"):
        run = tmp_path / executor
        (run / "kernels").mkdir(parents=True)
        (run / "models").mkdir()
        rounds = [*shards_of(run, write_fake_plan(run / "kernels", kernels), 4, shard_size=2, rounds=2),
                  *shards_of(run, write_fake_plan(run / "models", models, kind="models"), 2, shard_size=1,
                             kind="models")]
        runs[executor] = (run, rounds)
    on_local_pool(runs["local"][1])
    outcomes = on_ray(ray_cluster, runs["ray"][1])

    assert len({o.slot for o in outcomes}) == 2  # both actors took shards
    assert len(outcomes) == 2 * 2 + 2
    for local, ray_round in zip(runs["local"][1], runs["ray"][1], strict=True):
        assert round_shape(local.round_files()[0]) == round_shape(ray_round.round_files()[0])
    assert files_under(runs["local"][0] / "pair") == files_under(runs["ray"][0] / "pair")
    shards = read_round(runs["ray"][1][0].round_files()[0]).shards
    assert all(s["node"] and s["device"] == "cpu" and s["cpus"] for s in shards)


def test_an_actor_killed_mid_run_costs_only_its_shard(ray_cluster: str, tmp_path: Path) -> None:
    blocks = [kernel_block("k0"), kernel_block("k1", behave="kill-grandparent", marker=str(tmp_path / "killed")),
              kernel_block("k2"), kernel_block("k3")]
    rounds = shards_of(tmp_path, write_fake_plan(tmp_path, blocks), 4, shard_size=1)
    lines: list[str] = []
    outcomes = on_ray(ray_cluster, rounds, lines)

    assert (tmp_path / "killed").exists()  # the actor running shard 2 was killed with SIGKILL
    attempts = {o.key: o.attempts for o in outcomes}
    assert attempts == {"kernels round 1 shard 1/4": 1, "kernels round 1 shard 2/4": 2,
                        "kernels round 1 shard 3/4": 1, "kernels round 1 shard 4/4": 1}
    assert any("shard 2/4: lost on" in line and "actor died" in line for line in lines)
    [loss] = next(o for o in outcomes if o.attempts == 2).lost  # where and after how long, for the manifest
    assert loss.slot.device == "cpu" and loss.lost_s > 0 and "actor died" in loss.reason
    record = read_round(rounds[0].round_files()[0])
    assert {(v.item, v.side) for v in record.visits if not v.error} == {
        (f"pointwise/k{i}.py", side) for i in range(4) for side in ("base", "pr")}


def test_ctrl_c_stops_the_cluster_work_and_keeps_the_finished_shards(ray_cluster: str, tmp_path: Path,
                                                                     python_handles_ctrl_c) -> None:
    from prbench.executors.ray_cluster import RayExecutor

    blocks = [kernel_block("k0"), kernel_block("k1", behave="sleep", sleep_s=120)]
    rounds = shards_of(tmp_path, write_fake_plan(tmp_path, blocks), 2, shard_size=1)
    executor = RayExecutor(ray_cluster, platform="cpu", say=lambda line: None)

    def press_ctrl_c() -> None:
        deadline = time.monotonic() + 60
        while not (rounds[0].files(0)[0].exists() and "k1" in _logs(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.2)
        _thread.interrupt_main()

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_shards(rounds, executor, lambda line: None)
    finally:
        # A driver left connected is ended by Ray once the cluster goes away: that would end pytest with it.
        executor.close()

    assert time.monotonic() - started < 90  # not the 120 s kernel
    assert rounds[0].missing() == [1]
    sleeping = [int(line.split(" pid ")[1].split()[0]) for line in _logs(tmp_path).splitlines() if "k1" in line]
    time.sleep(1.0)
    assert sleeping and not [p for p in sleeping if Path(f"/proc/{p}").exists()]  # its worker was stopped too


def _logs(directory: Path) -> str:
    return "".join(p.read_text() for p in directory.glob("*-workers.log"))
