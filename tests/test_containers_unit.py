"""Containers without an engine: the Triton pin, template rendering for the real recipes, lock comparison,
env allow-list, and the Docker runner's mounts and GPU flags."""

from __future__ import annotations

import os
import re
from pathlib import Path

import git
import pytest

from foundation.errors import UserError
from prbench.images import image_lock as lock
from prbench.images.build import render_dockerfile
from prbench.runners import CODE_ROOT, StageCommand
from prbench.runners.docker import gpu_options, mounts_for
from prbench.sides import pins
from prbench.sides.pins import SourceTree
from prbench.sides.recipes import load_recipe
from tests.support.docker_support import commit_all

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
TRITON_SHA = "a" * 40


def _repo_with(path: Path, files: dict[str, str]) -> tuple[git.Repo, str]:
    repo = git.Repo.init(path)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return repo, commit_all(repo, "files")


# --- Triton pin ------------------------------------------------------------------------------------------


def test_pin_is_read_from_the_pytorch_commit_and_its_file_recorded(tmp_path: Path) -> None:
    repo, sha = _repo_with(tmp_path, {".ci/docker/ci_commit_pins/triton.txt": TRITON_SHA + "\n"})
    (tmp_path / ".ci/docker/ci_commit_pins/triton.txt").write_text("b" * 40)  # a dirty tree must not matter
    pin = pins.triton_pin("from-pytorch-pin", repo, sha, "cuda")
    assert pin == pins.TritonPin(TRITON_SHA, ".ci/docker/ci_commit_pins/triton.txt")


def test_older_trees_pin_rocm_triton_under_github(tmp_path: Path) -> None:
    repo, sha = _repo_with(tmp_path, {".github/ci_commit_pins/triton-rocm.txt": TRITON_SHA})
    assert pins.triton_pin("from-pytorch-pin", repo, sha, "rocm").source == ".github/ci_commit_pins/triton-rocm.txt"


def test_recipe_commit_overrides_the_pin(tmp_path: Path) -> None:
    repo, sha = _repo_with(tmp_path, {".ci/docker/ci_commit_pins/triton.txt": TRITON_SHA})
    assert pins.triton_pin("c" * 40, repo, sha, "rocm") == pins.TritonPin("c" * 40, "recipe")


def test_missing_pin_names_every_file_probed(tmp_path: Path) -> None:
    repo, sha = _repo_with(tmp_path, {"README": "no pins"})
    with pytest.raises(UserError, match=r"no Triton pin file \(probed .*triton.txt.*triton-rocm.txt"):
        pins.triton_pin("from-pytorch-pin", repo, sha, "rocm")


def test_a_pin_that_is_not_a_commit_is_refused(tmp_path: Path) -> None:
    repo, sha = _repo_with(tmp_path, {".ci/docker/ci_commit_pins/triton.txt": "release/3.5.x"})
    with pytest.raises(UserError, match="not a 40-hex commit"):
        pins.triton_pin("from-pytorch-pin", repo, sha, "cuda")


def test_old_triton_layout_installs_from_python_dir(tmp_path: Path) -> None:
    old_repo, old_sha = _repo_with(tmp_path / "old", {"python/setup.py": "", "python/requirements.txt": "lit\n"})
    new_repo, new_sha = _repo_with(tmp_path / "new", {"pyproject.toml": "", "python/requirements.txt": "lit\n"})
    old = pins._triton_tree(old_repo, old_sha)
    new = pins._triton_tree(new_repo, new_sha)
    assert (old.install_dir, old.requirements) == ("python", ("python/requirements.txt",))
    assert new.install_dir == "."


# --- rendered Dockerfiles of the real recipes ------------------------------------------------------------


def _render(recipe_name: str) -> str:
    recipe = load_recipe(recipe_name, RECIPES)
    assert recipe.pytorch is not None
    pytorch = SourceTree("pytorch", Path("/src/pytorch"), recipe.pytorch.commit,
                         requirements=("requirements.txt", "requirements-build.txt"))
    triton = SourceTree("triton", Path("/src/triton"), TRITON_SHA, requirements=("python/requirements.txt",))
    return render_dockerfile(recipe, pytorch, triton)


def _run_lines(text: str) -> list[str]:
    """RUN instructions with their backslash continuations joined, as the builder reads them."""
    logical = re.sub(r"\\\n\s*", " ", text)
    return [line for line in logical.splitlines() if line.startswith("RUN ")]


@pytest.mark.parametrize("name", ["rocm7-mi300", "rocm7-mi350", "cuda-h100"])
def test_real_recipes_build_from_a_digest_with_classic_builder_syntax(name: str) -> None:
    text = _render(name)
    recipe = load_recipe(name, RECIPES)
    assert recipe.base_image is not None
    from_lines = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert from_lines == [f"FROM {recipe.base_image.reference}"]
    assert re.fullmatch(r"FROM [\w./-]+@sha256:[0-9a-f]{64}", from_lines[0])
    # docker-py speaks to the classic builder only
    assert "--mount" not in text and "<<" not in text and "# syntax" not in text


