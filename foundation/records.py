"""Checks for the records our readers load (JSON files, CSV cells, trace events).

Every reader of a file a user can hand us (or that an interrupted run can leave behind) validates what it uses
with these helpers, so a malformed record is one line — the file, the record and what was expected — instead of
a traceback or, worse, a silently wrong number. ``where`` is always the full location, starting with the file:
``"runs/x/pair/kernels/round-001.json: visits[3].samples[0]"``.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import json
import math
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from foundation.errors import UserError

# Times in ns must survive int64 arithmetic (start + duration, differences): keep each below 4e18 ns (126 years).
MAX_NS = 4 * 10**18
MAX_US = MAX_NS / 1000


def describe(value: Any) -> str:
    """A short, one-line rendering of a found value for an error message."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = " ".join(repr(value).split())
    return text if len(text) <= 40 else text[:37] + "..."


def invalid(where: str, expected: str, found: Any) -> UserError:
    return UserError(f"{where}: expected {expected}, found {describe(found)}")


def is_number(value: Any) -> bool:
    """An int or float that is finite (booleans are not numbers here, although Python says they are)."""
    return type(value) in (int, float) and math.isfinite(value)


def expect_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(where, "an object", value)
    return value


def expect_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise invalid(where, "a list", value)
    return value


def expect_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise invalid(where, "text", value)
    return value


def expect_number(value: Any, where: str, minimum: float | None = None, what: str = "a finite number") -> float:
    """A finite int/float, at least ``minimum`` when given (durations and times: ``minimum=0``)."""
    if not is_number(value) or (minimum is not None and value < minimum):
        bound = f" ≥ {minimum:g}" if minimum is not None else ""
        raise invalid(where, f"{what}{bound}", value)
    return float(value)


def expect_int(value: Any, where: str, minimum: int | None = None) -> int:
    if type(value) is not int or (minimum is not None and value < minimum):
        bound = f" ≥ {minimum}" if minimum is not None else ""
        raise invalid(where, f"a whole number{bound}", value)
    return value


def expect_ns(value: Any, where: str) -> int:
    """A timestamp or duration in ns: 0 ≤ x < MAX_NS; ints stay exact (ns since boot exceed a float's 53 bits)."""
    if type(value) is int:
        number = value
    elif type(value) is float and math.isfinite(value):
        number = round(value)
    else:
        raise invalid(where, "a time in ns ≥ 0", value)
    if number < 0:
        raise invalid(where, "a time in ns ≥ 0", value)
    if number >= MAX_NS:
        raise invalid(where, f"a time in ns below {MAX_NS:.0e} (126 years)", value)
    return number


def parse_ns(text: str, where: str) -> int:
    """A CSV cell holding ns (see `expect_ns`)."""
    text = text.strip()
    try:
        return expect_ns(int(text), where)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise invalid(where, "a time in ns ≥ 0", text) from None
    if not math.isfinite(value):
        raise invalid(where, "a time in ns ≥ 0", text)
    return expect_ns(value, where)


def expect_ms_list(value: Any, where: str) -> list[float]:
    """A list of sample times in milliseconds: finite and non-negative."""
    items = expect_list(value, where)
    return [expect_number(x, f"{where}[{i}]", minimum=0, what="milliseconds") for i, x in enumerate(items)]


# Counts (calls, instances, samples) beyond this are not counts: they would overflow the tables' int64 columns.
MAX_COUNT = 2**53


def parse_cell(text: str, where: str, minimum: float | None = None, integer: bool = False) -> float:
    """A numeric CSV cell: finite (``nan``/``inf`` are refused), at least ``minimum``; whole and below
    `MAX_COUNT` when ``integer``."""
    try:
        value = float(text)
    except ValueError:
        raise invalid(where, "a number", text) from None
    if (not math.isfinite(value) or (minimum is not None and value < minimum)
            or (integer and (value != int(value) or abs(value) >= MAX_COUNT))):
        kind = "a whole number" if integer else "a finite number"
        bound = f" ≥ {minimum:g}" if minimum is not None else ""
        raise invalid(where, kind + bound, text)
    return value


