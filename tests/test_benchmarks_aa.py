"""benchmarks/aa_noise.py over synthetic report summaries, and benchmarks/background_load.py's bounds.

No torch compile: the A/A runs are summary.json files written here (the report's contract), and the measuring
path runs against a stand-in for `run_compare`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import aa_noise  # noqa: E402
from background_load import BackgroundLoad, DutySchedule, LoadSettings  # noqa: E402

# --- synthetic summaries ----------------------------------------------------------------------------------


def side_block(verdict: str = "equivalent", geomean: float = 1.0, low: float | None = 0.99,
               high: float | None = 1.01, n: int = 100, improved: int = 0, regressed: int = 0,
               equivalent: int = 90) -> dict[str, Any]:
    return {"verdict": verdict, "geomean": geomean, "ci_low": low, "ci_high": high, "confidence": 0.95, "n": n,
            "improved": improved, "regressed": regressed, "equivalent": equivalent,
            "inconclusive": n - improved - regressed - equivalent}


def control_block(passed: bool = True, kind: str = "identical kernels") -> dict[str, Any]:
    return {"kind": kind, "geomean": 1.0, "ci_low": 0.99, "ci_high": 1.01, "n": 50, "false_positive_share": 0.0,
            "passed": passed}


def summary(kernels: dict | None = None, models: dict | None = None, verdict: str | None = None,
            control_passed: bool = True) -> dict[str, Any]:
    kernels = side_block() if kernels is None else kernels
    models = side_block(n=4, equivalent=3, low=0.97, high=1.03) if models is None else models
    return {
        "verdict": verdict or "**Verdict:** kernels neutral within ±2 % (geomean 1.000×); models neutral within ±2 %.",
        "kernels": kernels, "models": models,
        "control": {"kernels": control_block(control_passed), "models": control_block(True, "split-half"),
                    "passed": control_passed, "resolution_pct": 1.5},
        "gates": [], "settings": {"confidence": 0.95, "margin": 0.02},
    }


def regressed_summary(verdict: str = "regressed") -> dict[str, Any]:
    kernels = side_block(verdict, 0.78, 0.76, 0.80, improved=0, regressed=80, equivalent=0)
    return summary(kernels=kernels, verdict="**Verdict:** kernels 22.0 % slower (geomean 0.780×).")


def write_run(runs: Path, run_id: str, data: dict[str, Any]) -> str:
    path = runs / run_id / "report" / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return run_id


def run_args(runs: Path, ids: list[str], positives: list[str] = (), *extra: str) -> list[str]:
    argv = ["--runs-dir", str(runs)]
    for run_id in ids:
        argv += ["--run", run_id]
    for run_id in positives:
        argv += ["--positive-run", run_id]
    return [*argv, *extra]


# --- aggregation and the gate -----------------------------------------------------------------------------


def test_clean_repeats_pass_the_gate_and_the_totals_say_why(tmp_path: Path, capsys) -> None:
    ids = [write_run(tmp_path, f"aa{i}", summary(kernels=side_block(improved=i, regressed=1))) for i in range(3)]
    pcs = [write_run(tmp_path, f"pc{i}", regressed_summary()) for i in range(3)]

    code = aa_noise.main(run_args(tmp_path, ids, pcs, "--max-flagged-share", "0.05", "--json",
                                  str(tmp_path / "aa.json")))

    out = capsys.readouterr().out
    assert code == 0, out
    assert sum(line.startswith("#") for line in out.splitlines()) == 3  # one line per repeat
    assert "kernels: CI contains 1.0 in 3/3 runs; max flagged 3.0%; mean equivalent 90.0%" in out
    assert "models: CI contains 1.0 in 3/3 runs" in out
    assert "verdict lines saying faster/slower: 0/3" in out
    assert "stable 'regressed': yes" in out and "A/A gate passed" in out
    numbers = json.loads((tmp_path / "aa.json").read_text())
    assert numbers["gate"]["passed"] and numbers["totals"]["problems"] == []
    assert numbers["totals"]["kernels"]["ci_contains_one"] == 3
    assert numbers["totals"]["positive_control"] == {"kernel_verdicts": ["regressed"] * 3, "stable": True}
    assert numbers["repeats"][2]["aa"]["kernels"]["flagged_share"] == pytest.approx(0.03)


def test_one_run_whose_interval_excludes_one_fails_the_gate(tmp_path: Path, capsys) -> None:
    ids = [write_run(tmp_path, "aa1", summary()),
           write_run(tmp_path, "aa2", summary(kernels=side_block(geomean=1.02, low=1.005, high=1.035)))]

    code = aa_noise.main(run_args(tmp_path, ids, [], "--max-flagged-share", "0.05"))

    out = capsys.readouterr().out
    assert code == 1
    assert "kernels: CI contains 1.0 in 1/2 runs" in out
    assert "repeat 2 (aa2): kernels CI 1.0050-1.0350 excludes 1.0" in out and "A/A gate FAILED" in out


def test_a_verdict_line_that_says_faster_fails_the_gate(tmp_path: Path, capsys) -> None:
    line = "**Verdict:** kernels 2.1 % faster (geomean 1.021×); models neutral within ±2 %."
    ids = [write_run(tmp_path, "aa1", summary()), write_run(tmp_path, "aa2", summary(verdict=line))]

    code = aa_noise.main(run_args(tmp_path, ids, [], "--max-flagged-share", "0.5"))

    out = capsys.readouterr().out
    assert code == 1
    assert "verdict lines saying faster/slower: 1/2" in out and "repeat 2 (aa2): verdict line says" in out


def test_flagged_share_above_the_limit_fails_the_gate(tmp_path: Path) -> None:
    ids = [write_run(tmp_path, "aa1", summary(kernels=side_block(improved=4, regressed=3)))]

    assert aa_noise.main(run_args(tmp_path, ids, [], "--max-flagged-share", "0.05")) == 1
    assert aa_noise.main(run_args(tmp_path, ids, [], "--max-flagged-share", "0.10")) == 0


@pytest.mark.parametrize("verdicts", [
    ["regressed", "inconclusive", "regressed"],  # one repeat missed it
    ["equivalent", "equivalent", "equivalent"],  # stable, but not a regression (e.g. no AVX-512)
])
def test_an_unstable_positive_control_fails_the_gate(tmp_path: Path, capsys, verdicts: list[str]) -> None:
    ids = [write_run(tmp_path, f"aa{i}", summary()) for i in range(3)]
    pcs = [write_run(tmp_path, f"pc{i}", regressed_summary(v) if v == "regressed" else summary(
        kernels=side_block(v))) for i, v in enumerate(verdicts)]

    code = aa_noise.main(run_args(tmp_path, ids, pcs, "--max-flagged-share", "0.05"))

    out = capsys.readouterr().out
    assert code == 1
    assert f"positive control kernel verdicts: {', '.join(verdicts)} -> stable 'regressed': NO" in out


def test_without_the_gate_problems_are_shown_but_do_not_fail(tmp_path: Path, capsys) -> None:
    regressed = side_block("regressed", 0.9, 0.88, 0.92, regressed=50, equivalent=10)
    ids = [write_run(tmp_path, "aa1", summary(kernels=regressed))]

    assert aa_noise.main(run_args(tmp_path, ids)) == 0
    assert "problem: repeat 1 (aa1): kernels verdict 'regressed' in an A/A comparison" in capsys.readouterr().out


def test_a_side_without_data_or_interval_is_reported_not_mistaken(tmp_path: Path) -> None:
    data = summary(kernels=side_block(low=None, high=None))
    data["models"] = None
    repeat = aa_noise.Repeat(1, aa_noise.parse_summary(data, "aa1"))

    totals = aa_noise.aggregate([repeat], max_flagged_share=0.05)

    assert totals.sides["models"] is None
    assert totals.sides["kernels"].no_interval == 1 and totals.sides["kernels"].ci_contains_one == 0
    assert totals.problems == ["repeat 1 (aa1): kernels has no interval"]


def test_the_controls_of_each_run_are_counted(tmp_path: Path) -> None:
    repeats = [aa_noise.Repeat(i, aa_noise.parse_summary(summary(control_passed=i != 2), f"aa{i}"))
               for i in range(1, 4)]

    totals = aa_noise.aggregate(repeats)

    assert (totals.sides["kernels"].controls_passed, totals.sides["kernels"].controls_known) == (2, 3)
    assert "control FAIL" in aa_noise.repeat_line(repeats[1])


@pytest.mark.parametrize(("argv", "message"), [
    ([], "give exactly one input"),
    (["--run", "x", "--load"], "--load: only with --measure"),
    (["--run", "x", "--positive-control"], "--positive-control: only with --measure"),
    (["--run", "x", "--rounds", "5"], "--rounds: only with --measure"),
    (["--run", "x", "--size", "full"], "--size: only with --measure"),
    (["--measure", "--size", "huge"], "--size 'huge': expected one of tiny, small, full"),
    (["--measure", "--dtype", "fp8"], "--dtype 'fp8': expected one of float32, bfloat16, float16, amp"),
    (["--measure", "--mode", "train"], "--mode 'train': expected one of inference, training"),
    (["--run", "x", "--mode", "training"], "--mode: only with --measure"),
    (["--run", "x", "--env", "A=1"], "--env: only with --measure"),
    (["--measure", "--env", "A"], "--env 'A': expected KEY=VALUE"),
    (["--measure", "--inductor-config", "triton.cudagraphs=False"],
     "--inductor-config: inductor config 'triton.cudagraphs': expected bool"),
    (["--measure", "--rounds", "2"], "--rounds 2: at least 3 rounds"),
    (["--measure", "--repeat", "0"], "--repeat 0: expected at least 1"),
    (["--measure", "--margin", "2"], "--margin 2.0"),
    (["--run", "a", "--positive-run", "b", "--positive-run", "c"], "--positive-run: with --run only, one per"),
    (["--run", "missing"], "runs/missing/report/summary.json: not found"),
    (["--run", "x", "--max-flagged-share", "1.5"], "--max-flagged-share 1.5"),
    (["--run", "x", "--repeat", "many"], "argument --repeat: invalid int value"),
])
def test_user_mistakes_are_one_line_and_exit_2(tmp_path: Path, capsys, monkeypatch, argv, message) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        code = aa_noise.main(argv)
    except SystemExit as exc:  # argparse's own checks
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1


def test_a_full_size_half_precision_aa_asks_the_suite_for_that_size_and_dtype() -> None:
    """The GPU check's A/A runs full-size models in bfloat16: the plan carries both to the suite request."""
    plan = aa_noise.plan_from(aa_noise.build_parser().parse_args(
        ["--measure", "--models", "BertForMaskedLM", "--size", "full", "--dtype", "bfloat16"]))

    assert (plan.models, plan.size, plan.dtype) == ("BertForMaskedLM", "full", "bfloat16")
    assert "models BertForMaskedLM (full, inference, bfloat16)" in aa_noise.header(plan)


