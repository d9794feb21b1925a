"""The content-addressed store: every input an image build consumes, fetched once on the host and kept by sha256.

A lock lists the store items its build consumed (``StoreItem.to_json()``); with the lock and a store holding those
items an image rebuilds with the network off and the git clones gone. Items are files of four kinds:

- ``source-archive``: a tar of exactly one commit's tree, submodules included, byte-for-byte reproducible;
- ``wheel``: every wheel pip installs, downloaded on the host for the image's interpreter (``WheelTarget``);
- ``download``: a file fetched by URL (Triton's LLVM tarball, its NVIDIA tools), checked against its sha256;
- ``image``: a base image as ``docker save`` wrote it.

What a source tree's build downloads by itself (``prbench.images.downloads.Download``) is read from a Triton tree by
``prbench.images.triton_setup`` and from a PyTorch tree by ``prbench.images.pytorch_setup``; each of those files enters
the store through ``add_url``.

Layout under the root (``~/.cache/prbench/store``, ``$PRBENCH_STORE`` or ``--store``)::

    objects/<sha256[:2]>/<sha256>   the item's bytes, read-only; the file name is its identity
    index.json                      {"format": 1, "items": [StoreItem.to_json(), ...]}: names and origins
    incoming/                       files being written (same file system, so placing one is a rename)
    .lock                           flock(2) taken by every writer while it places objects and rewrites the index
    locks/<name>.lock               flock(2) of one piece of work many processes may want at once (`held`):
                                    building one image on one engine

Readers take no lock: an object appears by rename, whole, and the index is replaced atomically. Several
processes may add items at once; each waits for the others' short critical sections. ``path()`` hashes an object
again before handing it out (remembering, per ``Store`` instance, the size and mtime it verified), so a corrupted
file is a one-line ``StoreError`` naming the item instead of a broken build.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags, generic_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from foundation.atomic_io import atomic_path, write_json
from foundation.errors import UserError
from foundation.io_errors import is_no_space
from foundation.records import (
    MAX_JSON_BYTES,
    check_regular,
    expect_int,
    expect_list,
    expect_object,
    expect_str,
    parse_json,
    read_json,
)
from prbench.images.triton_setup import triton_downloads as triton_downloads
from prbench.images.wheel_closure import Closure, closure, requires_dist

DEFAULT_STORE = Path("~/.cache/prbench/store")
STORE_ENV = "PRBENCH_STORE"
KINDS = ("source-archive", "wheel", "download", "image")

INDEX = "index.json"
OBJECTS = "objects"
INCOMING = "incoming"
LOCK_FILE = ".lock"
LOCKS = "locks"
INDEX_FORMAT = 1

_CHUNK = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
# A build-context file name: one path component, no control characters, nothing a shell or COPY reads specially.
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+\-]{0,254}")
_PROGRESS_EVERY_S = 5.0
# A private incoming/ directory untouched this long belongs to a writer that died (a live one writes into it).
_ABANDONED_AFTER_S = 24 * 3600

Emit = Callable[[str], None]


class StoreError(UserError):
    """A store item is missing, corrupt or cannot be fetched; one line naming the item, the path and what to do."""


@dataclass(frozen=True)
class StoreItem:
    """One file of the store; ``sha256`` is its identity, the rest says what to call it and where it came from."""

    kind: str  # one of KINDS
    name: str  # the file name to use in a build context
    sha256: str  # hex digest of the file's bytes
    size: int
    origin: str  # for people: a URL, "git <commit> of <clone>", "pip download ...", "docker save <ref> (<id>)"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "sha256": self.sha256, "size": self.size, "origin": self.origin}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> StoreItem:
        """Validate a record (from a lock, an index or an export): a bad one is a UserError naming ``where``."""
        data = expect_object(data, where)
        kind = expect_str(data.get("kind"), f"{where}.kind")
        if kind not in KINDS:
            raise UserError(f"{where}.kind: expected one of {', '.join(KINDS)}, found {kind!r}")
        name = expect_str(data.get("name"), f"{where}.name")
        check_file_name(name, f"{where}.name")
        sha256 = expect_str(data.get("sha256"), f"{where}.sha256")
        if not _SHA256.fullmatch(sha256):
            raise UserError(f"{where}.sha256: expected 64 lowercase hex digits, found {sha256[:70]!r}")
        size = expect_int(data.get("size"), f"{where}.size", minimum=0)
        origin = expect_str(data.get("origin"), f"{where}.origin")
        return cls(kind=kind, name=name, sha256=sha256, size=size, origin=origin)

    def label(self) -> str:
        """How messages name the item: ``wheel torch-2.13.0-...whl (sha256 0123456789ab)``."""
        return f"{self.kind} {self.name} (sha256 {self.sha256[:12]})"


def check_file_name(name: str, where: str) -> None:
    if not _FILE_NAME.fullmatch(name) or name in (".", ".."):
        raise UserError(f"{where}: expected a plain file name (letters, digits, '._+-', no '/'), found {name[:80]!r}")


@dataclass(frozen=True)
class WheelTarget:
    """The interpreter a wheelhouse is for (the image's, not the host's)."""

    python_version: str  # "3.11"
    platforms: tuple[str, ...]  # e.g. ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "linux_x86_64")
    implementation: str = "cp"
    abi: str | None = None  # "cp311"

    def check(self) -> None:
        if not re.fullmatch(r"[0-9]+\.[0-9]+", self.python_version):
            raise UserError(f"wheel target: python version {self.python_version!r}: expected MAJOR.MINOR, e.g. 3.11")
        if not self.platforms:
            raise UserError("wheel target: no platform given; expected e.g. manylinux_2_28_x86_64")
        for word in (*self.platforms, self.implementation, *([self.abi] if self.abi else [])):
            if not re.fullmatch(r"[a-z0-9_]+", word):
                raise UserError(f"wheel target: {word!r}: expected a wheel tag word (lowercase letters, digits, _)")

    def describe(self) -> str:
        return f"{self.implementation}{self.python_version.replace('.', '')} {self.platforms[0]}"

    def tags(self) -> frozenset[Tag]:
        """Every wheel tag an installer on the target accepts (manylinux platforms include their older glibcs)."""
        version = tuple(int(part) for part in self.python_version.split("."))
        platforms = [expanded for platform in self.platforms for expanded in _manylinux_family(platform)]
        abis = [self.abi] if self.abi else None
        nodot = "".join(str(part) for part in version)
        if self.implementation == "cp":
            specific = list(cpython_tags(version, abis=abis, platforms=platforms))
        else:
            specific = list(generic_tags(f"{self.implementation}{nodot}", abis=abis, platforms=platforms))
        return frozenset(specific + list(compatible_tags(version, f"{self.implementation}{nodot}", platforms)))

    def accepts(self, wheel_name: str) -> bool:
        try:
            _, _, _, tags = parse_wheel_filename(wheel_name)
        except InvalidWheelFilename:
            return False
        return not tags.isdisjoint(self.tags())

    def marker_environment(self) -> dict[str, str]:
        """The PEP 508 marker values of the target, for reading a wheel's dependencies without pip."""
        environment = {key: str(value) for key, value in default_environment().items()}
        platform = self.platforms[0]
        machine = re.sub(r"^(manylinux|musllinux)_[0-9]+_[0-9]+_|^(manylinux[0-9]+|linux)_", "", platform)
        system = "Linux" if re.match(r"(manylinux|musllinux|linux)", platform) else environment["platform_system"]
        environment.update({
            "python_version": self.python_version,
            "python_full_version": f"{self.python_version}.0",
            "implementation_version": f"{self.python_version}.0",
            "implementation_name": "cpython" if self.implementation == "cp" else self.implementation,
            "platform_python_implementation": "CPython" if self.implementation == "cp" else self.implementation,
            "platform_machine": machine,
            "platform_system": system,
            "sys_platform": "linux" if system == "Linux" else environment["sys_platform"],
            "os_name": "posix" if system == "Linux" else environment["os_name"],
        })
        return environment


