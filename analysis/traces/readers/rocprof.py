"""Readers for AMD rocprof outputs; every time is normalized to ns on input.

- rocprofv3 JSON (``--output-format json``, top-level ``rocprofiler-sdk-tool``): kernel dispatches with names
  from ``kernel_symbols``, memory copies, HIP API calls; timestamps are ns.
- rocprofv3 CSV: ``<prefix>_kernel_trace.csv`` (plus ``_memory_copy_trace.csv`` and ``_hip_api_trace.csv``
  next to it when present) and ``<prefix>_kernel_stats.csv`` (summary only); ns.
- rocprofv3 rocpd SQLite (``<pid>_results.db``, the ROCm 7 default): ``rocpd_kernel_dispatch`` joined with
  ``rocpd_info_kernel_symbol``; tables may carry a per-session uuid suffix.
- rocprof v1: ``results.csv`` (``BeginNs``/``EndNs``/``DurationNs``, names with `` [clone .kd]``) and the
  ``results.stats.csv`` / ``results.copy_stats.csv`` summaries; ns.
"""

from __future__ import annotations

import csv
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from analysis.traces.analyses.categories import ROCM_LEGACY_COPY
from analysis.traces.model import KERNEL, MEMCPY, KernelAggregate, TraceBuilder, TraceData
from analysis.traces.readers import fast_io
from analysis.traces.readers.fileio import open_text, reading
from foundation.errors import UserError
from foundation.records import expect_list, expect_ns, expect_object, number_too_long, parse_cell, parse_ns

_CLONE_SUFFIX = re.compile(r"( \[clone \.kd\]|\.kd)$")


def _clean_name(name: str) -> str:
    return _CLONE_SUFFIX.sub("", name.strip())


def _kind(name: str) -> int:
    return MEMCPY if ROCM_LEGACY_COPY.match(name) else KERNEL


# --- rocprofv3 JSON ---------------------------------------------------------------------------------------


def read_rocprofv3_json(path: Path) -> TraceData:
    with reading(path), open_text(path) as fh:
        try:
            doc = fast_io.load_document(fh.read())
        except json.JSONDecodeError as exc:
            if exc.pos >= len(exc.doc) - 1:
                raise UserError(f"{path}: truncated JSON (the file ends in the middle of a value)") from None
            raise UserError(f"{path}: invalid JSON ({exc.msg})") from None
        except ValueError as exc:  # a number of more digits than Python converts
            raise number_too_long(exc, str(path), "rocprofv3 JSON output") from None
    tools = doc.get("rocprofiler-sdk-tool") if isinstance(doc, dict) else None
    if not isinstance(tools, list) or not tools:
        raise UserError(f"{path}: no 'rocprofiler-sdk-tool' section; not rocprofv3 JSON output")
    b = TraceBuilder(path, "rocprofv3-json")
    b.platform = "rocm"
    for i, tool in enumerate(tools):
        where = f"{path}: rocprofiler-sdk-tool[{i}]"
        _add_rocprofv3_tool(b, expect_object(tool, where), where)
    return b.build()


