"""The two sides of a comparison on a wheel recipe: the pinned wheel ('installed'), another wheel named by its exact
version (resolved into the store and pinned by its sha256), or the PR as a patch on the wheel's torch package,
checked against the wheel's own files before anything is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundation.errors import UserError
from prbench.compare.variant_plan import plan_docker
from prbench.images import wheels
from prbench.images.content_store import Store, StoreItem, WheelTarget
from prbench.sides.recipes import load_recipe
from tests.support.store_support import write_wheel

TARGET = WheelTarget("3.11", ("manylinux_2_36_x86_64", "linux_x86_64"), abi="cp311")
DIGEST = "sha256:" + "0" * 64


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    # The image's interpreter would be read from the base image by a container; here it is given.
    monkeypatch.setattr(wheels, "base_image_target", lambda recipe, store: lambda: TARGET)
    return Store(tmp_path / "store")


def _wheel(tmp_path: Path, store: Store, version: str) -> StoreItem:
    path = write_wheel(tmp_path / "house", "torch", version, tag="cp311-cp311-manylinux_2_28_x86_64")
    return store.add_file(path, kind="wheel", name=path.name, origin=f"pip download torch=={version}")


def _recipe(tmp_path: Path, sha256: str):
    path = tmp_path / "wheel-sides.toml"
    path.write_text(f'platform = "cpu"\nrunner = "docker"\n[base_image]\nname = "prbench-test/bookworm:base"\n'
                    f'digest = "{DIGEST}"\n[pytorch]\nwheel = "torch==2.13.0+cpu"\nsha256 = "{sha256}"\n')
    return load_recipe(str(path), tmp_path)


def _patch(tmp_path: Path, old: str, new: str) -> Path:
    path = tmp_path / "pr.patch"
    path.write_text(f"--- a/torch/__init__.py\n+++ b/torch/__init__.py\n@@ -1,2 +1,2 @@\n-{old}\n+{new}\n"
                    " BUILD = ''\n")
    return path


def test_installed_is_the_recipes_wheel_and_a_patch_pr_is_an_overlay_on_it(tmp_path: Path, store: Store) -> None:
    torch = _wheel(tmp_path, store, "2.13.0+cpu")
    recipe = _recipe(tmp_path, torch.sha256)

    plan = plan_docker("installed", str(_patch(tmp_path, "VERSION = '2.13.0+cpu'", "VERSION = 'patched'")), recipe,
                       None, store)

    assert plan.base.wheel == plan.pr.wheel == recipe.pytorch_wheel
    assert plan.base.overlay is None and plan.pr.overlay is not None
    assert plan.pr.how.endswith("+ overlay layer pr.patch (1 files)")
    assert plan.base.pytorch_ref == f"torch==2.13.0+cpu sha256:{torch.sha256}"


def test_a_patch_that_does_not_apply_to_the_wheel_is_refused_before_any_build(tmp_path: Path, store: Store) -> None:
    torch = _wheel(tmp_path, store, "2.13.0+cpu")

    with pytest.raises(UserError) as refused:
        plan_docker("installed", str(_patch(tmp_path, "VERSION = '2.12.0'", "VERSION = 'x'")),
                    _recipe(tmp_path, torch.sha256), None, store)

    assert str(refused.value).startswith("overlay ") and "does not apply to the wheel torch==2.13.0+cpu" in \
        str(refused.value)


def test_two_wheels_are_two_sides_each_pinned_by_the_sha256_the_store_holds(tmp_path: Path, store: Store) -> None:
    base = _wheel(tmp_path, store, "2.13.0+cpu")
    nightly = _wheel(tmp_path, store, "2.14.0.dev20261101+cpu")

    plan = plan_docker("torch==2.13.0+cpu", "torch==2.14.0.dev20261101+cpu", _recipe(tmp_path, base.sha256), None,
                       store)

    assert plan.base.wheel is not None and plan.pr.wheel is not None
    assert (plan.base.wheel.sha256, plan.pr.wheel.sha256) == (base.sha256, nightly.sha256)
    assert plan.pr.wheel.requirement == "torch==2.14.0.dev20261101+cpu" and plan.pr.overlay is None


@pytest.mark.parametrize("spec, fragment", [
    ("abc1234", "give 'installed' (its torch==2.13.0+cpu), a wheel pin like torch==2.13.0+cpu, or a patch file"),
    ("torch>=2.13", "a wheel pin like"),
    ("numpy==2.0.0", "must be torch"),
])
def test_a_side_that_is_no_wheel_is_one_line(tmp_path: Path, store: Store, spec: str, fragment: str) -> None:
    torch = _wheel(tmp_path, store, "2.13.0+cpu")

    with pytest.raises(UserError) as refused:
        plan_docker("installed", spec, _recipe(tmp_path, torch.sha256), None, store)

    assert "\n" not in str(refused.value) and str(refused.value).startswith("--pr")
    assert fragment in str(refused.value)


class _Containers:
    def __init__(self, out: bytes) -> None:
        self.out = out
        self.calls: list[dict] = []

    def run(self, image: str, command: list[str], **options) -> bytes:
        self.calls.append({"image": image, "command": command, **options})
        return self.out


class _Client:
    def __init__(self, out: bytes) -> None:
        self.containers = _Containers(out)


def test_the_wheelhouse_target_is_the_base_images_python_read_without_network() -> None:
    client = _Client(b'{"python_version": "3.11", "implementation": "cpython", "abi": "cp311", "platforms": '
                     b'["manylinux_2_36_x86_64", "manylinux_2_35_x86_64", "manylinux2014_x86_64", "linux_x86_64"]}\n')

    target = wheels.image_wheel_target(client, "sha256:" + "1" * 64)

    assert target == WheelTarget("3.11", ("manylinux_2_36_x86_64", "manylinux_2_35_x86_64", "manylinux2014_x86_64",
                                          "linux_x86_64"), "cp", "cp311")
    [call] = client.containers.calls
    assert call["network_mode"] == "none" and call["remove"] is True and call["command"][0] == "python3"


def test_a_base_without_python3_is_one_line() -> None:
    with pytest.raises(UserError, match=r"^base image sha256:111111111111: cannot read its python3 version"):
        wheels.image_wheel_target(_Client(b"sh: python3: not found\n"), "sha256:" + "1" * 64)
