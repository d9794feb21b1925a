"""The paired orchestrator: base and PR interleaved in ABBA order, fresh pinned workers, failures as error visits."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from foundation.formats.paired_rounds import read_round, write_round
from foundation.formats.stage_records import Plan, SidePlan, read_plan, write_plan
from stages.paired import LAYOUT_PAD_MAX, run_round, side_order, start_order

ROOT = Path(__file__).resolve().parents[1]
FAKE = "tests.support.fake_paired_worker"


def kernel_job(name: str, behave: str = "ok", ms: float = 1.0, timeout_s: float = 30.0) -> dict[str, Any]:
    return {"path": f"/organized/{name}.py", "kernels": {name: f"pointwise/{name}.py"}, "behave": behave, "ms": ms,
            "iterations": 3, "timeout_s": timeout_s}


def plan(tmp_path: Path, blocks: list[dict[str, Any]], kind: str = "kernels", device: str = "cpu",
         prepare: list[dict[str, Any]] | None = None, groups: list[list[str]] | None = None) -> Plan:
    sides = {side: SidePlan(env={"PYTHONPATH": str(ROOT)}, log=str(tmp_path / f"{side}.log"),
                            prepare=list(prepare or [])) for side in ("base", "pr")}
    return Plan(kind=kind, worker=FAKE, device=device, sides=sides, blocks=blocks, groups=groups or [])


def both(name: str, base_ms: float = 1.0, pr_ms: float = 2.0, **kwargs: Any) -> dict[str, Any]:
    return {"base": kernel_job(name, ms=base_ms, **kwargs), "pr": kernel_job(name, ms=pr_ms, **kwargs)}


@pytest.mark.integration
def test_blocks_alternate_abba_and_the_first_side_alternates_between_rounds(tmp_path: Path) -> None:
    blocks = [both(f"k{i}") for i in range(4)]
    lines: list[str] = []
    first = run_round(plan(tmp_path, blocks), 1, ["base", "pr"], say=lines.append)
    second = run_round(plan(tmp_path, blocks), 2, ["base", "pr"], say=lines.append)

    order = [(v.block, v.side, v.position) for v in first.visits]
    abba, baab = ("pr", "base", "base", "pr"), ("base", "pr", "pr", "base")
    assert order == [(b, side, p) for b in range(4) for p, side in enumerate(abba if b % 2 == 0 else baab)]
    assert [v.side for v in second.visits][:4] == list(baab)  # round 2 starts with the other side
    assert side_order(0, 2) == baab and side_order(1, 2) == abba
    started = [v.started_s for v in first.visits]
    assert started == sorted(started)
    assert (first.round, first.kind, first.sides) == (1, "kernels", ["base", "pr"])
    assert next(v.samples for v in first.visits if v.side == "pr") == [2.0, 2.0, 2.0]
    assert {v.item for v in first.visits} == {f"pointwise/k{i}.py" for i in range(4)}
    assert any(line.startswith("[pair] 4/4 k3.py: ok") for line in lines)


def test_the_side_whose_worker_starts_first_alternates_between_rounds() -> None:
    """The worker started first measured slightly slower over whole A/A runs: no side may always start first."""
    assert [start_order(["base", "pr"], n) for n in (1, 2, 3)] == [["base", "pr"], ["pr", "base"], ["base", "pr"]]
    assert start_order(["pr"], 2) == ["pr"]


@pytest.mark.integration
def test_both_sides_are_fresh_workers_pinned_to_the_same_last_cpu(tmp_path: Path) -> None:
    record = run_round(plan(tmp_path, [both("k0")]), 1, ["base", "pr"], say=lambda _: None)

    cpu = max(os.sched_getaffinity(0))
    assert record.workers["base"]["cpus"] == record.workers["pr"]["cpus"] == [cpu]
    assert record.workers["base"]["pids"] != record.workers["pr"]["pids"]
    assert f"cpus [{cpu}]" in (tmp_path / "base.log").read_text()
    again = run_round(plan(tmp_path, [both("k0")]), 2, ["base", "pr"], say=lambda _: None)
    assert again.workers["base"]["pids"] != record.workers["base"]["pids"]  # a round never reuses a worker


@pytest.mark.integration
def test_on_a_gpu_both_workers_are_pinned_to_the_same_last_cpu_too(tmp_path: Path) -> None:
    """On an H100, unpinned workers timed a launch-bound model step at 0.76 ms in one process and 1.9 ms in the
    other, visit after visit: a GPU round pins both sides' timed visits to one CPU, as a CPU round does."""
    lines: list[str] = []
    record = run_round(plan(tmp_path, [both("k0")], device="0"), 1, ["base", "pr"], say=lines.append)

    cpu = max(os.sched_getaffinity(0))
    assert record.workers["base"]["cpus"] == record.workers["pr"]["cpus"] == [cpu]
    assert record.workers["base"]["device"] == "0"
    assert f"cpus [{cpu}]" in (tmp_path / "pr.log").read_text()
    assert f"pinned to CPU {cpu}, GPU 0" in lines[0]


