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

from analysis.errors import UserError
from analysis.traces.categories import ROCM_LEGACY_COPY
from analysis.traces.fileio import open_text, reading
from analysis.traces.model import KERNEL, MEMCPY, KernelAggregate, TraceBuilder, TraceData

_CLONE_SUFFIX = re.compile(r"( \[clone \.kd\]|\.kd)$")


def _clean_name(name: str) -> str:
    return _CLONE_SUFFIX.sub("", name.strip())


def _kind(name: str) -> int:
    return MEMCPY if ROCM_LEGACY_COPY.match(name) else KERNEL


# --- rocprofv3 JSON ---------------------------------------------------------------------------------------


def read_rocprofv3_json(path: Path) -> TraceData:
    with reading(path), open_text(path) as fh:
        try:
            doc = json.load(fh)
        except json.JSONDecodeError as exc:
            if exc.pos >= len(exc.doc) - 1:
                raise UserError(f"{path}: truncated JSON (the file ends in the middle of a value)") from None
            raise UserError(f"{path}: invalid JSON ({exc.msg})") from None
    tools = doc.get("rocprofiler-sdk-tool") if isinstance(doc, dict) else None
    if not isinstance(tools, list) or not tools:
        raise UserError(f"{path}: no 'rocprofiler-sdk-tool' section; not rocprofv3 JSON output")
    b = TraceBuilder(path, "rocprofv3-json")
    b.platform = "rocm"
    for tool in tools:
        _add_rocprofv3_tool(b, tool)
    return b.build()


def _add_rocprofv3_tool(b: TraceBuilder, tool: dict[str, Any]) -> None:
    symbols = {s.get("kernel_id"): s for s in tool.get("kernel_symbols") or [] if isinstance(s, dict)}
    gpu_agents = [a for a in tool.get("agents") or [] if a.get("type") == 2]
    # Agent handles are opaque; number the GPU agents 0..n-1 in the order rocprofv3 lists them.
    device_of = {a["id"]["handle"]: i for i, a in enumerate(gpu_agents)}
    b.device_names = [str(a.get("name", "")) for a in gpu_agents]
    meta = tool.get("metadata") or {}
    if "init_time" in meta and "fini_time" in meta:
        b.metadata["session_ns"] = int(meta["fini_time"]) - int(meta["init_time"])
    records = tool.get("buffer_records") or {}
    names: dict[int, str] = {}
    for rec in records.get("kernel_dispatch") or []:
        info = rec.get("dispatch_info") or {}
        kid = info.get("kernel_id")
        name = names.get(kid)
        if name is None:
            sym = symbols.get(kid) or {}
            # formatted = demangled with template arguments; truncated_kernel_name drops them
            # ("vectorized_elementwise_kernel"), which merges unrelated kernels in a per-kernel table.
            raw = sym.get("formatted_kernel_name") or sym.get("demangled_kernel_name") or sym.get("kernel_name")
            name = names[kid] = _clean_name(raw or f"kernel_{kid}")
        start = int(rec["start_timestamp"])
        b.add_event(name, start, int(rec["end_timestamp"]) - start, _kind(name),
                    device_of.get((info.get("agent_id") or {}).get("handle"), -1),
                    int((rec.get("stream_id") or {}).get("handle", (info.get("queue_id") or {}).get("handle", -1))),
                    int((rec.get("correlation_id") or {}).get("internal", -1)))
    for rec in records.get("memory_copy") or []:
        start = int(rec["start_timestamp"])
        b.add_event(f"MEMORY_COPY_{rec.get('operation', '')}", start, int(rec["end_timestamp"]) - start, MEMCPY,
                    device_of.get((rec.get("dst_agent_id") or {}).get("handle"), -1), -1,
                    int((rec.get("correlation_id") or {}).get("internal", -1)))
    api_names = _operation_names(tool, "HIP_RUNTIME_API")
    for rec in records.get("hip_api") or []:
        start = int(rec["start_timestamp"])
        b.add_runtime(api_names.get(rec.get("operation"), f"hip_api_{rec.get('operation')}"), start,
                      int(rec["end_timestamp"]) - start, int((rec.get("correlation_id") or {}).get("internal", -1)))


