"""benchmarks/round_cost.py over round files written here: where a round's wall time went, phase by phase."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from foundation.formats.paired_rounds import RoundRecord, Visit, round_file, write_round

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import round_cost  # noqa: E402


def startup(at_s: float, ready_s: float, imports_s: float, prepares: list[dict[str, object]],
            pinned_at_s: float) -> dict[str, object]:
    return {"at_s": at_s, "ready_s": ready_s, "imports_s": imports_s, "prepares": prepares,
            "pinned_at_s": pinned_at_s}


def model_round(number: int = 1) -> RoundRecord:
    """Both sides: 1 s to start (0.8 s of it imports), one model built in 0.5 s, first call 2 s, warm-up 0.5 s;
    then 4 visits of 1 s each, of which 0.25 s are samples, and the round ends with the last one."""
    prepare = {"items": ["M"], "build_s": 0.5, "compile_s": 2.0, "warmup_s": 0.5, "wall_s": 3.0}
    workers = {side: {"startups": [startup(0.0, 1.0, 0.8, [prepare], 4.0)]} for side in ("base", "pr")}
    visits = [Visit(side, "M", 0, i, 4.0 + i, [62.5] * 4) for i, side in enumerate(("base", "pr", "pr", "base"))]
    return RoundRecord(kind="models", round=number, sides=["base", "pr"], started_at="", wall_s=8.0,
                       workers=workers, visits=visits)


def write_run(runs: Path, run_id: str, records: list[RoundRecord]) -> None:
    for record in records:
        write_round(round_file(runs / run_id / "pair" / record.kind, record.round), record)


def test_a_model_round_splits_into_start_imports_build_first_call_warmup_and_visits() -> None:
    cost = round_cost.round_cost(model_round())

    assert cost.phases[round_cost.START] == pytest.approx(0.2)
    assert cost.phases[round_cost.IMPORTS] == pytest.approx(0.8)
    assert cost.phases[round_cost.BUILD] == pytest.approx(0.5)
    assert cost.phases[round_cost.FIRST] == pytest.approx(2.0)
    assert cost.phases[round_cost.WARMUP] == pytest.approx(0.5)
    assert cost.phases[round_cost.SAMPLES] == pytest.approx(1.0)
    assert cost.phases[round_cost.VISIT_REST] == pytest.approx(3.0)
    assert sum(cost.phases.values()) == pytest.approx(cost.wall_s)
    assert cost.share(round_cost.FIRST) == pytest.approx(2 / 8)


def test_a_round_recorded_before_the_startup_timestamps_splits_at_its_first_visit() -> None:
    old = model_round()
    old.workers = {"base": {"pids": [1]}, "pr": {"pids": [2]}}

    cost = round_cost.round_cost(old)

    assert cost.phases[round_cost.BEFORE_VISITS] == pytest.approx(4.0)
    assert cost.phases[round_cost.FIRST] == 0
    assert sum(cost.phases.values()) == pytest.approx(cost.wall_s)


def test_a_round_merged_from_two_shards_is_split_shard_by_shard_on_each_shards_clock() -> None:
    from foundation.formats.round_shards import merge_shards

    shards = []
    for index in range(2):
        record = model_round()
        record.visits = [Visit(v.side, f"M{index}", index, v.position, v.started_s, v.samples) for v in record.visits]
        record.shards = [{"blocks": [index], "sides": ["base", "pr"], "wall_s": 8.0}]
        shards.append(record)

    costs = [round_cost.round_cost(r) for r in round_cost.shard_records(merge_shards(shards))]

    assert len(costs) == 2
    for cost in costs:  # each shard as one round of its own: 2 s first call, 1 s samples out of 8 s
        assert cost.phases[round_cost.FIRST] == pytest.approx(2.0)
        assert cost.phases[round_cost.SAMPLES] == pytest.approx(1.0)
        assert sum(cost.phases.values()) == pytest.approx(8.0)


def test_the_script_prints_each_phase_as_seconds_and_share_per_kind(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path, "r1", [model_round(1), model_round(2)])

    assert round_cost.main(["--run", "r1", "--runs-dir", str(tmp_path)]) == 0

    out = capsys.readouterr().out
    assert "models: 2 rounds, wall 8.0 s per round" in out
    first_call = next(line for line in out.splitlines() if line.strip().startswith(round_cost.FIRST))
    assert "2.00 s" in first_call and "25.0%" in first_call


def test_a_run_without_paired_rounds_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r1").mkdir()

    assert round_cost.main(["--run", "r1", "--runs-dir", str(tmp_path)]) == 2

    err = capsys.readouterr().err
    assert err.startswith("error: --run r1: expected a run with paired rounds") and err.count("\n") == 1


def test_measure_runs_fresh_aa_comparisons_and_splits_each(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    import foundation.formats.suite_request

    requests: list[argparse.Namespace] = []

    def run_compare(request: argparse.Namespace, console: object = None) -> None:
        requests.append(request)
        write_run(request.runs_dir, request.run_id, [model_round(n) for n in range(1, request.rounds + 1)])

    module = types.ModuleType("prbench.compare.driver")
    module.CompareRequest, module.run_compare = argparse.Namespace, run_compare  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "prbench.compare.driver", module)
    monkeypatch.setattr(foundation.formats.suite_request.SuiteRequest, "validate", lambda self: ["BertForMaskedLM"])

    assert round_cost.main(["--measure", "--repeat", "2", "--rounds", "2", "--runs-dir", str(tmp_path)]) == 0

    out = capsys.readouterr().out
    assert [(r.base, r.pr, r.rounds) for r in requests] == [("installed", "installed", 2)] * 2
    assert requests[0].suite.models == round_cost.DEFAULT_MODELS and requests[0].run_id != requests[1].run_id
    assert out.count("models: 2 rounds, wall 8.0 s per round") == 2
    assert "all 2 runs together" in out and "models: 4 rounds" in out
