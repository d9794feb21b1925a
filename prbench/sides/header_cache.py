"""The precompiled C++ headers local sides share (``stages.support.environment.share_precompiled_headers``): where
they live, and a bound on how much of the disk they keep.

Contract:

- ``shared_header_dir()`` is the directory (``$PRBENCH_INDUCTOR_HEADERS``; empty: none, each side keeps its own
  under its TMPDIR; else ``~/.cache/prbench/inductor-headers``).
- Inductor names a header by its compiler, flags, include paths and preprocessed text: every Python environment
  and every flag set (a PR that changes the vector width) adds one of about 147 MB, and nothing removed them (one
  day of fresh clones here left 44 of them, 6.1 GB). ``prune_headers`` keeps the most recently used up to
  ``KEEP_BYTES`` and removes the others, oldest use first; a header used within ``SPARE_SECONDS`` is never
  removed, whatever the total, since a stage running now may hold its path.
- A header is its ``<key>.h`` and ``<key>.h.gch`` (a ``.pch`` with clang); its last use is the newer of the
  precompiled file's access and modification times (g++ reads it at every compile that includes it).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from foundation.formats.stage_records import HEADER_DIR_ENV

DEFAULT_HEADER_DIR = Path("~/.cache/prbench/inductor-headers")
# About 13 headers: the environments and flag sets of recent compares; one more is 6 s of g++ to build again.
KEEP_BYTES = 2 * 10**9
# Access times move at most once a day on relatime mounts (Linux's default): a day is what "in use" can mean.
SPARE_SECONDS = 24 * 3600
_PRECOMPILED = (".gch", ".pch")


def shared_header_dir() -> str:
    """Where the stages of local recipes share Inductor's precompiled C++ headers (see the contract)."""
    return os.environ.get(HEADER_DIR_ENV, str(DEFAULT_HEADER_DIR.expanduser()))


@dataclass(frozen=True)
class Header:
    """One precompiled header: its files, their size, and when it was last used."""

    files: tuple[Path, ...]
    size: int
    last_use: float


def headers_in(directory: Path) -> list[Header]:
    """The precompiled headers in ``directory``, most recently used first; files that vanish meanwhile are skipped
    (another compare pruning at the same time)."""
    found = []
    for compiled in directory.glob("*.h.*"):
        if compiled.suffix not in _PRECOMPILED:
            continue
        files = (compiled, compiled.with_suffix(""))
        try:
            stat = compiled.stat()
            size = sum(path.stat().st_size for path in files if path.exists())
        except FileNotFoundError:
            continue
        found.append(Header(files, size, max(stat.st_atime, stat.st_mtime)))
    return sorted(found, key=lambda header: header.last_use, reverse=True)


def prune_headers(directory: Path, now: float | None = None) -> list[Header]:
    """Remove the headers beyond ``KEEP_BYTES``, oldest use first, sparing those used within ``SPARE_SECONDS``;
    return the removed ones. A directory that does not exist holds nothing to prune."""
    if not directory.is_dir():
        return []
    now = time.time() if now is None else now
    kept = 0
    removed = []
    for header in headers_in(directory):
        kept += header.size
        if kept <= KEEP_BYTES or now - header.last_use < SPARE_SECONDS:
            continue
        for path in header.files:
            path.unlink(missing_ok=True)
        removed.append(header)
    return removed
