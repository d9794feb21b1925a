"""How `invoke compare` turns --base/--pr into environments: installed torch, overlays, or refused."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import git
import pytest

from foundation.errors import UserError
from prbench.compare import variant_plan
from prbench.compare.variant_plan import LocalEnvironment, local_lock, plan_docker, plan_local
from prbench.sides.recipes import load_recipe
from tests.support.docker_support import make_triton

ROOT = Path(__file__).resolve().parents[1]


def _installed_torch(monkeypatch: pytest.MonkeyPatch, version: str, commit: str) -> None:
    """The interpreter describes a torch of this version and commit (no process is started)."""
    monkeypatch.setattr(variant_plan, "describe_local_environment",
                        lambda python: LocalEnvironment({"torch": version, "torch_git": commit}))


def _commit(repo: git.Repo, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        path = Path(repo.working_dir) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        repo.index.add([rel])
    return repo.index.commit(message).hexsha


@pytest.fixture
def pytorch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A stand-in PyTorch clone: the installed commit, a base and a PR on top, and a PR touching C++."""
    repo = git.Repo.init(tmp_path / "pytorch")
    config = "torch/_inductor/config.py"
    shas = {"installed": _commit(repo, {config: "max_fusion_size = 64\n"}, "installed")}
    shas["base"] = _commit(repo, {config: "max_fusion_size = 64\nbenchmark_kernel = False\n"}, "base")
    shas["pr"] = _commit(repo, {config: "max_fusion_size = 8\nbenchmark_kernel = False\n"}, "pr")
    shas["native"] = _commit(repo, {"aten/src/ATen/native/Fused.cpp": "int f();\n"}, "native")
    shas["root"] = repo.working_dir
    _installed_torch(monkeypatch, "2.13.0", shas["installed"])
    installed = tmp_path / "site-packages" / "torch"  # what the installed commit ships, for the apply check
    (installed / "_inductor").mkdir(parents=True)
    (installed / "_inductor" / "config.py").write_text("max_fusion_size = 64\n")
    monkeypatch.setattr(variant_plan, "installed_package_dir", lambda python: installed)
    return shas


def test_a_python_only_pr_runs_as_overlays_on_the_installed_torch(pytorch):
    plan = plan_local(pytorch["base"][:10], "HEAD~1", Path(pytorch["root"]), "python")

    assert plan.base.pytorch_ref == pytorch["base"] and plan.pr.pytorch_ref == pytorch["pr"]
    assert [f.path for f in plan.base.overlay.files] == ["torch/_inductor/config.py"]
    assert "+max_fusion_size = 8" in plan.pr.overlay.patch_text  # the PR overlay goes from installed to the PR
    assert plan.merge_base == pytorch["base"]
    assert "Python overlay" in plan.pr.how


def test_the_installed_commit_itself_needs_no_overlay(pytorch):
    plan = plan_local(pytorch["installed"], pytorch["pr"], Path(pytorch["root"]), "python")
    assert plan.base.overlay is None and plan.pr.overlay is not None


def test_a_pr_touching_compiled_code_is_refused_with_the_reason(pytorch):
    with pytest.raises(UserError, match=r"--pr: touches non-Python files .*Fused\.cpp.*Docker recipe"):
        plan_local("installed", pytorch["native"], Path(pytorch["root"]), "python")


def test_a_patch_file_pr_goes_on_top_of_the_base(pytorch, tmp_path):
    patch = tmp_path / "change.patch"
    patch.write_text("--- a/torch/_inductor/config.py\n+++ b/torch/_inductor/config.py\n"
                     "@@ -1 +1 @@\n-max_fusion_size = 64\n+max_fusion_size = 4\n")
    plan = plan_local("installed", str(patch), None, "python")
    assert plan.base.overlay is None and plan.base.pytorch_ref == "installed"
    assert plan.pr.overlay.files[0].path == "torch/_inductor/config.py"


def test_unknown_refs_and_a_missing_installed_commit_are_one_line_errors(pytorch, monkeypatch):
    with pytest.raises(UserError, match=r"^--pr=no-such-branch: unknown ref"):
        plan_local("installed", "no-such-branch", Path(pytorch["root"]), "python")
    _installed_torch(monkeypatch, "2.13.0", "f" * 40)
    with pytest.raises(UserError, match="installed torch's commit ffffffffffff is not in"):
        plan_local("installed", pytorch["pr"], Path(pytorch["root"]), "python")


def test_with_a_docker_recipe_each_side_is_built_at_its_commit(pytorch, tmp_path):
    recipe = load_recipe("cuda-h100", ROOT / "recipes")
    _, triton = make_triton(tmp_path / "triton")  # these stand-in commits pin no Triton: --triton-ref names it
    clones = {"triton_src": tmp_path / "triton", "triton_ref": triton}
    plan = plan_docker(pytorch["base"], pytorch["pr"], recipe, Path(pytorch["root"]), **clones)
    assert (plan.base.pytorch_ref, plan.pr.pytorch_ref) == (pytorch["base"], pytorch["pr"])
    assert plan.base.overlay is None and plan.pr.overlay is None
    assert plan.merge_base == pytorch["base"]
    # Compiled changes are fine here: the image rebuilds PyTorch.
    native = plan_docker(pytorch["base"], pytorch["native"], recipe, Path(pytorch["root"]), **clones)
    assert native.pr.pytorch_ref == pytorch["native"]


def test_a_local_compare_asks_its_interpreter_about_torch_once(monkeypatch):
    """Importing torch takes seconds: the plan and both sides' locks share one description of the interpreter."""
    started: list[list[str]] = []
    facts = {"python": "3.11.7", "torch": "2.13.0+cpu", "torch_git": "a" * 40, "triton": None, "gpu": None}

    def run(argv, **_):
        started.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout=json.dumps(facts) + "\n", stderr="")

    monkeypatch.setattr(variant_plan.subprocess, "run", run)
    plan = plan_local("installed", "installed", None, "/opt/py/bin/python3")
    locks = [local_lock(side, plan.local) for side in (plan.base, plan.pr)]

    assert [argv[0] for argv in started] == ["/opt/py/bin/python3"]
    assert plan.installed_commit == "a" * 40
    for lock in locks:
        host = {k: lock["environment"][k] for k in ("cpu", "vector_isa", "cores", "load_1min")}  # this machine's
        assert lock["environment"] == {**facts, **host}
        assert lock["pytorch_ref"] == "installed" and lock["overlay_sha256"] is None


@pytest.mark.parametrize(("status", "error"), [(3, "cannot import torch"),
                                               (1, "cannot describe its torch environment")])
def test_an_interpreter_without_a_working_torch_is_one_line_naming_it(monkeypatch, status, error):
    monkeypatch.setattr(variant_plan.subprocess, "run",
                        lambda argv, **_: subprocess.CompletedProcess(argv, status, stdout="", stderr="boom"))
    with pytest.raises(UserError, match=rf"^--python /opt/py/bin/python3: {error}$"):
        plan_local("installed", "installed", None, "/opt/py/bin/python3")