@pytest.mark.integration
def test_each_worker_gets_an_environment_of_random_size_drawn_afresh_every_round(tmp_path: Path) -> None:
    """The sides' environments differ by a fixed size (their paths); a random pad per worker and round turns the
    memory layout that size sets into round-to-round spread instead of a fixed offset between the sides."""
    draws = random.Random(7)
    pads = []
    for number in (1, 2, 3):
        record = run_round(plan(tmp_path, [both("k0")]), number, ["base", "pr"], say=lambda _: None, layout=draws)
        pads += [record.workers["base"]["layout_pad"], record.workers["pr"]["layout_pad"]]

    again = random.Random(7)
    assert pads == [again.randrange(LAYOUT_PAD_MAX) for _ in range(6)]
    assert len(set(pads)) == 6 and all(0 <= pad < LAYOUT_PAD_MAX for pad in pads)
    logged = [int(n) for n in re.findall(r"pad (\d+)", (tmp_path / "base.log").read_text())]
    assert sorted(set(logged)) == sorted(pads[0::2])  # what each base worker really had in its environment


@pytest.mark.integration
def test_a_crash_or_a_hang_is_an_error_visit_and_the_worker_is_restarted(tmp_path: Path) -> None:
    blocks = [
        {"base": kernel_job("crasher", behave="crash"), "pr": kernel_job("crasher")},
        both("after_crash"),
        {"base": kernel_job("hanger"), "pr": kernel_job("hanger", behave="hang", timeout_s=2)},
        both("after_hang"),
        {"base": kernel_job("raiser", behave="error"), "pr": None},
    ]
    record = run_round(plan(tmp_path, blocks), 1, ["base", "pr"], say=lambda _: None)

    visits = {(v.side, v.item.split("/")[1][:-3]): v for v in record.visits}
    assert "SIGSEGV" in visits["base", "crasher"].error and visits["base", "crasher"].samples == []
    assert visits["pr", "crasher"].error == ""
    assert "timeout" in visits["pr", "hanger"].error
    assert visits["base", "after_crash"].samples == [1.0] * 3 and visits["pr", "after_hang"].samples == [2.0] * 3
    assert visits["base", "raiser"].error == "RuntimeError: the kernel raised"
    # The second visit of a job that killed its worker is skipped: one restart, not two (nor two timeouts).
    assert record.workers["base"]["starts"] == 2 and record.workers["pr"]["starts"] == 2
    assert [v.error for v in record.visits if v.item.endswith("crasher.py") and v.side == "base"] == \
        [visits["base", "crasher"].error] * 2
    assert [v.position for v in record.visits if v.block == 4] == [0, 1]  # a one-sided block: its side twice


@pytest.mark.integration
def test_models_are_prepared_first_and_re_prepared_after_a_crash(tmp_path: Path) -> None:
    prepare = [{"kind": "prepare", "model": m, "timeout_s": 30, "compile_s": 1.5} for m in ("A", "B", "C")]
    time_job = {"kind": "time", "iterations": 2, "timeout_s": 30}
    blocks = [{"base": {**time_job, "model": "A", "behave": "crash"}, "pr": {**time_job, "model": "A"}},
              {"base": {**time_job, "model": "B"}, "pr": {**time_job, "model": "B"}},
              {"base": {**time_job, "model": "C"}, "pr": {**time_job, "model": "C"}}]
    record = run_round(plan(tmp_path, blocks, kind="models", prepare=prepare), 1, ["base", "pr"],
                       say=lambda _: None)

    errors = {(v.side, v.item): v.error for v in record.visits}
    assert "SIGSEGV" in errors["base", "A"]
    assert all(not e for key, e in errors.items() if key != ("base", "A"))
    log = (tmp_path / "base.log").read_text()
    assert log.count("prepare B") == 2  # the restarted worker prepared its models again before timing B
    # Each prepare names the models prepared after it in that worker (the model worker builds them first).
    later = [line.split()[1] for line in log.splitlines() if line.startswith("later ")]
    assert later == ["B,C", "C", "-", "C", "-"]  # the restarted worker: A failed, so B and C
    assert (tmp_path / "pr.log").read_text().count("prepare B") == 1
    # Every compile is recorded with its first call's time: the report shows their spread per model and side.
    assert record.compiles["base"]["B"] == [1.5, 1.5] and record.compiles["pr"]["B"] == [1.5]
    write_round(tmp_path / "round.json", record)
    assert read_round(tmp_path / "round.json").compiles == record.compiles