def test_a_malformed_summary_is_a_user_error(tmp_path: Path, capsys) -> None:
    write_run(tmp_path, "bad", {"verdict": "x", "kernels": {"verdict": "equivalent", "n": "many"}})

    assert aa_noise.main(run_args(tmp_path, ["bad"])) == 2
    assert "not a report summary (n: expected a count" in capsys.readouterr().err


# --- the measuring path, against a stand-in for run_compare ----------------------------------------------


@dataclass
class FakeRequest:
    base: str
    pr: str
    recipe: Any
    runs_dir: Path
    run_id: str | None = None
    suite: Any = None
    rounds: int | None = None
    auto_rounds: bool = False
    passes: int | None = None
    stats: Any = None
    env: dict[str, str] = field(default_factory=dict)
    inductor_config: dict[str, Any] = field(default_factory=dict)


def stand_in(monkeypatch: pytest.MonkeyPatch, run_compare: Any) -> None:
    """prbench.compare.driver replaced by the contract it offers (CompareRequest with rounds and stats, run_compare)."""
    import foundation.formats.suite_request

    module = types.ModuleType("prbench.compare.driver")
    module.CompareRequest, module.run_compare = FakeRequest, run_compare
    monkeypatch.setitem(sys.modules, "prbench.compare.driver", module)
    monkeypatch.setattr(foundation.formats.suite_request.SuiteRequest, "validate", lambda self: ["BertForMaskedLM"])


