"""``read_trace(path)``: pick the reader for a profile file by its content, not only its name.

Each reader is imported when a file of its format is read: the Kineto reader imports neither numpy nor pandas,
the others do (see :mod:`analysis.traces.model`).
"""

from __future__ import annotations

from pathlib import Path

from analysis.traces.model import TraceData
from analysis.traces.readers.compiled_module_profile import MARKER
from analysis.traces.readers.fileio import read_head
from analysis.traces.readers.kineto import read_kineto
from foundation import records
from foundation.errors import UserError

SQLITE_MAGIC = b"SQLite format 3\x00"


def detect_format(path: Path) -> str:
    """One of kineto, rocprofv3-json, rocprofv3-csv, rocprof-stats, rocprof-v1, rocpd, nsys-gpu-trace,
    nsys-kern-sum, compiled-module-profile."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a trace file")
    with records.open_regular(path, "a trace file") as fh:
        if fh.read(16) == SQLITE_MAGIC:
            return "rocpd"
    head = read_head(path, 8192)
    if not head.strip():
        raise UserError(f"{path}: empty file")
    first = head.lstrip()
    if first.startswith("{"):
        return "rocprofv3-json" if '"rocprofiler-sdk-tool"' in head else "kineto"
    if MARKER in read_head(path, 1 << 20):
        return "compiled-module-profile"
    header = first.splitlines()[0]
    if "Kernel_Name" in header and "Start_Timestamp" in header:
        return "rocprofv3-csv"
    if "KernelName" in header and "BeginNs" in header:
        return "rocprof-v1"
    if "TotalDurationNs" in header and "Calls" in header:
        return "rocprof-stats"
    if "Start (" in head and "Duration (" in head:
        return "nsys-gpu-trace"
    if "Total Time (" in head and "Instances" in head:
        return "nsys-kern-sum"
    raise UserError(f"{path}: unrecognized profile format (expected a Kineto/rocprof/nsys trace or -p output)")


def read_trace(path: str | Path, lenient: bool = False) -> TraceData:
    """Read any supported profile; a trace with nothing to analyze is a UserError, never an empty report.
    ``lenient``: a Kineto event with a missing or malformed ``ts``/``dur`` is left out and counted
    (``TraceData.skipped``) instead of failing the read."""
    path = Path(path)
    return require_activity(_read(path, detect_format(path), lenient))


def _read(path: Path, fmt: str, lenient: bool = False) -> TraceData:
    if fmt == "kineto":
        return read_kineto(path, lenient)
    # The other readers import numpy (and pandas): only when a file of theirs is read.
    from analysis.traces.readers.compiled_module_profile import read_compiled_module_profile
    from analysis.traces.readers.nsys import read_nsys_gpu_trace, read_nsys_kern_sum
    from analysis.traces.readers.rocprof import (
        read_rocpd,
        read_rocprof_stats,
        read_rocprof_v1_results,
        read_rocprofv3_json,
        read_rocprofv3_kernel_trace,
    )

    if fmt == "rocprofv3-json":
        return read_rocprofv3_json(path)
    if fmt == "rocprofv3-csv":
        return read_rocprofv3_kernel_trace(path)
    if fmt == "rocprof-v1":
        return read_rocprof_v1_results(path)
    if fmt == "rocprof-stats":
        return read_rocprof_stats(path)
    if fmt == "rocpd":
        return read_rocpd(path)
    if fmt == "nsys-gpu-trace":
        return read_nsys_gpu_trace(path)
    if fmt == "nsys-kern-sum":
        return read_nsys_kern_sum(path)
    return read_compiled_module_profile(path).to_trace_data()


def require_activity(trace: TraceData) -> TraceData:
    """Refuse a trace without device time: its timeline would read "GPU-bound, 100 % busy" over 0 ms."""
    if trace.has_timeline:
        if not any(trace.columns.dur_ns):
            raise UserError(f"{trace.path}: contains no GPU kernel events with a duration ({trace.n_events} "
                            "device events, all 0 µs long); nothing to analyze")
        return trace
    if trace.aggregates:
        if not any(a.total_ns > 0 for a in trace.aggregates):
            raise UserError(f"{trace.path}: contains no GPU kernel time ({len(trace.aggregates)} kernel rows, "
                            "all 0 ns); nothing to analyze")
        return trace
    raise UserError(f"{trace.path}: contains no GPU kernel events (nor Inductor C++ kernels of a CPU profile); "
                    "nothing to analyze")
