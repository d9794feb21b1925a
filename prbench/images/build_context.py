"""The build context of an image, filled from the store: every file the build consumes, and the record of it.

Nothing in a Dockerfile fetches anything: the context holds, under fixed names,

- ``src/<tree>/``: the ``git archive`` of the exact PyTorch and Triton commits (submodules included), unpacked;
- ``wheels/<group>/``: the wheels of one install step plus ``requirements.txt`` listing each with its sha256 and
  ``brought-by.json`` naming the requirement that brought each (``prbench.images.wheels.brought_by_record``);
  groups: ``pytorch`` — the pinned wheels of a wheel recipe and their dependencies —, ``triton-build`` and
  ``pytorch-build`` — a source tree's build requirements —, ``extra`` — the recipe's ``[pip] extra``;
- ``downloads/<what>/``: the files Triton's build would fetch by URL (the LLVM tarball, NVIDIA tools), with
  ``downloads/place.sh`` that unpacks them in the image and ``downloads/env.sh`` that points the build at them;
- ``pytorch-downloads/<what>/``: the same for PyTorch's build (AOTriton on ROCm, ``prbench.images.pytorch_setup``),
  a folder of its own so that a change there does not rebuild the Triton layer.

Each file is a store item. A fresh build resolves them on the host (archives from the clones, ``pip download`` for
the image's interpreter, Triton's URLs) into the store; a rebuild from a lock takes exactly the items the lock
lists, by sha256, and needs neither the clones nor the network. The items used are returned as ``UsedItem``s
(the item and where it went), which the image's label and then its lock record.
"""

from __future__ import annotations

import re
import shlex
import tarfile
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import git

from foundation import atomic_io
from foundation.errors import UserError
from prbench.images.build_plan import ROOT_IN_IMAGE, BuildPlan, UsedItem
from prbench.images.content_store import Store, StoreItem, WheelTarget
from prbench.images.downloads import Download
from prbench.images.pytorch_setup import AOTRITON_CMAKE
from prbench.images.wheels import BROUGHT_BY, brought_by, brought_by_record, hashed_requirements, wheels_for
from prbench.sides.pins import SourceTree
from prbench.sides.recipes import ENV_NAME_RE, Recipe, WheelPin

Emit = Callable[[str], None]

_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.bz2")
# Per source tree, the paths (files, or folders taken whole) that decide what its build downloads
# (``planned_downloads``): a tree holding only these, read from a clone at the commit, lists the same downloads.
DOWNLOAD_INPUTS: dict[str, tuple[str, ...]] = {
    "triton": ("setup.py", "python/setup.py", "python/build_helpers.py", "cmake"),
    "pytorch": (AOTRITON_CMAKE,),
}


class _Source:
    """Where each item of a build comes from: the lock's list (a rebuild) or the host's resolution (fresh)."""

    def __init__(self, store: Store, locked: tuple[UsedItem, ...] | None) -> None:
        self.store = store
        self.locked = locked
        self.used: list[UsedItem] = []

    def items(self, use: str, resolve: Callable[[], list[StoreItem]],
              brought_by: Callable[[list[StoreItem]], dict[str, str]] | None = None) -> list[StoreItem]:
        found = resolve() if self.locked is None else [u.item for u in self.locked if u.used_as == use]
        by = brought_by(found) if brought_by is not None else {}
        self.used += [UsedItem(item, use, by.get(item.sha256)) for item in found]
        return found

    def one(self, use: str, resolve: Callable[[], StoreItem]) -> StoreItem:
        found = self.items(use, lambda: [resolve()])
        if len(found) != 1:
            raise UserError(f"--lock: the lock's store section has {len(found)} items for {use}, expected one")
        return found[0]


