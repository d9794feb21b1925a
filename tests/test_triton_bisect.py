"""A user bisects a Triton range with PyTorch fixed: ``invoke bisect --triton-src ~/triton --triton-good A
--triton-bad B --kernel K``. Every step is the Triton A/B ``invoke compare --triton-base A --triton-pr STEP`` plans
(one PyTorch on both sides), and the search is the PyTorch bisect's.

The clones are stand-ins (tests/support/docker_support): a Triton history of six commits after the good one, the
kernel's Triton code slower from commit 4 on, and a PyTorch that pins the good one. Each step's comparison is played by
a stand-in for `run_compare` that writes the report row a real one would; the planning of each step is the real one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from analysis.kernels.compare import IDENTICAL_CODE
from prbench.compare import bisect as bisect_command
from prbench.compare.bisect import BisectRequest, run_bisect
from prbench.compare.driver import CompareRequest
from prbench.sides.recipes import load_recipe
from tests.support.cli_support import invoke_in_process, one_line
from tests.support.docker_support import commit_all, make_pytorch, make_triton

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "triton_poi_fused_add_0"
FIRST_BAD = 4
COLUMNS = ("matched_by", "code_changed", "base_name", "pr_name", "body_hash", "shape_key", "base_graphs", "verdict",
           "speedup", "ci_low", "ci_high", "rounds")


@dataclass(frozen=True)
class Clones:
    pytorch: Path
    triton: Path
    pytorch_commit: str
    tritons: list[str]  # the good commit first


@pytest.fixture
def clones(tmp_path: Path) -> Clones:
    repo, good = make_triton(tmp_path / "triton")
    tritons = [good]
    for number in range(1, 7):
        (tmp_path / "triton" / "triton" / "backend_defaults.py").write_text(f"NUM_STAGES = {number}\n")
        tritons.append(commit_all(repo, f"triton commit {number}"))
    _, pytorch = make_pytorch(tmp_path / "pytorch", good)
    return Clones(tmp_path / "pytorch", tmp_path / "triton", pytorch, tritons)


class StandInCompare:
    """Writes the step's row: the Triton kernel regressed from commit 4 on, equivalent before, except that commit 2
    needs more than three rounds to be told equivalent (identical Inductor source is no proof in a Triton A/B)."""

    def __init__(self, clones: Clones) -> None:
        self.clones = clones
        self.calls: list[tuple[int, int | None]] = []
        self.requests: list[CompareRequest] = []

    def __call__(self, request: CompareRequest, console) -> tuple[None, SimpleNamespace]:
        position = self.clones.tritons.index(str(request.triton_pr))
        self.calls.append((position, request.rounds))
        self.requests.append(request)
        row: dict[str, object] = {"matched_by": IDENTICAL_CODE, "code_changed": True, "base_name": KERNEL,
                                  "pr_name": KERNEL, "verdict": "equivalent", "speedup": 1.0, "ci_low": 0.99,
                                  "ci_high": 1.01, "rounds": request.rounds}
        if position >= FIRST_BAD:
            row.update(verdict="regressed", speedup=0.7, ci_low=0.65, ci_high=0.75)
        elif position == 2 and request.rounds == 3:
            row.update(verdict="inconclusive", ci_low=0.9, ci_high=1.1)
        report = Path(request.runs_dir) / str(request.run_id) / "report"
        report.mkdir(parents=True, exist_ok=True)
        lines = [",".join(COLUMNS), ",".join(str(row.get(c, "")) for c in COLUMNS)]
        (report / "kernels_compare.csv").write_text("\n".join(lines) + "\n")
        return None, SimpleNamespace(out_dir=report)


def _request(clones: Clones, runs: Path) -> BisectRequest:
    recipe = load_recipe("rocm7-mi300", ROOT / "recipes")
    compare = CompareRequest(base=clones.pytorch_commit, pr=clones.pytorch_commit, recipe=recipe, runs_dir=runs,
                             triton_src=clones.triton, rounds=3)
    return BisectRequest(pytorch_src=clones.pytorch, good=clones.tritons[0][:10], bad=clones.tritons[-1],
                         compare=compare, kernel=KERNEL, max_rounds=6, triton=True)


def test_a_triton_range_finds_the_first_bad_triton_commit_with_pytorch_fixed(clones, tmp_path, monkeypatch):
    fake = StandInCompare(clones)
    monkeypatch.setattr(bisect_command, "run_compare", fake)

    result = run_bisect(_request(clones, tmp_path / "runs"))

    # the bad endpoint first, then halving
    assert fake.calls == [(6, 3), (3, 3), (4, 3)]
    assert result.conclusion.status == "found"
    assert result.record.commits[result.conclusion.candidates[0]].sha == clones.tritons[FIRST_BAD]
    assert result.headline == f"First bad Triton commit: `{clones.tritons[FIRST_BAD][:12]}` triton commit 4"
    # every step: the same PyTorch on both sides, the good Triton as the base's, the step's as the PR's
    assert {(r.base, r.pr, r.triton_base) for r in fake.requests} == {
        (clones.pytorch_commit, clones.pytorch_commit, clones.tritons[0])}
    assert all(r.run_id.startswith(f"step-triton-{clones.tritons[0][:10]}-") for r in fake.requests)
    data = json.loads((result.directory / "bisect.json").read_text())
    assert data["settings"]["triton_pytorch"] == clones.pytorch_commit
    assert result.directory.name.startswith("bisect-triton-")
    report = (result.directory / "bisect.md").read_text()
    assert f"every step builds PyTorch `{clones.pytorch_commit[:12]}` on both sides" in report


def test_identical_inductor_source_is_not_the_same_code_in_a_triton_range(clones, tmp_path, monkeypatch):
    fake = StandInCompare(clones)
    monkeypatch.setattr(bisect_command, "run_compare", fake)
    request = _request(clones, tmp_path / "runs")
    # A range whose middle commit is commit 2: its kernel matched identical source, yet it was timed again.
    run_bisect(BisectRequest(pytorch_src=request.pytorch_src, good=clones.tritons[0], bad=clones.tritons[FIRST_BAD],
                             compare=request.compare, kernel=KERNEL, max_rounds=6, triton=True))
    assert (2, 3) in fake.calls and (2, 6) in fake.calls


def _bisect(clones: Clones, tmp_path: Path, *extra: str, recipe: str = "rocm7-mi300"):
    return invoke_in_process("bisect", "--recipe", recipe, "--kernel", KERNEL, "--runs-dir", str(tmp_path / "runs"),
                             *extra)


@pytest.mark.parametrize("extra, expected", [
    (("--good", "{t0}", "--triton-good", "{t0}", "--triton-bad", "{t6}"),
     "error: --good/--bad: a bisect walks one range; with --triton-good/--triton-bad PyTorch stays fixed "
     "(--pytorch-ref, default the recipe's commit): leave --good/--bad out"),
    (("--triton-good", "{t0}"),
     "error: --triton-bad: required with a Triton range (the last good and the first bad Triton commit in "
     "--triton-src)"),
    (("--pytorch-ref", "{p}", "--good", "{t0}", "--bad", "{t6}", "--pytorch-src", "{pytorch}"),
     "error: --pytorch-ref {p}: fixes PyTorch for a Triton range; give --triton-good/--triton-bad, or walk PyTorch "
     "with --good/--bad"),
    (("--triton-good", "{t0}", "--triton-bad", "{t6}", "--triton-ref", "{t0}"),
     "error: --triton-ref: builds one Triton on every step; a Triton range builds each step's own: leave "
     "--triton-ref out"),
    (("--pytorch-src", "{pytorch}", "--pytorch-ref", "{p}", "--triton-src", "{triton}", "--triton-good",
      "no-such-commit", "--triton-bad", "{t6}"),
     "error: --triton-good=no-such-commit: unknown ref in {triton}"),
    (("--pytorch-src", "{pytorch}", "--pytorch-ref", "{p}", "--triton-src", "{triton}", "--triton-good", "{t6}",
      "--triton-bad", "{t0}"),
     "error: --triton-good={t6}: not an ancestor of --triton-bad={t0}; give the older, good commit as --triton-good"),
    (("--pytorch-src", "{pytorch}", "--pytorch-ref", "nope", "--triton-src", "{triton}", "--triton-good", "{t0}",
      "--triton-bad", "{t6}"),
     "error: --pytorch-ref=nope: unknown ref in {pytorch}"),
    (("--pytorch-src", "{pytorch}", "--triton-good", "{t0}", "--triton-bad", "{t6}"),
     "error: --triton-src: recipe rocm7-mi300 builds Triton from https://github.com/triton-lang/triton.git at the "
     "PyTorch pin; give a local clone of it (git clone https://github.com/triton-lang/triton.git; builds never fetch "
     "sources)"),
])
def test_a_triton_range_is_checked_at_the_door_with_one_line(clones, tmp_path, extra, expected):
    values = {"t0": clones.tritons[0], "t6": clones.tritons[6], "p": clones.pytorch_commit,
              "pytorch": str(clones.pytorch), "triton": str(clones.triton)}
    result = _bisect(clones, tmp_path, *(arg.format(**values) for arg in extra))
    assert one_line(result) == expected.format(**values)
    assert not (tmp_path / "runs").exists()


def test_a_triton_range_needs_a_recipe_that_builds_triton(clones, tmp_path):
    result = _bisect(clones, tmp_path, "--triton-good", clones.tritons[0], "--triton-bad", clones.tritons[6],
                     recipe="cpu-local")
    assert one_line(result) == ("error: --triton-good/--triton-bad: recipe cpu-local builds no Triton; give a Docker "
                                "recipe that builds from source (--recipe, or --docker-recipe with a local one)")