@contextlib.contextmanager
def reading(path: Path, what: str) -> Iterator[None]:
    """Every way a file can be unreadable (missing, a directory, not text, corrupt gzip, denied) as one line."""
    try:
        yield
    except UserError:
        raise
    except FileNotFoundError:
        raise UserError(f"{path}: file not found (expected {what})") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory (expected {what})") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); expected {what}") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise UserError(f"{path}: corrupt gzip data ({exc}); expected {what}") from None
    except EOFError:
        raise UserError(f"{path}: gzip stream ends early (truncated file); expected {what}") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply; expected {what}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror}); expected {what}") from None


# The largest JSON file a reader takes in whole. The largest one a run writes is kernel_samples.json: 5000
# kernels × 20 rounds × 100 samples at ~20 bytes each is 200 MB; a file of more is not one of ours.
MAX_JSON_BYTES = 1 << 30


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Path, what: str) -> BinaryIO:
    """Open ``path`` for reading in binary, only if it is a regular file (after links): a FIFO, a device or a
    socket where a file is expected is a one-line UserError instead of a read that never ends.

    The file is opened without blocking (opening a FIFO for reading would wait for a writer) and checked on the
    open descriptor, so what is read is what was checked; then the descriptor blocks again as usual.
    """
    path = Path(path)
    with reading(path, what):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UserError(f"{path}: is {_kind(mode)}, not a regular file (expected {what})")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: Path, what: str) -> Path:
    """``path`` if it is a regular file (see `open_regular`), for readers that open it themselves (tarfile, CSV)."""
    open_regular(path, what).close()
    return Path(path)


def read_bytes(path: Path, what: str, limit: int) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes; a larger one is refused before it is read."""
    with open_regular(path, what) as handle, reading(Path(path), what):
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise UserError(f"{path}: larger than {limit // 2**20} MiB; expected {what}")
    return data


def parse_json(text: str | bytes, where: str, what: str) -> Any:
    """``json.loads`` whose every failure is one line naming ``where``: invalid or truncated JSON, nesting deeper
    than the parser's stack, an integer longer than Python converts (4300 digits)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise UserError(f"{where}: nested too deeply; expected {what}") from None
    except json.JSONDecodeError as exc:
        if not exc.doc.strip():
            raise UserError(f"{where}: empty file (expected {what})") from None
        # Cut short: the parser stopped at the last character, or inside a string that runs to the end.
        if exc.pos >= len(exc.doc.rstrip()) - 1 or exc.msg.startswith("Unterminated string"):
            raise UserError(f"{where}: truncated JSON (the file ends in the middle of a value); expected {what}"
                            ) from None
        raise UserError(f"{where}: invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg}); "
                        f"expected {what}") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{where}: not UTF-8 text (byte {exc.start}: {exc.reason}); expected {what}") from None
    except ValueError as exc:  # int() of a too long literal
        raise number_too_long(exc, where, what) from None


def number_too_long(exc: ValueError, where: str, what: str) -> UserError:
    """The one line for what a JSON decoder raises, besides a syntax error, on a number Python will not hold: an
    integer literal beyond ``sys.get_int_max_str_digits()`` (4300 digits)."""
    return UserError(f"{where}: a number too long to read ({str(exc).split(';')[0]}); expected {what}")


def read_json(path: Path, what: str, limit: int = MAX_JSON_BYTES) -> Any:
    """Parse a JSON file; a missing, special (FIFO, device), oversized, unreadable, truncated or invalid one is a
    one-line UserError naming it."""
    path = Path(path)
    data = read_bytes(path, what, limit)
    with reading(path, what):
        text = data.decode("utf-8")
    return parse_json(text, str(path), what)


def check_format_version(data: dict[str, Any], where: str, supported: int, key: str = "format_version") -> int:
    """The file's format version: absent means 1 (files written before it was recorded); one above ``supported``
    is refused, naming the file, rather than read wrongly."""
    version = data.get(key, 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UserError(f"{where}: {key} {version!r} is not a positive whole number")
    if version > supported:
        raise UserError(f"{where}: {key} {version} was written by a newer prbench (this one reads up to {supported}); "
                        "upgrade prbench to read it")
    return version