def test_an_aa_of_the_seeds_experiment_runs_it_with_the_compares_settings(tmp_path: Path, capsys,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU check's A/A repeats the seed's experiment: trained in AMP, cudagraphs off, and the recipe's
    [suite.env] (pointwise autotuning) under the --env flags, as invoke compare runs it."""
    seen: list[FakeRequest] = []

    def fake_run_compare(request: FakeRequest, console: Any = None) -> tuple[Any, Any]:
        seen.append(request)
        write_run(request.runs_dir, request.run_id, summary())
        return None, None

    stand_in(monkeypatch, fake_run_compare)
    recipe = tmp_path / "local-seed.toml"
    recipe.write_text('platform = "cpu"\nrunner = "local"\n[pytorch]\n'
                      'source = "https://github.com/pytorch/pytorch.git"\ncommit = "installed"\n'
                      '[suite.env]\nTORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE = "1"\nOMP_NUM_THREADS = "2"\n')

    code = aa_noise.main(["--measure", "--recipe", str(recipe), "--rounds", "3", "--models", "BertForMaskedLM",
                          "--mode", "training", "--dtype", "amp", "--inductor-config", "triton.cudagraphs=false",
                          "--env", "OMP_NUM_THREADS=1", "--run", "s", "--runs-dir", str(tmp_path / "runs")])

    assert code == 0, capsys.readouterr()
    (request,) = seen
    assert (request.suite.mode, request.suite.dtype) == ("training", "amp")
    assert request.inductor_config == {"triton.cudagraphs": False}
    assert request.env == {"TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE": "1", "OMP_NUM_THREADS": "1"}
    assert "(tiny, training, amp, OMP_NUM_THREADS=1, triton.cudagraphs=False)" in capsys.readouterr().out


@pytest.mark.integration
def test_measure_runs_fresh_aa_and_positive_comparisons_under_load(tmp_path: Path, capsys, monkeypatch) -> None:
    seen: list[tuple[FakeRequest, list[int]]] = []

    def fake_run_compare(request: FakeRequest, console: Any = None) -> tuple[Any, Any]:
        print("stage output that belongs in the log")
        seen.append((request, _load_workers(expected=2)))
        data = summary() if request.pr == "installed" else regressed_summary()
        write_run(request.runs_dir, request.run_id, data)
        return None, None

    stand_in(monkeypatch, fake_run_compare)

    code = aa_noise.main(["--measure", "--repeat", "2", "--rounds", "4", "--load", "--positive-control",
                          "--run", "t", "--runs-dir", str(tmp_path), "--max-flagged-share", "0.05"])

    out = capsys.readouterr().out
    assert code == 0, out
    assert [(r.run_id, r.pr == "installed") for r, _ in seen] == [("t-aa1", True), ("t-pc1", False),
                                                                 ("t-aa2", True), ("t-pc2", False)]
    assert all(r.rounds == 4 and not r.auto_rounds and r.passes is None and r.base == "installed"
               and r.stats.margin == 0.02 for r, _ in seen)
    # Without --rounds the A/A measures what invoke compare does by default: adaptive rounds.
    default = aa_noise.plan_from(aa_noise.build_parser().parse_args(["--measure"]))
    assert (default.rounds, default.auto) == (None, True)
    assert seen[1][0].pr == str(aa_noise.EXAMPLE_PATCH)
    assert seen[0][0].suite.models == aa_noise.DEFAULT_MODELS
    assert (seen[0][0].suite.size, seen[0][0].suite.dtype) == ("tiny", "float32")  # invoke compare's defaults
    assert all(len(pids) == 2 for _, pids in seen)  # the default load: two workers during every comparison
    assert not any(_alive(pid) for _, pids in seen for pid in pids)  # and none after
    assert "stage output" not in out and "stage output" in (tmp_path / "t.log").read_text()
    assert "stable 'regressed': yes" in out


def _children() -> list[int]:
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == me:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _load_workers(expected: int, wait_s: float = 10.0) -> list[int]:
    """The children running background_load.py, once ``expected`` of them show (or after ``wait_s``). A child's
    /proc cmdline reads empty for a moment after Popen returns (the kernel lets the parent go on before it has set
    up the new program's arguments): on a loaded box, about half of the reads made at once."""
    deadline = time.monotonic() + wait_s
    while True:
        found = [pid for pid in _children() if _is_load_worker(pid)]
        if len(found) >= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def _is_load_worker(pid: int) -> bool:
    try:
        return b"background_load.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


# --- background load --------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    """Running (a zombie that nobody reaped yet does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_gone(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.integration
def test_background_load_starts_and_stops_within_a_second_or_two(capsys) -> None:
    begin = time.monotonic()
    with BackgroundLoad(workers=2, min_duty=0.05, max_duty=0.3, period_s=2, max_seconds=60) as load:
        pids = load.pids
        time.sleep(0.3)
        assert len(pids) == 2 and all(_alive(pid) for pid in pids)
        assert time.monotonic() - begin < 2
    assert _wait_gone(pids, 2.0)
    assert time.monotonic() - begin < 3
    assert "background load: 2 worker(s), duty 5%-30%" in capsys.readouterr().out


@pytest.mark.integration
def test_background_load_stops_by_itself_after_max_seconds() -> None:
    load = BackgroundLoad(workers=1, min_duty=0.05, max_duty=0.2, max_seconds=0.5, quiet=True).start()
    try:
        (process,) = load.processes
        # Nobody stopped it: it ended at its own deadline, 0.5 s after its start-up (a Python process; a busy
        # two-core machine stretches that to seconds). Left alone it would run until its parent is gone.
        assert process.wait(timeout=30) == 0
    finally:
        load.stop()


@pytest.mark.integration
def test_background_load_ends_when_its_parent_is_killed(tmp_path: Path) -> None:
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); from background_load import BackgroundLoad; "
            "load = BackgroundLoad(workers=1, min_duty=0.05, max_duty=0.2, max_seconds=60, quiet=True).start(); "
            "print(load.pids[0], flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code, str(ROOT / "benchmarks")], stdout=subprocess.PIPE,
                              text=True)
    try:
        worker = int(parent.stdout.readline())
        assert _alive(worker)
        parent.kill()  # no `with` exit runs: the worker must notice on its own
        parent.wait()
        assert _wait_gone([worker], 2.0)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


