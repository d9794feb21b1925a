"""Where a kernel worker's time goes: the start-up every paired kernel round pays, and how busy a visit keeps the GPU.

    python benchmarks/kernel_worker_startup.py --organized DIR [--device 0|cpu] [--kernels N] [--json FILE]

One process does, in order, what a paired round's kernel worker does: imports torch and the stage, makes its
timer (on a GPU: the CUDA context and the L2-flush buffer), loads every kernel module (the round's prepare), then
visits every kernel twice with the compare's warm-up and timed calls. Each phase is timed on the host. The loads and
the very first visit also run under cProfile and their costliest calls are printed, because every round starts
fresh workers and pays all of it again: on an H200 this showed each worker compiling torch's bytecode anew (5 s of
its 9 s of loads; see docs/gpu-validation.md), and Triton hashing its own sources on the first call (0.35 s).

On a GPU, each visit's device time (its samples plus one L2 flush per timed call, the flush timed on its own
here) against the visit's host time says how busy the GPU was while the visit ran.

The caches are the environment's (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``, ``PYTHONPYCACHEPREFIX``): run
it twice with the same ones to see a cold start (kernels compiled) and a warm one (rounds after the first, whose
workers find their side's caches filled), as ``benchmarks/gpu_check.sh startup`` does.
"""

from __future__ import annotations

import time

SCRIPT_BEGIN = time.perf_counter()

import cProfile  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from foundation.errors import UserError  # noqa: E402
from foundation.formats.kernel_index import read_index  # noqa: E402
from prbench.commands.cli import OneLineParser  # noqa: E402
from prbench.compare.driver import KernelSettings  # noqa: E402

PROFILE_LINES = 25  # costliest calls shown per profile (the loads, the first visit), by cumulative time
FLUSH_SAMPLES = 20


class Phases:
    """Host seconds per named phase, in the order they ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def timed(self, name: str, work: Callable[[], Any]) -> Any:
        begin = time.perf_counter()
        try:
            return work()
        finally:
            self.seconds[name] = time.perf_counter() - begin


def profiled(run: Callable[[], Any]) -> tuple[Any, str]:
    """``run()`` under cProfile: its result, and its costliest calls by cumulative time."""
    profiler = cProfile.Profile()
    result = profiler.runcall(run)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(PROFILE_LINES)
    return result, text.getvalue()


def visit_record(job: Any, reply: dict[str, Any], host_s: float, flush_ms: float) -> dict[str, Any]:
    samples = [s for entry in reply["results"].values() for s in entry.get("samples", [])]
    device_ms = sum(samples) + flush_ms * job.iterations
    return {"path": job.path, "host_ms": host_s * 1e3, "kernel_ms": sum(samples), "device_ms": device_ms,
            "busy": device_ms / (host_s * 1e3) if host_s > 0 else 0.0,
            "errors": [e["error"] for e in reply["results"].values() if e.get("error")]}


def measure(organized: Path, device: str, count: int) -> dict[str, Any]:
    from foundation.formats.stage_records import device_env

    os.environ.update(device_env(device, "cuda", {}))
    rows = sorted(read_index(organized / "index.csv"), key=lambda row: row.path)[:count]
    if not rows:
        raise UserError(f"--organized {organized}: index.csv lists no kernels")
    interpreted = device == "cpu" and any(row.backend == "triton" for row in rows)
    if interpreted:
        os.environ["TRITON_INTERPRET"] = "1"
    phases = Phases()
    torch = phases.timed("import torch", lambda: __import__("torch"))
    from stages import kernels  # imported above with prbench.compare.driver (it imports no torch)
    if interpreted:
        from stages.support import triton_cpu

        triton_cpu.install()
    gpu = device != "cpu"
    timer = phases.timed("timer (CUDA context, L2-flush buffer)" if gpu else "timer",
                         kernels.cuda_event_timer if gpu else kernels.WallTimer)
    flush_ms = statistics.median(phases.timed("L2 flush timed alone", lambda: flush_samples(timer))) if gpu else 0.0
    settings = KernelSettings()
    jobs = kernels.plan_jobs(rows, organized, settings.warmup, settings.iterations, settings.timeout_s,
                             kernels.INTERPRETER_ITERATIONS if interpreted else None)
    worker = kernels.KernelWorker(timer)
    _, load_profile = phases.timed(f"load {len(jobs)} modules (cProfile on)", lambda: profiled(
        lambda: [worker.execute(replace(job, kind=kernels.LOAD)) for job in jobs]))
    begin = time.perf_counter()
    reply, profile = profiled(lambda: worker.execute(jobs[0]))
    visits = [{"visit": 1, **visit_record(jobs[0], reply, time.perf_counter() - begin, flush_ms)}]
    phases.seconds["first visit of the first kernel (cProfile on)"] = visits[0]["host_ms"] / 1e3
    visits += phases.timed("visit 1 of every kernel but the first", lambda: visit_all(worker, jobs[1:], 1, flush_ms))
    visits += phases.timed("visit 2 of every kernel", lambda: visit_all(worker, jobs, 2, flush_ms))
    return {"device": torch.cuda.get_device_name(0) if gpu else "cpu", "torch": torch.__version__,
            "kernels": len(rows), "jobs": len(jobs),
            "since_script_start_s": time.perf_counter() - SCRIPT_BEGIN, "phases_s": phases.seconds,
            "flush_ms": flush_ms, "visits": visits, "load_profile": load_profile, "first_visit_profile": profile}


def flush_samples(timer: Any) -> list[float]:
    """One L2 flush's device time (ms): the flush called as the timed work (itself flushed first)."""
    return [float(ms) for ms in timer.time(timer.flush_l2, 1, FLUSH_SAMPLES)]


