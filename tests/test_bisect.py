"""`invoke bisect` orchestration on a stand-in history, each step's comparison played by a stand-in for
`run_compare` that writes the report row a real one would (the real one: tests/test_bisect_integration.py).

The history: 16 commits after the good one; the target kernel regressed from commit 11 on; commit 8's timing
never resolves (inconclusive at any number of rounds); commit 10 adds a C++ file (the overlay cannot make it),
which commit 11 removes again."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from analysis.bisect.report import KERNEL, BisectTarget, read_target_verdict
from analysis.kernels.compare import IDENTICAL_CODE
from foundation.errors import UserError
from prbench.compare import bisect as bisect_command
from prbench.compare import variant_plan
from prbench.compare.bisect import BisectRequest, resolve_target, run_bisect
from prbench.compare.driver import CompareRequest
from prbench.runners import StageFailed
from prbench.sides.recipes import load_recipe
from tests.support.bisect_support import NOOP, installed_is, standin_history
from tests.support.docker_support import make_triton

ROOT = Path(__file__).resolve().parents[1]
NATIVE = "aten/src/ATen/native/Fused.cpp"
COLUMNS = ("matched_by", "base_name", "pr_name", "body_hash", "shape_key", "base_graphs", "verdict", "speedup",
           "ci_low", "ci_high", "rounds")


def _write_kernels(report: Path, rows: list[dict[str, object]]) -> None:
    report.mkdir(parents=True, exist_ok=True)
    lines = [",".join(COLUMNS)] + [",".join(str(row.get(c, "")) for c in COLUMNS) for row in rows]
    (report / "kernels_compare.csv").write_text("\n".join(lines) + "\n")


@pytest.fixture
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    package = tmp_path / "site-packages" / "torch"  # what the installed commit ships
    (package / "_inductor").mkdir(parents=True)
    (package / "_inductor" / "config.py").write_text("max_fusion_size = 64\n")
    changes: list[str | Path] = [{10: NATIVE, 11: f"-{NATIVE}"}.get(n, NOOP) for n in range(1, 17)]
    shas = standin_history(tmp_path / "pytorch", package, ["_inductor/config.py"], changes)
    installed_is(monkeypatch, {"torch": "2.13.0"}, shas[0])
    monkeypatch.setattr(variant_plan, "installed_package_dir", lambda python: package)
    return shas


class StandInCompare:
    """Writes the step's report row: regressed from commit 11 on, same code before, commit 8 never resolved."""

    def __init__(self, shas: list[str]) -> None:
        self.shas = shas
        self.calls: list[tuple[int, int | None]] = []
        self.recipes: dict[int, str] = {}
        self.triton: dict[int, tuple[Path | None, str | None]] = {}  # each step's --triton-src and --triton-ref
        self.time_models: dict[int, bool] = {}  # whether each step's compare timed the models

    def __call__(self, request: CompareRequest, console) -> tuple[None, SimpleNamespace]:
        position = self.shas.index(request.pr)
        self.calls.append((position, request.rounds))
        self.recipes[position] = request.recipe.name
        self.triton[position] = (request.triton_src, request.triton_ref)
        self.time_models[position] = request.time_models
        row: dict[str, object] = {"matched_by": IDENTICAL_CODE, "base_name": "cpp_fused_k_0", "pr_name":
                                  "cpp_fused_k_0", "verdict": "inconclusive", "speedup": 1.01, "ci_low": 0.9,
                                  "ci_high": 1.1, "rounds": request.rounds}
        if position >= 11:
            row.update(matched_by="legacy_key", verdict="regressed", speedup=0.5, ci_low=0.45, ci_high=0.55)
        elif position == 8:
            row.update(matched_by="legacy_key")
        report = Path(request.runs_dir) / str(request.run_id) / "report"
        _write_kernels(report, [row])
        if request.time_models:  # the suite's model the same way, equivalent where its kernel is the same code
            verdict = "equivalent" if row["matched_by"] == IDENTICAL_CODE else row["verdict"]
            model = {"model": "BertForMaskedLM", "verdict": verdict, "speedup": row["speedup"],
                     "ci_low": row["ci_low"], "ci_high": row["ci_high"], "rounds": row["rounds"]}
            pd.DataFrame([model]).to_csv(report / "models_compare.csv", index=False)
        return None, SimpleNamespace(out_dir=report)


