"""`invoke compare --modes A,B`: each mode a run of its own under <run>/modes/<mode>/, resumed per mode, and one
report with a verdict per mode, the worst first, and --fail-on over every mode.

The modes' comparisons here are a stand-in for `run_compare` that lays out a finished comparison (`compare_data`,
training with GPT2 10 % slower) as a run of the request's id and renders its real report once its one stage is
recorded; everything around it (flags, the per-mode requests and layout, the run's manifest, the matrix, the exit
status) is the real code. The matrix's rules on summaries written by hand are at the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from analysis.report.modes import ModeResult, headline, mode_verdict, modes_fail_reasons, worst_first
from foundation.formats.modes import parse_modes
from prbench.compare import variant_plan
from prbench.compare.variant_plan import LocalEnvironment
from prbench.runs.run_store import RunStore, input_hash
from prbench.stages.report import render_run_report
from tests.support.cli_support import invoke_in_process
from tests.support.compare_data import kernel_specs, kernels_frame, model_rounds, suite_frame, write_variant

MODELS = {"BertForMaskedLM": 40.0, "GPT2": 30.0, "T5Small": 60.0}


class FakeCompare:
    """`run_compare` for the modes: one recorded stage (the mode's comparison), run once per inputs and then its real
    report (kept as it is when the stage was done before: rendering is what costs here). ``calls`` lists the
    requests, ``ran`` the modes whose stage ran."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.ran: list[str] = []

    def __call__(self, request: Any, console: Any) -> tuple[Any, Any]:
        self.calls.append(request)
        inputs = {"suite": request.suite.inputs(), "inductor_config": request.inductor_config, "env": request.env}
        with RunStore(request.runs_dir).create_or_open(request.run_id, {"rounds": 5}, "test") as run:
            if run.is_done("compare", input_hash(inputs)):
                summary = run.layout.report / "summary.json"
                return run, SimpleNamespace(summary_json=summary, verdict=json.loads(summary.read_text())["verdict"])
            with run.stage("compare", inputs) as record:
                self.ran.append(request.run_id)
                _lay_out(run.root, 1.1 if request.suite.mode == "training" else 1.0)
                record.outputs = ["base", "pr"]
            return run, render_run_report(run)


def _lay_out(root: Path, gpt2_factor: float) -> None:
    """A finished comparison in ``root``: 20 kernels, identical; three models, GPT2 ``gpt2_factor`` slower."""
    specs = kernel_specs(20, seed=13, models=tuple(MODELS))
    for side, seed, factor in (("base", 16, 1.0), ("pr", 17, gpt2_factor)):
        kernels, kernel_samples = kernels_frame(specs, seed=seed)
        suite, samples = suite_frame(MODELS, seed=seed)
        rounds = model_rounds(MODELS, seed=seed + 2, round_cv=0.003, factor={"GPT2": factor})
        write_variant(root / side, kernels, kernel_samples, suite, samples, env={"torch": {"commit": "1" * 40}},
                      model_samples=rounds)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeCompare:
    """The stand-in compare, on an interpreter whose torch is 2.13.0 (the plan at the door starts no process)."""
    stand_in = FakeCompare()
    monkeypatch.setattr("prbench.compare.modes_run.run_compare", stand_in)
    monkeypatch.setattr(variant_plan, "describe_local_environment",
                        lambda python: LocalEnvironment({"torch": "2.13.0", "torch_git": "1" * 40}))
    return stand_in


def compare_modes(tmp_path: Path, *args: str) -> Any:
    return invoke_in_process("compare", "--pr", "installed", "--runs-dir", str(tmp_path / "runs"), "--run", "m1",
                             "--models", "BertForMaskedLM,T5Small", *args)


def test_each_mode_runs_as_its_own_run_resumes_as_one_and_the_report_names_the_worst_mode_first(
        tmp_path: Path, fake: FakeCompare) -> None:
    result = compare_modes(tmp_path, "--modes", "inference,training+no-cudagraphs", "--fail-on", "regression")

    run = tmp_path / "runs" / "m1"
    # Each mode's comparison is asked for with the mode's settings over the flags, as <run>/modes/<mode>/.
    inference, training = fake.calls
    assert (inference.runs_dir, inference.run_id) == (run / "modes", "inference")
    assert (training.runs_dir, training.run_id) == (run / "modes", "training.no-cudagraphs")
    assert (inference.suite.mode, training.suite.mode) == ("inference", "training")
    assert training.inductor_config == {"triton.cudagraphs": False} and inference.inductor_config == {}
    assert inference.suite.models == training.suite.models == "BertForMaskedLM,T5Small"
    for mode in ("inference", "training.no-cudagraphs"):
        assert (run / "modes" / mode / "report" / "summary.json").is_file()
    # One verdict per mode, the worst first: training, where GPT2 is 10 % slower; --fail-on reads every mode.
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert summary["format_version"] == 1 and summary["kind"] == "modes"
    assert [m["mode"] for m in summary["modes"]] == ["training+no-cudagraphs", "inference"]
    assert [m["verdict"] for m in summary["modes"]] == ["regressed", "equivalent"]
    assert summary["verdict"].startswith("2 modes, worst first: training+no-cudagraphs regressed, inference "
                                         "equivalent. training+no-cudagraphs: ")
    assert summary["modes"][0]["cells"]["models"].startswith("regressed 0.9")
    assert set(summary["modes"][0]["cells"]) == {"models", "kernels", "compile", "memory", "numerics"}
    assert summary["verdict"] in result.stdout
    assert result.returncode == 1
    assert "--fail-on regression: training+no-cudagraphs: models: regressed (GPT2" in result.stderr
    assert "inference:" not in result.stderr
    # The matrix links each mode's own report and summary.json, relative to report/, where they are.
    report = (run / "report" / "report.md").read_text()
    assert report.index("| `training+no-cudagraphs` | **regressed** |") < report.index("| `inference` | **equivalent**")
    for link in ("../modes/training.no-cudagraphs/report/report.md", "../modes/inference/report/summary.json"):
        assert f"]({link})" in report and (run / "report" / link).resolve().is_file()
    assert "`triton.cudagraphs=False`" in report
    manifest = json.loads((run / "manifest.json").read_text())
    assert [m["name"] for m in manifest["settings"]["modes"]] == ["inference", "training+no-cudagraphs"]
    assert {k: v["status"] for k, v in manifest["stages"].items()} == {
        "mode/inference": "done", "mode/training.no-cudagraphs": "done", "report": "done"}

    again = compare_modes(tmp_path, "--modes", "inference,training+no-cudagraphs")

    assert again.returncode == 0, again.stderr
    # Asked for the same runs with the same settings, each mode's run found its comparison done.
    assert [c.run_id for c in fake.calls] == ["inference", "training.no-cudagraphs"] * 2
    assert fake.ran == ["inference", "training.no-cudagraphs"]
    (run / "modes" / "inference" / "report" / "report.md").unlink()

    rendered = invoke_in_process("report", "m1", "--runs-dir", str(tmp_path / "runs"))

    assert rendered.returncode == 0, rendered.stderr
    assert (run / "modes" / "inference" / "report" / "report.md").is_file()  # every mode's report rendered anew
    assert rendered.stdout.startswith("2 modes, worst first: training+no-cudagraphs regressed")
    asked = invoke_in_process("report", "m1", "--runs-dir", str(tmp_path / "runs"), "--kernel", "k")
    assert asked.returncode == 2 and "--kernel: run m1 holds 2 modes" in asked.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["--modes", "inference", "--mode", "training"], "--modes: not with --mode (each mode sets them"),
    (["--modes", "training", "--dtype", "amp"], "--modes: not with --dtype"),
    (["--modes", "inference,trainig"], "--modes: unknown mode 'trainig' (did you mean 'training'?"),
    (["--modes", "amp+bfloat16"], "amp and bfloat16 conflict"),
    (["--modes", "inference,training+cudagraphs"], "--modes training+cudagraphs: cudagraphs needs a GPU recipe"),
    (["--modes", "no-cudagraphs", "--inductor-config", "triton.cudagraphs=true"],
     "--inductor-config triton.cudagraphs=True: mode no-cudagraphs sets triton.cudagraphs=False"),
])
def test_a_bad_modes_flag_is_one_line_before_any_mode_runs(tmp_path: Path, fake: FakeCompare, args: list[str],
                                                            says: str) -> None:
    result = compare_modes(tmp_path, *args)

    assert result.returncode == 2, result.stdout
    assert says in result.stderr and "Traceback" not in result.stderr
    assert fake.calls == [] and not (tmp_path / "runs" / "m1" / "modes").exists()


