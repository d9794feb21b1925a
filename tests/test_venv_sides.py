"""Two torch releases compared without Docker: a venv recipe makes each side a virtual environment of this Python,
built from pinned wheels out of the store's wheelhouse. The user builds one offline from the store (a stand-in torch
that requires a stand-in Triton), sees what it will contain, finds it again without building, verifies it against
its lock, and rebuilds it from the lock alone after it is gone; a venv that no longer matches its lock is named
field by field."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from prbench.commands.images import SourceSides, run_store_action
from prbench.compare.doctor import DoctorInputs, Machine, run_doctor
from prbench.compare.variant_plan import plan_venv
from prbench.images import wheels
from prbench.images.content_store import Store, StoreItem, WheelTarget
from prbench.sides.recipes import UNPINNED, load_recipe
from tests.support.cli_support import invoke_in_process, one_line
from tests.support.docker_support import invoke
from tests.support.recipe_support import RECIPES_DIR, load_error, write
from tests.support.store_support import pip_reads_no_machine_settings, write_wheel

TARGET = WheelTarget("3.11", ("manylinux_2_36_x86_64", "linux_x86_64"), abi="cp311")
TRITON_REQUIREMENT = 'triton==3.8.0; platform_system == "Linux"'


# --- the recipes ---------------------------------------------------------------------------------------------


def _venv_recipe(path: Path, wheel: str, sha256: str) -> Path:
    """A CPU venv recipe at ``path`` pinning torch ``wheel`` by ``sha256``."""
    path.write_text(f'platform = "cpu"\nrunner = "venv"\n[pytorch]\nwheel = "{wheel}"\nsha256 = "{sha256}"\n')
    return path


def test_the_shipped_venv_recipes_pin_their_wheels_and_have_no_image() -> None:
    cpu, cuda, rocm = (load_recipe(name, RECIPES_DIR) for name in ("cpu-venv", "cuda-venv", "rocm7-venv"))

    assert [(r.platform, r.runner, r.base_image) for r in (cpu, cuda, rocm)] == [
        ("cpu", "venv", None), ("cuda", "venv", None), ("rocm", "venv", None)]
    assert cpu.pytorch_wheel is not None and cpu.triton_wheel is None and len(cpu.pytorch_wheel.sha256) == 64
    assert [pin.name for pin in cuda.wheel_pins] == ["torch", "triton"]
    assert all(len(pin.sha256) == 64 for pin in cuda.wheel_pins)
    # AMD's wheel directory could not be reached where the recipe was written: the first fetch pins them.
    assert [(pin.name, pin.sha256) for pin in rocm.wheel_pins] == [("torch", UNPINNED), ("triton", UNPINNED)]


@pytest.mark.parametrize("data, fragment", [
    ({"platform": "cpu", "runner": "venv"}, "key 'pytorch.wheel': a venv recipe installs a torch wheel"),
    ({"platform": "cpu", "runner": "venv", "base_image": {"name": "debian:12", "digest": "sha256:" + "0" * 64},
      "pytorch": {"wheel": "torch==2.13.0+cpu"}}, "key 'base_image': a venv recipe has no image"),
    ({"platform": "cuda", "runner": "venv", "pytorch": {"wheel": "torch==2.14.1"}},
     "key 'triton': a cuda recipe with a PyTorch wheel pins its Triton wheel"),
    ({"platform": "cpu", "runner": "docker", "base_image": {"name": "debian:12", "digest": "sha256:" + "0" * 64},
      "pytorch": {"wheel": "torch==2.13.0+cpu"}}, "missing key 'pytorch.sha256'"),
])
def test_a_venv_recipe_mistake_is_one_line(tmp_path: Path, data: dict, fragment: str) -> None:
    message = load_error(write(tmp_path, data))

    assert fragment in message and "\n" not in message


def test_store_fetch_of_a_venv_recipe_takes_its_wheels_for_this_python(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(wheels, "python_wheel_target", lambda python: TARGET)
    store = Store(tmp_path / "store")
    torch = _stored(tmp_path, store, "2.13.0+cpu")
    recipe = _venv_recipe(tmp_path / "fetch-venv.toml", "torch==2.13.0+cpu", torch.sha256)

    run_store_action("fetch", store_dir=str(store.root), file=None, lock=None,
                     recipe=load_recipe(str(recipe), tmp_path))

    said = capsys.readouterr().out
    assert "wheels: all 1 for cp311 manylinux_2_36_x86_64 are in the store" in said  # no pip: offline
    assert f"store {store.root}: 1 wheel(s) for recipe fetch-venv (venvs of " in said


@pytest.mark.integration
@pytest.mark.parametrize("runner", ["venv", "docker"])
def test_store_fetch_takes_both_releases_of_an_ab_so_that_compare_then_needs_no_network(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], runner: str) -> None:
    # The venvs' interpreter, or the Docker recipe's base image, would be asked for its wheel tags; here it is given.
    monkeypatch.setattr(wheels, "python_wheel_target", lambda python: TARGET)
    monkeypatch.setattr(wheels, "base_image_target", lambda recipe, store: lambda: TARGET)
    # pip's "index" is a local folder: the stand-in release torch 2.14.1 and the Triton it requires.
    index = tmp_path / "index"
    write_wheel(index, "torch", "2.14.1", tag="cp311-cp311-manylinux_2_36_x86_64", requires=(TRITON_REQUIREMENT,))
    write_wheel(index, "triton", "3.8.0")
    pip_reads_no_machine_settings(monkeypatch)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    store = Store(tmp_path / "store")
    cpu_build = _stored(tmp_path, store, "2.13.0+cpu")
    path = _venv_recipe(tmp_path / "ab.toml", "torch==2.13.0+cpu", cpu_build.sha256)
    if runner == "docker":
        base = f'runner = "docker"\n[base_image]\nname = "debian:12"\ndigest = "sha256:{"0" * 64}"\n'
        path.write_text(path.read_text().replace('runner = "venv"\n', base))
    recipe = load_recipe(str(path), tmp_path)

    run_store_action("fetch", store_dir=str(store.root), file=None, lock=None, recipe=recipe,
                     sides=SourceSides(refs=("torch==2.13.0", "torch==2.14.1")))

    said = capsys.readouterr().out
    assert f"store {store.root}: 3 wheel(s) for recipe ab and torch==2.13.0+cpu and torch==2.14.1" in said
    # Offline now: compare pins the PR side from the store, and every wheel its environment installs is there.
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    pin = wheels.resolve_wheel_spec("torch==2.14.1", "--pr", "pytorch", store, lambda: TARGET)
    at_hand = store.wheels_at_hand([pin.requirement], TARGET)
    assert at_hand is not None and sorted(item.name.split("-")[0] for item in at_hand) == ["torch", "triton"]


@pytest.mark.parametrize("pr, expected", [
    ("main", "error: store fetch: --base/--pr main: recipe cpu-venv installs torch wheels; expected an exact pin like "
             "torch==2.13.0+cpu (the distribution must be torch), 'installed' or a patch file"),
    ("torch>=2.14", "error: store fetch: --base/--pr torch>=2.14: recipe cpu-venv installs torch wheels; expected an "
                    "exact pin like torch==2.13.0+cpu (one '==' version, no wildcard, extras or markers), 'installed' "
                    "or a patch file"),
], ids=["a git ref", "a range"])
def test_a_side_that_is_no_torch_wheel_pin_stops_store_fetch_before_anything_is_fetched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pr: str, expected: str) -> None:
    pip_reads_no_machine_settings(monkeypatch)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # a fetch would fail, not reach an index
    store = tmp_path / "store"

    result = invoke_in_process("store", "fetch", "--recipe", "cpu-venv", "--pr", pr, "--store", str(store))

    assert one_line(result) == expected
    assert not (store / "objects").exists() or not any((store / "objects").iterdir())


# --- planning the sides ----------------------------------------------------------------------------------------


def _stored(tmp_path: Path, store: Store, version: str) -> StoreItem:
    path = write_wheel(tmp_path / "house", "torch", version, tag="cp311-cp311-manylinux_2_28_x86_64")
    return store.add_file(path, kind="wheel", name=path.name, origin=f"pip download torch=={version}")


def test_two_releases_are_two_venv_sides_and_a_plain_version_finds_its_local_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The venvs' interpreter would be asked for its wheel tags; here it is given.
    monkeypatch.setattr(wheels, "python_wheel_target", lambda python: TARGET)
    store = Store(tmp_path / "store")
    cpu_build = _stored(tmp_path, store, "2.13.0+cpu")
    release = _stored(tmp_path, store, "2.14.1")

    plan = plan_venv("torch==2.13.0", "torch==2.14.1", load_recipe("cpu-venv", RECIPES_DIR), store, "python3")

    assert plan.base.wheel is not None and plan.pr.wheel is not None
    # `torch==2.13.0` is what pip would install from the store: the CPU build 2.13.0+cpu, pinned as that.
    assert (plan.base.wheel.requirement, plan.base.wheel.sha256) == ("torch==2.13.0+cpu", cpu_build.sha256)
    assert (plan.pr.wheel.requirement, plan.pr.wheel.sha256) == ("torch==2.14.1", release.sha256)
    assert plan.base.how == f"venv of cpu-venv with wheel torch==2.13.0+cpu (sha256 {cpu_build.sha256[:12]})"
    assert plan.local is None


def test_a_patch_pr_on_a_venv_recipe_is_a_python_overlay_on_the_base_venv(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheels, "python_wheel_target", lambda python: TARGET)
    store = Store(tmp_path / "store")
    torch = _stored(tmp_path, store, "2.13.0+cpu")
    recipe = _venv_recipe(tmp_path / "patch-venv.toml", "torch==2.13.0+cpu", torch.sha256)
    patch = tmp_path / "pr.patch"
    patch.write_text("--- a/torch/__init__.py\n+++ b/torch/__init__.py\n@@ -1,2 +1,2 @@\n-VERSION = '2.13.0+cpu'\n"
                     "+VERSION = 'patched'\n BUILD = ''\n")

    plan = plan_venv("installed", str(patch), load_recipe(str(recipe), tmp_path), store, "python3")

    assert plan.base.wheel == plan.pr.wheel and plan.base.overlay is None and plan.pr.overlay is not None
    assert plan.pr.how == f"venv of patch-venv with wheel torch==2.13.0+cpu (sha256 {torch.sha256[:12]}) + Python " \
                          "overlay pr.patch (1 files)"


def test_doctor_says_what_each_venv_will_contain_before_anything_is_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheels, "python_wheel_target", lambda python: TARGET)
    store = Store(tmp_path / "store")
    cpu_build = _stored(tmp_path, store, "2.13.0+cpu")
    path = write_wheel(tmp_path / "house", "torch", "2.14.1", tag="cp311-cp311-manylinux_2_28_x86_64",
                       requires=(TRITON_REQUIREMENT,))
    store.add_file(path, kind="wheel", name=path.name, origin="stand-in")
    triton = write_wheel(tmp_path / "house", "triton", "3.8.0")
    store.add_file(triton, kind="wheel", name=triton.name, origin="stand-in")
    recipe = _venv_recipe(tmp_path / "doctor-venv.toml", "torch==2.13.0+cpu", cpu_build.sha256)

    roomy = Machine(free_bytes=lambda path: 1 << 40)  # what this machine's disk holds is not this test's story

    results = run_doctor(DoctorInputs(recipe=load_recipe(str(recipe), tmp_path), runs_dir=tmp_path / "runs",
                                      store=store.root, pr="torch==2.14.1", python="python3"), roomy)

    found = {r.name: r for r in results}
    assert list(found) == ["venv python", "disk", "venv contents", "experiment"]  # no Docker engine, no image
    assert [r.status for r in results[:3]] == ["ok", "ok", "ok"]
    assert found["venv python"].detail.startswith("python3: Python 3.11 (cp311 manylinux_2_36_x86_64)")
    assert found["venv contents"].detail.startswith("base: torch 2.13.0+cpu, no Triton, ")
    assert f"pr: torch 2.14.1, triton 3.8.0 (torch 2.14.1 requires {TRITON_REQUIREMENT}), " in \
        found["venv contents"].detail and "in the venv" in found["venv contents"].detail


# --- a real venv, built, found, verified, rebuilt ------------------------------------------------------------------


def test_doctor_refuses_a_venv_python_older_than_the_stages_run_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheels, "python_wheel_target",
                        lambda python: WheelTarget("3.9", ("manylinux_2_36_x86_64",), abi="cp39"))
    recipe = _venv_recipe(tmp_path / "old-python.toml", "torch==2.13.0+cpu", "0" * 64)

    results = run_doctor(DoctorInputs(recipe=load_recipe(str(recipe), tmp_path), runs_dir=tmp_path / "runs",
                                      store=tmp_path / "store", python="python3.9"))

    found = {r.name: r for r in results}
    assert (found["venv python"].status, found["venv python"].detail) == \
        ("fail", "python3.9 is Python 3.9; the stages need 3.10 or newer")


def _made(result) -> tuple[Path, Path]:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    match = re.search(r"venv (\S+) \(\S+\); lock (\S+)", result.stdout)
    assert match is not None, result.stdout[-2000:]
    return Path(match.group(1)), Path(match.group(2))


@pytest.mark.integration
def test_a_venv_side_builds_offline_from_the_store_and_its_lock_rebuilds_and_verifies(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    house = tmp_path / "house"
    torch = store.add_file(write_wheel(house, "torch", "2.14.1", requires=(TRITON_REQUIREMENT,)), kind="wheel",
                           name="torch-2.14.1-py3-none-any.whl", origin="stand-in")
    store.add_file(write_wheel(house, "triton", "3.8.0"), kind="wheel", name="triton-3.8.0-py3-none-any.whl",
                   origin="stand-in")
    recipe = tmp_path / "standin-venv.toml"
    recipe.write_text(f'platform = "cpu"\nrunner = "venv"\n[pytorch]\nwheel = "torch==2.14.1"\n'
                      f'sha256 = "{torch.sha256}"\n[env]\nOMP_NUM_THREADS = "1"\n')
    runs = tmp_path / "runs"
    offline = {"PIP_NO_INDEX": "1"}  # a pip that looked for anything on an index would find nothing
    build = ("build", "--recipe", str(recipe), "--runs-dir", str(runs), "--store", str(store.root))

    built = invoke(*build, env=offline)

    directory, lock_path = _made(built)
    assert directory.parent == runs / "venvs" and directory.name.startswith("standin-venv-")
    said = built.stdout
    assert f"venv {directory} will contain:\n  torch: torch 2.14.1 (pinned torch==2.14.1)\n  Triton: triton 3.8.0 " \
           f"(torch 2.14.1 requires {TRITON_REQUIREMENT})\n" in said
    assert f"prbench check: triton 3.8.0 kept: torch 2.14.1 requires {TRITON_REQUIREMENT}" in said
    lock = json.loads(lock_path.read_text())
    assert (lock["runner"], lock["lock_version"]) == ("venv", 2)
    assert lock["installed"]["triton"] == {"version": "3.8.0",
                                           "brought_by": f"torch 2.14.1 requires {TRITON_REQUIREMENT} (wheels/pytorch)"}
    python = directory / "env" / "bin" / "python"
    assert python.exists()

    # The same inputs again: the venv is found by its name, nothing is built.
    again = invoke(*build, env=offline)
    assert _made(again) == (directory, lock_path)
    assert f"venv {directory} is present; nothing to build" in again.stdout and "building venv" not in again.stdout

    verified = invoke("verify", "--lock", str(lock_path))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "differs:" not in verified.stdout and "the environment matches" in verified.stdout

    # Months later the venv is gone: the lock and the store rebuild it, offline, where it was.
    kept_lock = tmp_path / "kept-lock.json"
    shutil.copy(lock_path, kept_lock)
    shutil.rmtree(directory)
    rebuilt_dir, rebuilt_lock = _made(invoke("rebuild", "--lock", str(kept_lock), "--runs-dir", str(runs),
                                             "--store", str(store.root), env=offline))
    assert rebuilt_dir == directory
    assert json.loads(rebuilt_lock.read_text())["installed"] == lock["installed"]
    verified = invoke("verify", "--lock", str(kept_lock))
    assert verified.returncode == 0 and "differs:" not in verified.stdout, verified.stdout + verified.stderr

    # Someone installs another Triton into the venv by hand: verify names the field and fails.
    for dist_info in (directory / "env" / "lib").glob("python3*/site-packages/triton-3.8.0.dist-info"):
        metadata = dist_info / "METADATA"
        metadata.write_text(metadata.read_text().replace("Version: 3.8.0", "Version: 3.9.0"))
    changed = invoke("verify", "--lock", str(kept_lock))
    assert changed.returncode == 1
    assert "differs: contents.pip.triton: lock has 3.8.0, venv has 3.9.0" in changed.stdout


def test_each_venv_side_times_in_its_own_python_as_each_docker_side_in_its_own_image() -> None:
    # Both sides in one timing stage would start both sides' workers from the base's Python: the PR's torch unused.
    apart = {name: load_recipe(name, RECIPES_DIR).sides_apart for name in ("cpu-venv", "cpu-docker", "cpu-local")}

    assert apart == {"cpu-venv": True, "cpu-docker": True, "cpu-local": False}
