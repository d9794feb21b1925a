"""A round cut into shards on the local pool: the same round file as one process, resumable shard by shard, a
killed stage run again, Ctrl-C stopping what runs and keeping what finished."""

from __future__ import annotations

import _thread
import sys
import threading
import time
from pathlib import Path

import pytest

from foundation.errors import UserError
from foundation.formats.paired_rounds import read_round
from foundation.formats.round_shards import block_ranges, parse_block_ranges, partition_blocks
from prbench.compare.round_sharding import run_shards, time_in_shards
from prbench.executors import ShardOutcome, check_executor, open_executor
from prbench.executors.local_pool import LocalPool
from prbench.executors.node import cpu_slots
from tests.support.shard_support import kernel_block, model_block, round_shape, shards_of, write_fake_plan


def run_all(rounds, devices: list[str]) -> list[ShardOutcome]:
    outcomes: list[ShardOutcome] = []
    lines: list[str] = []
    run_shards(rounds, LocalPool(devices, say=lines.append), lines.append, outcomes.append)
    for shards in rounds:
        shards.merge()
    return outcomes


def test_block_ranges_travel_as_text_and_come_back() -> None:
    assert block_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert parse_block_ranges("0-2,5,7-8") == [0, 1, 2, 5, 7, 8]
    assert partition_blocks(5, 2) == [[0, 1], [2, 3], [4]]
    assert partition_blocks(5, 0) == [[0, 1, 2, 3, 4]]
    with pytest.raises(UserError, match="--blocks '3-1'"):
        parse_block_ranges("3-1")


def test_cpu_devices_share_the_cpus_from_the_last_one_down() -> None:
    assert [cpu_slots(i, 2, {0, 1, 2, 3}) for i in range(2)] == [frozenset({3, 2}), frozenset({1, 0})]
    assert cpu_slots(0, 1, {0, 1}) == frozenset({0, 1})
    assert [cpu_slots(i, 4, {0, 1}) for i in range(4)] == [frozenset({1}), frozenset({0}), frozenset({1}),
                                                           frozenset({0})]


def test_gpus_numbered_past_the_nodes_count_still_get_their_own_cpus() -> None:
    """A Ray node started with CUDA_VISIBLE_DEVICES=2,3 gives its actors GPU ids 2 and 3 of two GPUs."""
    shares = [cpu_slots(gpu, 2, {0, 1, 2, 3}) for gpu in (2, 3)]
    assert shares == [frozenset({3, 2}), frozenset({1, 0})]


@pytest.mark.integration
def test_shards_on_two_cpu_devices_give_the_round_file_of_one_process(tmp_path: Path) -> None:
    blocks = [kernel_block(f"k{i}") for i in range(4)]
    whole_dir, sharded_dir = tmp_path / "whole", tmp_path / "sharded"
    whole = shards_of(whole_dir, write_fake_plan(tmp_path, blocks), len(blocks), shard_size=0)
    sharded = shards_of(sharded_dir, write_fake_plan(tmp_path, blocks), len(blocks), shard_size=1)

    run_all(whole, ["cpu"])
    outcomes = run_all(sharded, ["cpu", "cpu"])

    one, four = whole[0].round_files()[0], sharded[0].round_files()[0]
    assert round_shape(one) == round_shape(four)
    record = read_round(four)
    assert len(record.shards) == 4 and sorted(b for s in record.shards for b in s["blocks"]) == [0, 1, 2, 3]
    # Each shard's pair of workers shares one CPU: the last of its device's CPUs.
    assert {tuple(s["cpus"]) for s in record.shards} == {(max(cpu_slots(i, 2)),) for i in range(2)}
    assert all(s["node"] and s["device"] == "cpu" for s in record.shards)
    assert {o.slot.cpus for o in outcomes} == {cpu_slots(0, 2), cpu_slots(1, 2)}  # both devices took shards
    pr = next(v for v in record.visits if v.side == "pr")
    assert pr.samples == [2.0, 2.0, 2.0]


@pytest.mark.integration
def test_model_rounds_shard_by_model_and_prepare_only_their_own(tmp_path: Path) -> None:
    blocks = [model_block(m) for m in ("ModelA", "ModelB", "ModelC")]
    rounds = shards_of(tmp_path, write_fake_plan(tmp_path, blocks, kind="models"), 3, shard_size=1, kind="models")
    run_all(rounds, ["cpu", "cpu"])
    record = read_round(rounds[0].round_files()[0])
    assert {v.item for v in record.visits} == {"ModelA", "ModelB", "ModelC"}
    assert not [v for v in record.visits if v.error]
    prepared = [line for line in (tmp_path / "base-workers.log").read_text().splitlines() if line.startswith("prepare")]
    assert len(prepared) == 3  # each shard's worker compiled its own model only
    # the merged round keeps every shard's first-call times: the report's compile spread sees all three models
    assert {side: sorted(models) for side, models in record.compiles.items()} == {
        "base": ["ModelA", "ModelB", "ModelC"], "pr": ["ModelA", "ModelB", "ModelC"]}
    # and every worker start with the shard whose clock it counts on (benchmarks/round_cost.py splits per shard)
    assert sorted(u["shard"] for u in record.workers["base"]["startups"]) == [0, 1, 2]
    assert sorted(u["prepares"][0]["items"][0] for u in record.workers["pr"]["startups"]) == [
        "ModelA", "ModelB", "ModelC"]


