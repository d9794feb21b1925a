"""The run store: the manifest says what finished, so a re-run resumes and an interrupt never lies."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from foundation.errors import UserError
from foundation.formats.run_layout import MANIFEST
from prbench.runs.run_store import Run, RunStore, StageRecord, StageStatus, input_hash
from tests.support.cli_support import invoke_in_process

PROJECT = Path(__file__).resolve().parents[1]


def manifest_on_disk(run: Run) -> dict:
    return json.loads((run.root / MANIFEST).read_text())


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return RunStore(tmp_path / "runs").create_or_open("r1", {"suite": "tiny"}, "0.1.0")


def finish_suite(run: Run, inputs: dict) -> None:
    with run.stage("base/suite", inputs) as rec:
        out = run.path("base", "suite", "suite.csv")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("name,speedup\n")
        rec.outputs = [run.relative(out)]
        rec.summary = {"models": 1}


def test_a_new_run_has_a_manifest_with_its_settings(tmp_path: Path) -> None:
    run = RunStore(tmp_path / "runs").create_or_open("r1", {"suite": "tiny"}, "0.1.0")

    data = manifest_on_disk(run)
    assert run.root == tmp_path / "runs" / "r1"
    assert (data["run_id"], data["prbench_version"], data["settings"], data["stages"]) == (
        "r1", "0.1.0", {"suite": "tiny"}, {})


def test_a_run_id_is_made_from_the_time_when_omitted(tmp_path: Path) -> None:
    run = RunStore(tmp_path / "runs").create_or_open(None, {}, "0.1.0")

    assert run.run_id[:8].isdigit() and (run.root / MANIFEST).exists()


def test_a_finished_stage_records_status_inputs_outputs_and_timings(run: Run) -> None:
    finish_suite(run, {"models": ["bert"]})

    rec = manifest_on_disk(run)["stages"]["base/suite"]
    assert rec["status"] == StageStatus.DONE
    assert rec["input_hash"] == input_hash({"models": ["bert"]})
    assert rec["outputs"] == ["base/suite/suite.csv"]  # relative: the run directory can be moved
    assert rec["summary"] == {"models": 1}
    assert rec["started"] and rec["finished"] and rec["duration_s"] >= 0
    assert rec["error"] == ""


def test_the_manifest_says_running_while_the_stage_runs(run: Run) -> None:
    with run.stage("base/suite", {}):
        assert manifest_on_disk(run)["stages"]["base/suite"]["status"] == StageStatus.RUNNING


def test_input_hash_ignores_key_order_and_follows_values() -> None:
    assert input_hash({"a": 1, "b": [1, 2]}) == input_hash({"b": [1, 2], "a": 1})
    assert input_hash({"a": 1}) != input_hash({"a": 2})


def test_is_done_only_with_the_same_inputs_and_outputs_still_there(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    finish_suite(store.create_or_open("r1", {}, "0.1.0"), {"models": ["bert"]})

    # A later invocation resumes the same run from its manifest.
    run = store.create_or_open("r1", {}, "0.1.0")
    same, other = input_hash({"models": ["bert"]}), input_hash({"models": ["gpt2"]})
    assert run.is_done("base/suite", same)
    assert not run.is_done("base/suite", other)
    assert not run.is_done("pr/suite", same)

    run.path("base", "suite", "suite.csv").unlink()
    assert not run.is_done("base/suite", same)


def test_reopening_a_run_keeps_its_stages_and_updates_settings(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    finish_suite(store.create_or_open("r1", {"suite": "tiny"}, "0.1.0"), {})

    run = store.create_or_open("r1", {"iterations": 50}, "0.1.0")

    assert list(run.manifest.stages) == ["base/suite"]
    assert manifest_on_disk(run)["settings"] == {"suite": "tiny", "iterations": 50}


def test_a_new_run_starts_with_one_side_of_another_run_and_skips_its_finished_stages(tmp_path: Path) -> None:
    # A bisect's steps all compare against the same good commit: a new step takes the last step's base side.
    store = RunStore(tmp_path / "runs")
    with store.create_or_open("step-1", {}, "0.1.0") as earlier:
        finish_suite(earlier, {"models": ["bert"]})
        with pytest.raises(RuntimeError), earlier.stage("base/organize", {"suite": "x"}):
            raise RuntimeError("the organize stage failed")
        with earlier.stage("pr/suite", {"models": ["bert"]}) as rec:
            earlier.path("pr").mkdir()
            rec.outputs = ["pr"]

    assert store.seed_side("step-2", "base", earlier, "0.1.0") == ["base/suite"]

    run = store.open("step-2")
    assert run.is_done("base/suite", input_hash({"models": ["bert"]}))  # skipped with the same inputs
    assert not run.is_done("base/suite", input_hash({"models": ["gpt2"]}))  # run again with others
    assert list(run.manifest.stages) == ["base/suite"]  # neither the failed stage nor the other side's
    assert run.path("base", "suite", "suite.csv").read_text() == "name,speedup\n" and not run.path("pr").exists()
    # A run that is there already is resumed as it is.
    assert store.seed_side("step-2", "base", earlier, "0.1.0") == [] and store.seed_side(
        "step-3", "pr", store.open("step-2"), "0.1.0") == []
    assert not (store.root / "step-3").exists()


def test_ctrl_c_inside_a_stage_leaves_a_consistent_manifest_marked_interrupted(run: Run) -> None:
    finish_suite(run, {})

    with pytest.raises(KeyboardInterrupt), run.stage("base/kernels", {"reps": 10}) as rec:
        rec.outputs = ["base/kernels.csv"]  # declared, but the stage never wrote it
        raise KeyboardInterrupt

    data = manifest_on_disk(run)  # valid JSON: the manifest was rewritten whole
    assert data["stages"]["base/suite"]["status"] == StageStatus.DONE
    kernels = data["stages"]["base/kernels"]
    assert kernels["status"] == StageStatus.INTERRUPTED
    assert kernels["error"] == "interrupted by the user"
    assert kernels["finished"]
    assert not run.is_done("base/kernels", input_hash({"reps": 10}))
    # No temp files left; .lock is the run's lock file, which stays (prbench.runs.run_lock).
    assert sorted(p.name for p in run.root.iterdir()) == [".lock", "base", MANIFEST]


def test_a_failing_stage_is_recorded_with_a_one_line_error(run: Run) -> None:
    with pytest.raises(ValueError), run.stage("base/organize", {}):
        raise ValueError("bad kernel file c5ify.py\n  line 10: unexpected indent")

    rec = RunStore(run.root.parent).open("r1").record("base/organize")
    assert rec is not None
    assert rec.status == StageStatus.FAILED
    assert rec.error == "ValueError: bad kernel file c5ify.py"
    assert not run.is_done("base/organize", input_hash({}))


def test_stages_whose_shards_run_elsewhere_show_running_and_those_left_unrecorded_end_failed(run: Run) -> None:
    rounds = {f"pair/kernels-round-{n}": {"round": n} for n in (1, 2)}
    with pytest.raises(UserError), run.running_elsewhere(rounds) as progress:
        assert {k: s["status"] for k, s in manifest_on_disk(run)["stages"].items()} == dict.fromkeys(
            rounds, StageStatus.RUNNING)
        progress("pair/kernels-round-2", {"shards": "1/2 done"})
        assert manifest_on_disk(run)["stages"]["pair/kernels-round-2"]["summary"] == {"shards": "1/2 done"}
        with run.stage("pair/kernels-round-1", {"round": 1}):  # its shards finished: merged and recorded
            pass
        progress("pair/kernels-round-1", {"shards": "2/2 done"})  # too late: the stage's own record stays
        raise UserError("kernel shard 2/2 of round 2 failed: exit status 1")

    stages = manifest_on_disk(run)["stages"]
    assert (stages["pair/kernels-round-1"]["status"], stages["pair/kernels-round-1"]["summary"]) == (
        StageStatus.DONE, {})
    assert (stages["pair/kernels-round-2"]["status"], stages["pair/kernels-round-2"]["error"]) == (
        StageStatus.FAILED, "UserError: kernel shard 2/2 of round 2 failed: exit status 1")


def write_report(run: Run, verdict: str) -> None:
    with run.stage("report", {}) as rec:
        run.path("report").mkdir()
        run.path("report", "report.md").write_text(f"# prbench: PR vs base\n\nverdict: {verdict}\n")
        rec.outputs = ["report/report.md"]


def test_when_the_run_starts_recomputing_its_old_report_stops_looking_current(run: Run) -> None:
    write_report(run, "improved")

    # The user changed an input; the stage fails half way.
    with pytest.raises(RuntimeError), run.stage("base/suite", {"models": ["gpt2"]}):
        raise RuntimeError("compile failed")

    assert not run.path("report").exists()
    stale = run.path("report.stale", "report.md").read_text().splitlines()
    assert stale[0].startswith("> **Stale report**") and "verdict: improved" in stale
    report = manifest_on_disk(run)["stages"]["report"]
    assert report["status"] == StageStatus.STALE and "report.stale/" in report["error"]


def test_a_newer_stale_report_replaces_an_older_one(run: Run) -> None:
    write_report(run, "improved")
    write_report(run, "regressed")  # rendering a report is a stage too: the first one is retired

    finish_suite(run, {})

    stale = run.path("report.stale", "report.md").read_text()
    assert "verdict: regressed" in stale and "verdict: improved" not in stale
    assert stale.count("Stale report") == 1 and not run.path("report").exists()


def test_a_runs_dir_that_cannot_be_created_is_a_user_error(tmp_path: Path) -> None:
    # Root ignores permission bits, so make the directory impossible: its parent is a regular file.
    (tmp_path / "afile").write_text("not a directory")
    store = RunStore(tmp_path / "afile" / "runs")

    with pytest.raises(UserError) as info:
        store.create_or_open("r1", {}, "0.1.0")

    message = str(info.value)
    assert message.startswith(f"--runs-dir {tmp_path / 'afile' / 'runs'}: cannot create the runs directory")
    assert "\n" not in message


def test_a_runs_dir_that_is_a_file_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("oops")

    with pytest.raises(UserError, match=r"--runs-dir .*runs: cannot create the runs directory"):
        RunStore(tmp_path / "runs").create_or_open("r1", {}, "0.1.0")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits")
def test_a_read_only_runs_dir_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir(mode=0o500)
    with pytest.raises(UserError, match="not writable"):
        RunStore(tmp_path / "runs").create_or_open("r1", {}, "0.1.0")


@pytest.mark.parametrize("bad", ["../escape", "a/b", ".hidden", "with space", ""])
def test_an_invalid_run_id_is_a_user_error_and_creates_nothing(tmp_path: Path, bad: str) -> None:
    store = RunStore(tmp_path / "runs")

    with pytest.raises(UserError, match=r"^--run .*: a run id may hold letters, digits"):
        store.create_or_open(bad, {}, "0.1.0")
    with pytest.raises(UserError, match=r"^--run "):
        store.open(bad)

    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "escape").exists()


def test_opening_a_missing_or_corrupt_run_is_a_user_error(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    with pytest.raises(UserError, match=r"run 'nope': no manifest.json"):
        store.open("nope")

    (tmp_path / "runs" / "broken").mkdir(parents=True)
    (tmp_path / "runs" / "broken" / MANIFEST).write_text("{not json")
    with pytest.raises(UserError, match=r"manifest.json: not a valid run manifest"):
        store.open("broken")


def test_latest_is_the_most_recently_written_run(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    older = store.create_or_open("older", {}, "0.1.0")
    store.create_or_open("newer", {}, "0.1.0")
    os.utime(older.root / MANIFEST, (1, 1))

    assert store.latest().run_id == "newer"


def test_latest_without_runs_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no runs yet"):
        RunStore(tmp_path / "runs").latest()


# --- invoke status (the user's view of the manifest) -----------------------------------------------------


def invoke_status(*args: str) -> subprocess.CompletedProcess:
    return invoke_in_process("--search-root", str(PROJECT), "status", *args, env={"COLUMNS": "200"})


def test_invoke_status_shows_every_stage_of_the_latest_run(tmp_path: Path) -> None:
    run = RunStore(tmp_path / "runs").create_or_open("r1", {}, "0.1.0")
    finish_suite(run, {})
    with pytest.raises(RuntimeError), run.stage("base/organize", {}):
        raise RuntimeError("no kernels in the cache")

    proc = invoke_status("--runs-dir", str(tmp_path / "runs"))

    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    suite = next(line for line in lines if "base/suite" in line)
    organize = next(line for line in lines if "base/organize" in line)
    assert "done" in suite and "base/suite/suite.csv" in suite and "models=1" in suite
    assert "failed" in organize and "RuntimeError: no kernels in the cache" in organize


def test_while_a_process_writes_the_run_status_names_it_and_a_running_stages_time_so_far(tmp_path: Path) -> None:
    run = RunStore(tmp_path / "runs").create_or_open("r1", {}, "0.1.0")  # this process holds the run
    with run.running_elsewhere({"pair/kernels-round-1": {"round": 1}}):
        proc = invoke_status("--runs-dir", str(tmp_path / "runs"))

    assert proc.returncode == 0, proc.stderr
    assert f"in use by pid {os.getpid()}" in proc.stdout
    (line,) = [line for line in proc.stdout.splitlines() if "pair/kernels-round-1" in line]
    assert re.search(r"│ running +│ \d+s so far", line), line


def test_rounds_that_started_together_are_listed_by_number(tmp_path: Path) -> None:
    run = RunStore(tmp_path / "runs").create_or_open("r1", {}, "0.1.0")
    with run.running_elsewhere({f"pair/models-round-{n}": {"round": n} for n in range(1, 12)}):
        proc = invoke_status("--runs-dir", str(tmp_path / "runs"))

    listed = re.findall(r"pair/models-round-(\d+)", proc.stdout)
    assert listed == [str(n) for n in range(1, 12)], proc.stdout


@pytest.mark.parametrize("end", ["killed", "lock file gone"])
def test_a_stage_left_running_by_a_process_that_is_gone_shows_stopped_and_how_to_resume(tmp_path: Path,
                                                                                      end: str) -> None:
    run = RunStore(tmp_path / "runs").create_or_open("r1", {}, "0.1.0")
    run.manifest.stages["base/suite"] = StageRecord(status=StageStatus.RUNNING, input_hash="h", started="x")
    run.save()
    run.close()
    if end == "killed":  # a kill -9 leaves the holder's line in the lock file, naming a pid that is gone
        (run.root / ".lock").write_text(json.dumps({"pid": _pid_of_a_finished_process(), "command": "invoke compare",
                                                    "started": "2026-11-26T10:00:00+00:00",
                                                    "host": socket.gethostname()}))
    else:
        (run.root / ".lock").unlink()

    proc = invoke_status("--runs-dir", str(tmp_path / "runs"))

    assert proc.returncode == 0, proc.stderr
    assert "in use by" not in proc.stdout
    (line,) = [line for line in proc.stdout.splitlines() if "base/suite" in line]
    assert "│ stopped │" in line and "no process is writing this run" in line


def _pid_of_a_finished_process() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_invoke_status_without_runs_is_one_error_line(tmp_path: Path) -> None:
    proc = invoke_status("--runs-dir", str(tmp_path / "runs"))

    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"error: --runs-dir {tmp_path / 'runs'}: no runs yet"]


# --- a manifest that is valid JSON of the wrong shape ---


@pytest.mark.parametrize(("content", "detail"), [
    ([], "expected an object, found a list"),
    ({"created": "now", "stages": {}}, "run_id: expected text, found null"),
    ({"run_id": "r", "created": "now", "stages": []}, "stages: expected an object, found a list"),
    ({"run_id": "r", "created": "now", "stages": {"base/suite": {"status": 3, "input_hash": "h"}}},
     "stages.base/suite.status: expected text, found 3"),
    ({"run_id": "r", "created": "now", "stages": {"base/suite": {"status": "done", "input_hash": "h",
                                                                 "outputs": "suite.csv"}}},
     "stages.base/suite.outputs: expected a list, found 'suite.csv'"),
    ({"run_id": "r", "created": "now", "stages": {"report": {"status": "done", "input_hash": "h",
                                                             "duration_s": "fast"}}},
     "stages.report.duration_s: expected a finite number ≥ 0, found 'fast'"),
], ids=["list", "no-run-id", "stages-list", "status-int", "outputs-text", "duration-text"])
def test_a_manifest_of_the_wrong_shape_is_one_line_naming_the_field(tmp_path: Path, content: object,
                                                                   detail: str) -> None:
    path = tmp_path / "runs" / "r" / MANIFEST
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(content))

    with pytest.raises(UserError) as err:
        RunStore(tmp_path / "runs").open("r")

    assert str(err.value) == f"{path}: not a valid run manifest ({detail})"


def test_a_truncated_manifest_says_so(tmp_path: Path) -> None:
    run = RunStore(tmp_path / "runs").create_or_open("r", {}, "0.1.0")
    path = run.root / MANIFEST
    path.write_text(path.read_text()[:-20])

    with pytest.raises(UserError, match=r"manifest.json: not a valid run manifest \(truncated JSON"):
        RunStore(tmp_path / "runs").open("r")


def test_invoke_status_of_a_manifest_that_is_a_list_is_one_error_line(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "r" / MANIFEST
    path.parent.mkdir(parents=True)
    path.write_text("[]")

    proc = invoke_status("--runs-dir", str(tmp_path / "runs"), "--run", "r")

    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {path}: not a valid run manifest (expected an object, found a list)"]