_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _manylinux_family(platform: str) -> list[str]:
    """``manylinux_2_28_x86_64`` → itself and every older glibc's tag (as pip expands ``--platform``)."""
    match = re.fullmatch(r"manylinux_([0-9]+)_([0-9]+)_(\w+)", platform)
    legacy = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", platform)
    if legacy:
        (major, minor), arch = _LEGACY_MANYLINUX[legacy.group(1)], legacy.group(2)
    elif match:
        major, minor, arch = int(match.group(1)), int(match.group(2)), match.group(3)
    else:
        return [platform]
    family = [platform]
    for glibc_minor in range(minor, 4, -1):
        family.append(f"manylinux_{major}_{glibc_minor}_{arch}")
        family += [f"{name}_{arch}" for name, version in _LEGACY_MANYLINUX.items() if version == (major, glibc_minor)]
    return list(dict.fromkeys(family))


class Store:
    """A store rooted at ``root`` (created on the first write)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser()
        # sha256 → (size, mtime_ns) of the object file this instance last hashed and found right.
        self._verified: dict[str, tuple[int, int]] = {}

    @classmethod
    def at(cls, explicit: str | Path | None = None) -> Store:
        """The store a command uses: ``--store`` if given, else ``$PRBENCH_STORE``, else ``~/.cache/prbench/store``."""
        chosen = explicit or os.environ.get(STORE_ENV) or DEFAULT_STORE
        return cls(Path(chosen).expanduser().absolute())

    # --- reading ---------------------------------------------------------------------------------------------

    def items(self) -> list[StoreItem]:
        """Every item the index lists, sorted by kind and name."""
        index = self.root / INDEX
        if not index.exists():
            return []
        data = expect_object(read_json(index, "the store's index"), str(index))
        if data.get("format") != INDEX_FORMAT:
            raise StoreError(f"{index}: format {data.get('format')!r} is not {INDEX_FORMAT}; this prbench cannot "
                             "read that store")
        raw = expect_list(data.get("items"), f"{index}: items")
        return [StoreItem.from_json(entry, f"{index}: items[{i}]") for i, entry in enumerate(raw)]

    def find(self, sha256: str) -> StoreItem | None:
        return next((item for item in self.items() if item.sha256 == sha256), None)

    def object_path(self, sha256: str) -> Path:
        """Where the object of that digest lives (whether or not it is there)."""
        return self.root / OBJECTS / sha256[:2] / sha256

    def path(self, item: StoreItem) -> Path:
        """The item's file, hashed again (once per change of size or mtime); missing or corrupt → StoreError."""
        problem = self._problem(item)
        if problem:
            raise StoreError(problem)
        return self.object_path(item.sha256)

    def verify(self) -> list[str]:
        """One line per missing or corrupt item of the index (an empty list: every object hashes to its name)."""
        return [problem for item in self.items() for problem in [self._problem(item)] if problem]

    def _problem(self, item: StoreItem) -> str | None:
        target = self.object_path(item.sha256)
        try:
            stat = target.stat()
        except FileNotFoundError:
            return (f"{item.label()} is missing from the store {self.root}: import a store that has it "
                    "(invoke store import) or fetch it again (build with the network on)")
        seen = (stat.st_size, stat.st_mtime_ns)
        if self._verified.get(item.sha256) == seen:
            return None
        digest = _hash_file(target)
        if digest != item.sha256 or stat.st_size != item.size:
            self._verified.pop(item.sha256, None)
            return (f"{item.label()} is corrupt in the store: {target} has sha256 {digest[:12]} and "
                    f"{stat.st_size} bytes, expected {item.size}; delete that file, then import or fetch it again")
        self._verified[item.sha256] = seen
        return None

    def materialize(self, items: Iterable[StoreItem], dest: Path) -> None:
        """Put a verified copy of each item at ``dest/<item.name>``.

        A copy, not a hard link: the object's read-only mode does not stop root, and a build step that edits its
        input in place would change the store's bytes under their name.
        """
        dest.mkdir(parents=True, exist_ok=True)
        for item in items:
            check_file_name(item.name, f"store item {item.sha256[:12]} name")
            target = dest / item.name
            target.unlink(missing_ok=True)
            shutil.copyfile(self.path(item), target)

    # --- adding ----------------------------------------------------------------------------------------------

    def add_file(self, path: Path, *, kind: str, name: str, origin: str) -> StoreItem:
        """Copy ``path`` in (idempotent: the same bytes are kept once)."""
        _check_kind(kind)
        check_file_name(name, f"store item name for {path}")
        with self._incoming() as incoming, open(path, "rb") as source:
            staged = _stage(source, incoming)
            return self._place([(staged, StoreItem(kind, name, staged.sha256, staged.size, origin))])[0]

    def add_url(self, url: str, *, name: str | None = None, sha256: str | None = None,
                emit: Emit = print) -> StoreItem:
        """A file fetched by URL (kind ``download``). With ``sha256`` given and that object present, nothing is
        fetched; a fetched file whose sha256 differs from the expected one is refused and not kept."""
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise StoreError(f"download {url[:200]!r}: expected an http(s) URL")
        name = name or urllib.parse.unquote(parsed.path.rsplit("/", 1)[-1])
        check_file_name(name, f"download {url}: file name")
        if sha256 is not None:
            sha256 = sha256.lower()
            if not _SHA256.fullmatch(sha256):
                raise StoreError(f"download {url}: expected sha256 {sha256[:70]!r} is not 64 hex digits")
            present = self._present(sha256)
            if present is not None:
                return present
        emit(f"downloading {name} from {url}")
        with self._incoming() as incoming:
            try:
                with urllib.request.urlopen(url, timeout=60) as response:  # the scheme is checked above
                    total = int(response.headers.get("Content-Length") or 0)
                    staged = _stage(response, incoming, progress=_download_progress(name, total, emit))
            except urllib.error.URLError as exc:
                reason = exc.reason if not isinstance(exc, urllib.error.HTTPError) else f"HTTP {exc.code} {exc.reason}"
                raise StoreError(f"download {name} from {url}: {reason}; check the URL and the network, or import "
                                 "a store that has it") from None
            except (TimeoutError, ConnectionError) as exc:
                raise StoreError(f"download {name} from {url}: {exc}; check the URL and the network") from None
            if sha256 is not None and staged.sha256 != sha256:
                raise StoreError(f"download {name} from {url}: its sha256 is {staged.sha256[:12]}, expected "
                                 f"{sha256[:12]}; the file was not kept (a changed upstream file or a wrong checksum)")
            return self._place([(staged, StoreItem("download", name, staged.sha256, staged.size, url))])[0]

    def add_commit_archive(self, clone: Path, commit: str, *, name: str, emit: Emit = print) -> StoreItem:
        """A tar of exactly ``commit``'s tree in ``clone``, submodules included at the commits the tree records
        (recursively), byte-for-byte reproducible: same commit, same sha256. An archive of that commit already in
        the store under that name is returned without reading the clone."""
        import git

        from prbench.sides.pins import open_repo

        check_file_name(name, f"archive name for {clone}")
        repo = open_repo(Path(clone), flag="source clone")
        try:
            sha = repo.git.rev_parse("--verify", "--end-of-options", f"{commit}^{{commit}}")
        except git.GitCommandError:
            raise StoreError(f"{clone}: commit {commit} is not in the clone; fetch it there first") from None
        for item in self.items():
            if item.kind == "source-archive" and item.name == name and item.origin.startswith(f"git {sha} ") \
                    and self._problem(item) is None:
                return item
        emit(f"archiving {name} ({sha[:12]} of {clone})")
        with self._incoming() as incoming:
            fd, tmp = tempfile.mkstemp(prefix="archive-", dir=incoming)
            with os.fdopen(fd, "wb") as file:
                out = _HashingWriter(file)
                write_commit_tar(GitObjects.of_repo(repo), sha, cast(IO[bytes], out))
            staged = _Staged(Path(tmp), out.sha256.hexdigest(), out.size)
            origin = f"git {sha} of {_remote_or_path(repo)}"
            return self._place([(staged, StoreItem("source-archive", name, staged.sha256, staged.size, origin))])[0]

    def add_wheels(self, requirements: list[str], target: WheelTarget, *, emit: Emit = print,
                   pip_options: Sequence[str] = ()) -> list[StoreItem]:
        """Every wheel ``pip download --only-binary=:all:`` resolves for ``requirements`` on ``target``
        (dependencies included), each added to the store; returns them sorted by name.

        Offline when every requirement is pinned ``==`` and the store already holds a wheel for the target of each
        and of each dependency they declare (read from the wheels' metadata). Otherwise pip resolves (with
        ``pip_options``, e.g. ``--no-index --find-links DIR``), but wheels the store has are laid in its download
        directory first, so it fetches only what is new.
        """
        target.check()
        parsed = [_requirement(text) for text in requirements]
        if not parsed:
            return []
        at_hand = self._wheels_at_hand(parsed, target)
        if at_hand is not None:
            emit(f"wheels: all {len(at_hand)} for {target.describe()} are in the store")
            return at_hand
        with self._incoming() as incoming:
            download_dir = Path(tempfile.mkdtemp(prefix="wheels-", dir=incoming))
            laid: dict[str, StoreItem] = {}
            for item in self.items():
                if item.kind == "wheel" and target.accepts(item.name) and item.name not in laid \
                        and self._problem(item) is None:
                    os.link(self.object_path(item.sha256), download_dir / item.name)
                    laid[item.name] = item
            reused = _pip_download(requirements, target, download_dir, pip_options, emit)

            def still_laid(path: Path) -> bool:  # pip replaces a laid file whose hash the index contradicts
                return path.name in laid and os.path.samefile(path, self.object_path(laid[path.name].sha256))

            staged = []
            for path in sorted(download_dir.iterdir()):
                if path.name.endswith(".whl") and not still_laid(path):
                    with open(path, "rb") as source:
                        file = _stage(source, incoming)
                    staged.append((file, StoreItem("wheel", path.name, file.sha256, file.size,
                                                   _wheel_origin(path.name, target))))
            added = self._place(staged) if staged else []
            kept = [laid[name] for name in sorted(reused) if still_laid(download_dir / name)]
            result = sorted({item.sha256: item for item in [*added, *kept]}.values(), key=lambda item: item.name)
            emit(f"wheels: {len(result)} for {target.describe()} ({len(added)} downloaded, {len(kept)} from the store)")
            return result

    def wheels_at_hand(self, requirements: list[str], target: WheelTarget) -> list[StoreItem] | None:
        """The store's wheels for ``target`` of the pinned ``requirements`` and of all they depend on, as
        ``add_wheels`` takes them without pip; None when a requirement is not pinned ``==`` or anything is missing
        (then ``add_wheels`` runs pip, which needs the package index)."""
        target.check()
        return self._wheels_at_hand([_requirement(text) for text in requirements], target)

    def add_image(self, client: Any, ref: str, *, name: str | None = None, emit: Emit = print) -> StoreItem:
        """``docker save`` of an image (by id, digest or tag) as one item; the same image id is saved once."""
        import docker

        try:
            image = client.images.get(ref)
        except docker.errors.ImageNotFound:
            raise StoreError(f"image {ref}: not present in the Docker engine; pull or build it first") from None
        except docker.errors.APIError as exc:
            raise StoreError(f"image {ref}: the Docker engine refused ({exc.explanation or exc})") from None
        image_id = str(image.id)
        name = name or f"image-{image_id.split(':')[-1][:12]}.tar"
        check_file_name(name, f"image {ref}: file name")
        for item in self.items():
            if item.kind == "image" and item.origin.endswith(f"({image_id})") and self._problem(item) is None:
                return item
        emit(f"saving image {ref} ({image_id[:19]})")
        with self._incoming() as incoming:
            staged = _stage(_ChunkReader(image.save(named=False)), incoming,
                            progress=_download_progress(name, 0, emit))
            origin = f"docker save {ref} ({image_id})"
            return self._place([(staged, StoreItem("image", name, staged.sha256, staged.size, origin))])[0]

    def load_image(self, client: Any, item: StoreItem) -> str:
        """``docker load`` of an image item (verified first); returns the loaded image's id."""
        import docker

        path = self.path(item)
        try:
            with open(path, "rb") as data:
                images = client.images.load(data)
        except docker.errors.APIError as exc:
            raise StoreError(f"{item.label()}: docker load refused {path} ({exc.explanation or exc})") from None
        if not images:
            raise StoreError(f"{item.label()}: docker load of {path} gave no image")
        return str(images[0].id)

    # --- moving a store ----------------------------------------------------------------------------------------

    def export(self, tar_path: Path, items: list[StoreItem] | None = None, *, emit: Emit = print) -> int:
        """Write ``items`` (default: all), verified, and their index into one tar; returns how many."""
        chosen = list({item.sha256: item for item in (self.items() if items is None else items)}.values())
        sources = [(item, self.path(item)) for item in chosen]
        index = json.dumps({"format": INDEX_FORMAT, "items": [item.to_json() for item in chosen]},
                           indent=2, sort_keys=True).encode() + b"\n"
        with atomic_path(tar_path) as tmp, tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_member(INDEX, len(index), 0o644), io.BytesIO(index))
            for i, (item, source) in enumerate(sources, 1):
                emit(f"export {i}/{len(sources)} {item.name}")
                with open(source, "rb") as data:
                    tar.addfile(_member(_object_name(item.sha256), item.size, 0o444), data)
        return len(sources)

    def import_tar(self, tar_path: Path, *, emit: Emit = print) -> list[StoreItem]:
        """Add every item of an exported tar, each re-hashed; a corrupt or missing one → StoreError, and then
        nothing of that tar is added."""
        tar_path = Path(tar_path)
        with _open_export(tar_path) as tar, self._incoming() as incoming:
            try:
                staged = self._stage_export(tar, tar_path, incoming, emit)
            except (tarfile.TarError, EOFError, zlib.error) as exc:
                raise StoreError(f"{tar_path}: damaged tar ({' '.join(str(exc).split())}); nothing was "
                                 "imported") from None
            except OSError as exc:
                if not is_no_space(exc):
                    raise
                # The store is what filled up, not the tar being read (and --runs-dir is no flag of this command).
                raise StoreError(f"no space left on device writing into the store {self.root}: free space or use "
                                 "--store elsewhere; nothing was imported") from None
            placed = self._place(staged) if staged else []
        emit(f"imported {len(placed)} item(s) into {self.root}")
        return placed

    def _stage_export(self, tar: tarfile.TarFile, tar_path: Path, incoming: Path,
                      emit: Emit) -> list[tuple[_Staged, StoreItem]]:
        """Every item of an export, copied out of the tar and hashed; the first bad one → StoreError."""
        items = _exported_items(tar, tar_path)
        staged = []
        for i, item in enumerate(items, 1):
            emit(f"import {i}/{len(items)} {item.name}")
            member = _tar_member(tar, _object_name(item.sha256))
            data = tar.extractfile(member) if member is not None and member.isfile() else None
            if data is None:
                raise StoreError(f"{tar_path}: {item.label()} is listed in its index but its object is not in "
                                 "the tar; nothing was imported")
            if member is not None and member.size != item.size:  # refused before a byte is inflated
                raise StoreError(f"{tar_path}: {item.label()} is listed as {item.size} bytes but its object in the "
                                 f"tar holds {member.size}; nothing was imported")
            file = _stage(data, incoming)
            if file.sha256 != item.sha256 or file.size != item.size:
                raise StoreError(f"{tar_path}: {item.label()} is corrupt in the tar (its bytes hash to "
                                 f"{file.sha256[:12]}, {file.size} bytes); nothing was imported")
            staged.append((file, item))
        return staged

    # --- writing internals ---------------------------------------------------------------------------------

    def _present(self, sha256: str) -> StoreItem | None:
        item = self.find(sha256)
        return item if item is not None and self._problem(item) is None else None

    @contextlib.contextmanager
    def _incoming(self) -> Iterator[Path]:
        """A private directory under ``incoming/`` for files being written; removed, with what is left, after."""
        try:
            (self.root / INCOMING).mkdir(parents=True, exist_ok=True)
            _sweep_abandoned(self.root / INCOMING)
            private = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=self.root / INCOMING))
        except OSError as exc:
            raise StoreError(f"store {self.root}: cannot write there ({exc.strerror}); pick another with --store "
                             f"or ${STORE_ENV}") from None
        try:
            yield private
        finally:
            shutil.rmtree(private, ignore_errors=True)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the store's write lock (waiting for another writer, with a line saying so)."""
        with _flocked(self.root / LOCK_FILE, f"waiting for another process writing the store {self.root}",
                      lambda line: print(line, file=sys.stderr)):
            yield

    @contextlib.contextmanager
    def held(self, name: str, waiting: str, emit: Emit = print) -> Iterator[None]:
        """Hold ``locks/<name>.lock`` for the block: the work that name stands for is done by one process at a
        time, and one that finds it held says ``waiting`` and waits. The lock goes with the process (flock)."""
        check_file_name(f"{name}.lock", "store lock name")
        try:
            (self.root / LOCKS).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"store {self.root}: cannot write there ({exc.strerror}); pick another with --store "
                             f"or ${STORE_ENV}") from None
        with _flocked(self.root / LOCKS / f"{name}.lock", waiting, emit):
            yield

    def _place(self, staged: list[tuple[_Staged, StoreItem]]) -> list[StoreItem]:
        """Move staged files into ``objects/`` and list them in the index, all under the lock; an item whose
        object is already there (and right) keeps its first name and origin."""
        with self._locked():
            known = {item.sha256: item for item in self.items()}
            result = []
            for file, item in staged:
                target = self.object_path(item.sha256)
                if self._problem(item) is not None:  # absent, or corrupt: the fresh bytes replace it
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.chmod(file.path, 0o444)
                    os.replace(file.path, target)
                    stat = target.stat()
                    self._verified[item.sha256] = (stat.st_size, stat.st_mtime_ns)
                known.setdefault(item.sha256, item)
                result.append(known[item.sha256])
            entries = sorted(known.values(), key=lambda item: (item.kind, item.name, item.sha256))
            write_json(self.root / INDEX, {"format": INDEX_FORMAT, "items": [item.to_json() for item in entries]})
            return result

    def _wheels_at_hand(self, requirements: list[Requirement], target: WheelTarget) -> list[StoreItem] | None:
        """The store's wheels for pinned ``requirements`` and everything they depend on, or None when a
        requirement is not pinned ``==`` or anything is missing (then pip must resolve)."""
        if not all(_pinned_version(requirement) for requirement in requirements):
            return None
        found = self._closure(requirements, target, "requested", None)
        if not found.complete:
            return None
        return sorted({item.sha256: item for item in found.items()}.values(), key=lambda item: item.name)

    def wheel_closure(self, requirements: list[str], target: WheelTarget, why: str,
                      among: Iterable[StoreItem] | None = None) -> Closure[StoreItem]:
        """What ``requirements`` (each named ``why``: ``pinned``, ``[pip] extra``) bring on ``target``, read from
        the wheels' metadata: the store's wheels for the target, or only ``among`` (the wheels of one install
        step), each with the requirement that brought it, and what no wheel at hand satisfies."""
        target.check()
        return self._closure([_requirement(text) for text in requirements], target, why, among)

    def _closure(self, requirements: list[Requirement], target: WheelTarget, why: str,
                 among: Iterable[StoreItem] | None) -> Closure[StoreItem]:
        wheels: dict[str, list[tuple[Version, StoreItem]]] = {}
        for item in self.items() if among is None else among:
            if item.kind == "wheel" and target.accepts(item.name):
                project, version, _, _ = parse_wheel_filename(item.name)
                wheels.setdefault(str(project), []).append((version, item))
        return closure([(requirement, why) for requirement in requirements], wheels, target.marker_environment(),
                       self._dependencies)

    def _dependencies(self, item: StoreItem) -> list[Requirement]:
        path = self.path(item)
        try:
            return requires_dist(path, item.label())
        except UserError as exc:
            raise StoreError(f"{exc}; delete it and fetch again") from None


