"""Wheel-pinned recipes: a user pins torch (and Triton) as released wheels by exact version and sha256; every
mistake is one line naming the file and the key, and the rendered Dockerfile installs from the store only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from prbench.images.build import render_dockerfile
from prbench.sides.pins import SourceTree
from prbench.sides.recipes import load_recipe
from tests.support.recipe_support import RECIPES_DIR, docker_recipe, load_error, set_key, write

TORCH_SHA = "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"
TRITON_SHA = "ab" * 32


def wheel_recipe(platform: str = "cpu") -> dict[str, Any]:
    """A valid wheel recipe, as the user would write it (a GPU platform pins its Triton wheel too)."""
    data = docker_recipe()
    data["platform"] = platform
    data["runner"] = "docker"
    data["pytorch"] = {"wheel": "torch==2.13.0+cpu", "sha256": TORCH_SHA}
    del data["triton"]
    if platform == "cpu":
        data.pop("arch")
    else:
        data["triton"] = {"wheel": "pytorch-triton-rocm==3.5.0", "sha256": TRITON_SHA}
    data["pip"] = {"extra": ["transformers==5.24.0"]}
    return data


# --- what loads --------------------------------------------------------------------------------------------


def test_the_shipped_cpu_docker_recipe_pins_the_cpu_wheel_and_no_triton() -> None:
    recipe = load_recipe("cpu-docker", RECIPES_DIR)

    assert (recipe.platform, recipe.runner, recipe.is_wheel) == ("cpu", "docker", True)
    assert recipe.pytorch_wheel is not None
    assert (recipe.pytorch_wheel.name, recipe.pytorch_wheel.version) == ("torch", "2.13.0+cpu")
    assert recipe.pytorch_wheel.sha256 == TORCH_SHA
    assert recipe.triton_wheel is None and recipe.pytorch is None and recipe.triton is None
    assert recipe.base_image is not None and recipe.base_image.name == "prbench-test/bookworm:base"
    local = load_recipe("cpu-local", RECIPES_DIR)
    assert (recipe.env, recipe.inductor_config) == (local.env, local.inductor_config)


def test_a_gpu_wheel_recipe_pins_its_triton_wheel(tmp_path: Path) -> None:
    recipe = load_recipe(str(write(tmp_path, wheel_recipe("rocm"))), tmp_path)

    assert [p.requirement for p in recipe.wheel_pins] == ["torch==2.13.0+cpu", "pytorch-triton-rocm==3.5.0"]
    assert recipe.triton_wheel is not None and recipe.triton_wheel.sha256 == TRITON_SHA


def test_another_wheel_pin_changes_the_recipe_hash(tmp_path: Path) -> None:
    recipe = load_recipe(str(write(tmp_path, wheel_recipe())), tmp_path)
    assert recipe.pytorch_wheel is not None
    other = recipe.with_wheels(type(recipe.pytorch_wheel)("torch==2.14.0.dev20261101+cpu", "cd" * 32), None)

    assert other.content_hash() != recipe.content_hash()
    assert other.triton_wheel is None and other.pytorch_wheel is not None
    assert other.pytorch_wheel.version == "2.14.0.dev20261101+cpu"


# --- what fails, in one line naming the file and the key ---------------------------------------------------


def _edit(key: str, value: Any, platform: str = "cpu") -> dict[str, Any]:
    return set_key(wheel_recipe(platform), key, value)


def _without(section: str, key: str) -> dict[str, Any]:
    data = wheel_recipe()
    del data[section][key]
    return data


MISTAKES = {
    "a version range": (_edit("pytorch.wheel", "torch>=2.13"), "'pytorch.wheel'", "one '==' version"),
    "a wildcard": (_edit("pytorch.wheel", "torch==2.13.*"), "'pytorch.wheel'", "no wildcard"),
    "another distribution": (_edit("pytorch.wheel", "numpy==2.0.0"), "'pytorch.wheel'", "must be torch"),
    "a direct URL": (_edit("pytorch.wheel", "torch @ https://example.com/torch.whl"), "'pytorch.wheel'",
                     "exact pin"),
    "a pip option": (_edit("pytorch.wheel", "--index-url=https://evil"), "'pytorch.wheel'", "exact pin"),
    "a short sha256": (_edit("pytorch.sha256", "abc123"), "'pytorch.sha256'", "64 lower-case hex"),
    "an upper-case sha256": (_edit("pytorch.sha256", TORCH_SHA.upper()), "'pytorch.sha256'", "64 lower-case hex"),
    "no sha256": (_without("pytorch", "sha256"), "'pytorch.sha256'", "missing key"),
    "a sha256 without a wheel": (_without("pytorch", "wheel"), "'pytorch.sha256'", "goes with 'pytorch.wheel'"),
    "a wheel and a commit": (_edit("pytorch.commit", "0" * 40), "'pytorch.commit'", "either"),
    "a triton source with a torch wheel": (
        _edit("triton", {"source": "https://github.com/triton-lang/triton.git", "commit": "from-pytorch-pin"}),
        "'triton'", "wheel pin too"),
    "a rocm wheel recipe without triton": (
        {k: v for k, v in wheel_recipe("rocm").items() if k != "triton"}, "'triton'", "only a cpu recipe"),
    "a triton wheel named torch": (_edit("triton.wheel", "torch==2.13.0", "rocm"), "'triton.wheel'",
                                   "triton or pytorch-triton"),
    "patches on a wheel": (_edit("patches", ["pytorch:fix.patch"]), "'patches'", "overlay"),
    "a newline in the pin": (_edit("pytorch.wheel", "torch==2.13.0\nRUN touch /tmp/x"), "'pytorch.wheel'",
                             "control characters"),
}


@pytest.mark.parametrize("data, key, fragment", MISTAKES.values(), ids=MISTAKES.keys())
def test_a_wrong_wheel_pin_is_one_line_naming_the_key(tmp_path: Path, data: dict[str, Any], key: str,
                                                      fragment: str) -> None:
    message = load_error(write(tmp_path, data))

    assert f"key {key}" in message or f"missing key {key}" in message, message
    assert fragment in message, message


def test_a_triton_wheel_without_a_torch_wheel_is_refused(tmp_path: Path) -> None:
    data = docker_recipe()
    data["triton"] = {"wheel": "triton==3.5.0", "sha256": TRITON_SHA}

    message = load_error(write(tmp_path, data))

    assert "key 'triton.wheel'" in message and "goes with a PyTorch wheel" in message


def test_a_local_recipe_cannot_pin_a_wheel(tmp_path: Path) -> None:
    data = {"platform": "cpu", "runner": "local", "pytorch": {"wheel": "torch==2.13.0+cpu", "sha256": TORCH_SHA}}

    message = load_error(write(tmp_path, data))

    assert "key 'pytorch.wheel'" in message and "Docker image" in message


# --- the rendered Dockerfiles: installs come from the store's wheelhouse and archives only ------------------


def _run_lines(text: str) -> list[str]:
    logical = re.sub(r"\s*\\\n\s*", " ", text)
    return [line for line in logical.splitlines() if line.startswith("RUN ")]


def _installs_only_from_the_build_context(text: str) -> None:
    """No pip install may reach an index, and no instruction fetches anything by URL."""
    runs = _run_lines(text)
    pip_installs = [r for r in runs if re.search(r"pip install(?! *-y)", r)]
    assert pip_installs, "nothing installed?"
    assert [r for r in pip_installs if "--no-index" not in r] == []
    assert not re.search(r"https?://|\bcurl\b|\bwget\b|git clone|git fetch|ADD ", text)
    assert [line for line in text.splitlines() if line.startswith("ADD ")] == []


def test_a_wheel_recipe_installs_its_pins_with_hashes_from_the_wheelhouse(tmp_path: Path) -> None:
    recipe = load_recipe("cpu-docker", RECIPES_DIR)

    text = render_dockerfile(recipe, overlay=True, overlay_strip=1)

    _installs_only_from_the_build_context(text)
    runs = _run_lines(text)
    wheel_install = next(r for r in runs if "/opt/prbench/wheels/pytorch " in r)
    assert "--require-hashes -r /opt/prbench/wheels/pytorch/requirements.txt" in wheel_install
    assert "COPY wheels/pytorch /opt/prbench/wheels/pytorch" in text
    assert "COPY wheels/extra /opt/prbench/wheels/extra" in text
    assert "transformers" not in "".join(runs)  # the extra pins are resolved on the host, not named to pip here
    # no source tree: nothing is built, and the overlay goes into the wheel's package in site-packages
    assert "src/pytorch" not in text and "src/triton" not in text
    overlay = next(r for r in runs if "overlay.patch" in r)
    assert "--site-of torch" in overlay and "git apply --check -p1 --include='torch/*'" in overlay
    # the CPU wheel requires no Triton: the check keeps only what the pinned wheel brought (tests/
    # test_wheel_requirements.py), and names what an extra pin brought
    assert runs[-1].endswith("--version torch==2.13.0+cpu --keep-tritons /opt/prbench/wheels/pytorch/brought-by.json "
                             "--brought-by /opt/prbench/wheels/extra/brought-by.json")
    assert text.index("/opt/prbench/wheels/pytorch ") < text.index("/opt/prbench/wheels/extra ")
    assert text.index("/opt/prbench/wheels/extra ") < text.index("COPY overlay.patch")


def test_a_gpu_wheel_recipe_checks_for_exactly_one_triton(tmp_path: Path) -> None:
    recipe = load_recipe(str(write(tmp_path, wheel_recipe("rocm"))), tmp_path)

    runs = _run_lines(render_dockerfile(recipe))

    assert runs[-1].endswith("--version torch==2.13.0+cpu --version pytorch-triton-rocm==3.5.0 --one-triton "
                             "--keep-tritons /opt/prbench/wheels/pytorch/brought-by.json --brought-by "
                             "/opt/prbench/wheels/extra/brought-by.json")


TREES = (SourceTree("pytorch", Path("/src/pytorch"), "0" * 40, requirements=("requirements.txt",)),
         SourceTree("triton", Path("/src/triton"), "1" * 40, requirements=("python/requirements.txt",)))


@pytest.mark.parametrize("name", ["rocm7-mi300", "rocm7-mi350", "cuda-h100"])
def test_rocm_and_cuda_dockerfiles_install_only_from_the_wheelhouse_and_archives(name: str) -> None:
    recipe = load_recipe(name, RECIPES_DIR)

    text = render_dockerfile(recipe, *TREES, overlay=True)

    _installs_only_from_the_build_context(text)
    copies = [line.split()[1] for line in text.splitlines() if line.startswith("COPY ")]
    assert set(copies) == {"check_environment.py", "wheels/triton-build", "downloads", "src/triton",
                           "wheels/pytorch-build", "pytorch-downloads", "src/pytorch", "wheels/extra",
                           "overlay.patch", "code"}
    # Triton's build is pointed at the store's copies of what it would download (LLVM, ...) before it runs
    runs = _run_lines(text)
    triton_build = next(r for r in runs if "-e ." in r and "downloads/env.sh" in r)
    assert triton_build.startswith("RUN . /opt/prbench/downloads/env.sh && python3 -m pip install --no-index ")
    assert text.index("RUN bash /opt/prbench/downloads/place.sh") < text.index("COPY src/triton")
    # and PyTorch's at its own (AOTriton on ROCm), with the base image's CMAKE_PREFIX_PATH gone
    pytorch_build = next(r for r in runs if "pytorch-downloads/env.sh" in r)
    assert pytorch_build.startswith("RUN unset CMAKE_PREFIX_PATH && . /opt/prbench/pytorch-downloads/env.sh && ")
    assert text.index("RUN bash /opt/prbench/pytorch-downloads/place.sh") < text.index("COPY src/pytorch")
    # the only network a build asks for is apt's (Debian packages the base lacks)
    apt = [r for r in runs if "apt-get" in r]
    assert len(apt) == (1 if recipe.apt_packages else 0)


def test_the_extra_pins_reach_pip_through_the_hashed_wheelhouse_only() -> None:
    recipe = load_recipe("rocm7-mi300", RECIPES_DIR)
    assert recipe.pip_extra == ("transformers==4.57.1",)

    text = render_dockerfile(recipe, *TREES)

    assert "transformers" not in text
    assert "--find-links /opt/prbench/wheels/extra --require-hashes -r /opt/prbench/wheels/extra/requirements.txt" \
        in text