def _field(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]...`` or None where a level is missing or not an object (handles and ids are optional)."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _records(parent: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    """An optional list of objects (``[]`` when absent)."""
    items = expect_list(parent.get(key) or [], f"{where}.{key}")
    return [expect_object(item, f"{where}.{key}[{i}]") for i, item in enumerate(items)]


def _span(rec: dict[str, Any], where: str) -> tuple[int, int]:
    """(start, duration) in ns from ``start_timestamp``/``end_timestamp``; the end may not precede the start."""
    return _checked_span(where, expect_ns(rec.get("start_timestamp"), f"{where}.start_timestamp"),
                         expect_ns(rec.get("end_timestamp"), f"{where}.end_timestamp"), "start_timestamp",
                         "end_timestamp")


def _checked_span(where: str, start: int, end: int, start_key: str, end_key: str) -> tuple[int, int]:
    if end < start:
        raise UserError(f"{where}: {end_key} {end} is before {start_key} {start}")
    return start, end - start


def _add_rocprofv3_tool(b: TraceBuilder, tool: dict[str, Any], where: str) -> None:
    symbols = {s.get("kernel_id"): s for s in _records(tool, "kernel_symbols", where)
               if isinstance(s.get("kernel_id"), int)}
    gpu_agents = [a for a in _records(tool, "agents", where) if a.get("type") == 2]
    # Agent handles are opaque; number the GPU agents 0..n-1 in the order rocprofv3 lists them.
    device_of = {_hashable(_field(a, "id", "handle")): i for i, a in enumerate(gpu_agents)}
    b.device_names = [str(a.get("name", "")) for a in gpu_agents]
    meta = tool.get("metadata") or {}
    if isinstance(meta, dict) and "init_time" in meta and "fini_time" in meta:
        _, session = _checked_span(f"{where}.metadata", expect_ns(meta["init_time"], f"{where}.metadata.init_time"),
                                   expect_ns(meta["fini_time"], f"{where}.metadata.fini_time"), "init_time",
                                   "fini_time")
        b.metadata["session_ns"] = session
    records = expect_object(tool.get("buffer_records") or {}, f"{where}.buffer_records")
    where = f"{where}.buffer_records"
    names: dict[int, str] = {}
    for i, rec in enumerate(_records(records, "kernel_dispatch", where)):
        info = rec.get("dispatch_info") or {}
        kid = _id(_field(info, "kernel_id"))
        name = names.get(kid)
        if name is None:
            sym = symbols.get(kid) or {}
            # formatted = demangled with template arguments; truncated_kernel_name drops them
            # ("vectorized_elementwise_kernel"), which merges unrelated kernels in a per-kernel table.
            raw = sym.get("formatted_kernel_name") or sym.get("demangled_kernel_name") or sym.get("kernel_name")
            name = names[kid] = _clean_name(raw if isinstance(raw, str) and raw else f"kernel_{kid}")
        start, dur = _span(rec, f"{where}.kernel_dispatch[{i}]")
        stream = _field(rec, "stream_id", "handle")
        b.add_event(name, start, dur, _kind(name), device_of.get(_hashable(_field(info, "agent_id", "handle")), -1),
                    _id(stream if stream is not None else _field(info, "queue_id", "handle")),
                    _id(_field(rec, "correlation_id", "internal")))
    for i, rec in enumerate(_records(records, "memory_copy", where)):
        start, dur = _span(rec, f"{where}.memory_copy[{i}]")
        b.add_event(f"MEMORY_COPY_{rec.get('operation', '')}", start, dur, MEMCPY,
                    device_of.get(_hashable(_field(rec, "dst_agent_id", "handle")), -1), -1,
                    _id(_field(rec, "correlation_id", "internal")))
    api_names = _operation_names(tool, "HIP_RUNTIME_API")
    for i, rec in enumerate(_records(records, "hip_api", where)):
        start, dur = _span(rec, f"{where}.hip_api[{i}]")
        operation = _hashable(rec.get("operation"))
        name = api_names.get(operation) if isinstance(operation, int) else None
        b.add_runtime(name if isinstance(name, str) else f"hip_api_{operation}", start, dur,
                      _id(_field(rec, "correlation_id", "internal")))


def _hashable(value: Any) -> Any:
    """Handles are used as dict keys; a list or object in their place matches nothing."""
    return None if isinstance(value, (list, dict)) else value


def _id(value: Any) -> int:
    """An id or handle as int64, -1 when absent or not a whole number that fits."""
    if type(value) is int and -(2**63) <= value < 2**63:
        return value
    return -1


def _operation_names(tool: dict[str, Any], kind: str) -> dict[int, str]:
    for entry in _field(tool, "strings", "buffer_records") or []:
        if isinstance(entry, dict) and entry.get("kind") == kind and isinstance(entry.get("operations"), list):
            return dict(enumerate(entry["operations"]))
    return {}


# --- CSV outputs (rocprofv3 and v1) -----------------------------------------------------------------------


Row = tuple[int, dict[str, str]]  # (line number, cells)


def _csv_rows(path: Path) -> list[Row]:
    """The data rows with their line numbers; a short row's missing cells are "" (not None)."""
    with reading(path, "CSV"), open_text(path) as fh:
        reader = csv.DictReader(fh, restval="")
        rows: list[Row] = []
        try:
            for row in reader:
                rows.append((reader.line_num, row))
        except csv.Error as exc:
            raise UserError(f"{path}: line {reader.line_num}: not CSV ({exc})") from None
        return rows


