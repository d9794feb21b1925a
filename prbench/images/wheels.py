"""Wheels for an image: the interpreter they are for, exact pins checked against the store, hashed requirements.

A wheel-pinned recipe installs PyTorch (and Triton) as released wheels instead of building them. Everything pip
installs in the image comes from the store's wheelhouse: ``pip download`` runs on the host for the image's
Python and platform (``WheelTarget``, read once from the base image's own ``python3`` in a container without
network), and the build installs with ``--no-index --require-hashes`` from a requirements file that lists every
wheel with its sha256, so the image can get nothing else.

A wheel side installs everything its wheels require, Triton included: each wheel of an install step is recorded with
the requirement that brought it (``brought_by``, read from the wheels' metadata by ``prbench.images.wheel_closure``),
in the step's ``brought-by.json`` (``brought_by_record``: the image's check keeps the Triton a pinned wheel requires
and names the requirement) and in the lock. Before a wheel image builds, ``contents_block`` says what it will
contain (torch, Triton, the CUDA/ROCm library wheels, their size) and what pip still has to fetch; ``invoke doctor``
weighs the same ``WheelContents`` against the free disk.
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from foundation.errors import UserError
from prbench.images.content_store import Store, StoreItem, WheelTarget
from prbench.images.wheel_closure import Brought, Closure, installed_size
from prbench.sides.recipes import UNPINNED, WHEEL_NAMES, Recipe, WheelPin, wheel_problem

if TYPE_CHECKING:
    from prbench.images.build_plan import UsedItem

# Next to each wheel group's requirements.txt in the build context (and so in the image): which requirement brought
# each wheel. Read by docker/check_environment.py (stdlib only, so it names the keys "wheels", "name", "version" and
# "brought_by" itself).
BROUGHT_BY = "brought-by.json"
BROUGHT_BY_FORMAT = 1
# A wheel of an install step that no requirement read from the wheels' metadata reaches (pip resolved it so).
UNREACHED = "pip's resolution (no requirement read from the wheels' metadata reaches it)"
# The wheels that carry a GPU vendor's libraries (PyPI's CUDA torch requires a dozen nvidia-* wheels).
LIBRARY_PREFIXES = {"CUDA": ("nvidia-", "cuda-"), "ROCm": ("rocm-", "rocm_", "hip-", "amd-")}

# Run by the base image's python3 (stdlib and pip's vendored packaging only: the base has nothing else).
_TARGET_SCRIPT = r"""
import json, sys
try:
    from pip._vendor.packaging import tags
    platforms = []
    for tag in tags.sys_tags():
        if tag.platform != "any" and tag.platform not in platforms:
            platforms.append(tag.platform)
except Exception:
    import sysconfig
    platforms = [sysconfig.get_platform().replace("-", "_").replace(".", "_")]
print(json.dumps({"python_version": "%d.%d" % sys.version_info[:2], "platforms": platforms,
                  "implementation": sys.implementation.name,
                  "abi": "cp%d%d" % sys.version_info[:2] if sys.implementation.name == "cpython" else None}))
