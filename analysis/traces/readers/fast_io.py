"""The fastest JSON decoder and gzip reader installed, with the standard library as the fallback.

Optional (``pip install prbench[fast]``): ``orjson`` (else ``msgspec``) decodes batches of trace events, and
``isal`` (``isal.igzip``, else ``zlib_ng.gzip_ng``) decompresses gzip. Without them the readers use ``json``'s
``raw_decode`` one event at a time and ``gzip``; the results are the same. ``PRBENCH_TRACE_PARSER=stdlib``
forces the standard library (the tests run both ways; the benchmark compares them).
"""

from __future__ import annotations

import contextlib
import gzip
import importlib
import json
import os
from collections.abc import Callable
from typing import Any

STDLIB_ENV = "PRBENCH_TRACE_PARSER"

BatchDecoder = Callable[[str], Any]
GzipOpen = Callable[..., Any]  # (path, mode) → a binary file object


def _stdlib_only() -> bool:
    return os.environ.get(STDLIB_ENV, "").strip().lower() == "stdlib"


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def json_decoder() -> tuple[str, BatchDecoder | None]:
    """(name, decode) of the fastest whole-document JSON decoder present; (json, None) when only the standard
    library is there (the reader then decodes one event at a time, which is faster than json.loads in batches)."""
    if not _stdlib_only():
        orjson = _module("orjson")
        if orjson is not None:
            return "orjson", orjson.loads
        msgspec_json = _module("msgspec.json")
        if msgspec_json is not None:
            return "msgspec", msgspec_json.Decoder().decode
    return "json", None


def load_document(text: str) -> Any:
    """A whole JSON document, decoded by the fastest decoder present. What that decoder refuses (NaN, broken
    syntax) is decoded again by ``json``, whose value or ``JSONDecodeError`` (and so its wording) is the answer.
    One difference stays: orjson reads an integer beyond 64 bits as the nearest float, json as an int."""
    decode = json_decoder()[1]
    if decode is not None:
        with contextlib.suppress(ValueError):  # orjson's and msgspec's decode errors are ValueErrors; json decides
            return decode(text)
    return json.loads(text)


def gzip_opener() -> tuple[str, GzipOpen]:
    """(name, open) of the fastest gzip reader present: isal's igzip, zlib-ng's gzip_ng, else gzip."""
    if not _stdlib_only():
        igzip = _module("isal.igzip")
        if igzip is not None:
            return "isal", igzip.open
        gzip_ng = _module("zlib_ng.gzip_ng")
        if gzip_ng is not None:
            return "zlib-ng", gzip_ng.open
    return "gzip", gzip.open


def decompress_errors() -> tuple[type[BaseException], ...]:
    """The errors the fast gzip readers raise on corrupt data (gzip's own are zlib.error / BadGzipFile)."""
    found = []
    isal_zlib = _module("isal.isal_zlib")
    if isal_zlib is not None:
        found.append(isal_zlib.error)
    zlib_ng = _module("zlib_ng.zlib_ng")
    if zlib_ng is not None:
        found.append(zlib_ng.error)
    return tuple(found)


def describe() -> str:
    """``orjson + isal``: what the readers use on this machine."""
    return f"{json_decoder()[0]} + {gzip_opener()[0]}"
