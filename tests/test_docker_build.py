"""A user builds images with `invoke build`: once, then never again for the same inputs; the Triton and
PyTorch layers run the real entry points of (stand-in) source trees; failures are one clear line."""

from __future__ import annotations

import io
import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import git
import pytest

from prbench.images.build import build_image, plan_build
from prbench.sides.patches import PATCHES_DIR
from prbench.sides.recipes import load_recipe
from tests.support.docker_support import (
    ZERO_DIGEST,
    StandIns,
    base_image_id,
    commit_all,
    invoke,
    make_standins,
    require_engine,
    write_recipe,
)

# Under ``pytest -n``, the docker tests that build stand-in images share one worker: they build (and remove) images
# of the same tags.
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker-standins")]


@dataclass(frozen=True)
class Workspace:
    root: Path
    standins: StandIns
    cpu_recipe: Path
    rocm_recipe: Path
    runs: Path


@pytest.fixture(scope="module")
def client():
    return require_engine()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, client) -> Workspace:
    root = tmp_path_factory.mktemp("build")
    standins = make_standins(root)
    digest = base_image_id(client)
    return Workspace(
        root=root,
        standins=standins,
        cpu_recipe=write_recipe("bookworm-cpu.toml", root, digest=digest, pytorch_commit=standins.pytorch_commit),
        rocm_recipe=write_recipe("bookworm-rocm-path.toml", root, digest=digest,
                                 pytorch_commit=standins.pytorch_commit),
        runs=root / "runs",
    )


def _in_image(client, image: str, code: str) -> dict:
    out = client.containers.run(image, ["python3", "-c", code], remove=True, network_mode="none")
    return json.loads(out.decode().strip().splitlines()[-1])


def test_build_runs_once_and_the_second_call_says_nothing_to_build(workspace: Workspace) -> None:
    first = invoke("build", "--recipe", str(workspace.cpu_recipe), "--runs-dir", str(workspace.runs))
    assert first.returncode == 0, first.stderr
    assert "Step 1/" in first.stdout and "Successfully tagged prbench/bookworm-cpu:" in first.stdout
    tag = re.search(r"image (prbench/bookworm-cpu:[0-9a-f]{12})", first.stdout).group(1)
    log = workspace.runs / "images" / tag.replace("prbench/", "").replace(":", "-") / "build.log"
    assert "Step 1/" in log.read_text()  # the live log also went to a file

    second = invoke("build", "--recipe", str(workspace.cpu_recipe), "--runs-dir", str(workspace.runs))
    assert second.returncode == 0, second.stderr
    assert f"image {tag} is present" in second.stdout and "nothing to build" in second.stdout
    assert "Step 1/" not in second.stdout


def test_rocm_path_builds_the_pinned_triton_and_hipified_torch(workspace: Workspace, client) -> None:
    plan = plan_build(load_recipe(str(workspace.rocm_recipe), workspace.root))
    result = build_image(plan, client, log_path=workspace.root / "rocm-build.log", stream=io.StringIO(),
                         emit=lambda _: None)
    facts = _in_image(client, result.image_id, (
        "import json, torch, triton, importlib.metadata as md;"
        "print(json.dumps({'build': torch.build_info, 'hipified': torch.hipified, 'torch': torch.__file__,"
        "'triton': triton.__file__, 'dists': sorted(d.metadata['Name'] for d in md.distributions())}))"))
    # build_amd.py ran and both it and setup.py saw the recipe's arch list and MAX_JOBS
    assert facts["hipified"] == {"PYTORCH_ROCM_ARCH": "gfx942;gfx950"}
    assert facts["build"] == {"PYTORCH_ROCM_ARCH": "gfx942;gfx950", "TORCH_CUDA_ARCH_LIST": None, "MAX_JOBS": "3",
                              "USE_ROCM": "1", "USE_CUDA": "0"}
    assert facts["torch"].startswith("/opt/prbench/src/pytorch/")
    assert facts["triton"].startswith("/opt/prbench/src/triton/")
    assert [d for d in facts["dists"] if "triton" in d.lower()] == ["triton"]
    labels = client.images.get(result.image_id).labels
    assert labels["dev.prbench.triton.commit"] == workspace.standins.triton_commit
    assert labels["dev.prbench.triton.pin-source"] == ".ci/docker/ci_commit_pins/triton.txt"
    assert labels["org.opencontainers.image.revision"] == workspace.standins.pytorch_commit
    assert labels["org.opencontainers.image.base.digest"] == base_image_id(client)
    assert labels["org.opencontainers.image.base.name"] == "prbench-test/bookworm:base"