def fill_context(plan: BuildPlan, store: Store, context: Path, target: Callable[[], WheelTarget],
                 emit: Emit = print, rocm_version: Callable[[], str] | None = None) -> list[UsedItem]:
    """Put every input of ``plan`` into ``context`` from the store; return the items used, in context order.

    ``target`` is called (at most once matters: it runs a container) when wheels must be resolved or a download
    depends on the image's machine; ``rocm_version`` (the base image's ROCm ``major.minor``) when PyTorch's
    AOTriton runtime is picked. A missing or corrupt item is the store's one-line error naming it.
    """
    if plan.recipe.is_wheel:
        return wheel_groups(plan.recipe, plan.locked, store, context, target, emit)
    source = _Source(store, plan.locked)
    wheel_target = _once(target)
    group = partial(_group, source, context, wheel_target, emit)
    assert plan.pytorch is not None and plan.triton is not None
    for tree in (plan.triton, plan.pytorch):
        _source_tree(source, context, tree, emit)
    _downloads(source, context, plan, wheel_target, rocm_version, emit)
    for tree, name in ((plan.triton, "triton-build"), (plan.pytorch, "pytorch-build")):
        group(name, build_requirements(context / "src" / tree.name, tree.requirements),
              f"{tree.name} build requirement")
    group("extra", list(plan.recipe.pip_extra), "[pip] extra")
    return source.used


def wheel_groups(recipe: Recipe, locked: tuple[UsedItem, ...] | None, store: Store, directory: Path,
                 target: Callable[[], WheelTarget], emit: Emit = print) -> list[UsedItem]:
    """The wheelhouse of a wheel recipe (an image's build context, or a venv's): ``wheels/pytorch`` (the pinned
    wheels and what they require) and ``wheels/extra`` (``[pip] extra``), each with its hashed requirements and
    ``brought-by.json``; from ``locked`` (a rebuild) or resolved in the store for ``target``."""
    source = _Source(store, locked)
    group = partial(_group, source, directory, _once(target), emit)
    group("pytorch", [p.requirement for p in recipe.wheel_pins], "pinned", recipe.wheel_pins)
    group("extra", list(recipe.pip_extra), "[pip] extra")
    return source.used


def _once(target: Callable[[], WheelTarget]) -> Callable[[], WheelTarget]:
    """``target``, called at most once (it may start a container)."""
    once: dict[str, WheelTarget] = {}

    def wheel_target() -> WheelTarget:
        if "target" not in once:
            once["target"] = target()
        return once["target"]

    return wheel_target


def _group(source: _Source, context: Path, target: Callable[[], WheelTarget], emit: Emit, name: str,
           requirements: list[str], why: str, pins: tuple[WheelPin, ...] = ()) -> None:
    store = source.store
    _wheel_group(source, context, name, partial(wheels_for, store, requirements, target, pins=pins, emit=emit),
                 partial(brought_by, store, requirements=requirements, why=why, target=target))


def _wheel_group(source: _Source, context: Path, group: str, resolve: Callable[[], list[StoreItem]],
                 attribute: Callable[[list[StoreItem]], dict[str, str]]) -> None:
    use = f"wheels/{group}"
    items = source.items(use, resolve, attribute)
    dest = context / "wheels" / group
    dest.mkdir(parents=True, exist_ok=True)
    source.store.materialize(items, dest)
    atomic_io.write_text(dest / "requirements.txt", hashed_requirements(items))
    atomic_io.write_json(dest / BROUGHT_BY, brought_by_record(group, [u for u in source.used if u.used_as == use]))


def _source_tree(source: _Source, context: Path, tree: SourceTree, emit: Emit) -> None:
    def archive() -> StoreItem:
        name = f"{tree.name}-{tree.commit}.tar"
        # The name holds the full commit: an archive under it is that commit's, whether or not the clone is there.
        kept = next((i for i in source.store.items() if i.kind == "source-archive" and i.name == name), None)
        if kept is not None:
            return kept
        if tree.clone is None:
            raise UserError(f"{tree.name} source: no clone to archive commit {tree.commit[:12]} from "
                            f"(give --{tree.name}-src)")
        return source.store.add_commit_archive(tree.clone, tree.commit, name=name, emit=emit)

    item = source.one(f"src/{tree.name}", archive)
    dest = context / "src" / tree.name
    dest.mkdir(parents=True, exist_ok=True)
    emit(f"unpacking {item.name} into the build context")
    with tarfile.open(source.store.path(item)) as tar:
        tar.extractall(dest, filter="tar")