def test_a_pr_that_cannot_be_applied_is_one_line_before_the_runs_directory_exists(tmp_path: Path,
                                                                                  fake: FakeCompare) -> None:
    result = invoke_in_process("compare", "--pr", "no-such-ref", "--runs-dir", str(tmp_path / "runs"), "--run", "m1",
                               "--modes", "inference,training")

    assert result.returncode == 2 and "--pytorch-src" in result.stderr and "Traceback" not in result.stderr
    assert fake.calls == [] and not (tmp_path / "runs" / "m1").exists()


# --- the matrix's rules, on summaries written by hand --------------------------------------------------------------


def _summary(models: str | None = "equivalent", geomean: float = 1.0, kernels: str | None = "equivalent",
             gate: str = "pass", numerics_failed: int = 0, verdict: str = "") -> dict[str, Any]:
    block = {"verdict": models, "geomean": geomean, "regressed_items": []} if models else None
    kernel_block = {"verdict": kernels, "step": {"speedup": 1.0}, "regressed_items": []} if kernels else None
    return {"format_version": 4, "verdict": verdict or f"models {models}", "models": block, "kernels": kernel_block,
            "gates": [{"name": "compile time ratio", "value": 1.3 if gate == "fail" else 1.0, "status": gate},
                      {"name": "peak-memory compression ratio", "value": 1.0, "status": "pass"}],
            "numerics": {"models": {"compared": 2, "failed": numerics_failed,
                                    "worst": {"name": "GPT2", "check": "PR vs base", "output": "logits",
                                              "max_abs": 0.4}}},
            "settings": {"fail_share": 0.05}}


