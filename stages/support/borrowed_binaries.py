"""Import another side's graph module with that side's compiled C++ kernels, not a build of one's own.

Inductor names a C++ kernel's binary by a hash of its source *and* of its compile command line, and the command
carries the side's include and library directories (``-I<torch>/include``). A worker of the PR that imports base's
graph module (an identical-code pair timed from base: ``prbench.stages.paired.timed_from_base``) hashes base's
source with its own directories, misses base's binary, and compiles the source again into base's cache under
another name; it then times its own build, not base's. Seen in README command 1 (2026-11-29, the PR an overlay on
the installed torch, so its headers live under another directory): the PR's worker compiled 44 of base's kernels
again in its first round (10–34 s per graph where base's loaded in 0.2 s), and the identical-kernel control failed
on one of them, ``cpp_fused_add_mul_pow_tanh_view_2`` at 0.947× [0.942, 0.951] in all 16 rounds.

While `borrowed_binaries(cache_dir)` is active, a C++ source Inductor writes is looked up by its content among the
sources in ``cache_dir`` that have their binary beside them (``<key>.main.cpp`` → ``<key>.main.so``), and that
key is used, so Inductor loads the binary the other side compiled and times exactly its code. A source the cache
does not hold is compiled as before and named in `BorrowedBinaries.compiled`. The sides' compile commands are
checked equal without their directories before any pair is timed this way (``analysis.kernels.cpp_build``), so the
borrowed binary is one the importing side would have built itself.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_SOURCE_SUFFIX = ".cpp"
_BINARY_SUFFIXES = (".so", ".o")


def _digest(text: str | bytes) -> str:
    data = text.strip().encode() if isinstance(text, str) else text.strip()
    return hashlib.sha256(data).hexdigest()


def _binary_beside(source: Path) -> bool:
    stem = source.name[: -len(_SOURCE_SUFFIX)]
    return any((source.parent / f"{stem}{suffix}").is_file() for suffix in _BINARY_SUFFIXES)


def index_sources(cache_dir: Path) -> dict[tuple[str, str], str]:
    """{(extension, digest of the stripped source): key} for every C++ source in the cache whose binary was built;
    where two keys hold the same source, the one written first (the side's own build) wins."""
    sources = sorted((p for p in cache_dir.glob(f"*/*{_SOURCE_SUFFIX}") if _binary_beside(p)),
                     key=lambda p: (p.stat().st_mtime, p.name))
    index: dict[tuple[str, str], str] = {}
    for source in sources:
        key, _, extension = source.name.partition(".")
        with contextlib.suppress(OSError, UnicodeDecodeError):
            index.setdefault((extension, _digest(source.read_text(encoding="utf-8"))), key)
    return index


@dataclass
class BorrowedBinaries:
    """What one import borrowed: the keys found in the other side's cache, and the sources it had to compile."""

    index: dict[tuple[str, str], str]
    borrowed: list[str] = field(default_factory=list)
    compiled: list[str] = field(default_factory=list)

    def writer(self, write: Callable[..., tuple[str, str]]) -> Callable[..., tuple[str, str]]:
        """Inductor's ``codecache.write`` with the key of an indexed C++ source put in for the computed one."""

        def write_borrowed(content: str | bytes, extension: str, *args: Any, **kwargs: Any) -> tuple[str, str]:
            if not extension.endswith(_SOURCE_SUFFIX) or kwargs.get("key") is not None:
                return write(content, extension, *args, **kwargs)
            key = self.index.get((extension, _digest(content)))
            if key is None:
                basename, path = write(content, extension, *args, **kwargs)
                self.compiled.append(basename)
                return basename, path
            self.borrowed.append(key)
            return write(content, extension, *args, **{**kwargs, "key": key})

        return write_borrowed


@contextlib.contextmanager
def borrowed_binaries(cache_dir: str) -> Iterator[BorrowedBinaries]:
    """While the block runs (the import of a graph module whose kernels were compiled into ``cache_dir``), Inductor
    loads the binaries ``cache_dir`` holds for the sources it writes; torch builds without ``codecache.write``
    compile as they would."""
    from torch._inductor import codecache

    found = BorrowedBinaries(index_sources(Path(cache_dir)))
    original = getattr(codecache, "write", None)
    if original is None:
        yield found
        return
    codecache.write = found.writer(original)
    try:
        yield found
    finally:
        codecache.write = original