def test_a_rounds_time_counts_shards_side_by_side_once_and_no_pause_between_invocations() -> None:
    shards = [{"started_at": "2026-11-26T10:00:00+00:00", "wall_s": 20.0},  # two devices at once
              {"started_at": "2026-11-26T10:00:05+00:00", "wall_s": 30.0},
              {"started_at": "2026-11-26T12:00:00+00:00", "wall_s": 10.0},  # resumed two hours later
              {"device": "cpu"}, {"started_at": "not a time", "wall_s": 1.0}]  # say nothing of their time
    assert time_in_shards(shards) == ("2026-11-26T10:00:00+00:00", 45.0)
    assert time_in_shards(shards[3:]) is None


@pytest.mark.integration
def test_finished_shards_are_never_redone(tmp_path: Path) -> None:
    blocks = [kernel_block(f"k{i}") for i in range(3)]
    rounds = shards_of(tmp_path, write_fake_plan(tmp_path, blocks), 3, shard_size=1)
    run_all(rounds, ["cpu"])
    files = [rounds[0].files(i)[0] for i in range(3)]
    before = {f: f.stat().st_mtime_ns for f in files}
    files[1].unlink()  # as if its stage had been interrupted before writing it

    assert rounds[0].missing() == [1]
    outcomes = run_all(rounds, ["cpu"])

    assert [o.key for o in outcomes] == ["kernels round 1 shard 2/3"]
    assert all(f.stat().st_mtime_ns == before[f] for f in (files[0], files[2]))
    assert {v.block for v in read_round(rounds[0].round_files()[0]).visits} == {0, 1, 2}


@pytest.mark.integration
def test_a_stage_killed_mid_run_is_run_again_and_nothing_is_lost(tmp_path: Path) -> None:
    blocks = [kernel_block("k0"), kernel_block("k1", behave="kill-parent", marker=str(tmp_path / "killed")),
              kernel_block("k2")]
    rounds = shards_of(tmp_path, write_fake_plan(tmp_path, blocks), 3, shard_size=1)
    outcomes = run_all(rounds, ["cpu", "cpu"])

    assert (tmp_path / "killed").exists()
    assert {o.key: o.attempts for o in outcomes}["kernels round 1 shard 2/3"] == 2
    # The lost attempt as the run's manifest records it: where, after how long, where the shard then ran.
    [redo] = next(o for o in outcomes if o.attempts == 2).redos()
    record_of_redo = redo.to_dict()
    assert record_of_redo["shard"] == "kernels round 1 shard 2/3" and record_of_redo["attempt"] == 1
    assert record_of_redo["lost_on"]["device"] == "cpu" and record_of_redo["lost_on"]["cpus"]
    assert record_of_redo["redone_on"]["node"] == record_of_redo["lost_on"]["node"]
    assert 0 < redo.lost_s < 60 and record_of_redo["reason"]
    record = read_round(rounds[0].round_files()[0])
    assert {(v.item, v.side) for v in record.visits if not v.error} == {
        (f"pointwise/k{i}.py", side) for i in range(3) for side in ("base", "pr")}


@pytest.mark.integration
def test_ctrl_c_stops_the_running_shards_and_keeps_the_finished_ones(tmp_path: Path, python_handles_ctrl_c) -> None:
    blocks = [kernel_block("k0"), kernel_block("k1", behave="sleep", sleep_s=60)]
    rounds = shards_of(tmp_path, write_fake_plan(tmp_path, blocks), 2, shard_size=1)

    def press_ctrl_c() -> None:
        while not rounds[0].files(0)[0].exists():
            time.sleep(0.1)
        time.sleep(1.0)  # shard 2 is in its long kernel by now
        _thread.interrupt_main()

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_shards(rounds, LocalPool(["cpu"], say=lambda line: None), lambda line: None)

    assert time.monotonic() - started < 30  # not the 60 s kernel
    assert rounds[0].missing() == [1]  # the finished shard is kept, the stopped one left nothing
    logs = [(tmp_path / f"{side}-workers.log").read_text() for side in ("base", "pr")]
    pids = [int(line.split(" pid ")[1].split()[0]) for log in logs for line in log.splitlines() if "k1" in line]
    time.sleep(0.5)
    assert pids and not [p for p in pids if Path(f"/proc/{p}").exists()]  # no worker outlived the stop


def test_a_ray_install_that_cannot_be_imported_is_one_line_saying_how_to_reinstall(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    broken = tmp_path / "ray"
    broken.mkdir()
    (broken / "__init__.py").write_text('raise ImportError("libray.so: cannot open shared object file")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.delitem(sys.modules, "prbench.executors.ray_cluster", raising=False)

    with pytest.raises(UserError, match=r'^--executor ray: Ray is installed but cannot be imported \(libray\.so: '
                                        r'cannot open shared object file\); reinstall it with: pip install -e'):
        open_executor("ray", devices=["cpu"], platform="cpu")


def test_ray_without_ray_installed_is_one_line_saying_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(UserError, match=r'^--executor ray: Ray is not installed; .*pip install -e "\.\[ray\]"$'):
        check_executor("ray", None)
    with pytest.raises(UserError, match="--ray-address: only with --executor ray"):
        check_executor("local", "auto")
    with pytest.raises(UserError, match="--executor 'slurm'"):
        check_executor("slurm", None)