def test_background_load_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="--min-duty"):
        BackgroundLoad(min_duty=0.8, max_duty=0.5).start()
    with pytest.raises(ValueError, match="--workers"):
        BackgroundLoad(workers=0).start()
    with pytest.raises(ValueError, match="--max-seconds"):
        BackgroundLoad(max_seconds=0).start()


def test_the_duty_cycle_moves_within_its_bounds() -> None:
    import random

    schedule = DutySchedule(LoadSettings(min_duty=0.2, max_duty=0.9, period_s=10), random.Random(1))
    duties = [schedule.duty(t * 0.05, 0.05) for t in range(2000)]  # 100 s of slices

    assert all(0.2 - 1e-9 <= d <= 0.9 + 1e-9 for d in duties)
    assert max(duties) - min(duties) > 0.5  # it changes within a comparison, not one steady level


def test_background_load_script_flags_are_checked(capsys) -> None:
    import background_load

    assert background_load.main(["--max-duty", "1.5"]) == 2
    assert capsys.readouterr().err.startswith("error: --min-duty 0.2 / --max-duty 1.5")


def test_a_failed_comparison_keeps_the_repeats_that_finished(tmp_path: Path, capsys, monkeypatch) -> None:
    from foundation.errors import UserError

    def fake_run_compare(request: FakeRequest, console: Any = None) -> tuple[Any, Any]:
        if request.run_id == "t-aa2":
            raise UserError("stage suite failed with exit code 1")
        write_run(request.runs_dir, request.run_id, summary())
        return None, None

    stand_in(monkeypatch, fake_run_compare)

    code = aa_noise.main(["--measure", "--repeat", "3", "--run", "t", "--runs-dir", str(tmp_path), "--json",
                          str(tmp_path / "aa.json")])

    captured = capsys.readouterr()
    assert code == 2 and captured.err == "error: stage suite failed with exit code 1\n"
    assert "A/A over 1 run(s)" in captured.out
    numbers = json.loads((tmp_path / "aa.json").read_text())
    assert numbers["input"]["stopped"].startswith("after 1 repeat(s)") and len(numbers["repeats"]) == 1


