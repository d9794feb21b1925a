"""A user checks a Triton A/B before hours of build: ``invoke doctor --triton-src ~/triton --triton-pr B`` (and
``invoke compare``, whose preflight runs the same checks) resolves both Triton commits in the clone, checks that a
``--triton-pr`` patch applies to the base's Triton, and looks in the store for the downloads of each side's Triton
(the PR's may pin another LLVM), one line per check naming the flag.

The clones are stand-ins: a Triton 3.4 tree (its setup.py fetches LLVM b5cc222d) pinned by a PyTorch, and a later
Triton main tree (cmake/llvm-info.json: LLVM 941a04e6) as the PR (tests/support/triton_trees.py).
"""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from foundation.errors import UserError
from prbench.compare import doctor
from prbench.compare.doctor import run_doctor
from prbench.images.content_store import WheelTarget
from tests.support.cli_support import invoke_in_process, one_line
from tests.support.docker_support import commit_all, make_pytorch, make_triton
from tests.support.triton_trees import triton_files, triton_tree
from tests.test_doctor import FakeEngine, amd_machine, by_name, inputs, rocm_recipe

TARGET = WheelTarget("3.10", ("manylinux_2_35_x86_64", "linux_x86_64"), abi="cp310")  # the base image's python3
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


def _archive(name: str) -> bytes:
    return f"the bytes of {name}".encode()


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
    # main's llvm-info.json names each LLVM archive's sha256: here the one of the archive this test's network serves
    info = tmp_path / "triton" / "cmake" / "llvm-info.json"
    pinned = json.loads(info.read_text())
    pinned["sha256sum"]["ubuntu-x64"] = hashlib.sha256(_archive(LLVM_MAIN)).hexdigest()
    info.write_text(json.dumps(pinned, indent=2) + "\n")
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
    # the fix is one fetch of both sides' Triton downloads (run below)
    assert store.detail.endswith(f"--triton-pr {trees.pr[:10]} --store {tmp_path / 'store'}")

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
    (("--recipe", "cpu-venv", "--triton-pr", "HEAD"),
     "error: --triton-pr: recipe cpu-venv runs an installed torch; it builds no Triton (leave --triton-pr out, or "
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


# --- the one store fetch the doctor names: both sides' Triton downloads ---------------------------------------------


class _Served(io.BytesIO):
    @property
    def headers(self) -> dict[str, str]:
        return {"Content-Length": str(len(self.getvalue()))}


@pytest.fixture
def network(monkeypatch) -> list[str]:
    """The network of a machine that can fetch: every archive by its URL (the names asked for, in order), and the
    base image's interpreter as the doctor's stand-in engine reports it."""
    from prbench.commands import images
    from prbench.images import wheels

    asked: list[str] = []

    def serve(url: str, timeout: float) -> _Served:
        asked.append(url.rsplit("/", 1)[1])
        return _Served(_archive(asked[-1]))

    monkeypatch.setattr(urllib.request, "urlopen", serve)
    monkeypatch.setattr(wheels, "base_image_target", lambda recipe, store: lambda: TARGET)
    monkeypatch.setattr(images, "_base_rocm_version", lambda recipe, store: "7.0")
    return asked


def _run_fix(fix: str, trees: Trees):
    """The doctor's fix line as the user pastes it, from the directory that holds the recipe."""
    words = shlex.split(fix)
    assert words[:2] == ["invoke", "store"], fix
    return invoke_in_process(*words[1:], env={"INVOKE_PRBENCH_RECIPES_DIR": str(trees.recipe.parent)})


def test_the_one_fetch_the_doctor_names_fills_the_store_with_both_sides_triton_downloads(trees, tmp_path,
                                                                                      network):
    """The doctor of a Triton A/B finds both LLVMs missing and names one command; run as printed, it fetches the
    pinned Triton's downloads and the PR Triton's (another LLVM), each once, and the doctor's store check then
    passes."""
    store = _doctor(trees, tmp_path, triton_pr=trees.pr[:10])["store"]
    fix = store.detail.split("; fetch them first: ")[1]
    assert fix == (f"invoke store fetch --recipe mi300 --pytorch-src {trees.pytorch} --triton-src {trees.triton} "
                   f"--triton-pr {trees.pr[:10]} --store {tmp_path / 'store'}")

    fetched = _run_fix(fix, trees)

    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    # main also fetches nlohmann/json (include.zip), which 3.4 fetches for Proton only, off in this build
    assert sorted(network) == sorted([LLVM_3_4, LLVM_MAIN, "include.zip"]), "each side's downloads, each once"
    assert fetched.stdout.splitlines()[-1] == (f"store {tmp_path / 'store'}: 3 build download(s) for recipe mi300 "
                                               "at 1 PyTorch commit(s) and 2 Triton commit(s)")
    after = _doctor(trees, tmp_path, triton_pr=trees.pr[:10])["store"]
    assert after.status == "ok", after.detail


def test_a_triton_patch_fetches_the_base_tritons_downloads_and_a_named_base_its_own(trees, tmp_path, network):
    """A --triton-pr patch builds the base's Triton, patched: one LLVM, the pinned Triton's. With --triton-base main
    the patch goes on main, whose LLVM is then the one fetched."""
    patch = tmp_path / "stages.patch"
    patch.write_text(PATCH)
    fix = _doctor(trees, tmp_path, triton_pr=str(patch))["store"].detail.split("; fetch them first: ")[1]
    assert fix.endswith(f"--triton-pr {patch} --store {tmp_path / 'store'}")

    assert _run_fix(fix, trees).returncode == 0
    assert network == [LLVM_3_4]

    network.clear()
    fetched = _run_fix(fix.replace("--triton-pr", f"--triton-base {trees.pr[:10]} --triton-pr"), trees)
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    assert network == [LLVM_MAIN, "include.zip"]
    assert fetched.stdout.splitlines()[-1].endswith("at 1 PyTorch commit(s) and 1 Triton commit(s)")
    assert _doctor(trees, tmp_path, triton_base=trees.pr[:10], triton_pr=str(patch))["store"].status == "ok"


@pytest.mark.parametrize("args, expected", [
    (("--triton-pr", "no-such-branch"),
     "error: --triton-pr: commit no-such-branch is not in the clone {triton} (fetch it there first: builds never "
     "fetch sources)"),
    (("--triton-base", "no-such-tag", "--triton-pr", "{pr}"),
     "error: --triton-base: commit no-such-tag is not in the clone {triton} (fetch it there first: builds never "
     "fetch sources)"),
    (("--triton-base", "{pr}"), "error: --triton-base: a Triton A/B also needs --triton-pr (the PR side's Triton "
                                "commit)"),
    (("--triton-pr", "{pr}", "--triton-ref", "{pr}"),
     "error: --triton-ref: builds one Triton on both sides; a Triton A/B (--triton-pr) names each side's "
     "(--triton-base, default the pinned one): leave --triton-ref out"),
    (("--triton-pr", "{base}"), "error: --triton-pr: Triton {base12} is also the base's "
                                "(.ci/docker/ci_commit_pins/triton.txt); a Triton A/B needs two commits"),
    (("--triton-pr", "{pr}", "--pr", "HEAD~1"),
     "error: --pr HEAD~1: a Triton A/B (--triton-pr) keeps PyTorch the same on both sides; leave --pr out (or give "
     "the --base commit), and compare PyTorch changes in a run of their own"),
    (("--triton-base", "{pr}", "--triton-pr", "{patch}"),
     "error: --triton-pr {patch}: does not apply to Triton {pr12} (error: patch failed: triton/__init__.py:1)"),
])
def test_store_fetchs_triton_ab_mistakes_are_one_line_before_anything_is_fetched(trees, tmp_path, network, args,
                                                                                  expected):
    patch = tmp_path / "stages.patch"
    patch.write_text(PATCH.replace('"3.5.0+standin"', '"3.6.0"'))
    names = {"pr": trees.pr, "base": trees.base, "pr12": trees.pr[:12], "base12": trees.base[:12],
             "triton": trees.triton, "patch": patch}
    fetch = ("store", "fetch", "--recipe", str(trees.recipe), "--pytorch-src", str(trees.pytorch), "--triton-src",
             str(trees.triton), "--store", str(tmp_path / "store"))
    assert one_line(invoke_in_process(*fetch, *(arg.format(**names) for arg in args))) == expected.format(**names)
    assert network == []


@pytest.mark.parametrize("args, expected", [
    (("fetch", "--recipe", "cpu-docker", "--triton-pr", "HEAD"),
     "error: --triton-pr: recipe cpu-docker installs wheels; it builds no Triton (leave --triton-pr out, or give a "
     "docker recipe that builds from source)"),
    (("fetch", "--recipe", "cpu-venv", "--triton-base", "HEAD", "--triton-pr", "HEAD"),
     "error: store fetch: recipe cpu-venv installs wheels; --pytorch-src, --triton-src, --triton-ref, "
     "--triton-base and --triton-pr are for recipes that build from source"),
    (("list", "--triton-pr", "HEAD"),
     "error: store list: --pytorch-src, --triton-src, --triton-ref, --triton-base, --triton-pr, --base and --pr are "
     "for fetch only"),
])
def test_the_triton_ab_flags_of_store_are_for_fetching_a_source_build(args, expected, tmp_path):
    assert one_line(invoke_in_process("store", *args, "--store", str(tmp_path / "store"))) == expected