def _downloads(source: _Source, context: Path, plan: BuildPlan, target: Callable[[], WheelTarget],
               rocm_version: Callable[[], str] | None, emit: Emit) -> None:
    """Every file the two trees' builds would fetch, from the store, each tree's in its own folder with the scripts
    that unpack them and point its build at them (a change of PyTorch's never rebuilds the Triton layer)."""
    planned = planned_downloads(context / "src", plan.recipe, target, rocm_version)
    for folder, (tree, downloads) in planned.items():
        _place_downloads(source, context, folder, downloads, tree, emit)


def planned_downloads(src: Path, recipe: Recipe, target: Callable[[], WheelTarget],
                      rocm_version: Callable[[], str] | None) -> dict[str, tuple[str, list[Download]]]:
    """What the builds of the trees under ``src`` (``src/triton/``, ``src/pytorch/``) fetch by URL, by the context
    folder they go in: ``{"downloads": ("Triton", [...]), "pytorch-downloads": ("PyTorch", [...])}``. Trees holding
    only the files ``DOWNLOAD_INPUTS`` names give the same lists (``invoke doctor`` reads no more). ``target`` is
    the image's interpreter (its machine and glibc pick the LLVM build); ``rocm_version`` the base image's ROCm
    (AOTriton's runtime), each asked only when a tree needs it."""
    from prbench.images.pytorch_setup import pytorch_downloads
    from prbench.images.triton_setup import triton_downloads

    triton = src / "triton"
    # setup.py is where Triton fetches things; a tree built from pyproject.toml alone fetches nothing through it.
    has_setup = (triton / "setup.py").is_file() or (triton / "python" / "setup.py").is_file()

    def image_rocm() -> str:
        if rocm_version is None:
            raise UserError(f"recipe {recipe.name}: the ROCm version of the base image is needed to pick "
                            "AOTriton's runtime, and it cannot be read here")
        return rocm_version()

    return {
        "downloads": ("Triton", triton_downloads(triton, recipe.platform, **_machine_and_glibc(target()))
                      if has_setup else []),
        "pytorch-downloads": ("PyTorch", pytorch_downloads(
            src / "pytorch", recipe.platform, recipe.arch, rocm_version=image_rocm,
            machine=lambda: _machine_and_glibc(target()).get("machine", "x86_64"))),
    }


def _place_downloads(source: _Source, context: Path, folder: str, downloads: list[Download], tree: str,
                     emit: Emit) -> None:
    """Each download from the store into ``context/folder/<what>/``, with ``place.sh`` that unpacks them in the
    image and ``env.sh`` that points the build at them."""
    directory = context / folder
    directory.mkdir(parents=True, exist_ok=True)
    place = ["#!/bin/bash", f"# Generated by prbench: unpack {tree}'s downloads where {folder}/env.sh points.",
             "set -euo pipefail"]
    env: dict[str, str] = {}
    removals: list[str] = []
    for download in downloads:
        # Downloads may share a directory (what) but each is its own item (key).
        item = source.one(f"downloads/{download.key}", partial(fetch_download, source.store, download, emit))
        where = directory / download.what
        where.mkdir(parents=True, exist_ok=True)
        source.store.materialize([item], where)
        in_image = f"{ROOT_IN_IMAGE}/{folder}/{download.what}"
        unpack, remove = _unpack_lines(in_image, item.name, download.unpack_under)
        place += unpack
        removals += [line for line in remove if line not in removals]
        for name, value in download.env.items():
            if not ENV_NAME_RE.fullmatch(name):
                raise UserError(f"{tree} downloads: {name!r} is not an environment variable name")
            env[name] = value.replace("{path}", in_image)
        emit(f"{download.key}: {item.name} ({item.sha256[:12]}) from the store")
    place += removals  # last: one archive may be unpacked into two places
    atomic_io.write_text(directory / "place.sh", "\n".join(place) + "\n")
    exports = [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())]
    atomic_io.write_text(directory / "env.sh", "\n".join([f"# Generated by prbench: {tree}'s build uses the "
                                                          "local copies of its downloads.", *exports]) + "\n")


