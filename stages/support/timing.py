"""Timing and peak-memory measurement for the suite, following the seeds' rules.

* Device events on a GPU (``torch.cuda.Event`` + synchronize), ``time.perf_counter_ns`` on CPU: never wall
  clock around asynchronous GPU work.
* Median, mean and sample standard deviation; a side whose std exceeds 10 % of its mean is flagged noisy.
* Peak memory in GB. GPU: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, over the warm
  warm-up calls (like the dynamo harness's ``--dashboard`` warm peak memory, so compilation is excluded).
  CPU: there is no allocator statistic, and process RSS mostly measures the allocator's retained heap, so we
  profile one warm call with ``torch.profiler(profile_memory=True)`` (every CPU tensor allocation and free,
  including Inductor's own buffers), take the peak of live bytes, and add the bytes the call starts with
  (parameters, buffers, inputs). One profiled call per side keeps it cheap and separate from the timings.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from analysis.stats.noise_rules import iterations_are_noisy


@dataclass(frozen=True)
class Stats:
    median_ms: float
    mean_ms: float
    std_ms: float
    n: int

    @property
    def noisy(self) -> bool:
        return iterations_are_noisy(self.mean_ms, self.std_ms)


def summarize(samples_ms: list[float]) -> Stats:
    if len(samples_ms) < 2:
        raise ValueError("need at least two samples for a standard deviation")
    return Stats(
        median_ms=statistics.median(samples_ms),
        mean_ms=statistics.fmean(samples_ms),
        std_ms=statistics.stdev(samples_ms),
        n=len(samples_ms),
    )


def is_gpu(device: str) -> bool:
    return device.startswith("cuda")


def time_call_ms(fn: Callable[[], object], device: str) -> float:
    """One call's latency in milliseconds."""
    if is_gpu(device):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return float(start.elapsed_time(end))
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1e6


def time_call_s(fn: Callable[[], object], device: str) -> float:
    """A first call (compilation included) in seconds: host time, synchronized on a GPU."""
    if is_gpu(device):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if is_gpu(device):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def gpu_peak_reset(device: str) -> None:
    if is_gpu(device):
        torch.cuda.reset_peak_memory_stats()


def gpu_peak_gb(device: str) -> float:
    return torch.cuda.max_memory_allocated() / 1e9


def resident_bytes(module: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> int:
    """Bytes a call starts with: parameters, buffers and inputs (what the profiler window cannot see)."""
    tensors = [*module.parameters(), *module.buffers(), *inputs.values()]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def cpu_peak_gb(fn: Callable[[], object], start_bytes: int) -> float:
    """Peak live CPU tensor bytes during one call of ``fn`` (plus ``start_bytes``), in GB."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    live = peak = 0
    for event in events:
        live += event.nbytes()  # negative for frees
        peak = max(peak, live)
    return (start_bytes + peak) / 1e9


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Kineto prints two debug lines to fd 2 on every profiler start/stop; keep them out of the stage log."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
