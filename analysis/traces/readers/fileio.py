"""Opening trace files: gzip by magic bytes (through the fastest gzip reader installed, see
:mod:`analysis.traces.readers.fast_io`), strict UTF-8, and one-line UserErrors for unreadable files."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

from analysis.traces.readers import fast_io
from foundation import records
from foundation.errors import UserError

GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: Path) -> bool:
    with records.open_regular(path, "a trace file") as fh:
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
    # The caller owns the returned file (``with open_text(path) as fh``).
    return io.TextIOWrapper(open_text_bytes(path), encoding="utf-8", errors="strict", newline="")


def open_text_bytes(path: Path) -> BinaryIO:
    """The bytes of a plain or gzip-compressed regular file (a FIFO or device is refused: `records.open_regular`)."""
    if is_gzip(path):  # checked on the way: is_gzip opens it with records.open_regular
        return fast_io.gzip_opener()[1](path, "rb")
    return records.open_regular(path, "a trace file")


def read_head(path: Path, n_chars: int = 65536) -> str:
    """The first characters of a (possibly gzipped) text file; decoding errors are ignored for sniffing."""
    with reading(path), open_text_bytes(path) as raw:
        data = raw.read(n_chars)
    return data.decode("utf-8", errors="replace")