def _results(**summaries: dict[str, Any]) -> list[ModeResult]:
    return [ModeResult(settings=mode.describe(), summary=summaries[mode.dir_name.replace("-", "_")],
                       report=f"modes/{mode.dir_name}/report/report.md",
                       summary_path=f"modes/{mode.dir_name}/report/summary.json")
            for mode in parse_modes(",".join(k.replace("_", "-") for k in summaries))]


def test_modes_are_ranked_numerics_first_then_regressions_then_the_larger_slowdown() -> None:
    results = _results(inference=_summary(models="improved", geomean=1.2),
                       training=_summary(models="regressed", geomean=0.97),
                       amp=_summary(numerics_failed=1),
                       bfloat16=_summary(models="regressed", geomean=0.9),
                       dynamic=_summary(gate="fail"),
                       cpp_wrapper=_summary(models="inconclusive"))

    assert [r.name for r in worst_first(results)] == ["amp", "bfloat16", "training", "dynamic", "cpp-wrapper",
                                                      "inference"]
    assert mode_verdict(results[4].summary) == "regressed"  # a failed compile check, the families equivalent
    assert headline(results).startswith("6 modes, worst first: amp numerics failed, bfloat16 regressed, training "
                                        "regressed, dynamic regressed, cpp-wrapper inconclusive, inference improved. "
                                        "amp: models equivalent")


def test_fail_on_reads_every_modes_summary() -> None:
    results = _results(inference=_summary(models="inconclusive"), training=_summary(numerics_failed=1))

    assert modes_fail_reasons(results, "numerics") == [
        "training: numerics: models 1 of 2 failed (worst: GPT2, PR vs base, logits max abs 0.4)"]
    assert modes_fail_reasons(results, "regression") == modes_fail_reasons(results, "numerics")
    assert modes_fail_reasons(results, "inconclusive")[-1] == "inference: models: inconclusive"
    assert modes_fail_reasons(results, "never") == []