def visit_all(worker: Any, jobs: list[Any], visit: int, flush_ms: float) -> list[dict[str, Any]]:
    records = []
    for job in jobs:
        begin = time.perf_counter()
        reply = worker.execute(job)
        records.append({"visit": visit, **visit_record(job, reply, time.perf_counter() - begin, flush_ms)})
    return records


def describe(result: dict[str, Any]) -> str:
    """The costliest calls of the loads and of the first visit, then the phases (last: a log's tail shows them)."""
    lines = []
    for name in ("load", "first_visit"):
        lines.append(f"{name.replace('_', ' ')}, costliest calls (cumulative):")
        lines.append(result[f"{name}_profile"].strip())
    lines.append(f"{result['device']}, torch {result['torch']}: {result['kernels']} kernels in {result['jobs']} jobs")
    lines += [f"  {name:<48} {seconds:8.3f} s" for name, seconds in result["phases_s"].items()]
    lines.append(f"  {'since the script started (its imports too)':<48} {result['since_script_start_s']:8.3f} s")
    for visit in (1, 2):
        mine = [v for v in result["visits"] if v["visit"] == visit]
        host = [v["host_ms"] for v in mine]
        busy = sum(v["device_ms"] for v in mine) / max(sum(host), 1e-9)
        lines.append(f"  visit {visit}: host ms per visit first {host[0]:.1f}, median {statistics.median(host):.1f}, "
                     f"max {max(host):.1f}; "
                     + (f"device busy {busy:.1%} of the visits' host time (kernels + {result['flush_ms'] * 1e3:.1f} "
                        "µs of L2 flush per timed call)" if result["flush_ms"] else
                        f"timed calls {busy:.1%} of the visits' host time"))
    errors = [e for v in result["visits"] for e in v["errors"]]
    if errors:
        lines.append(f"  {len(errors)} kernel errors, first: {errors[0]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--organized", type=Path, required=True, help="an organized directory (index.csv + kernels)")
    parser.add_argument("--device", default="0", help="a GPU index, or cpu (default 0)")
    parser.add_argument("--kernels", type=int, default=1000, help="at most this many kernels, by path (default 1000)")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    if args.device != "cpu" and not args.device.isdigit():
        parser.error(f"--device {args.device!r}: expected a GPU index such as 0, or cpu")
    if args.kernels < 1:
        parser.error(f"--kernels {args.kernels}: expected at least 1")
    if not (args.organized / "index.csv").is_file():
        parser.error(f"--organized {args.organized}: no index.csv (not an organized directory)")
    try:
        result = measure(args.organized, args.device, args.kernels)
    except UserError as exc:
        parser.error(str(exc))
    print(describe(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
