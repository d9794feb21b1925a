"""The content-addressed store: a user adds what a build consumes (files, commit archives, wheels, downloads), the
store hands each back only when its bytes still hash to its name, and a whole store moves to another machine as
one tar."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import threading
from pathlib import Path

import pytest

from foundation.errors import UserError
from prbench.images.content_store import (
    DEFAULT_STORE,
    STORE_ENV,
    Store,
    StoreError,
    StoreItem,
    WheelTarget,
    items_in_lock,
)
from tests.support.store_support import (
    clone_with_submodules,
    git,
    http_server,
    pip_reads_no_machine_settings,
    write_wheel,
)

TARGET = WheelTarget("3.11", ("manylinux_2_28_x86_64", "linux_x86_64"), abi="cp311")


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def a_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "inputs" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def tar_listing(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {member.name: member for member in tar.getmembers()}


# --- where the store is --------------------------------------------------------------------------------------


def test_the_store_is_the_flag_else_the_environment_else_the_cache_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(STORE_ENV, raising=False)
    assert Store.at().root == DEFAULT_STORE.expanduser()
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "from-env"))
    assert Store.at().root == tmp_path / "from-env"
    assert Store.at(tmp_path / "from-flag").root == tmp_path / "from-flag"


# --- files in, verified files out ------------------------------------------------------------------------------


def test_a_file_added_twice_is_kept_once_read_only_and_handed_back_verified(tmp_path) -> None:
    store = Store(tmp_path / "store")
    source = a_file(tmp_path, "llvm.tar.gz", "llvm bytes")

    first = store.add_file(source, kind="download", name="llvm.tar.gz", origin="https://example.org/llvm.tar.gz")
    again = store.add_file(source, kind="download", name="llvm-again.tar.gz", origin="elsewhere")

    assert first == again  # the same bytes: the first name and origin stay
    assert first.sha256 == sha256_of(source) and first.size == len("llvm bytes")
    assert store.items() == [first]
    kept = store.path(first)
    assert kept.read_text() == "llvm bytes" and kept.name == first.sha256
    assert kept.stat().st_mode & 0o222 == 0
    assert store.find(first.sha256) == first and store.find("0" * 64) is None
    assert store.verify() == []


def test_a_corrupted_object_is_a_one_line_error_naming_the_item_and_verify_lists_it(tmp_path) -> None:
    store = Store(tmp_path / "store")
    item = store.add_file(a_file(tmp_path, "w.whl", "wheel"), kind="wheel", name="w-1.0-py3-none-any.whl",
                          origin="pip download w==1.0")
    store.path(item)  # verified once: the check is remembered by size and mtime
    victim = store.object_path(item.sha256)
    victim.chmod(0o644)
    victim.write_text("WHEEL")  # same size, other bytes, new mtime

    with pytest.raises(StoreError) as refused:
        store.path(item)
    message = str(refused.value)
    assert "\n" not in message
    assert f"wheel w-1.0-py3-none-any.whl (sha256 {item.sha256[:12]})" in message
    assert str(victim) in message and "corrupt" in message
    assert [line for line in store.verify() if "corrupt" in line and item.name in line]


def test_a_missing_object_is_named_with_what_to_do(tmp_path) -> None:
    store = Store(tmp_path / "store")
    item = store.add_file(a_file(tmp_path, "a.tar", "a"), kind="source-archive", name="pytorch-abc.tar",
                          origin="git abc of clone")
    store.object_path(item.sha256).unlink()

    with pytest.raises(StoreError, match=r"source-archive pytorch-abc\.tar \(sha256 \w{12}\) is missing from the "
                                         r"store .*invoke store import"):
        store.path(item)


def test_an_item_added_again_after_corruption_is_repaired(tmp_path) -> None:
    store = Store(tmp_path / "store")
    source = a_file(tmp_path, "x.bin", "good bytes")
    item = store.add_file(source, kind="download", name="x.bin", origin="here")
    store.object_path(item.sha256).chmod(0o644)
    store.object_path(item.sha256).write_text("bad")

    store.add_file(source, kind="download", name="x.bin", origin="here")

    assert store.path(item).read_text() == "good bytes"


def test_materialize_puts_each_item_under_its_name(tmp_path) -> None:
    store = Store(tmp_path / "store")
    items = [store.add_file(a_file(tmp_path, f"f{i}", f"content {i}"), kind="download", name=f"file-{i}.bin",
                            origin="test") for i in range(3)]
    context = tmp_path / "context" / "wheels"

    store.materialize(items, context)

    assert sorted(path.name for path in context.iterdir()) == ["file-0.bin", "file-1.bin", "file-2.bin"]
    assert (context / "file-2.bin").read_text() == "content 2"


def test_materialize_refuses_a_corrupt_item_before_the_build_sees_it(tmp_path) -> None:
    store = Store(tmp_path / "store")
    item = store.add_file(a_file(tmp_path, "f", "abc"), kind="download", name="f.bin", origin="test")
    store.object_path(item.sha256).chmod(0o644)
    store.object_path(item.sha256).write_text("abd")

    with pytest.raises(StoreError, match=r"download f\.bin .* corrupt"):
        Store(store.root).materialize([item], tmp_path / "context")


def test_writers_in_parallel_all_land_in_the_index(tmp_path) -> None:
    """Each thread has its own Store (as separate processes would): the flock serializes the index updates."""
    root = tmp_path / "store"
    sources = [a_file(tmp_path, f"in{i}", f"payload {i}") for i in range(12)]
    errors: list[BaseException] = []

    def add(i: int) -> None:
        try:
            Store(root).add_file(sources[i], kind="download", name=f"in{i}.bin", origin="test")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(len(sources))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert sorted(item.name for item in Store(root).items()) == sorted(f"in{i}.bin" for i in range(12))
    assert list((root / "incoming").iterdir()) == []


def test_an_unwritable_store_is_one_line_naming_it(tmp_path) -> None:
    blocker = a_file(tmp_path, "not-a-dir", "x")
    store = Store(blocker / "store")

    with pytest.raises(StoreError, match=r"store .*not-a-dir/store: cannot write there .*--store"):
        store.add_file(blocker, kind="download", name="x.bin", origin="test")


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("name", "../etc/passwd", "plain file name"),
    ("name", "a b", "plain file name"),
    ("kind", "tarball", "expected one of"),
    ("sha256", "ABC", "64 lowercase hex"),
    ("size", -1, "whole number"),
])
def test_a_bad_item_record_names_where_it_is(field, value, expected) -> None:
    record = StoreItem("wheel", "a-1-py3-none-any.whl", "a" * 64, 3, "test").to_json()
    record[field] = value

    with pytest.raises(UserError, match=rf"lock\.json: store\[0\]\.{field}: .*{expected}"):
        StoreItem.from_json(record, "lock.json: store[0]")


def test_the_items_of_an_image_lock_and_of_a_run_lock(tmp_path) -> None:
    one = StoreItem("wheel", "a-1-py3-none-any.whl", "a" * 64, 3, "test")
    two = StoreItem("download", "llvm.tar.gz", "b" * 64, 5, "https://example.org/llvm.tar.gz")
    image_lock = tmp_path / "image-lock.json"
    image_lock.write_text(json.dumps({"base_image": "x", "store": [one.to_json(), two.to_json()]}))
    run_lock = tmp_path / "lock.json"
    run_lock.write_text(json.dumps({"base": {"store": [one.to_json()]}, "pr": {"store": [one.to_json(),
                                                                                       two.to_json()]}}))
    old_lock = tmp_path / "old.json"
    old_lock.write_text(json.dumps({"base_image": "x"}))

    assert items_in_lock(image_lock) == [one, two]
    assert sorted(items_in_lock(run_lock), key=lambda item: item.name) == [one, two]
    with pytest.raises(StoreError, match=r"old\.json: no 'store' section"):
        items_in_lock(old_lock)


# --- commit archives -------------------------------------------------------------------------------------------


def test_a_commit_archive_holds_the_tree_and_its_submodules_and_is_reproducible(tmp_path) -> None:
    clone = clone_with_submodules(tmp_path)
    name = f"project-{clone.commit}.tar"

    item = Store(tmp_path / "one").add_commit_archive(clone.root, clone.commit, name=name, emit=lambda _: None)
    again = Store(tmp_path / "two").add_commit_archive(clone.root, clone.commit, name=name, emit=lambda _: None)

    assert item.sha256 == again.sha256  # two stores, two tars: the same bytes
    assert item.kind == "source-archive" and item.origin.startswith(f"git {clone.commit} of ")
    members = tar_listing(Store(tmp_path / "one").path(item))
    for path in ("README.md", "third_party/fmt/include/fmt/core.h", "third_party/kineto/libkineto/src/init.cpp",
                 "third_party/kineto/libkineto/third_party/json/json.hpp",
                 "secret.txt"):  # export-ignore does not apply: the tree exactly
        assert members[path].isfile(), path
    assert members["tools/build.sh"].mode == 0o755 and members["README.md"].mode == 0o644
    assert members["link"].issym() and members["link"].linkname == "README.md"
    assert {member.mtime for member in members.values()} == {int(git(clone.root, "log", "-1", "--format=%ct"))}
    assert {(member.uid, member.gid, member.uname, member.gname) for member in members.values()} == {(0, 0, "", "")}
    with tarfile.open(Store(tmp_path / "one").path(item)) as tar:
        version = tar.extractfile("version.txt")
        assert version is not None and version.read() == b"$Format:%H$\n"  # no export-subst either


def test_the_archive_reads_submodules_from_the_git_directory_when_their_checkout_is_gone(tmp_path) -> None:
    clone = clone_with_submodules(tmp_path)
    name = f"project-{clone.commit}.tar"
    expected = Store(tmp_path / "one").add_commit_archive(clone.root, clone.commit, name=name, emit=lambda _: None)
    git(clone.root, "submodule", "deinit", "-q", "--all", "--force")  # checkouts removed, .git/modules kept

    item = Store(tmp_path / "two").add_commit_archive(clone.root, clone.commit, name=name, emit=lambda _: None)

    assert item.sha256 == expected.sha256


def test_a_submodule_commit_missing_from_the_clone_is_named(tmp_path) -> None:
    clone = clone_with_submodules(tmp_path)
    git(clone.root, "submodule", "deinit", "-q", "--all", "--force")
    shutil.rmtree(clone.root / ".git" / "modules" / "third_party" / "fmt")

    with pytest.raises(StoreError) as refused:
        Store(tmp_path / "store").add_commit_archive(clone.root, clone.commit, name="p.tar", emit=lambda _: None)
    message = str(refused.value)
    assert f"submodule third_party/fmt at {clone.submodules['third_party/fmt'][:12]}" in message
    assert "git submodule update --init --recursive" in message
    assert list((tmp_path / "store" / "incoming").iterdir()) == []


def test_a_commit_not_in_the_clone_is_named(tmp_path) -> None:
    clone = clone_with_submodules(tmp_path)
    with pytest.raises(StoreError, match=r"commit 0123456789ab is not in the clone"):
        Store(tmp_path / "store").add_commit_archive(clone.root, "0123456789ab", name="p.tar", emit=lambda _: None)


def test_an_archive_already_in_the_store_does_not_need_the_clone(tmp_path) -> None:
    clone = clone_with_submodules(tmp_path)
    store = Store(tmp_path / "store")
    item = store.add_commit_archive(clone.root, clone.commit, name="p.tar", emit=lambda _: None)
    lines: list[str] = []

    assert store.add_commit_archive(clone.root, clone.commit, name="p.tar", emit=lines.append) == item
    assert lines == []


# --- wheels ----------------------------------------------------------------------------------------------------


@pytest.fixture
def offline_pip(monkeypatch) -> None:
    """pip with no configuration files and no PIP_* settings of this machine: only the flags the test gives."""
    pip_reads_no_machine_settings(monkeypatch)


@pytest.fixture
def wheelhouse(tmp_path) -> Path:
    """app 1.0 needs lib (>=2) and, on Windows only, winonly; lib 2.0 needs nothing; lib 1.0 is too old."""
    house = tmp_path / "wheelhouse"
    write_wheel(house, "app", "1.0", requires=("lib>=2", 'winonly; sys_platform == "win32"'))
    write_wheel(house, "lib", "2.0")
    write_wheel(house, "lib", "1.0")
    return house


@pytest.mark.integration
def test_wheels_are_downloaded_for_the_target_with_their_dependencies(tmp_path, wheelhouse, offline_pip) -> None:
    store = Store(tmp_path / "store")
    lines: list[str] = []

    items = store.add_wheels(["app==1.0"], TARGET, emit=lines.append,
                             pip_options=["--no-index", "--find-links", str(wheelhouse)])

    assert [item.name for item in items] == ["app-1.0-py3-none-any.whl", "lib-2.0-py3-none-any.whl"]
    assert all(item.kind == "wheel" for item in items)
    assert items[0].sha256 == sha256_of(wheelhouse / "app-1.0-py3-none-any.whl")
    assert items[0].origin == "pip download app==1.0 for cp311 manylinux_2_28_x86_64"
    assert any("pip: " in line for line in lines)  # pip's own progress is shown
    assert sorted(item.name for item in store.items()) == [item.name for item in items]


@pytest.mark.integration
def test_pinned_wheels_already_in_the_store_need_no_pip_at_all(tmp_path, wheelhouse, offline_pip,
                                                             monkeypatch) -> None:
    store = Store(tmp_path / "store")
    first = store.add_wheels(["app==1.0"], TARGET, emit=lambda _: None,
                             pip_options=["--no-index", "--find-links", str(wheelhouse)])
    monkeypatch.setattr("prbench.images.content_store._pip_download", lambda *args: pytest.fail("pip ran"))

    again = Store(store.root).add_wheels(["app==1.0"], TARGET, emit=lambda _: None)

    assert again == first


@pytest.mark.integration
def test_unpinned_requirements_resolve_again_without_downloading_what_the_store_has(
        tmp_path, wheelhouse, offline_pip) -> None:
    store = Store(tmp_path / "store")
    options = ["--no-index", "--find-links", str(wheelhouse)]
    first = store.add_wheels(["app"], TARGET, emit=lambda _: None, pip_options=options)
    lines: list[str] = []

    again = store.add_wheels(["app"], TARGET, emit=lines.append, pip_options=options)

    assert again == first
    assert "(0 downloaded, 2 from the store)" in lines[-1]


@pytest.mark.integration
def test_a_pip_failure_is_one_line_with_pips_reason(tmp_path, wheelhouse, offline_pip) -> None:
    with pytest.raises(StoreError) as refused:
        Store(tmp_path / "store").add_wheels(["nothere==9"], TARGET, emit=lambda _: None,
                                             pip_options=["--no-index", "--find-links", str(wheelhouse)])
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("pip download nothere==9 for cp311 manylinux_2_28_x86_64 failed: ERROR:")


def test_a_requirement_that_is_not_one_is_refused_before_pip(tmp_path) -> None:
    with pytest.raises(UserError, match=r"requirement '--index-url=x': not a pip requirement"):
        Store(tmp_path / "store").add_wheels(["--index-url=x"], TARGET, emit=lambda _: None)


def test_the_target_accepts_the_wheels_its_interpreter_installs() -> None:
    assert TARGET.accepts("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert TARGET.accepts("numpy-2.0.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    assert TARGET.accepts("six-1.16.0-py2.py3-none-any.whl")
    assert TARGET.accepts("x-1-cp38-abi3-manylinux1_x86_64.whl")
    assert not TARGET.accepts("torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert not TARGET.accepts("torch-2.13.0-cp311-cp311-manylinux_2_28_aarch64.whl")
    assert not TARGET.accepts("torch-2.13.0-cp311-cp311-manylinux_2_34_x86_64.whl")  # newer glibc than the image
    assert not TARGET.accepts("not-a-wheel.tar.gz")


# --- downloads -------------------------------------------------------------------------------------------------


def test_a_download_is_kept_with_its_url_and_sha256(tmp_path) -> None:
    body = b"llvm tarball" * 1000
    with http_server({"/llvm/llvm-abc-ubuntu-x64.tar.gz": body}) as server:
        url = f"{server.url}/llvm/llvm-abc-ubuntu-x64.tar.gz"
        item = Store(tmp_path / "store").add_url(url, sha256=hashlib.sha256(body).hexdigest(), emit=lambda _: None)

    assert item.kind == "download" and item.name == "llvm-abc-ubuntu-x64.tar.gz" and item.origin == url
    assert Store(tmp_path / "store").path(item).read_bytes() == body


def test_a_download_already_in_the_store_makes_no_request(tmp_path) -> None:
    body = b"ptxas"
    store = Store(tmp_path / "store")
    with http_server({"/ptxas.tar.xz": body}) as server:
        first = store.add_url(f"{server.url}/ptxas.tar.xz", emit=lambda _: None)
        again = Store(store.root).add_url(f"{server.url}/ptxas.tar.xz", sha256=first.sha256, emit=lambda _: None)
        assert server.requests == ["/ptxas.tar.xz"]  # the first fetch only

    assert again == first


def test_a_download_with_the_wrong_checksum_is_refused_and_not_kept(tmp_path) -> None:
    store = Store(tmp_path / "store")
    with http_server({"/llvm.tar.gz": b"tampered"}) as server, pytest.raises(StoreError) as refused:
        store.add_url(f"{server.url}/llvm.tar.gz", sha256="ab" * 32, emit=lambda _: None)

    message = str(refused.value)
    assert f"download llvm.tar.gz from {server.url}/llvm.tar.gz: its sha256 is" in message
    assert "expected abababababab; the file was not kept" in message
    assert store.items() == []
    assert not (store.root / "objects").exists() or not any((store.root / "objects").rglob("*"))
    assert list((store.root / "incoming").iterdir()) == []


def test_a_download_that_fails_names_the_url(tmp_path) -> None:
    with http_server({}) as server, pytest.raises(StoreError, match=r"download gone\.tar from .*: HTTP 404"):
        Store(tmp_path / "store").add_url(f"{server.url}/gone.tar", emit=lambda _: None)


# --- moving a store --------------------------------------------------------------------------------------------


def filled_store(tmp_path: Path) -> tuple[Store, list[StoreItem]]:
    store = Store(tmp_path / "here")
    items = [store.add_file(a_file(tmp_path, f"x{i}", f"object {i}" * (i + 1)), kind="download",
                            name=f"x{i}.bin", origin=f"https://example.org/x{i}.bin") for i in range(3)]
    return store, items


def test_a_store_moves_to_another_machine_as_one_tar(tmp_path) -> None:
    store, items = filled_store(tmp_path)
    exported = tmp_path / "store.tar"

    assert store.export(exported, emit=lambda _: None) == 3
    there = Store(tmp_path / "there")
    imported = there.import_tar(exported, emit=lambda _: None)

    assert sorted(imported, key=lambda item: item.name) == items
    assert there.items() == store.items()
    assert [there.path(item).read_bytes() for item in items] == [store.path(item).read_bytes() for item in items]


def test_exporting_only_a_locks_items(tmp_path) -> None:
    store, items = filled_store(tmp_path)
    exported = tmp_path / "store.tar"

    assert store.export(exported, items[1:2], emit=lambda _: None) == 1

    assert Store(tmp_path / "there").import_tar(exported, emit=lambda _: None) == items[1:2]


def test_a_corrupted_object_in_the_tar_is_named_and_nothing_is_imported(tmp_path) -> None:
    store, items = filled_store(tmp_path)
    exported = tmp_path / "store.tar"
    store.export(exported, emit=lambda _: None)
    damaged = tmp_path / "damaged.tar"
    with tarfile.open(exported) as source, tarfile.open(damaged, "w") as out:
        for member in source.getmembers():
            data = source.extractfile(member).read()  # type: ignore[union-attr]
            if member.name.endswith(items[2].sha256):
                data = b"X" + data[1:]
            out.addfile(member, io.BytesIO(data))
    there = Store(tmp_path / "there")

    with pytest.raises(StoreError) as refused:
        there.import_tar(damaged, emit=lambda _: None)

    assert f"download x2.bin (sha256 {items[2].sha256[:12]}) is corrupt in the tar" in str(refused.value)
    assert there.items() == []
    assert not (there.root / "objects").exists()
    assert list((there.root / "incoming").iterdir()) == []


def test_a_tar_that_is_not_a_store_export_is_one_line(tmp_path) -> None:
    not_a_tar = a_file(tmp_path, "store.tar", "hello")
    plain_tar = tmp_path / "plain.tar"
    with tarfile.open(plain_tar, "w") as tar:
        tar.add(not_a_tar, arcname="hello.txt")

    with pytest.raises(StoreError, match=r"store\.tar: not a tar file \(or a damaged one\)") as refused:
        Store(tmp_path / "s").import_tar(not_a_tar, emit=lambda _: None)
    assert "\n" not in str(refused.value)
    with pytest.raises(StoreError, match=r"plain\.tar: no index\.json in the tar"):
        Store(tmp_path / "s").import_tar(plain_tar, emit=lambda _: None)
    with pytest.raises(StoreError, match=r"absent\.tar: no such file"):
        Store(tmp_path / "s").import_tar(tmp_path / "absent.tar", emit=lambda _: None)


def test_export_refuses_a_corrupt_item_and_leaves_no_tar(tmp_path) -> None:
    store, items = filled_store(tmp_path)
    store.object_path(items[0].sha256).chmod(0o644)
    store.object_path(items[0].sha256).write_text("changed")

    with pytest.raises(StoreError, match=r"download x0\.bin .* corrupt"):
        Store(store.root).export(tmp_path / "store.tar", emit=lambda _: None)
    assert not (tmp_path / "store.tar").exists()


def test_a_truncated_tar_is_one_line_and_nothing_is_imported(tmp_path) -> None:
    store, _ = filled_store(tmp_path)
    exported = tmp_path / "store.tar"
    store.export(exported, emit=lambda _: None)
    truncated = tmp_path / "truncated.tar"
    truncated.write_bytes(exported.read_bytes()[:2000])
    there = Store(tmp_path / "there")

    with pytest.raises(StoreError) as refused:
        there.import_tar(truncated, emit=lambda _: None)

    assert "\n" not in str(refused.value) and "nothing was imported" in str(refused.value)
    assert there.items() == []


def test_a_build_that_edits_a_materialized_file_does_not_touch_the_store(tmp_path) -> None:
    store = Store(tmp_path / "store")
    item = store.add_file(a_file(tmp_path, "src", "pristine"), kind="source-archive", name="src.tar", origin="t")
    store.materialize([item], tmp_path / "context")

    (tmp_path / "context" / "src.tar").write_text("patched in place")

    assert Store(store.root).path(item).read_text() == "pristine"


@pytest.mark.integration
def test_a_stored_wheel_the_index_contradicts_is_fetched_again(tmp_path, wheelhouse, offline_pip) -> None:
    """Same file name, other bytes (a rebuilt wheel): pip checks the index's sha256 and fetches the index's file;
    the store keeps both and returns the one pip installed."""
    store = Store(tmp_path / "store")
    old = store.add_wheels(["app"], TARGET, emit=lambda _: None,
                           pip_options=["--no-index", "--find-links", str(wheelhouse)])
    rebuilt = tmp_path / "rebuilt"
    app = write_wheel(rebuilt, "app", "1.0", requires=("lib>=2",), build="2")
    lib = shutil.copy(wheelhouse / "lib-2.0-py3-none-any.whl", rebuilt)
    links = "".join(f'<a href="{Path(wheel).name}#sha256={sha256_of(Path(wheel))}">{Path(wheel).name}</a>\n'
                    for wheel in (app, lib))
    (rebuilt / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")

    new = store.add_wheels(["app"], TARGET, emit=lambda _: None,
                           pip_options=["--no-index", "--find-links", str(rebuilt / "index.html")])

    assert [item.sha256 for item in new] == [sha256_of(app), old[1].sha256]
    assert new[0].sha256 != old[0].sha256
    assert {item.sha256 for item in store.items()} == {old[0].sha256, old[1].sha256, sha256_of(app)}


@pytest.mark.integration
def test_a_pinned_wheel_whose_dependency_is_not_stored_goes_to_pip(tmp_path, wheelhouse, offline_pip) -> None:
    store = Store(tmp_path / "store")
    store.add_file(wheelhouse / "app-1.0-py3-none-any.whl", kind="wheel", name="app-1.0-py3-none-any.whl",
                   origin="test")  # lib, which app needs, is not in the store

    items = store.add_wheels(["app==1.0"], TARGET, emit=lambda _: None,
                             pip_options=["--no-index", "--find-links", str(wheelhouse)])

    assert [item.name for item in items] == ["app-1.0-py3-none-any.whl", "lib-2.0-py3-none-any.whl"]


def test_what_a_killed_writer_left_in_incoming_is_swept_a_day_later(tmp_path) -> None:
    store = Store(tmp_path / "store")
    store.add_file(a_file(tmp_path, "a", "a"), kind="download", name="a.bin", origin="t")
    old, recent = store.root / "incoming" / "999-old", store.root / "incoming" / "998-recent"
    for leftover in (old, recent):
        leftover.mkdir()
        (leftover / "object-x").write_text("half")
    os.utime(old, (1, 1))

    store.add_file(a_file(tmp_path, "b", "b"), kind="download", name="b.bin", origin="t")

    assert not old.exists() and recent.exists()
