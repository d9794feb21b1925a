"""Profile analysis: readers for Kineto, rocprof, nsys and ``-p`` output, and pure analyses over them.

Entry points: :func:`read_trace` (any supported file → :class:`TraceData`), the analyses in
``timeline``, ``breakdown`` and ``launch``, the report writer in ``perf_report`` and ``trace_diff``.
"""

from analysis.traces.model import KernelAggregate, KernelEvent, RuntimeCall, StepWindow, TraceData
from analysis.traces.readers.by_content import detect_format, read_trace

__all__ = ["KernelAggregate", "KernelEvent", "RuntimeCall", "StepWindow", "TraceData", "detect_format",
           "read_trace"]
