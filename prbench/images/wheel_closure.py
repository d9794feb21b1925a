"""What a set of requirements brings in, read from the wheels' own metadata, and which requirement brought each.

``requires_dist`` reads a wheel's ``Requires-Dist`` lines (its ``*.dist-info/METADATA``); ``closure`` walks the
requirements from their roots over the wheels at hand (the store's for the image's interpreter, or exactly the
wheels of one install step), evaluating each marker for the image's interpreter (``WheelTarget.marker_environment``,
never the host's): a requirement whose marker does not hold is not followed. Each wheel reached is a ``Brought``
with the first requirement that reached it (the walk is breadth first, so that is the shortest chain from a root);
what no wheel at hand satisfies is ``missing`` (pip resolves it from the index), two requirements that pick
different versions of one project are a ``conflict`` (a resolver's job: pip's).

The walk is generic over the wheel's record (``StoreItem`` in practice) so that the store can use it without a
circle of imports.
"""

from __future__ import annotations

import email.parser
import re
import zipfile
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from foundation.errors import UserError

T = TypeVar("T")

_METADATA = re.compile(r"[^/]+\.dist-info/METADATA")


@dataclass(frozen=True)
class Brought(Generic[T]):
    """One wheel of a closure and the requirement that brought it (``pinned torch==2.14.1``, ``torch 2.14.1
    requires triton==3.8.0; platform_system == "Linux"``)."""

    project: str  # canonical name
    version: str
    item: T
    by: str


@dataclass(frozen=True)
class Closure(Generic[T]):
    brought: tuple[Brought[T], ...]  # in the order the walk reached them
    missing: tuple[str, ...] = ()  # the requirements no wheel at hand satisfies, each as "<who> requires <what>"
    conflicts: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.missing and not self.conflicts

    def items(self) -> list[T]:
        return [entry.item for entry in self.brought]


def requires_dist(path: Path, where: str) -> list[Requirement]:
    """The ``Requires-Dist`` requirements of the wheel at ``path`` (``where`` names it in an error)."""
    try:
        with zipfile.ZipFile(path) as wheel:
            metadata = next(name for name in wheel.namelist() if _METADATA.fullmatch(name))
            text = wheel.read(metadata).decode("utf-8", errors="replace")
    except (zipfile.BadZipFile, StopIteration, OSError):
        raise UserError(f"{where}: not a wheel with METADATA ({path})") from None
    message = email.parser.Parser().parsestr(text, headersonly=True)
    found = []
    for line in message.get_all("Requires-Dist") or []:
        try:
            found.append(Requirement(line))
        except InvalidRequirement as exc:
            raise UserError(f"{where} Requires-Dist {line[:120]!r}: not a pip requirement ({exc})") from None
    return found


def installed_size(path: Path) -> int:
    """The bytes a wheel's files take once installed (the sum of its members' uncompressed sizes)."""
    with zipfile.ZipFile(path) as wheel:
        return sum(info.file_size for info in wheel.infolist())


def closure(roots: Sequence[tuple[Requirement, str]], candidates: Mapping[str, Sequence[tuple[Version, T]]],
            environment: Mapping[str, str], dependencies: Callable[[T], list[Requirement]]) -> Closure[T]:
    """Walk ``roots`` (each requirement with what names it: ``pinned``, ``[pip] extra``) over ``candidates``
    (canonical project → its wheels with their versions): for each requirement whose marker holds, the newest
    wheel it accepts, then that wheel's own requirements (and those of each extra asked for)."""
    pending: deque[tuple[Requirement, str, str]] = deque(
        (requirement, "", f"{why} {requirement}") for requirement, why in roots)
    chosen: dict[str, Brought[T]] = {}
    expanded: set[tuple[str, str]] = set()
    missing: list[str] = []
    conflicts: list[str] = []
    while pending:
        requirement, extra, by = pending.popleft()
        if requirement.marker and not requirement.marker.evaluate({**environment, "extra": extra}):
            continue
        project = canonicalize_name(requirement.name)
        fits = [(version, item) for version, item in candidates.get(project, ())
                if requirement.specifier.contains(version, prereleases=True)]
        if not fits:
            missing.append(by)
            continue
        version, item = max(fits, key=lambda pair: pair[0])
        first = chosen.setdefault(project, Brought(project, str(version), item, by))
        if first.item != item:
            conflicts.append(f"{project}: {first.by} picks {first.version}, {by} picks {version}")
            continue
        for wanted in ["", *sorted(requirement.extras)]:
            if (project, wanted) in expanded:
                continue
            expanded.add((project, wanted))
            parent = f"{project} {version}" + (f" [{wanted}]" if wanted else "")
            pending.extend((dependency, wanted, f"{parent} requires {dependency}") for dependency in dependencies(item))
    return Closure(tuple(chosen.values()), tuple(dict.fromkeys(missing)), tuple(conflicts))
