"""Two users of one store and one Docker engine at once (two compares on one GPU box share
``~/.cache/prbench/store``): processes adding the same item write it once and a reader never sees part of it;
items added side by side are all listed; two builds of the same image on one engine build it once.

The processes are real (multiprocessing, forked), started together behind a barrier so that they race.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import queue
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import docker
from prbench.images import build
from prbench.images.build import BuildResult, build_image
from prbench.images.content_store import INDEX, Store

pytestmark = pytest.mark.integration  # it starts processes (forked Pythons)

FORK = multiprocessing.get_context("fork")
WRITERS = 4
PAYLOAD = os.urandom(1 << 24)  # 16 MiB: copied in chunks, so a reader would catch a partial object if one showed
SHA = hashlib.sha256(PAYLOAD).hexdigest()
RACE_S = 60  # a hang guard: each racer is done in about a second on an idle machine, seconds on a busy one


def _add(root: Path, source: Path, name: str, barrier: Any) -> None:
    barrier.wait()
    Store(root).add_file(source, kind="download", name=name, origin=f"test pid {os.getpid()}")


def _watch(root: Path, stop: Any, seen: Any) -> None:
    """Poll the object and the index the way a reader does (no lock) until told to stop; note every inode of the
    object and every sighting of a partial object or an unreadable index."""
    store = Store(root)
    target = store.object_path(SHA)
    while not stop.is_set():
        try:
            data = target.read_bytes()
            seen.put(("inode", os.stat(target).st_ino))
            if data != PAYLOAD:
                seen.put(("partial", len(data)))
        except FileNotFoundError:
            pass
        if (root / INDEX).exists():
            try:
                store.items()
            except Exception as exc:  # any failure to read the index is what this test looks for
                seen.put(("index", str(exc)))


def _race(targets: list[tuple[Any, tuple[Any, ...]]]) -> None:
    processes = [FORK.Process(target=fn, args=args) for fn, args in targets]
    for process in processes:
        process.start()
    for process in processes:
        process.join(RACE_S)
    assert [process.exitcode for process in processes] == [0] * len(processes)


def _drain(messages: Any) -> list[Any]:
    found = []
    while True:
        try:
            found.append(messages.get(timeout=0.5))
        except queue.Empty:
            return found


def test_processes_adding_the_same_item_write_it_once_and_no_reader_sees_part_of_it(tmp_path: Path) -> None:
    source = tmp_path / "llvm.tar.gz"
    source.write_bytes(PAYLOAD)
    root = tmp_path / "store"
    barrier, stop, seen = FORK.Barrier(WRITERS), FORK.Event(), FORK.Queue()
    watcher = FORK.Process(target=_watch, args=(root, stop, seen))
    watcher.start()

    _race([(_add, (root, source, "llvm.tar.gz", barrier)) for _ in range(WRITERS)])
    stop.set()
    watcher.join(RACE_S)
    sightings = _drain(seen)

    assert [s for s in sightings if s[0] != "inode"] == []  # never a partial object, never a broken index
    assert len({inode for kind, inode in sightings if kind == "inode"} | {os.stat(Store(root).object_path(SHA)).st_ino}
               ) == 1  # placed once: a second placement would be a new file (a rename over the first)
    (item,) = Store(root).items()
    assert item.sha256 == SHA and Store(root).path(item).read_bytes() == PAYLOAD
    assert list((root / "incoming").iterdir()) == []  # the losers' staged copies are gone


def test_items_added_side_by_side_are_all_listed(tmp_path: Path) -> None:
    sources = []
    for i in range(WRITERS):
        sources.append(tmp_path / f"file-{i}.bin")
        sources[-1].write_bytes(f"item {i}".encode() * 1000)
    root = tmp_path / "store"
    barrier = FORK.Barrier(WRITERS)

    _race([(_add, (root, source, source.name, barrier)) for source in sources])

    assert sorted(item.name for item in Store(root).items()) == [source.name for source in sources]
    assert Store(root).verify() == []


class _FileEngine:
    """A Docker engine whose images are files under ``root`` (what `image_present` reads: images.get)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.images = self

    def info(self) -> dict[str, str]:
        return {"ID": "TEST:ENGINE"}

    def get(self, tag: str) -> Any:
        path = self.root / tag.replace("/", "_")
        if not path.exists():
            raise docker.errors.ImageNotFound(tag)
        return SimpleNamespace(id=path.read_text(), short_id=path.read_text()[:12])


def _build_slowly(plan: Any, client: _FileEngine, store: Store, *args: Any) -> BuildResult:
    """The docker build, as long as a real one feels: note it, take a second, then the image is there."""
    with open(client.root / "builds.log", "a") as log:
        log.write(f"{os.getpid()}\n")
    time.sleep(1.0)
    (client.root / plan.tag.replace("/", "_")).write_text(f"sha256:{os.getpid():064d}")
    return BuildResult(tag=plan.tag, image_id=f"sha256:{os.getpid():064d}", built=True)


def _build(root: Path, engine: Path, barrier: Any, said: Any) -> None:
    barrier.wait()
    result = build_image(SimpleNamespace(tag="prbench/bookworm:0123456789ab"), _FileEngine(engine),
                         store=Store(root), emit=said.put)
    said.put(f"built={result.built}")


def test_two_builds_of_the_same_image_on_one_engine_build_it_once(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "_build_in_context", _build_slowly)  # the forked racers inherit it
    engine = tmp_path / "engine"
    engine.mkdir()
    barrier, said = FORK.Barrier(2), FORK.Queue()

    _race([(_build, (tmp_path / "store", engine, barrier, said)) for _ in range(2)])
    lines = _drain(said)

    assert len((engine / "builds.log").read_text().splitlines()) == 1
    assert sorted(line for line in lines if line.startswith("built=")) == ["built=False", "built=True"]
    assert any("waiting for another process building prbench/bookworm:0123456789ab" in line for line in lines)
