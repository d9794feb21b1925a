"""Recipes: every shipped recipe loads, and every mistake in a recipe is one line naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundation.errors import UserError
from prbench.sides.recipes import FROM_PYTORCH_PIN, INSTALLED, list_recipes, load_recipe
from tests.support.recipe_support import (
    DIGEST,
    RECIPES_DIR,
    docker_recipe,
    drop_key,
    load_error,
    set_key,
    to_toml,
    write,
)

SHIPPED = sorted(RECIPES_DIR.glob("*.toml"))


# --- the recipes we ship ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_recipe_loads(path: Path) -> None:
    recipe = load_recipe(path.stem, RECIPES_DIR)

    assert recipe.name == path.stem
    assert recipe.platform in ("cpu", "cuda", "rocm")
    if recipe.is_docker:
        # Rebuilding months later must give the same environment: the base image is pinned by digest.
        assert recipe.base_image is not None
        assert recipe.base_image.reference.endswith("@" + recipe.base_image.digest)
        if recipe.is_wheel:  # a binary pin: exact version and the wheel file's sha256
            assert recipe.pytorch_wheel is not None and "==" in recipe.pytorch_wheel.requirement
            assert len(recipe.pytorch_wheel.sha256) == 64
        else:
            assert recipe.pytorch is not None and len(recipe.pytorch.commit) == 40
        if recipe.platform != "cpu":
            assert recipe.arch


def test_list_recipes_returns_every_shipped_recipe() -> None:
    assert [r.name for r in list_recipes(RECIPES_DIR)] == [p.stem for p in SHIPPED]


def test_cpu_local_is_the_installed_torch_on_one_thread() -> None:
    recipe = load_recipe("cpu-local", RECIPES_DIR)

    assert (recipe.platform, recipe.runner, recipe.is_docker) == ("cpu", "local", False)
    assert recipe.base_image is None
    assert recipe.pytorch is not None and recipe.pytorch.commit == INSTALLED
    assert recipe.env["OMP_NUM_THREADS"] == "1"


def test_a_recipe_can_be_given_as_a_path(tmp_path: Path) -> None:
    path = write(tmp_path, docker_recipe(), name="mi300-test")

    recipe = load_recipe(str(path), RECIPES_DIR)

    assert recipe.name == "mi300-test"
    assert recipe.runner == "docker"  # the default for a GPU platform
    assert recipe.triton is not None and recipe.triton.from_pytorch_pin
    assert recipe.max_jobs == 8
    assert recipe.base_image is not None
    assert recipe.base_image.reference == f"rocm/pytorch@{DIGEST}"


def test_registry_port_is_not_mistaken_for_a_tag(tmp_path: Path) -> None:
    data = docker_recipe()
    data["base_image"]["name"] = "localhost:5000/rocm/pytorch"
    recipe = load_recipe(str(write(tmp_path, data)), tmp_path)

    assert recipe.base_image is not None
    assert recipe.base_image.reference == f"localhost:5000/rocm/pytorch@{DIGEST}"


def test_content_hash_follows_meaning_not_formatting(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    data = docker_recipe()
    plain = load_recipe(str(write(tmp_path / "a", data)), tmp_path)
    reformatted = load_recipe(str(write(tmp_path / "b", "# pinned for the MI300 box\n\n" + to_toml(data))), tmp_path)
    data["env"]["AMDGCN_USE_BUFFER_OPS"] = "0"
    changed = load_recipe(str(write(tmp_path / "c", data)), tmp_path)

    assert plain.content_hash() == reformatted.content_hash()
    assert plain.content_hash() != changed.content_hash()


# --- one-line errors naming the file and the key ---------------------------------------------------------


BAD = {
    # name: (edit of a valid docker recipe, fragments the message must hold)
    "unknown top-level key": (lambda d: set_key(d, "colour", "red"), ["unknown key 'colour'"]),
    "unknown key in a table": (lambda d: set_key(d, "pytorch.branch", "main"), ["unknown key 'pytorch.branch'"]),
    "short SHA": (lambda d: set_key(d, "pytorch.commit", "0123abc"), ["'pytorch.commit'", "40-hex", "'0123abc'"]),
    "branch name as commit": (lambda d: set_key(d, "triton.commit", "main"), ["'triton.commit'", FROM_PYTORCH_PIN]),
    "tag without digest": (lambda d: drop_key(d, "base_image.digest"), ["'base_image.digest'", "tag without a digest"]),
    "malformed digest": (lambda d: set_key(d, "base_image.digest", "sha256:abc"), ["'base_image.digest'", "64 hex"]),
    "digest in the name": (
        lambda d: set_key(d, "base_image.name", f"rocm/pytorch@{DIGEST}"), ["'base_image.name'", "digest"]),
    "no base image": (lambda d: drop_key(d, "base_image"), ["'base_image'", "docker recipe needs a base image"]),
    "installed torch in docker": (lambda d: set_key(d, "pytorch.commit", INSTALLED), ["'pytorch.commit'", "local"]),
    "GPU recipe without arch": (lambda d: drop_key(d, "arch"), ["'arch'", "GPU architecture"]),
    "missing platform": (lambda d: drop_key(d, "platform"), ["missing key 'platform'"]),
    "unknown platform": (lambda d: set_key(d, "platform", "tpu"), ["'platform'", "cpu, cuda, rocm", "'tpu'"]),
    "unknown runner": (lambda d: set_key(d, "runner", "k8s"), ["'runner'", "local, docker"]),
    "platform not a string": (lambda d: set_key(d, "platform", 3), ["'platform'", "non-empty string"]),
    "arch not a list": (lambda d: set_key(d, "arch", "gfx942"), ["'arch'", "list of strings"]),
    "pip extra not strings": (lambda d: set_key(d, "pip", {"extra": [1, 2]}), ["'pip.extra'", "list of strings"]),
    "section not a table": (lambda d: set_key(d, "pytorch", "main"), ["'pytorch'", "expected a table"]),
    "env value a list": (lambda d: set_key(d, "env.HIP_VISIBLE_DEVICES", [0, 1]), ["'env.HIP_VISIBLE_DEVICES'"]),
    "env value a boolean": (lambda d: set_key(d, "env.FLAG", True), ["'env.FLAG'", "string or number"]),
    "env name invalid": (lambda d: set_key(d, "env.BAD-NAME", "1"), ["'env.BAD-NAME'", "environment variable"]),
    "max_jobs zero": (lambda d: set_key(d, "build.max_jobs", 0), ["'build.max_jobs'", "positive integer"]),
    "max_jobs a string": (lambda d: set_key(d, "build.max_jobs", "8"), ["'build.max_jobs'", "positive integer"]),
    "apt packages not a list": (lambda d: set_key(d, "build.apt", "python3"), ["'build.apt'", "list of strings"]),
    "max_jobs a boolean": (lambda d: set_key(d, "build.max_jobs", True), ["'build.max_jobs'", "positive integer"]),
}


@pytest.mark.parametrize("edit, fragments", BAD.values(), ids=BAD.keys())
def test_a_bad_recipe_is_one_line_naming_file_and_key(tmp_path: Path, edit, fragments: list[str]) -> None:
    path = write(tmp_path, edit(docker_recipe()))

    message = load_error(path)

    for fragment in fragments:
        assert fragment in message


def test_malformed_toml_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'platform = "cpu"\n[pytorch\nsource = "x"\n')

    message = load_error(path)

    assert "malformed TOML" in message
    assert "line 2" in message


def test_a_local_recipe_needs_no_image_or_sources(tmp_path: Path) -> None:
    recipe = load_recipe(str(write(tmp_path, 'platform = "cpu"\n')), tmp_path)

    assert (recipe.runner, recipe.base_image, recipe.pytorch, recipe.triton) == ("local", None, None, None)


def test_unknown_recipe_name_lists_the_known_ones() -> None:
    with pytest.raises(UserError) as info:
        load_recipe("mi999", RECIPES_DIR)
    message = str(info.value)

    assert "\n" not in message
    assert message.startswith("--recipe: unknown recipe 'mi999'")
    assert "cpu-local" in message
