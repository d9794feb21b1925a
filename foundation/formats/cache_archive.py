"""The suite's Inductor cache archive (``<variant>/inductor-cache.tar.gz``): written by the suite stage (or by the
host when it merges a spread suite's shards), read by organize; and what tells a compiled graph module (the wrapper
with ``call``) from a kernel file. Pure files: no torch.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from foundation import atomic_io

ARCHIVE_ROOT = "inductor-cache"  # every member's first path component


def _is_graph_module_text(text: str) -> bool:
    return "# AOT ID:" in text and ("def call(" in text or "class Runner" in text)


def is_graph_module(path: Path) -> bool:
    """An Inductor compiled graph module (the wrapper with ``call``), as opposed to a kernel file."""
    if path.suffix != ".py":
        return False
    try:
        return _is_graph_module_text(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return False


def archive_cache(cache_dir: Path, target: Path) -> tuple[int, int]:
    """Write ``cache_dir`` as ``inductor-cache/...`` into the tar.gz ``target`` (atomically).

    Returns (files archived, compiled graph modules among them).
    """
    files = sorted(p for p in cache_dir.rglob("*") if p.is_file() and not p.is_symlink())
    with atomic_io.atomic_path(target) as tmp, tarfile.open(tmp, "w:gz") as tar:
        for path in files:
            tar.add(path, arcname=str(Path(ARCHIVE_ROOT) / path.relative_to(cache_dir)))
    return len(files), sum(1 for p in files if is_graph_module(p))


def archived_graph_modules(archive: Path) -> list[str]:
    """Names of the compiled graph modules inside an archive written by ``archive_cache``."""
    found: list[str] = []
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.endswith(".py"):
                continue
            handle = tar.extractfile(member)
            text = handle.read().decode("utf-8", errors="replace") if handle else ""
            if _is_graph_module_text(text):
                found.append(member.name)
    return found