# --- the CSV mode: the report's own summary of two kernel tables -----------------------------------------


def test_csv_mode_reads_the_summary_the_report_would_write(tmp_path: Path, capsys) -> None:
    from tests.support.compare_data import kernel_specs, kernels_frame

    specs = kernel_specs(60, seed=24)
    for side, seed, factor in (("a", 25, None), ("b", 26, None), ("c", 27, dict.fromkeys(range(60), 1.3))):
        frame, samples = kernels_frame(specs, seed=seed, cv=0.03, factor=factor)
        frame.to_csv(tmp_path / f"{side}.csv", index=False)
        (tmp_path / f"{side}.json").write_text(json.dumps(samples))

    def check(pr: str) -> int:
        return aa_noise.main(["--base-csv", str(tmp_path / "a.csv"), "--pr-csv", str(tmp_path / f"{pr}.csv"),
                              "--samples-base", str(tmp_path / "a.json"), "--samples-pr", str(tmp_path / f"{pr}.json"),
                              "--max-flagged-share", "0.05", "--json", str(tmp_path / f"{pr}.out.json")])

    assert check("b") == 0, capsys.readouterr().out
    same = json.loads((tmp_path / "b.out.json").read_text())["repeats"][0]["aa"]
    assert same["kernels"]["ci_contains_one"] and same["kernels"]["n"] == 60 and not same["says_change"]
    # Nothing changed: the interval is the split-half's; the identical kernels' offset is shown beside it.
    assert same["kernels"]["verdict"] == "identical" and same["kernels"]["control_kind"] == "identical kernels"
    offset = same["kernels"]["offset"]
    assert offset[1] <= offset[0] <= offset[2] and (offset[1], offset[2]) != (same["kernels"]["ci_low"],
                                                                              same["kernels"]["ci_high"])
    assert check("c") == 1  # 30 % slower kernels are no A/A
    slower = json.loads((tmp_path / "c.out.json").read_text())["repeats"][0]["aa"]
    assert slower["kernels"]["verdict"] == "regressed" and slower["says_change"]


