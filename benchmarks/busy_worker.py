"""A kernel worker that computes on the CPU for a set time: the work of ``benchmarks/scale.py``'s shards.

    python -m busy_worker --worker --result-fd N            (started by ``stages.paired``)

A job is a kernel job (``kernels``: {name: organized path}) with ``busy_ms`` and ``iterations``: each of the
``iterations`` samples is a busy loop of ``busy_ms / iterations`` milliseconds of CPU time (not a sleep: devices
that share a core slow each other down, as real kernels on shared CPUs do). Stdlib only, so a worker starts in a
fraction of a second and the benchmark measures the executors, not torch's import.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from stages.support.worker_process import serve


def burn(ms: float) -> float:
    """Compute until ``ms`` of this thread's CPU time have passed; the wall time it took, in ms."""
    start_wall, start_cpu = time.perf_counter(), time.thread_time()
    total = 0
    while (time.thread_time() - start_cpu) * 1000 < ms:
        total += sum(range(1000))
    return (time.perf_counter() - start_wall) * 1000


def handle(job: dict[str, Any]) -> dict[str, Any]:
    iterations = int(job.get("iterations", 1))
    each = float(job.get("busy_ms", 0.0)) / iterations
    return {"results": {name: {"samples": [burn(each) for _ in range(iterations)]} for name in job["kernels"]}}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m busy_worker")
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--result-fd", type=int, required=True)
    return serve(parser.parse_args().result_fd, handle)


if __name__ == "__main__":
    sys.exit(main())
