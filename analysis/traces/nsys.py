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

from analysis.errors import UserError
from analysis.traces.fileio import open_text, reading
from analysis.traces.model import KERNEL, MEMCPY, MEMSET, KernelAggregate, TraceBuilder, TraceData

_UNIT_NS = {"ns": 1.0, "us": 1e3, "μs": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_UNIT = re.compile(r"\((ns|us|μs|µs|ms|s)\)")


def _header_index(lines: list[str], must_have: tuple[str, ...]) -> int:
    for i, line in enumerate(lines):
        if all(key in line for key in must_have):
            return i
    return -1


def _load(path: Path, must_have: tuple[str, ...]) -> tuple[list[dict[str, str]], dict[str, float]]:
    with reading(path, "nsys CSV"), open_text(path) as fh:
        lines = fh.read().splitlines()
    start = _header_index(lines, must_have)
    if start < 0:
        raise UserError(f"{path}: no header with {', '.join(must_have)}; not an nsys stats CSV")
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    scale = {}
    for col in reader.fieldnames or []:
        m = _UNIT.search(col)
        scale[col] = _UNIT_NS[m.group(1)] if m else 1.0
    return list(reader), scale


def _col(row: dict[str, str], scale: dict[str, float], prefix: str) -> float | None:
    for key, value in row.items():
        if key and key.startswith(prefix) and value not in (None, ""):
            try:
                return float(value.replace(",", "")) * scale.get(key, 1.0)
            except ValueError:
                return None
    return None


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
    for row in rows:
        start, dur = _col(row, scale, "Start"), _col(row, scale, "Duration")
        if start is None or dur is None:
            continue
        name = row.get("Name", "")
        b.add_event(name, round(start), round(dur), _kind(name), int(_col(row, {}, "Device") or -1),
                    int(_col(row, {}, "Strm") or -1), int(_col(row, {}, "CorrId") or -1))
    return b.build()


def read_nsys_kern_sum(path: Path) -> TraceData:
    rows, scale = _load(path, ("Total Time", "Instances", "Name"))
    b = TraceBuilder(path, "nsys-kern-sum")
    b.platform = "cuda"
    for row in rows:
        total = _col(row, scale, "Total Time")
        if total is None:
            continue
        lo, hi = _col(row, scale, "Min"), _col(row, scale, "Max")
        b.aggregates.append(KernelAggregate(
            name=row.get("Name", ""), calls=int(_col(row, {}, "Instances") or 0), total_ns=round(total),
            min_ns=round(lo) if lo is not None else None, max_ns=round(hi) if hi is not None else None))
    return b.build()
