"""The suite stage and ``invoke suite``: rows per model, resumable after an interrupt, clean user errors.

Most tests use the ``aot_eager`` backend (Dynamo + AOTAutograd without Inductor codegen) so that they run in
seconds on a shared 2-core box; the ``integration`` test does real Inductor compiles through ``invoke suite``.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from foundation.formats.dynamo_csv import SUITE_COLUMNS, read_suite_csv
from foundation.formats.suite_request import SuiteRequest
from prbench.runners import CODE_ROOT
from prbench.sides.recipes import load_recipe
from prbench.sides.variants import Variant
from prbench.stages.command_lines import suite_command
from prbench.stages.suite import summarize

TWO = "BertForMaskedLM,DistilBertForMaskedLM"


def stage_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TORCHINDUCTOR_CACHE_DIR")}
    env.update(
        PYTHONPATH=str(CODE_ROOT),
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "work" / "inductor-cache"),
        TRITON_CACHE_DIR=str(tmp_path / "work" / "triton-cache"),
        TMPDIR=str(tmp_path / "work" / "tmp"),
        HF_HUB_OFFLINE="1",
    )
    return env


def stage_argv(out: Path, *extra: str, models: str = TWO) -> list[str]:
    return [sys.executable, "-m", "stages.suite", "--out", str(out), "--models", models, "--warmup", "3",
            "--iterations", "10", *extra]


def run_stage(tmp_path: Path, out: Path, *extra: str, models: str = TWO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(stage_argv(out, *extra, models=models), env=stage_env(tmp_path), cwd=CODE_ROOT,
                          capture_output=True, text=True, timeout=600)


def leftovers(directory: Path) -> list[Path]:
    return list(directory.rglob("*.tmp")) if directory.exists() else []


@pytest.mark.integration
def test_the_stage_writes_one_row_per_model_with_the_contract_columns(tmp_path: Path) -> None:
    out = tmp_path / "suite"
    proc = run_stage(tmp_path, out, "--backend", "aot_eager")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    with (out / "suite.csv").open() as fh:
        header = next(csv.reader(fh))
    assert tuple(header) == SUITE_COLUMNS
    rows = read_suite_csv(out / "suite.csv")
    assert [r["name"] for r in rows] == TWO.split(",")
    for row in rows:
        assert row["status"] == "ok" and row["error"] == ""
        assert (row["dev"], row["mode"], row["dtype"], row["size"]) == ("cpu", "inference", "float32", "tiny")
        assert (row["n"], row["warmup"], row["batch_size"]) == ("10", "3", "2")
        # speedup = eager median / compiled median, abs_latency = compiled median, floats as %.6f
        assert float(row["speedup"]) == pytest.approx(
            float(row["eager_median_ms"]) / float(row["compiled_median_ms"]), rel=1e-4)
        assert row["abs_latency"] == row["compiled_median_ms"]
        assert all(len(row[c].split(".")[1]) == 6 for c in ("speedup", "eager_std_ms", "first_run_s"))
        assert float(row["first_run_s"]) > 0 and float(row["eager_peak_mem"]) > 0
        assert int(row["unique_graphs"]) >= 1 and int(row["calls_captured"]) > 0
        assert (row["fxgraph_cache_hits"], row["fxgraph_cache_misses"]) == ("0", "0")  # aot_eager: no Inductor graph
        assert set(filter(None, row["flags"].split(";"))) <= {"noisy_eager", "noisy_compiled"}
    samples = json.loads((out / "samples.json").read_text())
    assert set(samples) == set(TWO.split(","))
    assert all(len(samples[m]["eager"]) == len(samples[m]["compiled"]) == 10 for m in samples)
    assert "[suite] 2 ok, 0 failed" in proc.stdout


@pytest.mark.integration
def test_an_interrupted_run_resumes_without_redoing_finished_models(tmp_path: Path) -> None:
    out = tmp_path / "suite"
    # Enough iterations that the second model is still running when the first row appears.
    argv = stage_argv(out, "--backend", "aot_eager", "--iterations", "400")
    proc = subprocess.Popen(argv, env=stage_env(tmp_path), cwd=CODE_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while not (out / "suite.csv").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the stage ended before writing a row"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C (or the local runner's stop) sends
    first_log, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    first_bytes = (out / "suite.csv").read_bytes()
    assert [r["name"] for r in read_suite_csv(out / "suite.csv")] == ["BertForMaskedLM"]
    assert leftovers(out) == []
    assert "interrupted" in first_log

    second = subprocess.run(argv, env=stage_env(tmp_path), cwd=CODE_ROOT, capture_output=True, text=True,
                            timeout=600)
    assert second.returncode == 0, second.stdout[-3000:]
    assert "1/2 BertForMaskedLM: done earlier, kept" in second.stdout
    assert "1/2 BertForMaskedLM: start" not in second.stdout
    assert "2/2 DistilBertForMaskedLM: start" in second.stdout
    text = (out / "suite.csv").read_bytes()
    assert text.startswith(first_bytes)  # the first model's row is byte-identical
    assert [r["name"] for r in read_suite_csv(out / "suite.csv")] == TWO.split(",")


@pytest.mark.integration
def test_a_failing_model_gets_a_fail_row_and_the_others_go_on(tmp_path: Path, monkeypatch) -> None:
    from stages import suite
    from stages.support import hf_models

    real_build = hf_models.build

    def build_that_breaks_distilbert(name: str, **kwargs):  # fault injection: a model whose build raises
        if name == "DistilBertForMaskedLM":
            raise RuntimeError("weights exploded\nsecond line is dropped")
        return real_build(name, **kwargs)

    monkeypatch.setattr(hf_models, "build", build_that_breaks_distilbert)
    for key, value in stage_env(tmp_path).items():
        if key.startswith(("TORCHINDUCTOR_", "TRITON_", "TMPDIR")):
            monkeypatch.setenv(key, value)
    settings = suite.SuiteSettings(
        out=tmp_path / "suite", models=("DistilBertForMaskedLM", "BertForMaskedLM"), size="tiny", mode="training",
        dtype="float32", warmup=3, iterations=10, device="cpu", cpu_backend="cpp", backend="aot_eager",
        cache_archive=None)
    rows = suite.run_suite(settings, tmp_path / "work" / "inductor-cache")
    assert [(r["name"], r["status"]) for r in rows] == [("DistilBertForMaskedLM", "fail"), ("BertForMaskedLM", "ok")]
    failed = rows[0]
    assert failed["error"] == "RuntimeError: weights exploded"
    assert (failed["speedup"], failed["abs_latency"], failed["batch_size"]) == ("0.000000", "0.000000", "0")
    assert rows[1]["mode"] == "training" and float(rows[1]["speedup"]) > 0
    # The failed model is measured again on the next run; the ok one is kept.
    monkeypatch.setattr(hf_models, "build", real_build)
    again = suite.run_suite(settings, tmp_path / "work" / "inductor-cache")
    assert [r["status"] for r in again] == ["ok", "ok"]
    assert again[1] == rows[1]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--warmup", "2"], "error: --warmup 2: at least 3 warm-up calls are required"),
        (["--iterations", "5"], "error: --iterations 5: at least 10 timed calls are required"),
        (["--models", "GPT3"], "error: --models: unknown model 'GPT3'"),
    ],
)
@pytest.mark.integration
def test_the_stage_rejects_bad_values_in_one_line(tmp_path: Path, extra: list[str], message: str) -> None:
    out = tmp_path / "suite"
    proc = subprocess.run([*stage_argv(out), *extra], env=stage_env(tmp_path), cwd=CODE_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(message) and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not out.exists()


def invoke(tmp_path: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = stage_env(tmp_path)
    env.pop("PYTHONPATH")
    return subprocess.run([sys.executable, "-m", "invoke", "suite", *args], env=env, cwd=CODE_ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--models", "NoSuchModel"], "error: --models: unknown model 'NoSuchModel'"),
        (["--warmup", "2"], "error: --warmup 2: at least 3 warm-up calls are required"),
        (["--runs-dir", "{file}/runs"], "cannot create the runs directory"),
    ],
)
@pytest.mark.integration
def test_invoke_suite_user_errors_are_one_line_and_leave_nothing_behind(tmp_path: Path, args: list[str],
                                                                        message: str) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    runs = tmp_path / "runs"
    args = [a.replace("{file}", str(a_file)) for a in args]
    if "--runs-dir" not in args:
        args += ["--runs-dir", str(runs)]
    proc = invoke(tmp_path, *args, "--run", "r1", timeout=300)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not runs.exists()
    assert a_file.read_text() == "not a directory\n"


def test_suite_command_runs_the_stage_with_the_variants_environment(tmp_path: Path) -> None:
    recipe = load_recipe("cpu-local", CODE_ROOT / "recipes")
    variant = Variant(name="base", recipe=recipe, env={"EXTRA": "1"})
    settings = SuiteRequest(models="T5Small", warmup=5, iterations=20)
    command = suite_command(tmp_path / "base", settings, variant)
    assert command.module == "stages.suite"
    args = command.args
    assert args[args.index("--out") + 1] == str(tmp_path / "base" / "suite")
    assert args[args.index("--cache-archive") + 1] == str(tmp_path / "base" / "inductor-cache.tar.gz")
    assert (args[args.index("--warmup") + 1], args[args.index("--iterations") + 1]) == ("5", "20")
    assert command.env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "base" / "work" / "inductor-cache")
    assert command.env["OMP_NUM_THREADS"] == "1" and command.env["EXTRA"] == "1"


@pytest.mark.integration
def test_a_truncated_samples_json_from_an_earlier_attempt_is_one_error_line(tmp_path: Path) -> None:
    out = tmp_path / "suite"
    out.mkdir()
    (out / "samples.json").write_text('{"BertForMaskedLM": {"eager": [1.0, 1.1], "compiled": [0.9')

    proc = run_stage(tmp_path, out, "--backend", "aot_eager", models="BertForMaskedLM")

    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {out / 'samples.json'}: truncated JSON (the file ends in the middle of a value); expected suite "
        'samples {model: {"eager": [ms], "compiled": [ms]}} (left by an earlier attempt; delete it to measure '
        "again)"]
    assert not (out / "suite.csv").exists()


def _stage_pids(run_dir: Path) -> list[int]:
    """The suite stage processes writing into ``run_dir`` (each runs in a session of its own, away from its host)."""
    pids = []
    for proc_dir in Path("/proc").iterdir():
        try:
            argv = (proc_dir / "cmdline").read_bytes().split(b"\0")
        except OSError:  # not a process, or one that just ended
            continue
        if b"stages.suite" in argv and any(str(run_dir).encode() in arg for arg in argv):
            pids.append(int(proc_dir.name))
    return pids


@dataclass(frozen=True)
class StoppedSuite:
    """`invoke suite` of two models stopped with SIGTERM after the first, then the same command again."""

    tmp_path: Path
    common: list[str]
    first_log: str
    first_returncode: int
    first_rows: list[dict[str, str]]  # suite.csv as the stopped run left it
    first_row: str
    again: subprocess.CompletedProcess[str]

    @property
    def suite_csv(self) -> Path:
        return self.tmp_path / "runs" / "it" / "base" / "suite" / "suite.csv"


@pytest.fixture(scope="module", params=["the host", "the stage"])
def stopped_suite(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> StoppedSuite:
    # `invoke suite` (the pipeline `invoke compare` runs its suites through) is stopped with SIGTERM after the first of
    # its two models: a cancelled job or `timeout` signals the host, which stops its stage; a `kill` of the process
    # tree or a shutdown may reach the stage's process first, and the host then ends on its own ("stage suite was
    # killed (SIGTERM)"), as in the user's report.
    tmp_path = tmp_path_factory.mktemp("stopped")
    runs = tmp_path / "runs"
    common = ["--models", TWO, "--warmup", "3", "--iterations", "10", "--runs-dir", str(runs), "--run", "it"]
    env = stage_env(tmp_path)
    env.pop("PYTHONPATH")
    host = subprocess.Popen([sys.executable, "-m", "invoke", "suite", *common], env=env, cwd=CODE_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    suite_csv = runs / "it" / "base" / "suite" / "suite.csv"
    deadline = time.monotonic() + 600
    while not (suite_csv.exists() and read_suite_csv(suite_csv)):
        assert host.poll() is None and time.monotonic() < deadline, "the suite ended before its first model"
        time.sleep(0.05)
    if request.param == "the host":
        host.send_signal(signal.SIGTERM)
    else:
        stages = _stage_pids(runs / "it")
        assert stages
        for pid in stages:
            os.kill(pid, signal.SIGTERM)
    first_log, _ = host.communicate(timeout=120)
    assert suite_csv.exists(), first_log[-3000:]
    first_rows, first_row = read_suite_csv(suite_csv), suite_csv.read_text().splitlines()[1]
    return StoppedSuite(tmp_path, common, first_log, host.returncode, first_rows, first_row,
                        invoke(tmp_path, *common))


@pytest.mark.integration
@pytest.mark.xdist_group("suite-stopped")  # with the test below: one worker runs each stopped suite once
def test_a_suite_stopped_after_its_first_model_keeps_it_and_the_same_command_redoes_only_the_rest(
        stopped_suite: StoppedSuite) -> None:
    assert stopped_suite.first_returncode != 0, stopped_suite.first_log[-3000:]
    # The second model was under way: no row, or a failed one where the stop broke into its compile.
    assert [r["name"] for r in stopped_suite.first_rows if r["status"] == "ok"] == ["BertForMaskedLM"]

    again, suite_csv = stopped_suite.again, stopped_suite.suite_csv
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert again.stdout.count("1 of 2 models kept from the stopped run") == 1, again.stdout[-4000:]
    assert "1/2 BertForMaskedLM: done earlier, kept" in again.stdout
    assert "1/2 BertForMaskedLM: start" not in again.stdout
    assert "2/2 DistilBertForMaskedLM: start" in again.stdout
    assert suite_csv.read_text().splitlines()[1] == stopped_suite.first_row  # the kept model was not measured again
    assert [r["name"] for r in read_suite_csv(suite_csv)] == TWO.split(",")
    manifest = json.loads((suite_csv.parents[2] / "manifest.json").read_text())
    assert manifest["stages"]["base/suite"]["status"] == "done"


# The suite that finished on the second attempt (its first model compiled before the host was stopped, the second
# after) is what one attempt writes: the same files, and the same command again redoes nothing.
@pytest.mark.integration
@pytest.mark.xdist_group("suite-stopped")
@pytest.mark.parametrize("stopped_suite", ["the host"], indirect=True)
def test_invoke_suite_compiles_two_tiny_models_and_archives_the_inductor_cache(stopped_suite: StoppedSuite) -> None:
    tmp_path, common, proc = stopped_suite.tmp_path, stopped_suite.common, stopped_suite.again
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    runs = tmp_path / "runs"
    variant = runs / "it" / "base"
    rows = read_suite_csv(variant / "suite" / "suite.csv")
    assert [(r["name"], r["status"]) for r in rows] == [(model, "ok") for model in TWO.split(",")]
    assert all(float(r["compilation_latency"]) > 0 and float(r["speedup"]) > 0 for r in rows)
    # Every model's compile looked its graphs up in Inductor's FX-graph cache, which started empty: the first model
    # (compiled before the stop, its row kept) missed. The second may hit: on a fast machine the stopped attempt
    # had already saved its graph when the stop reached it (DistilBertForMaskedLM: 1 hit, 0 misses, in CI).
    assert int(rows[0]["fxgraph_cache_misses"]) >= 1, rows
    assert all(int(r["fxgraph_cache_misses"]) + int(r["fxgraph_cache_hits"]) >= 1 for r in rows), rows

    from foundation.formats.cache_archive import archived_graph_modules

    modules = archived_graph_modules(variant / "inductor-cache.tar.gz")
    assert len(modules) >= 2, modules  # one compiled graph per model at least
    manifest = json.loads((runs / "it" / "manifest.json").read_text())
    record = manifest["stages"]["base/suite"]
    assert record["status"] == "done" and record["summary"]["ok"] == 2
    assert summarize(variant)["failed"] == 0
    env_json = json.loads((variant / "env.json").read_text())
    assert env_json["stage_env"]["OMP_NUM_THREADS"] == "1"
    assert "suite.csv" in proc.stdout and "geomean speedup" in proc.stdout

    again = invoke(tmp_path, *common)
    assert again.returncode == 0
    assert "already done with the same inputs" in again.stdout


@pytest.mark.integration
def test_a_run_again_after_a_stop_that_kept_no_model_compiles_cold(tmp_path: Path) -> None:
    """The H200 lease of 2026-11-30: the PR suite was stopped inside its first model, and the run again reused the
    Triton binaries the stopped attempt had compiled, so its compile time was not a cold one. With no row kept, the
    run again empties the side's Inductor and Triton caches; a Triton cache of the user's elsewhere stays."""
    out = tmp_path / "suite"
    env = stage_env(tmp_path)
    stale = [Path(env[key]) / "left-by-the-stopped-attempt" for key in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")]
    for path in stale:
        path.parent.mkdir(parents=True)
        path.write_text("stale")
    argv = stage_argv(out, "--backend", "aot_eager", models="DistilBertForMaskedLM")

    proc = subprocess.run(argv, env=env, cwd=CODE_ROOT, capture_output=True, text=True, timeout=600)

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [path.exists() for path in stale] == [False, False]

    users = tmp_path / "users-triton-cache" / "kept"
    users.parent.mkdir()
    users.write_text("the user's")
    (out / "suite.csv").unlink()  # nothing kept: a fresh run again
    proc = subprocess.run(argv, env={**env, "TRITON_CACHE_DIR": str(users.parent)}, cwd=CODE_ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and users.read_text() == "the user's"