def _int(row: dict[str, str], *keys: str, default: int = -1) -> int:
    """An id column (agent, queue, stream, correlation): the digits in it ("Agent 4" → 4), else ``default``."""
    for key in keys:
        value = row.get(key)
        if isinstance(value, str) and value != "":
            digits = re.search(r"-?\d+", value)
            if digits and len(digits.group()) < 19:
                return int(digits.group())
    return default


def _ns(path: Path, line: int, row: dict[str, str], key: str, default: int | None = None) -> int:
    """A time column in ns (``default`` when the cell is empty and one is given)."""
    value = row.get(key) or ""
    if not value.strip() and default is not None:
        return default
    return parse_ns(value, f"{path}: line {line}, column {key}")


def _duration(path: Path, line: int, start: int, end: int, start_key: str, end_key: str) -> int:
    return _checked_span(f"{path}: line {line}", start, end, start_key, end_key)[1]


def _timed(path: Path, rows: list[Row]) -> list[tuple[dict[str, str], int, int]]:
    """(row, start, duration) for rocprofv3 trace CSVs (``Start_Timestamp``/``End_Timestamp``)."""
    out = []
    for line, row in rows:
        start = _ns(path, line, row, "Start_Timestamp")
        end = _ns(path, line, row, "End_Timestamp")
        out.append((row, start, _duration(path, line, start, end, "Start_Timestamp", "End_Timestamp")))
    return out


def read_rocprofv3_kernel_trace(path: Path) -> TraceData:
    b = TraceBuilder(path, "rocprofv3-csv")
    b.platform = "rocm"
    for row, start, dur in _timed(path, _csv_rows(path)):
        name = _clean_name(row.get("Kernel_Name") or "")
        b.add_event(name, start, dur, _kind(name), _int(row, "Agent_Id"), _int(row, "Stream_Id", "Queue_Id"),
                    _int(row, "Correlation_Id"))
    prefix = path.name[: -len("kernel_trace.csv")]
    copies = path.with_name(prefix + "memory_copy_trace.csv")
    if copies.exists():
        for row, start, dur in _timed(copies, _csv_rows(copies)):
            b.add_event(row.get("Direction") or "MEMORY_COPY", start, dur, MEMCPY,
                        _int(row, "Destination_Agent_Id"), _int(row, "Stream_Id"), _int(row, "Correlation_Id"))
    api = path.with_name(prefix + "hip_api_trace.csv")
    if api.exists():
        for row, start, dur in _timed(api, _csv_rows(api)):
            b.add_runtime(row.get("Function") or "", start, dur, _int(row, "Correlation_Id"))
    return b.build()


def read_rocprof_stats(path: Path) -> TraceData:
    """``Name,Calls,TotalDurationNs,AverageNs,Percentage[,MinNs,MaxNs,StdDev]`` (v1 and v3 stats)."""
    b = TraceBuilder(path, "rocprof-stats")
    b.platform = "rocm"
    kind = "memcpy" if "copy" in path.name else "kernel"
    for line, row in _csv_rows(path):
        where = f"{path}: line {line}, column"
        calls = parse_cell(row.get("Calls") or "0", f"{where} Calls", minimum=0, integer=True)
        lo, hi = (row.get(k) or "" for k in ("MinNs", "MaxNs"))
        b.aggregates.append(KernelAggregate(
            name=_clean_name(row.get("Name") or ""), calls=int(calls),
            total_ns=_ns(path, line, row, "TotalDurationNs", 0),
            min_ns=_ns(path, line, row, "MinNs") if lo.strip() else None,
            max_ns=_ns(path, line, row, "MaxNs") if hi.strip() else None, kind=kind))
    return b.build()