@pytest.mark.integration
def test_each_worker_start_records_when_it_was_ready_what_its_imports_and_prepares_took(tmp_path: Path) -> None:
    prepare = [{"kind": "prepare", "model": m, "timeout_s": 30, "compile_s": 1.5} for m in ("A", "B")]
    blocks = [{side: {"kind": "time", "model": m, "iterations": 2, "timeout_s": 30} for side in ("base", "pr")}
              for m in "AB"]
    record = run_round(plan(tmp_path, blocks, kind="models", prepare=prepare), 1, ["base", "pr"],
                       say=lambda _: None)

    first_visit = min(v.started_s for v in record.visits)
    for side in ("base", "pr"):
        (startup,) = record.workers[side]["startups"]  # benchmarks/round_cost.py splits the round with these
        assert 0 <= startup["at_s"] < startup["pinned_at_s"] <= first_visit
        # The stand-in worker imports nothing heavy: its imports may round to 0.000 s.
        assert isinstance(startup["imports_s"], float) and 0 <= startup["imports_s"] <= startup["ready_s"]
        assert [p["items"] for p in startup["prepares"]] == [["A"], ["B"]]
        assert all(p["compile_s"] == 1.5 and p["wall_s"] >= 0 for p in startup["prepares"])
    write_round(tmp_path / "round.json", record)
    assert read_round(tmp_path / "round.json").workers == record.workers


@pytest.mark.integration
def test_model_groups_get_fresh_workers_and_a_failed_prepare_fails_only_its_model(tmp_path: Path) -> None:
    prepare = [{"kind": "prepare", "model": "A", "timeout_s": 30},
               {"kind": "prepare", "model": "B", "timeout_s": 30, "behave": "error"},
               {"kind": "prepare", "model": "C", "timeout_s": 30}]
    blocks = [{side: {"kind": "time", "model": m, "timeout_s": 30} for side in ("base", "pr")} for m in "ABC"]
    record = run_round(plan(tmp_path, blocks, kind="models", prepare=prepare, groups=[["A", "B"], ["C"]]), 1,
                       ["base", "pr"], say=lambda _: None)

    errors = {(v.side, v.item): v.error for v in record.visits}
    assert errors["base", "B"] == "prepare: RuntimeError: the kernel raised"
    assert errors["base", "A"] == errors["base", "C"] == ""
    assert record.workers["base"]["starts"] == 2  # one fresh worker per group
    assert "prepare C" not in (tmp_path / "base.log").read_text().split("prepare B")[0]


@pytest.mark.integration
def test_one_side_only_times_that_sides_jobs(tmp_path: Path) -> None:
    blocks = [both("k0"), {"base": None, "pr": kernel_job("only_pr")}]
    record = run_round(plan(tmp_path, blocks), 2, ["pr"], say=lambda _: None)

    assert record.sides == ["pr"] and set(record.workers) == {"pr"}
    assert [(v.side, v.block, v.position) for v in record.visits] == [("pr", 0, 0), ("pr", 0, 1), ("pr", 1, 0),
                                                                     ("pr", 1, 1)]


def run_stage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stages.paired", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.integration
def test_the_stage_writes_the_round_file(tmp_path: Path) -> None:
    write_plan(tmp_path / "plan.json", plan(tmp_path, [both("k0")]))
    result = run_stage("--plan", str(tmp_path / "plan.json"), "--round", "3", "--out", str(tmp_path / "r.json"))

    assert result.returncode == 0, result.stderr
    assert "[pair] 1/1 k0.py: ok" in result.stdout
    record = read_round(tmp_path / "r.json")
    assert record.round == 3 and len(record.visits) == 4  # A B B A
    assert read_plan(tmp_path / "plan.json").blocks[0]["base"]["kernels"] == {"k0": "pointwise/k0.py"}


@pytest.mark.parametrize("content, expected", [
    ("not json", "cannot read the plan"),
    (json.dumps({"kind": "kernels"}), "not a paired timing plan"),
    (json.dumps({"kind": "laps", "worker": FAKE, "device": "cpu", "sides": {}, "blocks": []}), "kind 'laps'"),
    (json.dumps({"kind": "kernels", "worker": FAKE, "device": "cpu", "sides": {"base": {"env": {}, "log": "l"}},
                 "blocks": [{"base": None}]}), "block 0 has no job"),
])
@pytest.mark.integration
def test_a_bad_plan_is_one_line_naming_the_file(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "plan.json"
    path.write_text(content)
    result = run_stage("--plan", str(path), "--round", "1", "--out", str(tmp_path / "r.json"))

    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: --plan {path}: ") and expected in lines[0]
    assert not (tmp_path / "r.json").exists()


@pytest.mark.integration
def test_a_side_the_plan_lacks_is_one_line(tmp_path: Path) -> None:
    one_side = plan(tmp_path, [{"base": kernel_job("k0")}])
    del one_side.sides["pr"]
    write_plan(tmp_path / "plan.json", one_side)
    result = run_stage("--plan", str(tmp_path / "plan.json"), "--round", "1", "--out", str(tmp_path / "r.json"))

    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: --plan {tmp_path / 'plan.json'}: no worker environment for side pr "
                                     "(--sides base,pr)")