# --- runner_overhead: each method subtracts the calls it made ---------------------------------------------


def test_runner_overhead_counts_the_calls_prbench_recorded_in_either_samples_format() -> None:
    import runner_overhead

    flat = runner_overhead.recorded_calls({"a.py": [2.0], "b.py": [1.0, 3.0]})
    rounds = runner_overhead.recorded_calls({"a.py": [[2.0], [4.0]], "b.py": [[1.0, 3.0]], "c.py": []})

    assert flat == {"a.py": [2.0], "b.py": [1.0, 3.0]}
    assert rounds == {"a.py": [2.0, 4.0], "b.py": [1.0, 3.0], "c.py": []}


def test_runner_overhead_probe_wraps_the_seed_harness_call() -> None:
    import runner_overhead

    source = (runner_overhead.FIXTURES / f"{runner_overhead.SOURCES[0]}.py").read_text()
    probed = runner_overhead.add_probe(source)

    assert probed.index("def call(args):\n    begin") < probed.index("if __name__ == '__main__':")
    assert probed.replace(runner_overhead.CALL_PROBE, "") == source


def fixture_organized(root: Path) -> list[str]:
    """An organized directory of the triton213 fixture kernels (index rows as organize writes them, listed out of
    path order, with a C++ row among them); their relative paths, sorted."""
    import runner_overhead

    from analysis.kernels.identity import identify_triton
    from foundation.formats.kernel_index import IndexRow, write_index

    rows = [IndexRow("cpp", "cpp_fused_0", "h", "", "", "cpp/cpp_fused_0.cpp", 1, "", "cpp", "")]
    for source in sorted(runner_overhead.FIXTURES.glob("triton_*.py"), reverse=True):
        identity = identify_triton(source.read_text())
        relative = f"{identity.category}/{source.name}"
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(source.read_text())
        rows.append(IndexRow(identity.category, identity.kernel_name, identity.body_hash, identity.shape_key,
                             identity.legacy_key, relative, 1, "", "triton", ""))
    write_index(root / "index.csv", rows)
    return sorted(row.path for row in rows if row.backend == "triton")