def _operation_names(tool: dict[str, Any], kind: str) -> dict[int, str]:
    for entry in (tool.get("strings") or {}).get("buffer_records") or []:
        if entry.get("kind") == kind:
            return dict(enumerate(entry.get("operations") or []))
    return {}


# --- CSV outputs (rocprofv3 and v1) -----------------------------------------------------------------------


def _csv_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with reading(path, "CSV"), open_text(path) as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def _int(row: dict[str, str], *keys: str, default: int = -1) -> int:
    for key in keys:
        value = row.get(key)
        if value not in (None, ""):
            try:
                return int(float(value))
            except ValueError:
                digits = re.search(r"-?\d+", value)
                if digits:
                    return int(digits.group())
    return default


def read_rocprofv3_kernel_trace(path: Path) -> TraceData:
    _, rows = _csv_rows(path)
    b = TraceBuilder(path, "rocprofv3-csv")
    b.platform = "rocm"
    for row in rows:
        start = _int(row, "Start_Timestamp")
        name = _clean_name(row.get("Kernel_Name", ""))
        b.add_event(name, start, _int(row, "End_Timestamp") - start, _kind(name),
                    _int(row, "Agent_Id"), _int(row, "Stream_Id", "Queue_Id"), _int(row, "Correlation_Id"))
    prefix = path.name[: -len("kernel_trace.csv")]
    copies = path.with_name(prefix + "memory_copy_trace.csv")
    if copies.exists():
        for row in _csv_rows(copies)[1]:
            start = _int(row, "Start_Timestamp")
            b.add_event(row.get("Direction") or "MEMORY_COPY", start, _int(row, "End_Timestamp") - start, MEMCPY,
                        _int(row, "Destination_Agent_Id"), _int(row, "Stream_Id"), _int(row, "Correlation_Id"))
    api = path.with_name(prefix + "hip_api_trace.csv")
    if api.exists():
        for row in _csv_rows(api)[1]:
            start = _int(row, "Start_Timestamp")
            b.add_runtime(row.get("Function", ""), start, _int(row, "End_Timestamp") - start,
                          _int(row, "Correlation_Id"))
    return b.build()


def read_rocprof_stats(path: Path) -> TraceData:
    """``Name,Calls,TotalDurationNs,AverageNs,Percentage[,MinNs,MaxNs,StdDev]`` (v1 and v3 stats)."""
    _, rows = _csv_rows(path)
    b = TraceBuilder(path, "rocprof-stats")
    b.platform = "rocm"
    kind = "memcpy" if "copy" in path.name else "kernel"
    for row in rows:
        b.aggregates.append(KernelAggregate(
            name=_clean_name(row.get("Name", "")), calls=_int(row, "Calls", default=0),
            total_ns=_int(row, "TotalDurationNs", default=0),
            min_ns=_int(row, "MinNs", default=-1) if row.get("MinNs") else None,
            max_ns=_int(row, "MaxNs", default=-1) if row.get("MaxNs") else None, kind=kind))
    return b.build()


def read_rocprof_v1_results(path: Path) -> TraceData:
    _, rows = _csv_rows(path)
    b = TraceBuilder(path, "rocprof-v1")
    b.platform = "rocm"
    for row in rows:
        start = _int(row, "BeginNs")
        dur = _int(row, "DurationNs", default=-1)
        if dur < 0:
            dur = _int(row, "EndNs") - start
        name = _clean_name(row.get("KernelName", ""))
        b.add_event(name, start, dur, _kind(name), _int(row, "gpu-id"),
                    _int(row, "queue-id"), -1)
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
    for name, start, end, agent, strm in conn.execute(query):
        name = _clean_name(name or "unknown")
        b.add_event(name, int(start), int(end) - int(start), _kind(name),
                    int(agent if agent is not None else -1), int(strm if strm is not None else -1))
    copy = _table(conn, "rocpd_memory_copy")
    if copy is not None and {"start", "end"} <= _columns(conn, copy):
        for start, end in conn.execute(f'SELECT start, "end" FROM "{copy}"'):
            b.add_event("MEMORY_COPY", int(start), int(end) - int(start), MEMCPY)
    return b.build()