# --- helpers -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Staged:
    path: Path
    sha256: str
    size: int


def _stage(source: IO[bytes] | Any, directory: Path, progress: Callable[[int], None] | None = None) -> _Staged:
    """Copy a stream into a new file under ``directory``, hashing it on the way."""
    digest = hashlib.sha256()
    size = 0
    fd, name = tempfile.mkstemp(prefix="object-", dir=directory)
    with os.fdopen(fd, "wb") as out:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
            if progress:
                progress(size)
    return _Staged(Path(name), digest.hexdigest(), size)


class _HashingWriter:
    """A file face that hashes and counts what passes through it on the way to ``file``."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self._file.write(data)

    def tell(self) -> int:
        return self.size


class _ChunkReader:
    """A ``read(n)`` face on an iterator of byte chunks (``Image.save()``'s stream)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)

    def read(self, _size: int) -> bytes:
        return next(self._chunks, b"")


def _download_progress(name: str, total: int, emit: Emit) -> Callable[[int], None]:
    last = [time.monotonic()]

    def report(done: int) -> None:
        now = time.monotonic()
        if now - last[0] >= _PROGRESS_EVERY_S:
            last[0] = now
            of = f" of {total / 1e6:.0f}" if total else ""
            emit(f"  {name}: {done / 1e6:.0f}{of} MB")

    return report


@contextlib.contextmanager
def _flocked(path: Path, waiting: str, emit: Emit) -> Iterator[None]:
    """An exclusive flock(2) of ``path`` for the block; ``waiting`` is said once when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            emit(waiting)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _sweep_abandoned(incoming: Path) -> None:
    """Remove what writers killed mid-write (kill -9, a power cut) left under ``incoming/`` a day or more ago."""
    cutoff = time.time() - _ABANDONED_AFTER_S
    for leftover in incoming.iterdir():
        with contextlib.suppress(OSError):
            if leftover.lstat().st_mtime < cutoff:
                shutil.rmtree(leftover, ignore_errors=True)


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        while chunk := data.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise UserError(f"store item kind {kind!r}: expected one of {', '.join(KINDS)}")


def _object_name(sha256: str) -> str:
    return f"{OBJECTS}/{sha256[:2]}/{sha256}"


def _member(name: str, size: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, mode, 0
    return info


def _tar_member(tar: tarfile.TarFile, name: str) -> tarfile.TarInfo | None:
    try:
        return tar.getmember(name)
    except KeyError:
        return None


@contextlib.contextmanager
def _open_export(tar_path: Path) -> Iterator[tarfile.TarFile]:
    with contextlib.ExitStack() as stack:
        try:
            if tar_path.exists():  # a FIFO or device would make tarfile wait forever
                check_regular(tar_path, "a tar from 'invoke store export'")
            tar = stack.enter_context(tarfile.open(tar_path, "r:*"))
        except FileNotFoundError:
            raise StoreError(f"{tar_path}: no such file (expected a tar from 'invoke store export')") from None
        except (tarfile.TarError, EOFError):
            raise StoreError(f"{tar_path}: not a tar file (or a damaged one); expected a tar from "
                             "'invoke store export'") from None
        yield tar


def _exported_items(tar: tarfile.TarFile, tar_path: Path) -> list[StoreItem]:
    member = _tar_member(tar, INDEX)
    data = tar.extractfile(member) if member is not None and member.isfile() else None
    if data is None or member is None:
        raise StoreError(f"{tar_path}: no {INDEX} in the tar; expected a tar from 'invoke store export'")
    where = f"{tar_path}: {INDEX}"
    if member.size > MAX_JSON_BYTES:
        raise StoreError(f"{where}: {member.size} bytes, larger than an index can be; nothing was imported")
    try:
        index = parse_json(data.read(), where, "the export's index of items")
    except UserError as exc:
        raise StoreError(f"{exc}; nothing was imported") from None
    raw = expect_list(expect_object(index, where).get("items"), f"{where} items")
    return [StoreItem.from_json(entry, f"{where} items[{i}]") for i, entry in enumerate(raw)]


def _wheel_origin(file_name: str, target: WheelTarget) -> str:
    try:
        project, version, _, _ = parse_wheel_filename(file_name)
    except InvalidWheelFilename:
        return f"pip download for {target.describe()}"
    return f"pip download {project}=={version} for {target.describe()}"


def _requirement(text: str, where: str = "requirement") -> Requirement:
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise UserError(f"{where} {text[:120]!r}: not a pip requirement ({exc})") from None
    if requirement.url:
        raise UserError(f"{where} {text[:120]!r}: a direct URL cannot be pinned by the store; give name==version")
    return requirement


def _pinned_version(requirement: Requirement) -> str | None:
    specs = list(requirement.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def _pip_download(requirements: list[str], target: WheelTarget, dest: Path, pip_options: Sequence[str],
                  emit: Emit) -> set[str]:
    """Run pip download into ``dest``; returns the names of files it found already there (and used)."""
    command = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--dest", str(dest),
               "--python-version", target.python_version, "--implementation", target.implementation,
               "--progress-bar", "off", "--disable-pip-version-check"]
    for platform in target.platforms:
        command += ["--platform", platform]
    if target.abi:
        command += ["--abi", target.abi]
    command += [*pip_options, "--", *requirements]
    emit(f"pip download {' '.join(requirements)} for {target.describe()}")
    reused: set[str] = set()
    tail: list[str] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as pip:
        assert pip.stdout is not None
        try:
            for line in pip.stdout:
                line = line.rstrip()
                if not line:
                    continue
                tail = [*tail[-19:], line]
                emit(f"  pip: {line.strip()}")
                already = re.match(r"\s*File was already downloaded (.+)$", line)
                if already:
                    reused.add(Path(already.group(1).strip()).name)
        except BaseException:
            # Ctrl-C, SIGTERM (prbench.termination): Popen's exit would wait for the whole download (a SIGTERM
            # or a `kill -INT` reaches this process alone, not pip), so pip is ended here.
            pip.kill()
            raise
    if pip.returncode != 0:
        errors = [line.strip() for line in tail if line.strip().startswith("ERROR")] or tail[-1:] or ["no output"]
        raise StoreError(f"pip download {' '.join(requirements)} for {target.describe()} failed: {errors[-1]}")
    return reused


def _remote_or_path(repo: Any) -> str:
    try:
        return str(repo.remotes.origin.url)
    except (AttributeError, IndexError, ValueError):
        return str(repo.working_tree_dir or repo.git_dir)


# --- commit archives -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GitObjects:
    """One repository's objects, read through git's CLI with ``GIT_DIR`` pinned.

    A submodule's git directory under ``.git/modules`` may have no work tree (deinitialized) or a relative one
    that does not exist; GitPython would run git in its parent, where git finds the superproject instead.
    """

    git_dir: Path
    work_tree: Path | None
    git: Any  # git.Git (GitPython), its commands run with env
    env: dict[str, str]

    @classmethod
    def open(cls, git_dir: Path, work_tree: Path | None) -> GitObjects:
        import git

        # A submodule's core.worktree may name a checkout that is gone, and git would refuse to start; only
        # objects are read, so any existing directory serves as the work tree.
        pinned = {"GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(work_tree or git_dir)}
        command = git.Git(str(git_dir))
        command.update_environment(**pinned)
        return cls(git_dir, work_tree, command, {**os.environ, **pinned})

    @classmethod
    def of_repo(cls, repo: Any) -> GitObjects:
        work_tree = Path(repo.working_tree_dir) if repo.working_tree_dir else None
        return cls.open(Path(repo.git_dir), work_tree)

    def has_commit(self, commit: str) -> bool:
        import git

        try:
            self.git.cat_file("-e", f"{commit}^{{commit}}")
        except git.GitCommandError:
            return False
        return True

    @contextlib.contextmanager
    def blobs(self, shas: list[str]) -> Iterator[IO[bytes]]:
        """``git cat-file --batch`` fed all of ``shas`` at once by a thread (no round trip per file, which costs
        more than the reading on a big tree); the caller reads each answer in order with ``_next_blob``."""
        process = subprocess.Popen(["git", "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   env=self.env, cwd=self.git_dir)
        assert process.stdin is not None and process.stdout is not None
        stdin = process.stdin

        def feed() -> None:
            with contextlib.suppress(OSError):  # the reader stopped early (an error): git's stdin is closed
                for sha in shas:
                    stdin.write(f"{sha}\n".encode())
                stdin.close()

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        try:
            yield process.stdout
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            feeder.join()
            process.stdout.close()


def _next_blob(answers: IO[bytes], sha: str, where: str) -> int:
    """Read cat-file's header for ``sha``; returns the size of the content that follows."""
    header = answers.readline().split()
    if len(header) != 3 or header[0].decode() != sha or header[1] != b"blob":
        raise StoreError(f"{where}: git object {sha[:12]} cannot be read ({b' '.join(header).decode()!r}); is the "
                         "clone damaged?")
    return int(header[2])


def write_commit_tar(objects: GitObjects, commit: str, out: IO[bytes]) -> None:
    """Write ``commit``'s tree, with its submodules' trees at their recorded commits, as one tar to ``out``.

    Read from git's objects (``ls-tree`` and ``cat-file``), not from a checkout, and not through ``git archive``
    (whose ``export-ignore``/``export-subst`` attributes would change the tree). Every entry gets the superproject
    commit's time, uid/gid 0, no owner names and git's modes (0644, 0755 for executables and directories, 0777 for
    symbolic links), in git's tree order with each submodule at its place, so the same commit always gives the
    same bytes.
    """
    mtime = int(objects.git.show("-s", "--format=%ct", commit))
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add_tree(tar, objects, commit, "", mtime)


def _add_tree(tar: tarfile.TarFile, objects: GitObjects, commit: str, prefix: str, mtime: int) -> None:
    listing = objects.git.ls_tree("-r", "-t", "-z", "--full-tree", commit, stdout_as_string=False)
    entries = []
    for record in listing.split(b"\0"):
        if record:
            meta, raw_path = record.split(b"\t", 1)
            mode, kind, sha = meta.decode().split()
            entries.append((mode, kind, sha, raw_path.decode("utf-8", errors="surrogateescape")))
    submodules: dict[str, str] | None = None
    where = f"{prefix or 'the tree'} at {commit[:12]} in {objects.work_tree or objects.git_dir}"
    with objects.blobs([sha for _, kind, sha, _ in entries if kind == "blob"]) as answers:
        for mode, kind, sha, relative in entries:
            info = tarfile.TarInfo(prefix + relative)
            info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
            if kind in ("tree", "commit"):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                if kind == "commit":
                    if submodules is None:
                        submodules = _submodule_names(objects, commit)
                    sub = _submodule_objects(objects, relative, submodules.get(relative, relative), sha, prefix)
                    _add_tree(tar, sub, sha, f"{prefix}{relative}/", mtime)
                continue
            size = _next_blob(answers, sha, where)
            if mode == "120000":
                info.type, info.mode = tarfile.SYMTYPE, 0o777
                info.linkname = answers.read(size).decode("utf-8", errors="surrogateescape")
                tar.addfile(info)
            else:
                info.mode = 0o755 if mode == "100755" else 0o644
                info.size = size
                tar.addfile(info, answers)
            answers.read(1)  # the newline after each object


def _submodule_names(objects: GitObjects, commit: str) -> dict[str, str]:
    """Submodule path → name, from the commit's own .gitmodules (the name is its directory under .git/modules)."""
    import git

    try:
        text = objects.git.config("--blob", f"{commit}:.gitmodules", "--get-regexp", r"^submodule\..*\.path$")
    except git.GitCommandError:
        return {}
    names = {}
    for line in text.splitlines():
        key, _, path = line.partition(" ")
        names[path] = key[len("submodule."):-len(".path")]
    return names


def _submodule_objects(parent: GitObjects, path: str, name: str, commit: str, prefix: str) -> GitObjects:
    """The submodule's repository holding ``commit``: its checkout, else its git directory under .git/modules."""
    import git

    candidates: list[GitObjects] = []
    if parent.work_tree is not None:
        try:
            checkout = git.Repo(parent.work_tree / path)
            candidates.append(GitObjects.of_repo(checkout))
        except (git.NoSuchPathError, git.InvalidGitRepositoryError):
            pass
    for git_dir in dict.fromkeys([parent.git_dir / "modules" / name, parent.git_dir / "modules" / path]):
        if (git_dir / "HEAD").is_file() and (git_dir / "objects").is_dir():
            work_tree = parent.work_tree / path if parent.work_tree is not None else None
            candidates.append(GitObjects.open(git_dir, work_tree if work_tree and work_tree.is_dir() else None))
    for candidate in candidates:
        if candidate.has_commit(commit):
            return candidate
    where = parent.work_tree or parent.git_dir
    raise StoreError(f"submodule {prefix}{path} at {commit[:12]} is not in the clone {where}; run "
                     "'git submodule update --init --recursive' there")


def items_in_lock(path: Path) -> list[StoreItem]:
    """The store items a lock lists: an image's ``lock.json`` (its ``store`` list) or a run's
    ``{"base": lock, "pr": lock}``; each validated."""
    data = expect_object(read_json(path, "a lock.json"), str(path))
    sections: list[tuple[str, Any]] = []
    if "store" in data:
        sections.append(("store", data["store"]))
    else:
        sections += [(f"{side}.store", lock["store"]) for side, lock in sorted(data.items())
                     if isinstance(lock, dict) and "store" in lock]
    if not sections:
        raise StoreError(f"{path}: no 'store' section (a lock written before the store existed); build again to "
                         "record one")
    items: dict[str, StoreItem] = {}
    for where, section in sections:
        for i, entry in enumerate(expect_list(section, f"{path}: {where}")):
            item = StoreItem.from_json(entry, f"{path}: {where}[{i}]")
            items.setdefault(item.sha256, item)
    return list(items.values())
