"""A user compares (or builds) with a ROCm recipe that builds Triton from source at the commit PyTorch pins: the Triton
clone comes with --triton-src (a missing one is one line at the door), the pin of each side is found in it,
--triton-ref builds another commit, and the image's lock says which commit was built and where it came from.

The clones are stand-ins with the real layout of what is read: PyTorch's pin file
``.ci/docker/ci_commit_pins/triton.txt`` (one 40-hex commit and a newline) and a Triton tree with pyproject.toml.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from foundation.errors import UserError
from prbench.compare.variant_plan import plan_docker
from prbench.images.build import plan_build
from prbench.sides.pins import TritonPin
from prbench.sides.recipes import load_recipe
from tests.support.cli_support import invoke_in_process, one_line
from tests.support.docker_support import commit_all, make_pytorch, make_triton

ROOT = Path(__file__).resolve().parents[1]
PIN_FILE = ".ci/docker/ci_commit_pins/triton.txt"
TRITON_URL = "https://github.com/triton-lang/triton.git"


@dataclass(frozen=True)
class Clones:
    pytorch: Path
    triton: Path
    base: str  # PyTorch commit pinning triton_base
    pr: str  # PyTorch commit moving the pin to triton_pr
    triton_base: str
    triton_pr: str
    feature: str  # a Triton commit on the branch "feature", pinned by no PyTorch commit


@pytest.fixture
def clones(tmp_path: Path) -> Clones:
    triton_repo, triton_base = make_triton(tmp_path / "triton")
    (tmp_path / "triton" / "triton" / "language.py").write_text('"""A Triton change PyTorch picked up."""\n')
    triton_pr = commit_all(triton_repo, "the commit the PR pins")
    triton_repo.git.checkout("-q", "-b", "feature", triton_base)
    (tmp_path / "triton" / "triton" / "feature.py").write_text('"""A Triton change to try."""\n')
    feature = commit_all(triton_repo, "a feature")
    pytorch_repo, base = make_pytorch(tmp_path / "pytorch", triton_base)
    (tmp_path / "pytorch" / PIN_FILE).write_text(triton_pr + "\n")
    pr = commit_all(pytorch_repo, "update the Triton pin")
    return Clones(tmp_path / "pytorch", tmp_path / "triton", base, pr, triton_base, triton_pr, feature)


def _rocm():
    return load_recipe("rocm7-mi300", ROOT / "recipes")


@pytest.mark.parametrize("task, flags", [("compare", ("--triton-src", "--triton-ref")),
                                         ("bisect", ("--triton-src", "--triton-ref")),
                                         ("build", ("--triton-src", "--triton-ref")),
                                         ("rebuild", ("--triton-src",))])
def test_the_tasks_that_build_list_the_triton_flags(task: str, flags: tuple[str, ...]) -> None:
    shown = invoke_in_process("--help", task).stdout
    assert all(flag in shown for flag in flags), shown
    if task == "rebuild":  # a lock pins the exact Triton commit: there is nothing to override
        assert "--triton-ref" not in shown


def test_a_rocm_compare_without_a_triton_clone_stops_at_the_door(clones: Clones, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    result = invoke_in_process("compare", "--recipe", "rocm7-mi300", "--pytorch-src", str(clones.pytorch),
                               "--base", clones.base, "--pr", clones.pr, "--runs-dir", str(runs))
    assert one_line(result) == (
        f"error: --triton-src: recipe rocm7-mi300 builds Triton from {TRITON_URL} at the PyTorch pin; give a local "
        f"clone of it (git clone {TRITON_URL}; builds never fetch sources)")
    assert not runs.exists()

    result = invoke_in_process("compare", "--recipe", "rocm7-mi300", "--base", clones.base, "--pr", clones.pr,
                               "--runs-dir", str(runs))
    assert one_line(result).startswith("error: --pytorch-src: recipe rocm7-mi300 builds PyTorch from "
                                        "https://github.com/pytorch/pytorch.git; give a local clone of it (git clone")
    assert not runs.exists()


def test_each_side_builds_the_triton_commit_its_pytorch_pins(clones: Clones) -> None:
    plan = plan_docker(clones.base, clones.pr, _rocm(), clones.pytorch, triton_src=clones.triton)
    assert plan.base.triton == TritonPin(clones.triton_base, PIN_FILE)
    assert plan.pr.triton == TritonPin(clones.triton_pr, PIN_FILE)
    assert f"Triton {clones.triton_pr[:12]} ({PIN_FILE})" in plan.pr.how

    # The image of the PR side (as `invoke compare` plans it) records the commit and the pin file in its lock.
    image = plan_build(_rocm(), pytorch_src=clones.pytorch, triton_src=clones.triton,
                       pytorch_ref=plan.pr.pytorch_ref, pin=plan.pr.triton)
    assert image.inputs()["sources"]["triton"] == {"source": TRITON_URL, "commit": clones.triton_pr,
                                                   "pin_source": PIN_FILE, "install_dir": "."}


def test_a_pinned_commit_missing_from_the_clone_is_one_line_that_says_how_to_fetch_it(clones: Clones,
                                                                                      tmp_path: Path) -> None:
    old_clone, _ = make_triton(tmp_path / "old-triton", "3.4.0")  # a clone from before either pinned commit
    runs = tmp_path / "runs"
    result = invoke_in_process("compare", "--recipe", "rocm7-mi300", "--pytorch-src", str(clones.pytorch),
                               "--triton-src", str(tmp_path / "old-triton"), "--base", clones.base, "--pr",
                               clones.pr, "--runs-dir", str(runs))
    clone = old_clone.working_dir
    assert one_line(result) == (
        f"error: --triton-src: Triton commit {clones.triton_base} (pinned by PyTorch {clones.base[:12]} in "
        f"{PIN_FILE}) is not in the clone {clone}; fetch it there (git -C {clone} fetch origin "
        f"{clones.triton_base}), or build another commit with --triton-ref")
    assert not runs.exists()


def test_triton_ref_builds_another_commit_on_both_sides_and_the_lock_says_so(clones: Clones) -> None:
    plan = plan_docker(clones.base, clones.pr, _rocm(), clones.pytorch, triton_src=clones.triton,
                       triton_ref="feature")
    assert plan.base.triton == plan.pr.triton == TritonPin(clones.feature, "--triton-ref")
    image = plan_build(_rocm(), pytorch_src=clones.pytorch, triton_src=clones.triton,
                       pytorch_ref=plan.pr.pytorch_ref, pin=plan.pr.triton)
    assert image.triton is not None and image.triton.commit == clones.feature
    assert image.inputs()["sources"]["triton"]["pin_source"] == "--triton-ref"
    assert image.labels()["dev.prbench.triton.pin-source"] == "--triton-ref"
    pinned = plan_build(_rocm(), pytorch_src=clones.pytorch, triton_src=clones.triton, pytorch_ref=clones.pr)
    assert pinned.tag != image.tag  # another Triton is another image


def test_invoke_build_takes_triton_ref(clones: Clones, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prbench.images import docker_engine, image_lock

    built = []

    def build_and_lock(plan, client, images_dir, **kw):
        built.append(plan)
        return SimpleNamespace(result=SimpleNamespace(tag=plan.tag, image_id="sha256:" + "0" * 64),
                               lock_path=tmp_path / "lock.json")

    monkeypatch.setattr(image_lock, "build_and_lock", build_and_lock)
    monkeypatch.setattr(docker_engine, "docker_client", lambda: None)
    common = ("build", "--recipe", "rocm7-mi300", "--pytorch-src", str(clones.pytorch), "--triton-src",
              str(clones.triton), "--pytorch-ref", clones.pr, "--runs-dir", str(tmp_path / "runs"))
    result = invoke_in_process(*common, "--triton-ref", clones.feature[:10])
    assert result.returncode == 0, result.stderr
    assert built[0].triton_pin == TritonPin(clones.feature, "--triton-ref")

    result = invoke_in_process(*common, "--triton-ref", "no-such-branch")
    assert one_line(result).startswith("error: --triton-ref: commit no-such-branch is not in the clone")


def test_compare_takes_triton_ref_at_the_door(clones: Clones, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    result = invoke_in_process("compare", "--recipe", "rocm7-mi300", "--pytorch-src", str(clones.pytorch),
                               "--triton-src", str(clones.triton), "--triton-ref", "no-such-branch",
                               "--base", clones.base, "--pr", clones.pr, "--runs-dir", str(runs))
    assert one_line(result).startswith("error: --triton-ref: commit no-such-branch is not in the clone")
    assert not runs.exists()


def test_triton_flags_where_no_triton_is_built_are_refused(clones: Clones, tmp_path: Path) -> None:
    result = invoke_in_process("compare", "--recipe", "cpu-local", "--pr", "installed", "--triton-src",
                               str(clones.triton), "--runs-dir", str(tmp_path / "runs"))
    assert one_line(result).startswith("error: --triton-src: recipe cpu-local runs an installed torch; it builds "
                                        "no Triton")
    with pytest.raises(UserError, match=r"^--triton-ref: recipe cpu-docker installs wheels; it builds no Triton"):
        plan_build(load_recipe(str(ROOT / "recipes" / "cpu-docker.toml"), ROOT / "recipes"), triton_ref="main")


def test_a_rocm_bisect_checks_its_triton_flags_before_the_first_step(clones: Clones, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    common = ("bisect", "--recipe", "rocm7-mi300", "--pytorch-src", str(clones.pytorch), "--good", clones.base,
              "--bad", clones.pr, "--model", "BertForMaskedLM", "--runs-dir", str(runs))
    assert one_line(invoke_in_process(*common)).startswith(
        f"error: --triton-src: recipe rocm7-mi300 builds Triton from {TRITON_URL} at the PyTorch pin; give a local "
        "clone of it")
    result = invoke_in_process(*common, "--triton-src", str(clones.triton), "--triton-ref", "no-such-branch")
    assert one_line(result).startswith("error: --triton-ref: commit no-such-branch is not in the clone")
    assert not runs.exists()
