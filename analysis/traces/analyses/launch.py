"""Host-side costs: launch delay, gaps between kernels, synchronization, and a CPU- vs GPU-bound verdict.

- launch delay: kernel start − end of the runtime call that launched it (joined by correlation id), ≥ 0 (HTA).
  Every launch API counts (``cudaLaunchKernel``, ``hipLaunchKernel``, ``hipExtModuleLaunchKernel``,
  ``hipModuleLaunchKernel``, graph launches), so ROCm traces are not empty as they are in HTA.
- gaps: per (device, stream), next start − previous end when positive. A gap is "host wait" when the next
  kernel was launched after the previous one had finished: the GPU waited for the CPU (HTA's host_wait).
- sync: time spent in ``{cuda,hip}{Device,Stream,Event}Synchronize``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.traces.analyses.breakdown import launch_index, short_kernel_share
from analysis.traces.analyses.timeline import Timeline, gpu_timeline
from analysis.traces.model import CPU_KERNEL, TraceData

SYNC_NAME = re.compile(r"^(cuda|hip)(Device|Stream|Event)Synchronize$")
IDLE_GPU_BOUND_PCT = 15.0  # TraceLens' agent flags idle above 15 % of the timeline


@dataclass(frozen=True)
class Stats:
    count: int
    total_ms: float
    mean_us: float
    median_us: float
    p90_us: float
    max_us: float

    @classmethod
    def of(cls, values_ns: np.ndarray) -> Stats:
        if values_ns.size == 0:
            return cls(0, 0.0, float("nan"), float("nan"), float("nan"), float("nan"))
        us = values_ns / 1e3
        return cls(int(us.size), float(us.sum() / 1e3), float(us.mean()), float(np.median(us)),
                   float(np.percentile(us, 90)), float(us.max()))


@dataclass(frozen=True)
class Verdict:
    label: str  # "GPU-bound", "CPU-bound", "sync-bound", "mixed", "CPU profile", "no timeline"
    reason: str


@dataclass(frozen=True)
class LaunchAnalysis:
    launch_delay: Stats
    gaps: Stats
    host_wait_ms: float
    sync: Stats
    short_kernels: int
    kernels: int
    verdict: Verdict


def launch_delays(trace: TraceData) -> np.ndarray:
    launch = launch_index(trace)
    linked = launch >= 0
    rt_end = trace.rt_start_ns[launch[linked]] + trace.rt_dur_ns[launch[linked]]
    return np.clip(trace.start_ns[linked] - rt_end, 0, None)


def stream_gaps(trace: TraceData) -> tuple[np.ndarray, np.ndarray]:
    """(positive gaps between consecutive activities on each stream, whether each gap was a host wait)."""
    if trace.n_events < 2:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=bool)
    order = np.lexsort((trace.start_ns, trace.stream, trace.device))
    dev, stream = trace.device[order], trace.stream[order]
    start, end = trace.start_ns[order], trace.end_ns[order]
    same = (dev[1:] == dev[:-1]) & (stream[1:] == stream[:-1])
    prev_end = np.maximum.accumulate(end)  # a long earlier kernel can outlast the previous one
    gap = start[1:] - prev_end[:-1]
    keep = same & (gap > 0)
    launch = launch_index(trace)[order][1:]
    launched_at = np.full(launch.size, np.iinfo(np.int64).min, dtype=np.int64)
    linked = launch >= 0
    launched_at[linked] = trace.rt_start_ns[launch[linked]]
    host_wait = launched_at > prev_end[:-1]
    return gap[keep], host_wait[keep]


def sync_table(trace: TraceData) -> pd.DataFrame:
    columns = ["name", "count", "total ms", "mean us", "max us"]
    names = np.asarray(trace.names, dtype=object)
    if trace.rt_start_ns.size == 0:
        return pd.DataFrame(columns=columns)
    rt_names = names[trace.rt_name_id]
    mask = np.fromiter((bool(SYNC_NAME.match(n)) for n in rt_names), dtype=bool, count=rt_names.size)
    if not mask.any():
        return pd.DataFrame(columns=columns)
    df = pd.DataFrame({"name": rt_names[mask], "dur": trace.rt_dur_ns[mask]})
    g = df.groupby("name", as_index=False).agg(count=("dur", "size"), total=("dur", "sum"), max=("dur", "max"))
    return pd.DataFrame({"name": g["name"], "count": g["count"], "total ms": g["total"] / 1e6,
                         "mean us": g["total"] / g["count"] / 1e3, "max us": g["max"] / 1e3}
                        ).sort_values("total ms", ascending=False).reset_index(drop=True)


def analyze_launches(trace: TraceData, timeline: Timeline | None = None,
                     short_threshold_us: float = 10.0) -> LaunchAnalysis:
    timeline = timeline or gpu_timeline(trace)
    gaps, host_wait = stream_gaps(trace)
    sync_durs = np.array([c.dur_ns for c in trace.runtime_calls() if SYNC_NAME.match(c.name)], dtype=np.int64)
    short, total = short_kernel_share(trace, short_threshold_us)
    host_wait_ms = float(gaps[host_wait].sum()) / 1e6
    sync = Stats.of(sync_durs)
    return LaunchAnalysis(
        launch_delay=Stats.of(launch_delays(trace)),
        gaps=Stats.of(gaps),
        host_wait_ms=host_wait_ms,
        sync=sync,
        short_kernels=short,
        kernels=total,
        verdict=verdict(trace, timeline, host_wait_ms, sync.total_ms, short, total),
    )


def verdict(trace: TraceData, timeline: Timeline, host_wait_ms: float, sync_ms: float,
            short: int, kernels: int) -> Verdict:
    if not trace.has_timeline:
        return Verdict("no timeline", "the input has kernel totals only, no per-event times")
    if timeline.busy_time <= 0:
        # Nothing ran for any time: "busy 100 %" of a 0 ms span would be a verdict about nothing.
        return Verdict("no timeline", "the device activities take no time; there is nothing to judge")
    if (trace.kind == CPU_KERNEL).all():
        return Verdict("CPU profile", "no GPU activity; the breakdown covers Inductor C++ kernels and extern "
                                      "calls on the CPU")
    idle_pct = timeline.percent("idle_time")
    idle_ms = timeline.idle_time / 1e6
    if idle_pct < IDLE_GPU_BOUND_PCT:
        return Verdict("GPU-bound", f"the GPU is busy {100 - idle_pct:.1f}% of the profiled span")
    if idle_ms and sync_ms >= 0.5 * idle_ms:
        return Verdict("sync-bound", f"GPU idle {idle_pct:.1f}%; synchronize calls take {sync_ms:.3f} ms "
                                     f"against {idle_ms:.3f} ms idle")
    short_share = short / kernels if kernels else 0.0
    if idle_ms and host_wait_ms >= 0.5 * idle_ms:
        return Verdict("CPU-bound", f"GPU idle {idle_pct:.1f}%; {100 * host_wait_ms / idle_ms:.0f}% of idle time "
                                    f"the GPU waited for launches; {100 * short_share:.0f}% of kernels < 10 us")
    return Verdict("mixed", f"GPU idle {idle_pct:.1f}%, but most idle time is not explained by late launches "
                            "or synchronization")
