"""`invoke store`: a user lists and verifies a store, moves it to another machine as one tar (all of it, or only
what one lock needs), and every mistake is one line with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prbench.store import Store, StoreItem

ROOT = Path(__file__).resolve().parents[1]


def invoke(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), "store", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


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