def test_an_overlay_is_a_layer_on_top_of_the_cached_torch_build(workspace: Workspace, client, tmp_path: Path) -> None:
    recipe = load_recipe(str(workspace.cpu_recipe), workspace.root)
    build_image(plan_build(recipe), client, stream=io.StringIO(), emit=lambda _: None)
    overlay = tmp_path / "pr.patch"
    overlay.write_text(
        "--- a/torch/_inductor/config.py\n+++ b/torch/_inductor/config.py\n"
        "@@ -1 +1,2 @@\n \"\"\"Stand-in Inductor config.\"\"\"\n+pr_knob = 'from the PR'\n")
    out = io.StringIO()
    result = build_image(plan_build(recipe, overlay=overlay), client, stream=out, emit=lambda _: None)
    log = out.getvalue()
    torch_step = log[log.index("pip install --no-index --no-build-isolation -v -e ."):]
    assert torch_step.split("\n", 2)[1].strip() == "---> Using cache"  # PyTorch was not rebuilt
    assert "git apply --check /opt/prbench/overlay.patch" in log
    facts = _in_image(client, result.image_id,
                      "import json, torch._inductor.config as c; print(json.dumps({'knob': c.pr_knob}))")
    assert facts == {"knob": "from the PR"}


# --- failures: one line on stderr, exit != 0, nothing lost -----------------------------------------------


def _one_line_error(result) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_no_engine_is_one_line(workspace: Workspace) -> None:
    result = invoke("build", "--recipe", str(workspace.cpu_recipe), "--runs-dir", str(workspace.runs),
                    env={"DOCKER_HOST": f"unix://{workspace.root}/no-such-docker.sock"})
    assert _one_line_error(result).startswith("error: docker: cannot reach the Docker engine")


def test_missing_base_image_is_one_line_and_never_pulled(workspace: Workspace) -> None:
    recipe = write_recipe("bookworm-cpu.toml", workspace.root, digest=ZERO_DIGEST,
                          pytorch_commit=workspace.standins.pytorch_commit, name="missing-base.toml")
    line = _one_line_error(invoke("build", "--recipe", str(recipe), "--runs-dir", str(workspace.runs)))
    assert f"base image prbench-test/bookworm@{ZERO_DIGEST}" in line and "--pull" in line


def test_build_failing_half_way_keeps_the_log_and_earlier_images(workspace: Workspace, client) -> None:
    good = invoke("build", "--recipe", str(workspace.cpu_recipe), "--runs-dir", str(workspace.runs))
    good_tag = re.search(r"image (prbench/bookworm-cpu:[0-9a-f]{12})", good.stdout).group(1)
    repo = git.Repo(workspace.standins.pytorch)
    (workspace.standins.pytorch / "FAIL_BUILD").write_text("the stand-in compile fails at this commit\n")
    broken = commit_all(repo, "a commit that does not compile")
    try:
        result = invoke("build", "--recipe", str(workspace.cpu_recipe), "--runs-dir", str(workspace.runs),
                        "--pytorch-ref", broken)
    finally:
        repo.git.rm("-q", "FAIL_BUILD")
        commit_all(repo, "fixed again")
    line = _one_line_error(result)
    # the PyTorch step: its build environment (prbench.images.pytorch_setup), then the editable install
    assert re.search(r"failed at Step \d+/\d+ : RUN unset CMAKE_PREFIX_PATH .* python3 -m pip install --no-index "
                     r"--no-build-isolation -v -e \.", line)
    log_path = Path(line.rsplit("log: ", 1)[1])
    assert "compile error (requested by the test)" in log_path.read_text()
    assert client.images.get(good_tag)  # nothing lost


def test_patch_that_no_longer_applies_names_patch_and_file(workspace: Workspace, client) -> None:
    # A recipe's patches come from patches/ only, so the drifted patch is put there for the test.
    patch = PATCHES_DIR / f"drifted-{uuid.uuid4().hex[:8]}.patch"
    patch.write_text("--- a/setup.py\n+++ b/setup.py\n@@ -1,2 +1,2 @@\n-a line upstream removed long ago\n"
                     "+its replacement\n context that is not there either\n")
    try:
        recipe = write_recipe("bookworm-cpu.toml", workspace.root, digest=base_image_id(client), name="drift.toml",
                              pytorch_commit=workspace.standins.pytorch_commit)
        recipe.write_text(f'patches = ["pytorch:{patch.name}"]\n' + recipe.read_text())
        result = invoke("build", "--recipe", str(recipe), "--runs-dir", str(workspace.runs))
    finally:
        patch.unlink()
    line = _one_line_error(result)
    assert f"patch {patch.name} does not apply to setup.py" in line
