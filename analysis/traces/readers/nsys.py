"""Readers for NVIDIA Nsight Systems ``nsys stats --format csv`` reports.

- ``cuda_gpu_trace``: one row per kernel / memcpy / memset (``Start``, ``Duration``, ``CorrId``, ``Device``,
  ``Strm``, ``Name``) → a full timeline.
- ``cuda_gpu_kern_sum`` (older name ``gpukernsum``): one row per kernel (``Total Time``, ``Instances``,
  ``Min``/``Max``, ``Name``) → per-kernel totals only.

Columns carry their unit in the header (``(ns)`` by default, other units with ``--timeunit``); values are
converted to ns. ``nsys stats`` may print preamble lines before the CSV header; they are skipped.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from analysis.traces.model import KERNEL, MEMCPY, MEMSET, KernelAggregate, TraceBuilder, TraceData
from analysis.traces.readers.fileio import open_text, reading
from foundation.errors import UserError
from foundation.records import expect_ns, parse_cell

_UNIT_NS = {"ns": 1.0, "us": 1e3, "μs": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_UNIT = re.compile(r"\((ns|us|μs|µs|ms|s)\)")


def _header_index(lines: list[str], must_have: tuple[str, ...]) -> int:
    for i, line in enumerate(lines):
        if all(key in line for key in must_have):
            return i
    return -1


Row = tuple[int, dict[str, str]]  # (line number in the file, cells)


def _load(path: Path, must_have: tuple[str, ...]) -> tuple[list[Row], dict[str, float]]:
    with reading(path, "nsys CSV"), open_text(path) as fh:
        lines = fh.read().splitlines()
    start = _header_index(lines, must_have)
    if start < 0:
        raise UserError(f"{path}: no header with {', '.join(must_have)}; not an nsys stats CSV")
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])), restval="")
    scale = {}
    for col in reader.fieldnames or []:
        m = _UNIT.search(col)
        scale[col] = _UNIT_NS[m.group(1)] if m else 1.0
    rows: list[Row] = []
    try:
        for row in reader:
            rows.append((start + reader.line_num, row))
    except csv.Error as exc:
        raise UserError(f"{path}: line {start + reader.line_num}: not CSV ({exc})") from None
    return rows, scale


def _cell(row: dict[str, str], prefix: str) -> tuple[str, str] | None:
    """(column, text) of the first non-empty column whose name starts with ``prefix`` (units vary)."""
    for key, value in row.items():
        if key and key.startswith(prefix) and isinstance(value, str) and value.strip():
            return key, value
    return None


def _ns(path: Path, line: int, row: dict[str, str], scale: dict[str, float], prefix: str) -> int | None:
    """A time column converted to ns (None when empty); text, NaN, inf or a negative time is refused."""
    found = _cell(row, prefix)
    if found is None:
        return None
    key, value = found
    where = f"{path}: line {line}, column {key}"
    return expect_ns(parse_cell(value.replace(",", ""), where, minimum=0) * scale.get(key, 1.0), where)


def _count(path: Path, line: int, row: dict[str, str], prefix: str) -> int | None:
    found = _cell(row, prefix)
    if found is None:
        return None
    key, value = found
    return int(parse_cell(value.replace(",", ""), f"{path}: line {line}, column {key}", minimum=0, integer=True))


def _id(row: dict[str, str], prefix: str) -> int:
    """Device, stream and correlation ids: -1 when absent or not a whole number (0 is a real device)."""
    found = _cell(row, prefix)
    if found is None:
        return -1
    try:
        value = int(found[1].strip())
    except ValueError:
        return -1
    return value if -(2**31) <= value < 2**31 else -1


def _kind(name: str) -> int:
    lowered = name.lower()
    if "memset" in lowered and name.startswith("["):
        return MEMSET
    if "memcpy" in lowered and name.startswith("["):
        return MEMCPY
    return KERNEL


def read_nsys_gpu_trace(path: Path) -> TraceData:
    rows, scale = _load(path, ("Start", "Duration", "Name"))
    b = TraceBuilder(path, "nsys-gpu-trace")
    b.platform = "cuda"
    for line, row in rows:
        start, dur = _ns(path, line, row, scale, "Start"), _ns(path, line, row, scale, "Duration")
        if start is None or dur is None:
            continue  # not an activity row (nsys leaves both empty on summary lines)
        name = row.get("Name") or ""
        b.add_event(name, start, dur, _kind(name), _id(row, "Device"), _id(row, "Strm"), _id(row, "CorrId"))
    return b.build()


def read_nsys_kern_sum(path: Path) -> TraceData:
    rows, scale = _load(path, ("Total Time", "Instances", "Name"))
    b = TraceBuilder(path, "nsys-kern-sum")
    b.platform = "cuda"
    for line, row in rows:
        total = _ns(path, line, row, scale, "Total Time")
        if total is None:
            continue
        b.aggregates.append(KernelAggregate(
            name=row.get("Name") or "", calls=_count(path, line, row, "Instances") or 0, total_ns=total,
            min_ns=_ns(path, line, row, scale, "Min"), max_ns=_ns(path, line, row, scale, "Max")))
    return b.build()