def _request(pytorch: Path, shas: list[str], runs: Path, **kw) -> BisectRequest:
    compare = CompareRequest(base="", pr="", recipe=load_recipe("cpu-local", ROOT / "recipes"), runs_dir=runs,
                             rounds=3)
    return BisectRequest(pytorch_src=pytorch, good=shas[0][:10], bad=shas[16], compare=compare,
                         kernel="cpp_fused_k_0", max_rounds=6, **kw)


def test_undecided_and_unbuildable_commits_are_stepped_around_and_said(history, tmp_path, monkeypatch):
    shas = history
    fake = StandInCompare(shas)
    monkeypatch.setattr(bisect_command, "run_compare", fake)

    result = run_bisect(_request(tmp_path / "pytorch", shas, tmp_path / "runs"))

    # commit 8 was given twice the rounds, then stepped around; commit 10 never reached a comparison
    assert fake.calls == [(16, 3), (8, 3), (8, 6), (7, 3), (11, 3), (9, 3)]
    data = json.loads((result.directory / "bisect.json").read_text())
    assert [(shas.index(s["sha"]), s["outcome"]) for s in data["steps"]] == [
        (16, "bad"), (8, "undecided"), (7, "good"), (11, "bad"), (9, "good"), (10, "skipped")]
    undecided, skipped = data["steps"][1], data["steps"][5]
    assert undecided["note"] == "inconclusive after 6 round(s) (--max-rounds 6)" and undecided["rounds"] == 6
    assert skipped["note"].startswith("cannot be built:") and "Fused.cpp" in skipped["note"]
    assert data["steps"][2]["verdict"] == "same code"  # inconclusive timing, identical code: good
    assert data["conclusion"] == {"status": "range", "first_bad": None, "candidates": [shas[10], shas[11]],
                                  "stepped_around": [shas[10]]}
    assert [(s["good"], s["bad"]) for s in data["steps"]] == [(0, 16), (0, 16), (7, 16), (7, 11), (9, 11),
                                                              (9, 11)]
    report = (result.directory / "bisect.md").read_text()
    assert "The first bad commit is one of 2" in report
    assert "Stepped around (`git bisect skip`)" in report and "undecided (stepped around)" in report
    assert report.count("\n| ") == 1 + len(data["steps"])  # the header and one row per step

    fake.calls.clear()
    again = run_bisect(_request(tmp_path / "pytorch", shas, tmp_path / "runs"))
    assert fake.calls == [] and again.record.steps == result.record.steps


def test_a_kernel_bisect_times_no_model_while_a_model_bisect_times_its_model(history, tmp_path, monkeypatch):
    fake = StandInCompare(history)
    monkeypatch.setattr(bisect_command, "run_compare", fake)
    request = _request(tmp_path / "pytorch", history, tmp_path / "runs", model="BertForMaskedLM")

    kernel = run_bisect(request)  # --model names the model to compile; the kernel is the target
    assert set(fake.time_models.values()) == {False} and kernel.conclusion.candidates == (10, 11)

    fake.time_models.clear()
    model = run_bisect(replace(request, kernel=None))
    assert set(fake.time_models.values()) == {True} and model.conclusion.candidates == (10, 11)
    assert model.directory != kernel.directory


def test_with_a_docker_recipe_the_commit_an_overlay_cannot_make_is_built_from_source(history, tmp_path,
                                                                                     monkeypatch):
    fake = StandInCompare(history)
    monkeypatch.setattr(bisect_command, "run_compare", fake)
    docker = load_recipe("rocm7-mi300", ROOT / "recipes")
    _, triton = make_triton(tmp_path / "triton")  # the stand-in history pins no Triton: --triton-ref names it

    request = _request(tmp_path / "pytorch", history, tmp_path / "runs", docker_recipe=docker)
    result = run_bisect(replace(request, compare=replace(request.compare, triton_src=tmp_path / "triton",
                                                         triton_ref=triton[:10])))

    assert fake.recipes[10] == "rocm7-mi300" and {fake.recipes[p] for p in fake.recipes if p != 10} == {"cpu-local"}
    # the step built from source got the Triton clone and ref; the installed torch's steps bring their own Triton
    assert fake.triton[10] == (tmp_path / "triton", triton[:10])
    assert {fake.triton[p] for p in fake.triton if p != 10} == {(None, None)}
    assert result.conclusion.status == "found" and result.record.commits[result.conclusion.candidates[0]].sha == \
        history[11]


