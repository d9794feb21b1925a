"""A worker that answers garbage on its result channel costs exactly one kernel: that kernel gets a failure row
naming the protocol error, the worker is restarted, and the next kernel is timed normally."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from foundation.formats.stage_records import Job, Plan, SidePlan
from stages.kernels import run_jobs
from stages.paired import run_round
from stages.support.worker_process import Worker, WorkerProtocolError, reply_outcomes

ROOT = Path(__file__).resolve().parents[1]
FAKE = "tests.support.fake_paired_worker"


def fake_worker(tmp_path: Path, name: str = "worker0[cpu]") -> Worker:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return Worker(name, FAKE, env, tmp_path / f"{name}.log")


def job(number: int, behaviour: str) -> Job:
    """A kernels job whose file name tells the fake worker how to misbehave."""
    return Job(number, "triton", f"/organized/{behaviour}.py", {f"k{number}": f"pointwise/k{number}.py"}, 0, 3, 30.0)


@pytest.mark.parametrize("broken", ["garbage", "half", "list"])
@pytest.mark.integration
def test_a_garbled_reply_fails_one_kernel_and_the_next_kernel_runs(tmp_path: Path, broken: str) -> None:
    worker = fake_worker(tmp_path)
    lines: list[str] = []

    outcomes = run_jobs([job(0, "ok"), job(1, broken), job(2, "ok")], [worker], progress=lines.append)

    assert outcomes["pointwise/k0.py"].samples == [1.0, 1.0, 1.0]
    assert outcomes["pointwise/k1.py"].samples == []
    assert outcomes["pointwise/k1.py"].error.startswith("protocol error: the worker's reply while running it")
    assert "worker restarted" in outcomes["pointwise/k1.py"].error
    # The real reply that followed the garbage must not be taken as k2's: k2 ran in a fresh worker.
    assert outcomes["pointwise/k2.py"] == type(outcomes["pointwise/k2.py"])(samples=[1.0, 1.0, 1.0], error="")
    assert worker.starts == 2
    assert len(lines) == 3  # every job reported: no driver thread died


@pytest.mark.integration
def test_nan_samples_fail_that_kernel_with_the_reason(tmp_path: Path) -> None:
    outcomes = run_jobs([job(0, "nan"), job(1, "ok")], [fake_worker(tmp_path)], progress=lambda _: None)

    assert outcomes["pointwise/k0.py"].error == (
        "bad reply: results['k0'].samples[0]: expected milliseconds ≥ 0, found nan")
    assert outcomes["pointwise/k1.py"].samples == [1.0, 1.0, 1.0]


@pytest.mark.integration
def test_the_worker_itself_raises_a_protocol_error_and_is_stopped(tmp_path: Path) -> None:
    worker = fake_worker(tmp_path)
    worker.start()

    with pytest.raises(WorkerProtocolError, match=r"not a JSON object \(\[1, 2, 3\]\)"):
        worker.run({"kernels": {"k": "k.py"}, "behave": "list"}, 30.0)

    assert not worker.alive
    assert worker.run({"kernels": {"k": "k.py"}}, 30.0) == {"results": {"k": {"samples": [1.0, 1.0, 1.0]}}}
    worker.stop()


@pytest.mark.parametrize(("reply", "error"), [
    ({"results": []}, "bad reply: 'results' is not an object (list)"),
    ({"results": {"k": 3}}, "bad reply: results['k'] is not an object (int)"),
    ({"results": {"k": {"samples": "12"}}}, "bad reply: results['k'].samples: expected a list, found '12'"),
    ({"results": {"k": {"samples": [1, -2]}}}, "bad reply: results['k'].samples[1]: expected milliseconds ≥ 0, "
                                               "found -2"),
    ({"error": {"x": 1}}, "bad reply: 'error' is not text (dict)"),
    ({"results": {}}, "no samples in the worker's reply"),
])
def test_a_mis_shaped_reply_is_an_error_for_its_items(reply: dict[str, object], error: str) -> None:
    assert reply_outcomes(reply, ["k"]) == {"k": ([], error)}


@pytest.mark.integration
def test_a_paired_round_records_a_garbled_reply_as_one_error_visit(tmp_path: Path) -> None:
    def kernel_job(name: str, behave: str) -> dict[str, object]:
        return {"path": f"/organized/{name}.py", "kernels": {name: f"pointwise/{name}.py"}, "behave": behave,
                "iterations": 3, "timeout_s": 30.0}

    sides = {side: SidePlan(env={"PYTHONPATH": str(ROOT)}, log=str(tmp_path / f"{side}.log"))
             for side in ("base", "pr")}
    blocks = [{"base": kernel_job("a", "garbage"), "pr": kernel_job("a", "ok")},
              {"base": kernel_job("b", "ok"), "pr": kernel_job("b", "ok")}]

    record = run_round(Plan(kind="kernels", worker=FAKE, device="cpu", sides=sides, blocks=blocks), 1,
                       ["base", "pr"], say=lambda _: None)

    base = [v for v in record.visits if v.side == "base"]
    assert {v.item for v in base if v.error.startswith("protocol error")} == {"pointwise/a.py"}
    assert all(v.samples == [1.0, 1.0, 1.0] and not v.error for v in base if v.item == "pointwise/b.py")
