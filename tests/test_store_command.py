"""`invoke store`: a user lists and verifies a store, moves it to another machine as one tar (all of it, or only
what one lock needs), and every mistake is one line with exit status 2."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from prbench.images.content_store import Store, StoreItem
from tests.support.cli_support import invoke_in_process

ROOT = Path(__file__).resolve().parents[1]


def invoke(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return invoke_in_process("-r", str(ROOT), "store", *args, cwd=cwd)


@pytest.fixture
def store(tmp_path: Path) -> tuple[Store, list[StoreItem]]:
    store = Store(tmp_path / "store")
    items = []
    for i, name in enumerate(["llvm-abc-ubuntu-x64.tar.gz", "torch-2.13.0-cp311-cp311-linux_x86_64.whl"]):
        source = tmp_path / f"source{i}"
        source.write_bytes(b"x" * (1500 * (i + 1)))
        kind = "download" if i == 0 else "wheel"
        items.append(store.add_file(source, kind=kind, name=name, origin=f"origin {i}"))
    return store, items


def test_list_shows_every_item_with_its_digest_and_origin(tmp_path, store) -> None:
    target, items = store

    proc = invoke("list", "--store", str(target.root), cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("download") and items[0].sha256[:12] in line and "origin 0" in line for line in lines)
    assert any("torch-2.13.0-cp311-cp311-linux_x86_64.whl" in line and "3.0 kB" in line for line in lines)
    assert lines[-1] == f"store {target.root}: 2 item(s), 4.5 kB"


def test_the_store_comes_from_the_environment_when_no_flag_names_it(tmp_path, store, monkeypatch) -> None:
    target, _ = store
    monkeypatch.setenv("PRBENCH_STORE", str(target.root))

    proc = invoke("list", cwd=tmp_path)

    assert proc.stdout.splitlines()[-1].startswith(f"store {target.root}: 2 item(s)")


def test_verify_names_each_corrupt_item_and_exits_2(tmp_path, store) -> None:
    target, items = store
    assert invoke("verify", "--store", str(target.root), cwd=tmp_path).returncode == 0
    target.object_path(items[1].sha256).chmod(0o644)
    target.object_path(items[1].sha256).write_bytes(b"y" * 3000)

    proc = invoke("verify", "--store", str(target.root), cwd=tmp_path)

    assert proc.returncode == 2
    assert [line for line in proc.stdout.splitlines() if line.startswith("bad: ")] == [
        line for line in proc.stdout.splitlines() if "torch-2.13.0" in line and "corrupt" in line]
    assert proc.stderr.strip() == f"error: store {target.root}: 1 of 2 item(s) missing or corrupt (listed above)"


def test_a_lock_and_its_items_move_to_another_machine(tmp_path, store) -> None:
    target, items = store
    lock = tmp_path / "runs" / "r1" / "lock.json"
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"base": {"store": [items[0].to_json()]}, "pr": {"store": [items[0].to_json()]}}))
    tar = tmp_path / "store.tar"

    exported = invoke("export", "--file", str(tar), "--lock", str(lock), "--store", str(target.root), cwd=tmp_path)
    imported = invoke("import", "--file", str(tar), "--store", str(tmp_path / "elsewhere"), cwd=tmp_path)

    assert exported.returncode == 0 and f"exported 1 item(s) from {target.root} to {tar}" in exported.stdout
    assert imported.returncode == 0, imported.stderr
    assert Store(tmp_path / "elsewhere").items() == [items[0]]


@pytest.mark.parametrize(("args", "expected"), [
    (["frob"], "store frob: expected one of list, verify, export, import"),
    (["export"], "store export: --file is needed"),
    (["import"], "store import: --file is needed"),
    (["list", "--lock", "lock.json"], "store list: --lock is for export only"),
    (["import", "--file", "missing.tar"], "missing.tar: no such file"),
    (["import", "--file", "notatar.tar"], "notatar.tar: not a tar file"),
    (["export", "--file", "out.tar", "--lock", "old-lock.json"], "old-lock.json: no 'store' section"),
    (["import", "--file", "good.tar", "--store", "blocker/store"], "cannot write there"),
])
def test_a_mistake_is_one_line_and_exit_2(tmp_path, store, args, expected) -> None:
    target, _ = store
    (tmp_path / "notatar.tar").write_text("hello")
    (tmp_path / "old-lock.json").write_text(json.dumps({"base_image": "x"}))
    (tmp_path / "blocker").write_text("a file, not a directory")
    target.export(tmp_path / "good.tar", emit=lambda _: None)
    if "--store" not in args:
        args = [*args, "--store", str(target.root)]

    proc = invoke(*args, cwd=tmp_path)

    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 2, lines
    assert lines[-1].startswith("error: ") and expected in lines[-1], lines
    assert sum(line.startswith("error: ") for line in lines) == 1
    assert not (tmp_path / "out.tar").exists()


# --- fetch: a recipe's wheels into the store, so its builds run offline ---------------------------------------


def _wheel_recipe(directory: Path, torch_sha: str) -> Path:
    path = directory / "wheels.toml"
    path.write_text(f'''
platform = "cpu"
runner = "docker"
[base_image]
name = "prbench-test/bookworm:base"
digest = "sha256:{"e" * 64}"
[pytorch]
wheel = "torch==2.13.0+cpu"
sha256 = "{torch_sha}"
[pip]
extra = ["app==1.0"]
''', encoding="utf-8")
    return path


@pytest.fixture
def fetching(tmp_path: Path, monkeypatch) -> Path:
    """pip sees only a local wheelhouse (torch, app needing lib); the base image's Python is read without Docker."""
    from prbench.images.content_store import WheelTarget
    from tests.support.store_support import write_wheel

    house = tmp_path / "wheelhouse"
    torch = write_wheel(house, "torch", "2.13.0+cpu")
    write_wheel(house, "app", "1.0", requires=("lib>=2",))
    write_wheel(house, "lib", "2.0")
    for key in list(os.environ):
        if key.startswith("PIP_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(house))
    target = WheelTarget("3.11", ("manylinux_2_28_x86_64", "linux_x86_64"), abi="cp311")
    monkeypatch.setattr("prbench.images.wheels.base_image_target", lambda recipe, store: lambda: target)
    return torch


@pytest.mark.integration
def test_fetch_puts_a_recipes_wheels_in_the_store_and_later_needs_no_index(tmp_path: Path, fetching, capsys,
                                                                           monkeypatch) -> None:
    from prbench.commands.images import run_store_action
    from prbench.sides.recipes import load_recipe

    torch = fetching
    recipe = load_recipe(str(_wheel_recipe(tmp_path, hashlib.sha256(torch.read_bytes()).hexdigest())), tmp_path)
    run_store_action("fetch", store_dir=str(tmp_path / "store"), file=None, lock=None, recipe=recipe)

    assert capsys.readouterr().out.splitlines()[-1] == f"store {tmp_path / 'store'}: 3 wheel(s) for recipe wheels"
    names = sorted(item.name for item in Store(tmp_path / "store").items())
    assert names == ["app-1.0-py3-none-any.whl", "lib-2.0-py3-none-any.whl", "torch-2.13.0+cpu-py3-none-any.whl"]

    # Months later, the wheelhouse is gone: the store alone is enough.
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    run_store_action("fetch", store_dir=str(tmp_path / "store"), file=None, lock=None, recipe=recipe)
    assert "all 2 for cp311" in capsys.readouterr().out


@pytest.mark.integration
def test_fetch_refuses_a_wheel_whose_bytes_are_not_the_pinned_ones(tmp_path: Path, fetching) -> None:
    from foundation.errors import UserError
    from prbench.commands.images import run_store_action
    from prbench.sides.recipes import load_recipe

    torch = fetching
    recipe = load_recipe(str(_wheel_recipe(tmp_path, "0" * 64)), tmp_path)
    with pytest.raises(UserError, match=r"^wheel torch==2\.13\.0\+cpu: the recipe pins sha256 0{64}, but pip "
                                        rf"download gave torch-2\.13\.0\+cpu-py3-none-any\.whl with sha256 "
                                        rf"{hashlib.sha256(torch.read_bytes()).hexdigest()}$"):
        run_store_action("fetch", store_dir=str(tmp_path / "store"), file=None, lock=None, recipe=recipe)


@pytest.mark.parametrize(("args", "message"), [
    (["fetch"], "error: store fetch: --recipe is needed (the recipe whose wheels to fetch)"),
    (["list", "--recipe", "cpu-docker"], "error: store list: --recipe is for fetch only"),
    (["fetch", "--recipe", "cpu-local"], "error: store fetch: recipe cpu-local runs locally; fetch is for Docker "
                                         "and venv recipes (their images and venvs install wheels from the store)"),
])
def test_fetch_flag_mistakes_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke(*args, "--store", str(tmp_path / "store"), cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.strip() == message
