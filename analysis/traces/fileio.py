"""Opening trace files: gzip by magic bytes, strict UTF-8, and one-line UserErrors for unreadable files."""

from __future__ import annotations

import contextlib
import gzip
import io
from pathlib import Path
from typing import TextIO

from analysis import records

GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def reading(path: Path, what: str = "trace") -> contextlib.AbstractContextManager[None]:
    """Every way a trace (or other profiler output) file can be unreadable, as a one-line UserError naming it."""
    return records.reading(path, f"a {what} file")


def open_text(path: Path) -> TextIO:
    """Open plain or gzip-compressed text (detected by magic bytes, not by extension) as strict UTF-8."""
    opener = gzip.open if is_gzip(path) else open
    # The caller owns the returned file (``with open_text(path) as fh``).
    return io.TextIOWrapper(opener(path, "rb"), encoding="utf-8", errors="strict", newline="")


def read_head(path: Path, n_chars: int = 65536) -> str:
    """The first characters of a (possibly gzipped) text file; decoding errors are ignored for sniffing."""
    with reading(path):
        opener = gzip.open if is_gzip(path) else open
        with opener(path, "rb") as raw:
            data = raw.read(n_chars)
    return data.decode("utf-8", errors="replace")
