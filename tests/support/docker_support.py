"""Helpers for the docker tests: the engine check, stand-in PyTorch/Triton repositories and test recipes.

The stand-ins are real git repositories with the entry points the templates call (``setup.py``/
``pyproject.toml``, ``tools/amd_build/build_amd.py``, the Triton pin file), so the template, build-arg
and pin logic run for real, in seconds and without the network. The stand-in torch records at build time
what the build gave it (arch lists, MAX_JOBS, whether hipify ran) in ``torch/_build_info.json``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import git
import pytest

from prbench.runners import OWNER_LABEL, RUN_LABEL, STAGE_LABEL
from prbench.runners.docker import owner_label

PROJECT = Path(__file__).resolve().parents[2]
TEST_RECIPES = Path(__file__).resolve().parents[1] / "recipes"
BASE_IMAGE = "prbench-test/bookworm:base"
ZERO_DIGEST = "sha256:" + "0" * 64
ZERO_COMMIT = "0" * 40
VEC_ISA_OK = "TORCHINDUCTOR_VEC_ISA_OK"  # torch's switch for its ISA probe (tests/conftest.py sets it)

_BUILD_AMD = '''\
"""Stand-in hipify: marks the tree so the test can see it ran, with the arch it saw."""
import json, os, pathlib
root = pathlib.Path(__file__).resolve().parents[2]
(root / "torch" / "_hipified.json").write_text(json.dumps({"PYTORCH_ROCM_ARCH": os.environ.get("PYTORCH_ROCM_ARCH")}))
print("stand-in hipify done", flush=True)
'''

_SETUP = '''\
"""Stand-in torch build: records the build environment, then installs the package."""
import json, os, pathlib
from setuptools import setup
keys = ["PYTORCH_ROCM_ARCH", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "USE_ROCM", "USE_CUDA"]
root = pathlib.Path(__file__).resolve().parent
if os.environ.get("STANDIN_FAIL_BUILD") or (root / "FAIL_BUILD").exists():
    raise SystemExit("stand-in torch: compile error (requested by the test)")
(root / "torch" / "_build_info.json").write_text(json.dumps({{k: os.environ.get(k) for k in keys}}))
setup(name="torch", version="{version}", packages=["torch", "torch._inductor"], package_data={{"torch": ["*.json"]}})
'''

_TORCH_INIT = '''\
"""Stand-in torch package."""
import json, pathlib
_here = pathlib.Path(__file__).resolve().parent
__version__ = "{version}"
build_info = json.loads((_here / "_build_info.json").read_text()) if (_here / "_build_info.json").exists() else {{}}
hipified = json.loads((_here / "_hipified.json").read_text()) if (_here / "_hipified.json").exists() else None
'''

_TRITON_PYPROJECT = '''\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "triton"
version = "{version}"

[tool.setuptools]
packages = ["triton"]
'''

_GIT_ENV = {"GIT_AUTHOR_NAME": "prbench test", "GIT_AUTHOR_EMAIL": "test@prbench.invalid",
            "GIT_COMMITTER_NAME": "prbench test", "GIT_COMMITTER_EMAIL": "test@prbench.invalid"}


@dataclass(frozen=True)
class StandIns:
    pytorch: Path
    triton: Path
    pytorch_commit: str
    triton_commit: str


def skip_unless_ci(reason: str) -> None:
    """Skip for what this machine lacks; under CI fail instead (CI must never pass silently)."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so the docker tests must not be skipped")
    pytest.skip(reason)


def require_engine():
    """A docker-py client with the local base image, or skip (fail under CI)."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        skip_unless_ci(f"no Docker engine reachable ({' '.join(str(exc).split())[:160]})")
    try:
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        skip_unless_ci(f"base image {BASE_IMAGE} missing: run .ci/base-image.sh")
    return client


def commit_all(repo: git.Repo, message: str) -> str:
    repo.git.add(A=True)
    with repo.git.custom_environment(**_GIT_ENV):
        repo.git.commit("-q", "-m", message)
    return repo.head.commit.hexsha


def make_triton(path: Path, version: str = "3.5.0+standin") -> tuple[git.Repo, str]:
    repo = git.Repo.init(path)
    (path / "triton").mkdir(parents=True)
    (path / "triton" / "__init__.py").write_text(f'"""Stand-in Triton."""\n__version__ = "{version}"\n')
    (path / "pyproject.toml").write_text(_TRITON_PYPROJECT.format(version=version))
    return repo, commit_all(repo, "stand-in triton")


def make_pytorch(path: Path, triton_commit: str, version: str = "2.9.0a0+standin") -> tuple[git.Repo, str]:
    repo = git.Repo.init(path)
    (path / "torch").mkdir(parents=True)
    (path / "torch" / "__init__.py").write_text(_TORCH_INIT.format(version=version))
    # Every stage that compiles starts with stages.support.environment.prepare_inductor(), which imports this module.
    (path / "torch" / "_inductor").mkdir()
    (path / "torch" / "_inductor" / "__init__.py").write_text("")
    (path / "torch" / "_inductor" / "config.py").write_text('"""Stand-in Inductor config."""\n')
    (path / "setup.py").write_text(_SETUP.format(version=version))
    (path / "tools" / "amd_build").mkdir(parents=True)
    (path / "tools" / "amd_build" / "build_amd.py").write_text(_BUILD_AMD)
    pins = path / ".ci" / "docker" / "ci_commit_pins"
    pins.mkdir(parents=True)
    (pins / "triton.txt").write_text(triton_commit + "\n")
    return repo, commit_all(repo, "stand-in pytorch")


def make_standins(root: Path) -> StandIns:
    _, triton_commit = make_triton(root / "standin-triton")
    _, pytorch_commit = make_pytorch(root / "standin-pytorch", triton_commit)
    return StandIns(root / "standin-pytorch", root / "standin-triton", pytorch_commit, triton_commit)


def base_image_id(client) -> str:
    return client.images.get(BASE_IMAGE).id


def stage_containers(client, image: str, run: Path | None = None) -> list:
    """Stage containers of ``image`` that the test started, running or not: those of the run at ``run`` (stages of
    an ``invoke compare`` the test started), else those this process owns (a runner the test drives).

    Never every container of the image: another test session, or a user's compare, on the same engine runs stages
    of the same image meanwhile (its tag is its content's, the same in every checkout of one commit), and Docker's
    ``ancestor`` filter also matches every image built on it (a base image's PR overlays)."""
    owner = f"{RUN_LABEL}={run.resolve()}" if run is not None else f"{OWNER_LABEL}={owner_label()}"
    return client.containers.list(all=True, filters={"label": [STAGE_LABEL, owner], "ancestor": image})


def write_recipe(template: str, dest_dir: Path, *, digest: str, pytorch_commit: str, name: str | None = None,
                 extra: str = "") -> Path:
    """Copy a test recipe from tests/recipes next to the stand-ins, with this machine's base image id
    (``docker import`` is not bit-reproducible, so the id cannot be written in the file) and the commit."""
    text = (TEST_RECIPES / template).read_text(encoding="utf-8")
    assert ZERO_DIGEST in text and ZERO_COMMIT in text, f"{template} lost its placeholders"
    text = text.replace(f'commit = "{ZERO_COMMIT}"', f'commit = "{pytorch_commit}"').replace(ZERO_DIGEST, digest)
    text += textwrap.dedent(extra)
    path = dest_dir / (name or template)
    path.write_text(text, encoding="utf-8")
    return path


def invoke(*args: str, env: dict[str, str] | None = None, cwd: Path = PROJECT,
           timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the real CLI the way a user does."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=timeout)