"""
_IMPLEMENTATIONS = {"cpython": "cp", "pypy": "pp"}


def image_wheel_target(client: Any, image: str) -> WheelTarget:
    """The Python version and platform tags of ``image``'s ``python3``, read by a container without network."""
    import docker

    # Every platform tag the interpreter accepts, newest first: pip download takes --platform values as they are.
    try:
        out = client.containers.run(image, ["python3", "-c", _TARGET_SCRIPT], remove=True, network_mode="none",
                                    entrypoint=[], stdout=True, stderr=True)
        facts = json.loads(out.decode().strip().splitlines()[-1])
    except (docker.errors.ContainerError, docker.errors.APIError, ValueError, IndexError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise UserError(f"base image {image[:19]}: cannot read its python3 version and platform ({reason})") from None
    return _target(facts)


def python_wheel_target(python: str) -> WheelTarget:
    """The Python version and platform tags of the interpreter ``python`` (a venv recipe's sides are its venvs)."""
    try:
        proc = subprocess.run([python, "-c", _TARGET_SCRIPT], capture_output=True, text=True, check=True)
        facts = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        raise UserError(f"--python {python}: cannot read its version and platform (does it run?)") from None
    return _target(facts)


def _target(facts: dict[str, Any]) -> WheelTarget:
    return WheelTarget(python_version=facts["python_version"], platforms=tuple(facts["platforms"]),
                       implementation=_IMPLEMENTATIONS.get(facts["implementation"], "cp"), abi=facts["abi"])


def wheel_identity(item: StoreItem) -> tuple[str, str]:
    """(canonical name, version) of a wheel item, from its file name."""
    try:
        name, version, _, _ = parse_wheel_filename(item.name)
    except InvalidWheelFilename:
        raise UserError(f"store: wheel item {item.name} ({item.sha256[:12]}) has no wheel file name") from None
    return str(name), str(version)


def hashed_requirements(items: Iterable[StoreItem]) -> str:
    """A requirements file for ``pip install --require-hashes``: every wheel pinned by version and sha256.

    pip checks each file it installs against its hash and refuses any requirement (a dependency too) that has
    none, so this file is the whole of what the install may take.
    """
    lines = ["# Generated by prbench from the store's wheelhouse: every wheel, pinned by version and sha256."]
    by_name: dict[str, list[StoreItem]] = {}
    for item in items:
        by_name.setdefault(wheel_identity(item)[0], []).append(item)
    for name in sorted(by_name):
        wheels = by_name[name]
        versions = {wheel_identity(w)[1] for w in wheels}
        if len(versions) != 1:
            raise UserError(f"store: the wheelhouse holds {name} at several versions ({', '.join(sorted(versions))})")
        hashes = " ".join(f"--hash=sha256:{w.sha256}" for w in sorted(wheels, key=lambda w: w.sha256))
        lines.append(f"{name}=={versions.pop()} {hashes}")
    return "\n".join(lines) + "\n"


def wheels_for(store: Store, requirements: list[str], target: Callable[[], WheelTarget],
               pins: tuple[WheelPin, ...] = (), emit: Callable[[str], None] = print) -> list[StoreItem]:
    """The wheels ``requirements`` need (dependencies included) for the image's interpreter, each in the store.

    Every pin must be among them with its exact sha256: a wheel that pip found under the pinned name and
    version but with other bytes is refused, naming both checksums.
    """
    if not requirements:
        return []
    items = store.add_wheels(list(requirements), target(), emit=emit)
    by_sha = {item.sha256 for item in items}
    for pin in pins:
        if pin.sha256 in by_sha or pin.sha256 == UNPINNED:  # a venv recipe's unpinned wheel: pinned by this fetch
            continue
        found = [i for i in items if wheel_identity(i) == (pin.name, pin.version)]
        got = f"pip download gave {found[0].name} with sha256 {found[0].sha256}" if found else "pip found no such wheel"
        raise UserError(f"wheel {pin.requirement}: the recipe pins sha256 {pin.sha256}, but {got}")
    return items


def resolve_wheel_spec(spec: str, flag: str, section: str, store: Store, target: Callable[[], WheelTarget],
                       emit: Callable[[str], None] = print) -> WheelPin:
    """``--base``/``--pr`` naming a wheel (``torch==2.14.0.dev20261101+cpu``): pip download it into the store
    (unless a wheel that fits is there) and pin it by the sha256 of what it got. ``torch==2.13.0`` fits a local
    version too (``2.13.0+cpu``, as pip reads it): the pin names the version found."""
    problem = wheel_problem(spec, WHEEL_NAMES[section])
    if problem:
        raise UserError(f"{flag}={spec}: {problem}")
    requirement = Requirement(spec)
    name = canonicalize_name(requirement.name)
    wanted = target()

    def pin(items: Iterable[StoreItem]) -> WheelPin | None:
        found = [(Version(wheel_identity(item)[1]), item) for item in items if item.kind == "wheel"
                 and wheel_identity(item)[0] == name and wanted.accepts(item.name)
                 and requirement.specifier.contains(wheel_identity(item)[1], prereleases=True)]
        if not found:
            return None
        version, item = max(found, key=lambda pair: pair[0])
        return WheelPin(requirement=f"{requirement.name}=={version}", sha256=item.sha256)

    found = pin(store.items()) or pin(store.add_wheels([spec], wanted, emit=emit))
    if found is None:
        raise UserError(f"{flag}={spec}: pip download found no {name} {requirement.specifier} wheel for the "
                        "environment's Python")
    return found


def is_wheel_spec(spec: str) -> bool:
    """Whether a ``--base``/``--pr`` value names a wheel (``name==version``) rather than a ref or a patch."""
    return "==" in spec


def base_image_target(recipe: Recipe, store: Store) -> Callable[[], WheelTarget]:
    """The recipe's base image's interpreter, read on first use (it starts a container) and then kept."""
    found: list[WheelTarget] = []

    def target() -> WheelTarget:
        if not found:
            from prbench.images.docker_engine import docker_client, resolve_base

            assert recipe.base_image is not None
            client = docker_client()
            base = resolve_base(client, recipe.base_image, pull=False, emit=print, store=store)
            found.append(image_wheel_target(client, base.image_id))
        return found[0]

    return target


def brought_by(store: Store, items: list[StoreItem], requirements: list[str], why: str,
               target: Callable[[], WheelTarget]) -> dict[str, str]:
    """sha256 → the requirement that brought that wheel into one install step (``items``, installed for
    ``requirements``, each named ``why``), read from the wheels' metadata for the image's interpreter."""
    if not items:
        return {}
    found = store.wheel_closure(requirements, target(), why, among=items)
    by = {entry.item.sha256: entry.by for entry in found.brought}
    return {item.sha256: by.get(item.sha256, UNREACHED) for item in items}


def brought_by_record(group: str, used: Iterable[UsedItem]) -> dict[str, Any]:
    """The ``brought-by.json`` of one wheel group: ``{"format", "group", "wheels": [{"name", "version", "file",
    "brought_by"}]}``, one entry per wheel the step installs."""
    wheels = []
    for entry in used:
        name, version = wheel_identity(entry.item)
        wheels.append({"name": name, "version": version, "file": entry.item.name,
                       "brought_by": entry.brought_by or UNREACHED})
    return {"format": BROUGHT_BY_FORMAT, "group": group, "wheels": wheels}


@dataclass(frozen=True)
class WheelContents:
    """What an image of wheels will hold: the closure of its requirements in the store, and the sizes of the wheels
    found (their files, which stay in the image, and what they unpack to; None when a wheel could not be read)."""

    closure: Closure[StoreItem]
    wheel_bytes: int
    installed_bytes: int | None

    @property
    def image_bytes(self) -> int | None:
        """What the wheels add to the image: the copied wheelhouse and the installed files."""
        return None if self.installed_bytes is None else self.wheel_bytes + self.installed_bytes

    def named(self, names: Iterable[str]) -> list[Brought[StoreItem]]:
        wanted = set(names)
        return [entry for entry in self.closure.brought if entry.project in wanted]

    def libraries(self, vendor: str) -> list[Brought[StoreItem]]:
        return [entry for entry in self.closure.brought if entry.project.startswith(LIBRARY_PREFIXES[vendor])]

    def line(self, where: str = "the image") -> str:
        """The same facts as ``contents_block``, in one line (``invoke doctor``)."""
        parts = [f"{e.project} {e.version}" for e in self.named(WHEEL_NAMES["pytorch"])]
        unknown = "Triton not known until the missing wheels are fetched"
        parts += [f"{e.project} {e.version} ({e.by})" for e in self.named(WHEEL_NAMES["triton"])] or [
            "no Triton" if self.closure.complete else unknown]
        parts += [f"{len(found)} {vendor} library wheels" for vendor in LIBRARY_PREFIXES
                  if (found := self.libraries(vendor))]
        size = self.image_bytes
        parts.append(f"{size_text(size)} in {where}" if size is not None else "size unknown")
        if self.closure.missing:
            parts.append(f"{len(self.closure.missing)} requirement(s) not in the store yet (size unknown)")
        return ", ".join(parts)


def wheel_contents(store: Store, groups: Iterable[tuple[list[str], str]], target: WheelTarget) -> WheelContents:
    """The closure of each group of requirements (with what names them: ``pinned``, ``[pip] extra``) in the store's
    wheels for ``target``, merged, with the sizes of the wheels found. Reads the store only: nothing is fetched."""
    brought: dict[str, Brought[StoreItem]] = {}
    missing: list[str] = []
    conflicts: list[str] = []
    for requirements, why in groups:
        if not requirements:
            continue
        found = store.wheel_closure(requirements, target, why)
        for entry in found.brought:
            brought.setdefault(entry.item.sha256, entry)
        missing += found.missing
        conflicts += found.conflicts
    installed: int | None = 0
    for entry in brought.values():
        try:  # the object's bytes are hashed when the build takes them; a summary only reads their sizes
            size = installed_size(store.object_path(entry.item.sha256))
        except (OSError, zipfile.BadZipFile):
            installed = None
            continue
        installed = None if installed is None else installed + size
    return WheelContents(Closure(tuple(brought.values()), tuple(dict.fromkeys(missing)), tuple(conflicts)),
                         sum(entry.item.size for entry in brought.values()), installed)


def recipe_contents(store: Store, recipe: Recipe, target: WheelTarget) -> WheelContents:
    """What an image of a wheel recipe (a side's, with its own pin) will hold: its pins and its ``[pip] extra``."""
    return wheel_contents(store, [([pin.requirement for pin in recipe.wheel_pins], "pinned"),
                                  (list(recipe.pip_extra), "[pip] extra")], target)


def contents_block(title: str, contents: WheelContents) -> list[str]:
    """A few lines saying what an image will contain, before it builds: torch, Triton (and what required it), the
    CUDA/ROCm library wheels, the sizes, and what pip has yet to fetch."""
    def version_of(entries: list[Brought[StoreItem]]) -> str:
        found = ", ".join(f"{e.project} {e.version} ({e.by})" for e in entries)
        return found or ("none" if contents.closure.complete else "none in the store (see what pip fetches, below)")

    lines = [f"{title} will contain:",
             f"  torch: {version_of(contents.named(WHEEL_NAMES['pytorch']))}",
             f"  Triton: {version_of(contents.named(WHEEL_NAMES['triton']))}"]
    for vendor in LIBRARY_PREFIXES:
        libraries = contents.libraries(vendor)
        if libraries:
            named = ", ".join(e.project for e in libraries[:3]) + (", …" if len(libraries) > 3 else "")
            lines.append(f"  {vendor} libraries: {len(libraries)} wheels ({named}), "
                         f"{size_text(sum(e.item.size for e in libraries))}")
    count = len(contents.closure.brought)
    installed = "" if contents.installed_bytes is None else f", {size_text(contents.installed_bytes)} installed"
    lines.append(f"  {count} wheels in the store: {size_text(contents.wheel_bytes)}{installed}")
    if contents.closure.missing:
        shown = "; ".join(contents.closure.missing[:3]) + ("; …" if len(contents.closure.missing) > 3 else "")
        lines.append(f"  not in the store yet ({len(contents.closure.missing)}; pip download fetches them and what "
                     f"they require, size unknown): {shown}")
    return lines


def size_text(size: int) -> str:
    """A byte count for people: 950 B, 12.3 MB, 2.9 GB (powers of 1000, as pip and df -H print them)."""
    if size < 1000:
        return f"{size} B"
    scaled = float(size)
    for unit in ("kB", "MB", "GB"):
        scaled /= 1000
        if scaled < 1000 or unit == "GB":
            break
    return f"{scaled:.1f} {unit}"