def test_a_docker_recipe_without_its_triton_clone_stops_the_bisect_at_the_door(history, tmp_path, monkeypatch):
    fake = StandInCompare(history)
    monkeypatch.setattr(bisect_command, "run_compare", fake)
    docker = load_recipe("rocm7-mi300", ROOT / "recipes")

    with pytest.raises(UserError, match=r"^--triton-src: recipe rocm7-mi300 builds Triton from \S+ at the PyTorch "
                                        r"pin; give a local clone of it \(git clone "):
        run_bisect(_request(tmp_path / "pytorch", history, tmp_path / "runs", docker_recipe=docker))
    assert fake.calls == [] and not (tmp_path / "runs").exists()


def test_a_commit_whose_stage_fails_is_skipped_and_said(history, tmp_path, monkeypatch):
    def failing(request, console):
        raise StageFailed("stage pr/suite failed: SyntaxError in torch/_inductor/config.py; log: suite.log")

    monkeypatch.setattr(bisect_command, "run_compare", failing)
    result = run_bisect(_request(tmp_path / "pytorch", history, tmp_path / "runs"))

    assert result.conclusion.status == "unresolved" and len(result.record.steps) == 1
    assert result.record.steps[0].note.startswith("did not run: stage pr/suite failed: SyntaxError")
    assert "Unresolved: the bad endpoint" in result.headline


def test_other_settings_do_not_reuse_the_recorded_steps(history, tmp_path, monkeypatch):
    fake = StandInCompare(history)
    monkeypatch.setattr(bisect_command, "run_compare", fake)
    run_bisect(_request(tmp_path / "pytorch", history, tmp_path / "runs", bisect_id="b"))
    fake.calls.clear()
    request = _request(tmp_path / "pytorch", history, tmp_path / "runs", bisect_id="b")
    run_bisect(replace(request, max_rounds=3))
    assert (8, 6) not in fake.calls and fake.calls[0] == (16, 3)


def test_a_kernel_from_a_finished_run_brings_its_identity_and_models(tmp_path):
    _write_kernels(tmp_path / "runs" / "r1" / "report", [
        {"base_name": "cpp_fused_a_0", "pr_name": "cpp_fused_a_3", "body_hash": "h1", "shape_key": "x64",
         "base_graphs": "BertForMaskedLM/0_inference_abc;T5Small/1_inference_def"}])
    request = BisectRequest(pytorch_src=tmp_path, good="a", bad="b", from_run="r1", kernel="cpp_fused_a_3",
                            compare=CompareRequest(base="", pr="", recipe=load_recipe("cpu-local", ROOT / "recipes"),
                                                   runs_dir=tmp_path / "runs"))
    target = resolve_target(request)
    assert target == BisectTarget(KERNEL, "cpp_fused_a_0", "h1", "x64", ("BertForMaskedLM", "T5Small"))

    # at a step the kernel was renumbered: found by its identity, not its name
    _write_kernels(tmp_path / "step", [{"matched_by": "legacy_key", "base_name": "cpp_fused_a_7", "body_hash": "h1",
                                        "shape_key": "x64", "verdict": "regressed", "speedup": 0.8, "rounds": 3}])
    found = read_target_verdict(tmp_path / "step", target)
    assert found is not None and found.verdict == "regressed" and found.rounds == 3


@pytest.mark.parametrize("flags, message", [
    ({}, "--model or --kernel: name what regressed"),
    ({"from_run": "r1", "model": "BertForMaskedLM"}, "--from-run r1: give --kernel NAME"),
    ({"model": "NoSuchModel"}, "--model: "),
    ({"model": "BertForMaskedLM,T5Small"}, "--model BertForMaskedLM,T5Small: one model"),
    ({"kernel": "k", "from_run": "r1"}, "--from-run r1: no "),
])
def test_what_regressed_is_checked_with_one_line(flags, message, tmp_path):
    request = BisectRequest(pytorch_src=tmp_path, good="a", bad="b", **flags,
                            compare=CompareRequest(base="", pr="", recipe=load_recipe("cpu-local", ROOT / "recipes"),
                                                   runs_dir=tmp_path / "runs"))
    with pytest.raises(UserError, match=message.replace("(", r"\(")) as caught:
        resolve_target(request)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("good, bad, message", [
    (16, 0, "--good=.*: not an ancestor of --bad"),
    (3, 3, "--bad=.*: the same commit as --good"),
    ("nope", 3, "--good=nope: unknown ref"),
])
def test_endpoints_are_checked_with_one_line(history, tmp_path, good, bad, message):
    refs = [history[x] if isinstance(x, int) else x for x in (good, bad)]
    request = _request(tmp_path / "pytorch", history, tmp_path / "runs", model="BertForMaskedLM")
    with pytest.raises(UserError, match=message):
        run_bisect(replace(request, good=refs[0], bad=refs[1]))
