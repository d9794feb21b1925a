"""Opening trace files: gzip by magic bytes (through the fastest gzip reader installed, see
:mod:`analysis.traces.fast_io`), strict UTF-8, and one-line UserErrors for unreadable files."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from analysis import records
from analysis.errors import UserError
from analysis.traces import fast_io

GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


@contextlib.contextmanager
def reading(path: Path, what: str = "trace") -> Iterator[None]:
    """Every way a trace (or other profiler output) file can be unreadable, as a one-line UserError naming it
    (the fast gzip readers' own error types included)."""
    with records.reading(path, f"a {what} file"):
        try:
            yield
        except fast_io.decompress_errors() as exc:
            raise UserError(f"{path}: corrupt gzip data ({exc}); expected a {what} file") from None


def open_text(path: Path) -> TextIO:
    """Open plain or gzip-compressed text (detected by magic bytes, not by extension) as strict UTF-8."""
    opener = fast_io.gzip_opener()[1] if is_gzip(path) else open
    # The caller owns the returned file (``with open_text(path) as fh``).
    return io.TextIOWrapper(opener(path, "rb"), encoding="utf-8", errors="strict", newline="")


def read_head(path: Path, n_chars: int = 65536) -> str:
    """The first characters of a (possibly gzipped) text file; decoding errors are ignored for sniffing."""
    with reading(path):
        opener = fast_io.gzip_opener()[1] if is_gzip(path) else open
        with opener(path, "rb") as raw:
            data = raw.read(n_chars)
    return data.decode("utf-8", errors="replace")