def downloads_at(recipe: Recipe, pytorch: tuple[git.Repo, str], triton: tuple[git.Repo, str],
                 target: Callable[[], WheelTarget], rocm_version: Callable[[], str] | None) -> list[Download]:
    """Every file the build of ``recipe`` at these (clone, commit) pairs takes from the store: the trees'
    ``DOWNLOAD_INPUTS`` read from the clones' objects at the commits, as ``planned_downloads`` reads a context."""
    with tempfile.TemporaryDirectory(prefix="prbench-downloads-") as tmp:
        src = Path(tmp)
        for tree, (repo, commit) in (("pytorch", pytorch), ("triton", triton)):
            export_download_inputs(repo, commit, tree, src / tree)
        planned = planned_downloads(src, recipe, target, rocm_version)
    return [download for _tree, downloads in planned.values() for download in downloads]


def export_download_inputs(repo: git.Repo, commit: str, tree: str, dest: Path) -> None:
    """The files of ``tree``'s ``DOWNLOAD_INPUTS`` at ``commit``, written under ``dest`` (a folder whole)."""
    root = repo.commit(commit).tree
    for relative in DOWNLOAD_INPUTS.get(tree, ()):
        try:
            found = root / relative
        except KeyError:
            continue
        within = found.traverse() if isinstance(found, git.Tree) else [found]
        for blob in (b for b in within if isinstance(b, git.Blob)):
            path = dest / blob.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(blob.data_stream.read())


def stored_download(store: Store, download: Download) -> StoreItem | None:
    """The store's file of the download's URL (the URLs name immutable builds: the LLVM hash, a tool's or
    AOTriton's version), if it holds one with the sha256 the tree names (any, where it names none)."""
    sha256 = download.sha256 or None
    return next((i for i in store.items() if i.kind == "download" and i.origin == download.url
                 and sha256 in (None, i.sha256)), None)


def fetch_download(store: Store, download: Download, emit: Emit) -> StoreItem:
    """The stored file of the download, else fetched into the store (checked against the tree's sha256, if any)."""
    kept = stored_download(store, download)
    return kept if kept is not None else store.add_url(download.url, sha256=download.sha256 or None, emit=emit)


def _machine_and_glibc(target: WheelTarget) -> dict[str, str]:
    """The image's machine and glibc, as its newest manylinux platform tag says (they pick Triton's LLVM build)."""
    for platform in target.platforms:
        found = re.fullmatch(r"manylinux_([0-9]+)_([0-9]+)_(\w+)", platform)
        if found:
            return {"machine": found.group(3), "glibc": f"{found.group(1)}.{found.group(2)}"}
    return {}


def _unpack_lines(directory: str, name: str, under: str) -> tuple[list[str], list[str]]:
    """The lines that unpack an archive into ``directory/under``, and the line that removes it afterwards."""
    path = shlex.quote(f"{directory}/{name}")
    into = shlex.quote(f"{directory}/{under}".rstrip("/"))
    if name.endswith(_ARCHIVE_SUFFIXES):
        return [f"mkdir -p {into}", f"tar -xf {path} -C {into}"], [f"rm -f {path}"]
    if name.endswith(".zip"):
        return [f"mkdir -p {into}", f"python3 -m zipfile -e {path} {into}"], [f"rm -f {path}"]
    return [], []


def build_requirements(tree: Path, files: tuple[str, ...]) -> list[str]:
    """The requirements of a source tree's requirement files (``-r`` includes followed), for ``pip download``.

    Options (index URLs, ``-e``) are left out: the wheelhouse is resolved from the host's index, and nothing is
    installed in the image but the wheels it lists.
    """
    out: list[str] = []
    for name in files:
        out += _requirement_lines(tree / name, tree, set())
    return list(dict.fromkeys(out))


def _requirement_lines(path: Path, tree: Path, seen: set[Path]) -> list[str]:
    resolved = path.resolve()
    if resolved in seen or not resolved.is_relative_to(tree.resolve()) or not path.is_file():
        return []
    seen.add(resolved)
    lines: list[str] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        include = re.fullmatch(r"(?:-r|--requirement)[ =]?\s*(\S+)", line)
        if include:
            lines += _requirement_lines(path.parent / include.group(1), tree, seen)
        elif not line.startswith("-"):
            lines.append(line)
    return lines
