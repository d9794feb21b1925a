"""`invoke bisect` on a stand-in PyTorch history of 2 Python-only commits built from the installed torch's own
files, a no-op (commit 1) then the README's example regression (commit 2): real compiles and paired rounds of tiny
BERT, three kernel rounds per step and no model round (a bisect of a kernel times its kernels alone). The
smallest history whose search has both outcomes of a real compare: one bisect finds commit 2 in two steps (the bad
endpoint regressed, commit 1 the same code, so good), compiling the good commit once; a second one over the no-op
commit 1 alone reuses the first one's run of commit 1 and reports the range good; the first command again redoes
nothing. Each step is a whole compare but for the model rounds (a compile of the PR side, three kernel rounds):
the search over longer histories, in both directions, around undecided and unbuildable commits, is
tests/test_bisect.py's on stand-in compares."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from prbench.compare import bisect as bisect_command
from prbench.compare.bisect import BisectRequest, run_bisect
from prbench.compare.driver import CompareRequest, KernelSettings
from prbench.compare.variant_plan import describe_local_environment
from prbench.sides.overlay import installed_package_dir
from prbench.sides.recipes import load_recipe
from prbench.stages.suite import SuiteRequest
from tests.support.bisect_support import NOOP, installed_is, standin_history

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cpu-scalar-short-reductions.patch"
PLANTED = 2
LAST = 2
# The example makes four of tiny BERT's five C++ kernels slower (0.14× to 0.28× here); this one the most.
KERNEL = "cpp_fused__log_softmax_nll_loss_forward_view_4"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("pytorch")
    changes: list[str | Path] = [EXAMPLE if n == PLANTED else NOOP for n in range(1, LAST + 1)]
    shas = standin_history(root, installed_package_dir(sys.executable), ["_inductor/config.py",
                                                                          "_inductor/codegen/cpp.py"], changes)
    return root, shas


def _request(src: Path, good: str, bad: str, runs: Path) -> BisectRequest:
    compare = CompareRequest(base=good, pr=bad, recipe=load_recipe("cpu-local", ROOT / "recipes"), runs_dir=runs,
                             suite=SuiteRequest(warmup=3, iterations=10), rounds=3, passes=2,
                             kernels=KernelSettings(warmup=3, iterations=10), python=sys.executable)
    return BisectRequest(pytorch_src=src, good=good, bad=bad, compare=compare, model="BertForMaskedLM",
                         kernel=KERNEL, max_rounds=3)


def test_bisect_finds_the_planted_commit_then_a_no_op_range_is_good(history, tmp_path, monkeypatch):
    src, shas = history
    installed_is(monkeypatch, describe_local_environment(sys.executable).facts, shas[0])
    runs = tmp_path / "runs"
    calls: list[str] = []
    real = bisect_command.run_compare
    monkeypatch.setattr(bisect_command, "run_compare", lambda request, console: calls.append(request.pr)
                        or real(request, console))

    found = run_bisect(_request(src, shas[0], shas[LAST], runs))

    data = json.loads((found.directory / "bisect.json").read_text())
    assert data["format_version"] == 1
    assert data["conclusion"] == {"status": "found", "first_bad": shas[PLANTED], "candidates": [shas[PLANTED]],
                                  "stepped_around": []}
    steps = [(shas.index(s["sha"]), s["outcome"]) for s in data["steps"]]
    assert steps == [(LAST, "bad"), (1, "good")]
    assert all(s["verdict"] == "same code" for s in data["steps"] if s["outcome"] == "good")
    assert all(s["verdict"] == "regressed" and s["ci_high"] < 0.5 for s in data["steps"] if s["outcome"] == "bad")
    report = (found.directory / "bisect.md").read_text()
    assert f"First bad commit: `{shas[PLANTED][:12]}` commit {PLANTED}: {EXAMPLE.name}" in report
    assert report.count("| bad") + report.count("| **bad**") == 1 and f"`{shas[1][:8]}..{shas[2][:8]}" in report
    # The good commit (every step's base side) is compiled once: the later steps took the first step's base side.
    good_sides = {json.loads((runs / step["run"] / "manifest.json").read_text())["stages"]["base/suite"]["started"]
                  for step in data["steps"]}
    assert len(good_sides) == 1
    for step in data["steps"]:  # a kernel's steps time no model, and their reports say so
        stages = json.loads((runs / step["run"] / "manifest.json").read_text())["stages"]
        assert [key for key in stages if key.startswith("pair/models-round-")] == []
        assert [key for key in stages if key.startswith("pair/kernels-round-")] != []
        report = runs / step["run"] / "report"
        assert json.loads((report / "summary.json").read_text())["not_timed"] == ["models"]
        assert "## Models\n\nNot timed in this run" in (report / "report.md").read_text()
    for step in data["steps"]:  # time per step, for the note
        print(f"step {shas.index(step['sha'])}: {step['outcome']} in {step['seconds']:.0f} s")

    calls.clear()
    again = run_bisect(_request(src, shas[0], shas[LAST], runs))
    assert calls == [] and again.record.steps == found.record.steps  # resumed from bisect.json, nothing re-run

    no_op = run_bisect(_request(src, shas[0], shas[1], runs))
    assert calls == [shas[1]]  # the first bisect's run of commit 1, resumed: its stages are all done
    assert no_op.conclusion.status == "not regressed" and "the range is good" in no_op.headline
