"""Opening trace files: gzip by magic bytes, strict UTF-8, and one-line UserErrors for unreadable files."""

from __future__ import annotations

import contextlib
import gzip
import io
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from analysis.errors import UserError

GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


@contextlib.contextmanager
def reading(path: Path, what: str = "trace") -> Iterator[None]:
    """Turn every way a file can be unreadable into a one-line UserError naming it."""
    try:
        yield
    except UserError:
        raise
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what} file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a {what} file") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); expected a {what} file") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise UserError(f"{path}: corrupt gzip data ({exc})") from None
    except EOFError:
        raise UserError(f"{path}: gzip stream ends early (truncated file)") from None
    except PermissionError:
        raise UserError(f"{path}: permission denied") from None
    except RecursionError:
        raise UserError(f"{path}: JSON nested too deeply to be a {what} file") from None


def open_text(path: Path) -> TextIO:
    """Open plain or gzip-compressed text (detected by magic bytes, not by extension) as strict UTF-8."""
    raw = gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="strict", newline="")


def read_head(path: Path, n_chars: int = 65536) -> str:
    """The first characters of a (possibly gzipped) text file; decoding errors are ignored for sniffing."""
    with reading(path):
        raw = gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")
        with raw:
            data = raw.read(n_chars)
    return data.decode("utf-8", errors="replace")
