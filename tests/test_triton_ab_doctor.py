"""A user checks a Triton A/B before hours of build: ``invoke doctor --triton-src ~/triton --triton-pr B`` (and
``invoke compare``, whose preflight runs the same checks) resolves both Triton commits in the clone, checks that a
``--triton-pr`` patch applies to the base's Triton, and looks in the store for the downloads of each side's Triton
(the PR's may pin another LLVM), one line per check naming the flag.

The clones are stand-ins: a Triton 3.4 tree (its setup.py fetches LLVM b5cc222d) pinned by a PyTorch, and a later
Triton main tree (cmake/llvm-info.json: LLVM 941a04e6) as the PR (tests/support/triton_trees.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from foundation.errors import UserError
from prbench.compare import doctor
from prbench.compare.doctor import run_doctor
from tests.support.cli_support import invoke_in_process, one_line
from tests.support.docker_support import commit_all, make_pytorch, make_triton
from tests.support.triton_trees import triton_files, triton_tree
from tests.test_doctor import FakeEngine, amd_machine, by_name, inputs, rocm_recipe

LLVM_3_4 = "llvm-b5cc222d-ubuntu-x64.tar.gz"
LLVM_MAIN = "llvm-941a04e6-ubuntu-x64-1.tar.gz"
PATCH = """\
--- a/triton/__init__.py
+++ b/triton/__init__.py
@@ -1,2 +1,3 @@
 \"\"\"Stand-in Triton.\"\"\"
 __version__ = "3.5.0+standin"
+NUM_STAGES = 2
"""


@dataclass(frozen=True)
class Trees:
    recipe: Path
    triton: Path
    pytorch: Path
    base: str  # Triton 3.4, the pinned one
    pr: str  # Triton main


@pytest.fixture
def trees(tmp_path: Path) -> Trees:
    repo, _ = make_triton(tmp_path / "triton")
    triton_tree(tmp_path / "triton", "3.4")
    base = commit_all(repo, "triton 3.4 layout")
    for relative in triton_files("3.4"):
        (tmp_path / "triton" / relative).unlink()
    triton_tree(tmp_path / "triton", "main")
    pr = commit_all(repo, "triton main layout")
    _, pytorch = make_pytorch(tmp_path / "pytorch", base)
    return Trees(rocm_recipe(tmp_path, commit=pytorch), tmp_path / "triton", tmp_path / "pytorch", base, pr)


def _doctor(trees: Trees, tmp_path: Path, **given):
    machine = amd_machine(tmp_path, gpu=True, docker=lambda: FakeEngine(tmp_path))
    return by_name(run_doctor(inputs(trees.recipe, tmp_path, pytorch_src=trees.pytorch, triton_src=trees.triton,
                                     **given), machine))


def test_the_doctor_resolves_both_tritons_and_wants_the_prs_llvm_too(trees, tmp_path):
    found = _doctor(trees, tmp_path, triton_pr=trees.pr[:10])

    assert found["triton pin"].detail == (f"base {trees.base[:12]} (.ci/docker/ci_commit_pins/triton.txt), "
                                          f"pr {trees.pr[:10]} (--triton-pr)")
    assert found["triton commits"].status == "ok"
    assert found["triton commits"].detail.startswith(f"{trees.base[:12]}, {trees.pr[:12]} in ") or \
        found["triton commits"].detail.startswith(f"{trees.pr[:12]}, {trees.base[:12]} in ")
    store = found["store"]
    assert store.status == "fail" and LLVM_3_4 in store.detail and LLVM_MAIN in store.detail
    # the fix fetches each side's Triton: the pinned one, then the PR's
    assert store.detail.endswith(f"--store {tmp_path / 'store'}, then invoke store fetch --recipe mi300 "
                                 f"--pytorch-src {trees.pytorch} --triton-src {trees.triton} --store "
                                 f"{tmp_path / 'store'} --triton-ref {trees.pr[:10]}")

    # Without the A/B the PR's LLVM is not wanted: the store check follows the Triton each side builds.
    plain = _doctor(trees, tmp_path)["store"]
    assert LLVM_3_4 in plain.detail and LLVM_MAIN not in plain.detail


def test_a_triton_base_and_a_missing_pr_commit_are_named_by_their_flags(trees, tmp_path):
    found = _doctor(trees, tmp_path, triton_base=trees.pr, triton_pr="no-such-branch")
    assert found["triton commits"].status == "fail"
    assert found["triton commits"].detail == (f"--triton-pr: commit no-such-branch is not in the clone {trees.triton} "
                                              "(fetch it there first: builds never fetch sources)")


def test_a_triton_patch_is_checked_against_the_base_triton(trees, tmp_path):
    patch = tmp_path / "stages.patch"
    patch.write_text(PATCH)
    found = _doctor(trees, tmp_path, triton_pr=str(patch))
    assert found["triton commits"].status == "ok" and found["triton commits"].detail.endswith(
        "; stages.patch applies to the base's")
    assert LLVM_MAIN not in found["store"].detail  # the PR builds the base's Triton, patched

    patch.write_text(PATCH.replace('"3.5.0+standin"', '"3.6.0"'))
    found = _doctor(trees, tmp_path, triton_base=trees.pr, triton_pr=str(patch))
    assert found["triton commits"].status == "fail"
    assert found["triton commits"].detail.startswith(f"--triton-pr {patch}: does not apply to Triton {trees.pr[:12]} "
                                                     "(error: patch failed: triton/__init__.py:")


@pytest.mark.parametrize("args, expected", [
    (("--recipe", "cpu-local", "--triton-pr", "HEAD"),
     "error: --triton-pr: recipe cpu-local runs an installed torch; it builds no Triton (leave --triton-pr out, or "
     "give a docker recipe that builds from source)"),
    (("--recipe", "rocm7-mi300", "--triton-base", "HEAD"),
     "error: --triton-base: a Triton A/B also needs --triton-pr (the PR side's Triton commit)"),
    (("--recipe", "rocm7-mi300", "--triton-pr", "HEAD", "--triton-ref", "HEAD"),
     "error: --triton-ref: builds one Triton on both sides; a Triton A/B (--triton-pr) names each side's "
     "(--triton-base, default the pinned one): leave --triton-ref out"),
])
def test_the_doctors_triton_flags_are_checked_at_the_door(args, expected):
    assert one_line(invoke_in_process("doctor", *args)) == expected


def test_compares_preflight_checks_the_triton_ab_it_will_build(trees, tmp_path, monkeypatch):
    from prbench.compare.driver import CompareRequest, run_compare
    from prbench.sides.recipes import load_recipe

    machine = amd_machine(tmp_path, gpu=True, docker=lambda: FakeEngine(tmp_path))
    monkeypatch.setattr(doctor, "this_machine", lambda: machine)
    request = CompareRequest(base="installed", pr="installed", recipe=load_recipe(str(trees.recipe), tmp_path),
                             runs_dir=tmp_path / "runs", pytorch_src=trees.pytorch, triton_src=trees.triton,
                             triton_pr=trees.pr, store=tmp_path / "store")
    printed: list[str] = []
    console = type("Console", (), {"print": lambda self, line, **_: printed.append(str(line))})()

    with pytest.raises(UserError, match=r"^doctor: .* checks failed for recipe mi300 \(.*store.*\); invoke doctor"):
        run_compare(request, console)

    store = next(line for line in printed if "store" in line and "missing" in line)
    assert LLVM_MAIN in store and LLVM_3_4 in store
    assert not (tmp_path / "runs").exists()