def read_rocprof_v1_results(path: Path) -> TraceData:
    b = TraceBuilder(path, "rocprof-v1")
    b.platform = "rocm"
    for line, row in _csv_rows(path):
        start = _ns(path, line, row, "BeginNs")
        dur = _ns(path, line, row, "DurationNs", -1)
        if dur < 0:  # no DurationNs column (older rocprof): from the end
            dur = _duration(path, line, start, _ns(path, line, row, "EndNs"), "BeginNs", "EndNs")
        name = _clean_name(row.get("KernelName") or "")
        b.add_event(name, start, dur, _kind(name), _int(row, "gpu-id"), _int(row, "queue-id"), -1)
    return b.build()


# --- rocpd SQLite -----------------------------------------------------------------------------------------


def read_rocpd(path: Path) -> TraceData:
    with reading(path, "rocpd database"):
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                return _read_rocpd(path, conn)
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:
            raise UserError(f"{path}: not a readable rocpd SQLite database ({exc})") from None


def _table(conn: sqlite3.Connection, base: str) -> str | None:
    """The unsuffixed view if rocprofv3 created one, else the single uuid-suffixed table."""
    rows = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table','view') AND (name = ? OR name LIKE ?)",
        (base, base + "%"))]
    if base in rows:
        return base
    suffixed = [r for r in rows if re.fullmatch(re.escape(base) + r"_?[0-9a-fA-F_]+", r)]
    return suffixed[0] if suffixed else None


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}


def _read_rocpd(path: Path, conn: sqlite3.Connection) -> TraceData:
    dispatch = _table(conn, "rocpd_kernel_dispatch")
    symbol = _table(conn, "rocpd_info_kernel_symbol")
    if dispatch is None or symbol is None:
        raise UserError(f"{path}: no rocpd_kernel_dispatch / rocpd_info_kernel_symbol tables; not rocprofv3 rocpd")
    sym_cols = _columns(conn, symbol)
    name_expr = "COALESCE(" + ", ".join(
        f"s.{c}" for c in ("display_name", "formatted_kernel_name", "kernel_name") if c in sym_cols) + ")"
    disp_cols = _columns(conn, dispatch)
    stream = "k.stream_id" if "stream_id" in disp_cols else "k.queue_id"
    b = TraceBuilder(path, "rocpd")
    b.platform = "rocm"
    query = (f'SELECT {name_expr}, k.start, k."end", k.agent_id, {stream} FROM "{dispatch}" k '
             f'LEFT JOIN "{symbol}" s ON s.id = k.kernel_id ORDER BY k.start')
    for i, (name, start, end, agent, strm) in enumerate(conn.execute(query)):
        name = _clean_name(name if isinstance(name, str) and name else "unknown")
        begin, dur = _db_span(f"{path}: {dispatch} row {i + 1}", start, end)
        b.add_event(name, begin, dur, _kind(name), _id(agent), _id(strm))
    copy = _table(conn, "rocpd_memory_copy")
    if copy is not None and {"start", "end"} <= _columns(conn, copy):
        for i, (start, end) in enumerate(conn.execute(f'SELECT start, "end" FROM "{copy}"')):
            begin, dur = _db_span(f"{path}: {copy} row {i + 1}", start, end)
            b.add_event("MEMORY_COPY", begin, dur, MEMCPY)
    return b.build()


def _db_span(where: str, start: Any, end: Any) -> tuple[int, int]:
    return _checked_span(where, expect_ns(start, f"{where}, start"), expect_ns(end, f"{where}, end"), "start", "end")