@pytest.mark.parametrize("argv, message", [
    (["--organized", "{dir}"], "--organized needs --device"),
    (["--device", "0"], "--device needs --organized"),
    (["--organized", "{dir}", "--device", "gpu0"], "--device 'gpu0': expected a GPU index"),
    (["--organized", "{dir}", "--device", "0"], "--organized {dir}: no index.csv"),
    (["--organized", "{dir}", "--device", "0", "only-cpp"], "--organized {dir}: index.csv lists no Triton kernels"),
    (["--organized", "{dir}", "--device", "0", "file-gone"], "is in index.csv but not in the directory"),
])
def test_runner_overhead_gpu_mode_mistakes_are_one_line(tmp_path: Path, capsys, argv, message) -> None:
    import runner_overhead

    from foundation.formats.kernel_index import IndexRow, write_index

    if "only-cpp" in argv:
        write_index(tmp_path / "index.csv", [IndexRow("cpp", "k", "h", "", "", "cpp/k.cpp", 1, "", "cpp", "")])
    if "file-gone" in argv:
        fixture_organized(tmp_path)
        (tmp_path / "pointwise" / "triton_poi_fused_add_relu_sin_0.py").unlink()
    argv = [a.format(dir=tmp_path) for a in argv if a not in ("only-cpp", "file-gone")]
    with pytest.raises(SystemExit) as exc:  # before any kernel runs
        runner_overhead.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert message.format(dir=tmp_path) in err


def test_runner_overhead_gpu_mode_takes_the_first_triton_kernels_by_path(tmp_path: Path) -> None:
    import runner_overhead

    from analysis.kernels.benchmark_line import rewrite_benchmark_line
    from foundation.formats.kernel_index import read_index

    source = tmp_path / "organized"
    paths = fixture_organized(source)

    rows = runner_overhead.triton_rows(source, 3)
    assert [row.path for row in rows] == paths[:3]
    assert [row.path for row in runner_overhead.triton_rows(source, 10)] == paths  # all there are

    copy = tmp_path / "tmp" / "organized"
    seed_paths = runner_overhead.copy_organized(source, rows, copy)
    assert read_index(copy / "index.csv") == rows
    assert sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*.py")) == paths[:3]
    assert seed_paths == [tmp_path / "tmp" / "seed" / path for path in paths[:3]]
    for path, seed_path in zip(paths[:3], seed_paths, strict=True):
        timed = rewrite_benchmark_line((source / path).read_text(), rep=0, warmup=0)
        assert (copy / path).read_text() == timed
        assert seed_path.read_text() == runner_overhead.add_probe(timed)


def test_a_control_that_could_not_run_is_not_counted_as_passed() -> None:
    """The H100 A/A had 3 rounds: its models' split-half could not run (summary.json: available false, passed
    true, since nothing failed). The A/A says "-" for it and counts it in neither "passed" nor "known"."""
    data = summary()
    data["control"]["models"] = {**control_block(True, "split-half"), "available": False, "geomean": None,
                                 "reason": "3 round(s); a split-half needs at least 4 (two per half)"}
    repeats = [aa_noise.Repeat(1, aa_noise.parse_summary(data, "aa1"))]

    totals = aa_noise.aggregate(repeats)

    assert (totals.sides["models"].controls_passed, totals.sides["models"].controls_known) == (0, 0)
    assert (totals.sides["kernels"].controls_passed, totals.sides["kernels"].controls_known) == (1, 1)
    assert "models" in aa_noise.repeat_line(repeats[0]).split("|")[1] and "control -" in aa_noise.repeat_line(
        repeats[0]).split("|")[1]