def test_mi350_dockerfile_builds_triton_then_hipified_pytorch_for_gfx950() -> None:
    text = _render("rocm7-mi350")
    runs = _run_lines(text)
    uninstall = next(r for r in runs if "pip uninstall" in r)
    for package in ("torch", "torchvision", "torchaudio", "triton", "pytorch-triton", "pytorch-triton-rocm",
                    "triton-rocm"):
        assert f" {package} " in uninstall + " "
    assert 'PYTORCH_ROCM_ARCH="gfx950"' in text and "TORCH_CUDA_ARCH_LIST" not in text
    order = [text.index(s) for s in ("pip install --no-index --find-links /opt/prbench/wheels/triton-build",
                                     "COPY src/triton ", "COPY src/pytorch ",
                                     "RUN python3 tools/amd_build/build_amd.py")]
    assert order == sorted(order)
    installs = [r for r in runs if "pip install --no-index --no-build-isolation -v -e" in r]
    assert [r.split()[-1] for r in installs] == [".", "."]  # Triton (new layout), then PyTorch
    assert text.index("build_amd.py") < text.rindex("--no-build-isolation -v -e .")
    assert runs[-1].startswith("RUN python3 /opt/prbench/build/check_environment.py --one-triton")
    assert 'ENV AMDGCN_USE_BUFFER_OPS="1"' in text
    # the extra pin is resolved on the host into the wheelhouse: pip in the image reads hashes, never the pin text
    assert "transformers" not in text
    assert "pip install --no-index --find-links /opt/prbench/wheels/extra --require-hashes" in text


def test_cuda_dockerfile_sets_arch_list_and_installs_python_first() -> None:
    text = _render("cuda-h100")
    assert 'TORCH_CUDA_ARCH_LIST="9.0"' in text
    assert "build_amd.py" not in text and "PYTORCH_ROCM_ARCH" not in text
    assert text.index("apt-get install -y --no-install-recommends -- python3 ") < text.index("pip uninstall")
    assert " && python3 -m pip install --no-index --no-build-isolation -v -e ." in text


# --- lock comparison and env allow-list ------------------------------------------------------------------


def _lock(**changes: object) -> dict:
    base = {k: {} for k in lock.COMPARED}
    base["sources"] = {"pytorch": {"commit": "1" * 40}, "triton": {"commit": TRITON_SHA, "pin_source": "x"}}
    base["contents"] = {"pip": {"torch": "2.9.0"}, "dpkg": {"libc6": "2.36"}}
    base.update(changes)
    return base


def test_compare_names_exactly_the_changed_field() -> None:
    changed = _lock(sources={"pytorch": {"commit": "1" * 40}, "triton": {"commit": "f" * 40, "pin_source": "x"}})
    diffs = lock.compare(_lock(), changed)
    assert [d.field for d in diffs] == ["sources.triton.commit"]
    assert "lock has aaaa" in diffs[0].line() and "image has ffff" in diffs[0].line()


def test_compare_reports_added_and_removed_packages() -> None:
    changed = _lock(contents={"pip": {"torch": "2.9.0", "pandas": "2.2.3"}, "dpkg": {}})
    fields = [d.field for d in lock.compare(_lock(), changed)]
    assert fields == ["contents.dpkg", "contents.dpkg.libc6", "contents.pip.pandas"]


def test_env_allow_list_never_keeps_secrets() -> None:
    env = ["PYTORCH_ROCM_ARCH=gfx942", "HF_TOKEN=hf_abc", "TRITON_API_KEY=x", "AWS_SECRET_ACCESS_KEY=y",
           "PATH=/usr/bin", "GITHUB_TOKEN=z", "HOME=/root"]
    assert lock.allowed_env(env) == {"PATH": "/usr/bin", "PYTORCH_ROCM_ARCH": "gfx942"}


# --- Docker runner: mounts and GPU flags -----------------------------------------------------------------


def test_mounts_keep_host_paths_and_make_only_the_run_dir_writable(tmp_path: Path) -> None:
    run_dir, cache = tmp_path / "runs" / "r1", tmp_path / "cache"
    cache.mkdir()
    command = StageCommand("stages.organize", ["--cache", str(cache), f"--out={run_dir / 'base'}", "--rep", "5"])
    volumes = mounts_for(command, [run_dir])
    assert volumes[str(run_dir)] == {"bind": str(run_dir), "mode": "rw"}
    assert volumes[str(CODE_ROOT)] == {"bind": str(CODE_ROOT), "mode": "ro"}
    assert volumes[str(cache)] == {"bind": str(cache), "mode": "ro"}
    assert len(volumes) == 3  # the output under the run dir needs no mount of its own


def test_rocm_flags_add_devices_and_the_hosts_render_gid(tmp_path: Path) -> None:
    (tmp_path / "kfd").write_text("")
    (tmp_path / "dri").mkdir()
    if os.geteuid() == 0:  # a render gid that is neither ours nor video's, as amdgpu-install assigns
        os.chown(tmp_path / "kfd", -1, 4242)
    gid = os.stat(tmp_path / "kfd").st_gid
    opts = gpu_options("rocm", shm_size="8G", dev=tmp_path).kwargs
    assert opts["devices"] == [f"{tmp_path}/kfd:{tmp_path}/kfd:rwm", f"{tmp_path}/dri:{tmp_path}/dri:rwm"]
    assert set(opts["group_add"]) == {"44", str(gid)}
    assert (opts["ipc_mode"], opts["shm_size"]) == ("host", "8G")
    assert opts["security_opt"] == ["seccomp=unconfined"] and opts["cap_add"] == ["SYS_PTRACE"]


def test_rocm_without_devices_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"needs .*kfd"):
        gpu_options("rocm", dev=tmp_path)


def test_cuda_asks_for_all_gpus_and_cpu_for_nothing() -> None:
    request = gpu_options("cuda").kwargs["device_requests"][0]
    assert (request["Count"], request["Capabilities"]) == (-1, [["gpu"]])
    assert gpu_options("cpu").kwargs == {}
