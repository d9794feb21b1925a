"""Stage ``kernels``: time every organized kernel in long-lived, crash-isolated worker processes.

    python -m stages.kernels --dir ORGANIZED [--out DIR] [--devices cpu|0,1,...] [--warmup N] [--iterations N]
                             [--timeout S] [--cache-dir DIR] [--filter REGEX]

One worker per device (pinned with CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES) imports kernel modules and
times them in-process, so a kernel costs one import and its timed calls instead of a Python start-up
(the seed ran ``python kernel.py`` per file). A worker that crashes (segfault) or hangs past ``--timeout`` is
killed and restarted: the kernel gets a failure row with the reason, the run goes on.

* Triton kernels: ``get_args()`` then ``call(args)``; on a GPU each timed call is bracketed by device events,
  with the L2 cache flushed (a 256 MiB buffer zeroed) before each one; ``*.best_config`` files are deleted
  and each worker has a private Triton cache, so base and PR autotune alike. On CPU they run through the
  Triton interpreter (``stages.triton_cpu``): correctness and mechanics only, by default a single call.
* C++ kernels (the default CPU backend): timed through their compiled graph module under ``torch.profiler``;
  each kernel's samples are the self CPU times of its ``graph_<n>_<kernel>`` events, which exist only when the
  graph was compiled with ``torch._inductor.config.cpp.enable_kernel_profile = True``. The worker needs the
  compile's ``TORCHINDUCTOR_CACHE_DIR`` (``--cache-dir``), or it recompiles every kernel.

Writes ``kernels.csv`` (index columns + ``n,median_ms,mean_ms,std_ms,min_ms,gb,gb_per_s,status,error``),
``kernel_samples.json`` ({organized relative path: [ms, ...]}) and ``kernels_seed.csv`` (the seed's
``relative_dir,filename,kernel_name,ms_per_call,gb_per_s``).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from analysis.errors import UserError
from analysis.kernel_identity import kernel_num_gb
from analysis.kernel_index import IndexRow, read_index
from analysis.kernel_results import KernelRow, summarize_samples, write_results

L2_FLUSH_BYTES = 256 * 1024 * 1024  # as Triton's do_bench and Inductor's benchmarker: larger than any L2
STARTUP_TIMEOUT_S = 300.0
_GRAPH_EVENT = re.compile(r"^graph_\d+_(?P<kernel>.+)$")


# --- timing (worker side; torch objects are passed in so the logic is testable without a GPU) ------------------


class DeviceEventTimer:
    """Device-event timing: flush L2, record start, call, record end; read all events after one synchronize."""

    def __init__(self, event_factory: Callable[[], Any], synchronize: Callable[[], None],
                 flush_l2: Callable[[], None]) -> None:
        self.event_factory = event_factory
        self.synchronize = synchronize
        self.flush_l2 = flush_l2

    def time(self, fn: Callable[[], Any], warmup: int, iterations: int) -> list[float]:
        for _ in range(warmup):
            fn()  # also triggers autotuning on the first launch
        self.synchronize()
        pairs = [(self.event_factory(), self.event_factory()) for _ in range(iterations)]
        for start, end in pairs:
            self.flush_l2()  # outside the events: a cold L2 for every sample, flush time not counted
            start.record()
            fn()
            end.record()
        self.synchronize()
        return [start.elapsed_time(end) for start, end in pairs]


class WallTimer:
    """CPU timing with ``perf_counter_ns`` (synchronous work: the call returns when the work is done)."""

    def time(self, fn: Callable[[], Any], warmup: int, iterations: int) -> list[float]:
        for _ in range(warmup):
            fn()
        samples = []
        for _ in range(iterations):
            begin = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - begin) / 1e6)
        return samples


def cuda_event_timer() -> DeviceEventTimer:
    import torch

    flush_buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    return DeviceEventTimer(
        event_factory=lambda: torch.cuda.Event(enable_timing=True),
        synchronize=torch.cuda.synchronize,
        flush_l2=flush_buffer.zero_,
    )


# --- jobs ----------------------------------------------------------------------------------------------------


@dataclass
class Job:
    """One unit of worker work: a Triton kernel file, or a graph module timing the C++ kernels it launches."""

    id: int
    kind: str  # "triton" or "graph"
    path: str  # absolute path of the module to import
    kernels: dict[str, str]  # kernel name → organized relative path (one entry for a Triton job)
    warmup: int
    iterations: int
    timeout_s: float


@dataclass
class Outcome:
    samples: list[float] = field(default_factory=list)
    error: str = ""


def plan_jobs(rows: list[IndexRow], organized: Path, warmup: int, iterations: int, timeout_s: float,
              interpreter_iterations: int | None) -> list[Job]:
    """Triton rows → one job each; C++ rows → one job per graph (timed where the kernel was first seen)."""
    jobs: list[Job] = []
    graph_kernels: dict[str, dict[str, str]] = {}
    for row in rows:
        if row.backend == "cpp":
            graph = row.graphs.split(";")[0].rsplit("/", 1)[-1] if row.graphs else ""
            graph_kernels.setdefault(graph, {})[row.kernel_name] = row.path
            continue
        w, n = (0, interpreter_iterations) if interpreter_iterations else (warmup, iterations)
        jobs.append(Job(len(jobs), "triton", str(organized / row.path), {row.kernel_name: row.path}, w, n, timeout_s))
    for graph, kernels in graph_kernels.items():
        path = organized / "graphs" / f"{graph}.py"
        jobs.append(Job(len(jobs), "graph", str(path), kernels, warmup, iterations,
                        timeout_s * max(1, len(kernels))))
    return jobs


# --- worker process (host side) ----------------------------------------------------------------------------------


class WorkerFailure(Exception):
    """The worker died or hung; the message is the reason recorded for the kernel."""


def worker_env(device: str, platform: str, base: dict[str, str], work_dir: Path,
               cache_dir: Path | None) -> dict[str, str]:
    """Environment of one worker: pinned to its device, private Triton cache, one OpenMP thread on CPU."""
    env = dict(base)
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        env.pop(var, None)
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU worker must not touch a GPU that happens to be there
        env.setdefault("OMP_NUM_THREADS", "1")
    elif platform == "rocm":
        env["HIP_VISIBLE_DEVICES"] = device  # ROCm also honours CUDA_VISIBLE_DEVICES; set only one
    else:
        env["CUDA_VISIBLE_DEVICES"] = device
    env["PRBENCH_WORKER_DEVICE"] = "cpu" if device == "cpu" else "gpu"
    env["TRITON_CACHE_DIR"] = str(work_dir / "triton")
    inductor_cache = cache_dir or (Path(base["TORCHINDUCTOR_CACHE_DIR"]) if base.get("TORCHINDUCTOR_CACHE_DIR")
                                   else work_dir / "inductor")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_cache)
    env.setdefault("TMPDIR", str(work_dir / "tmp"))
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # no compile pool: a killed worker leaves no orphans
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Worker:
    """A ``python -m stages.kernels --worker`` process: jobs as JSON lines on stdin, results on a pipe."""

    def __init__(self, name: str, env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.result_fd = -1
        self.buffer = b""
        self.starts = 0

    def start(self) -> None:
        for key in ("TRITON_CACHE_DIR", "TMPDIR"):
            Path(self.env[key]).mkdir(parents=True, exist_ok=True)
        read_fd, write_fd = os.pipe()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "stages.kernels", "--worker", "--result-fd", str(write_fd)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                pass_fds=(write_fd,), start_new_session=True,  # so a kill takes the worker's children too
            )
        finally:
            os.close(write_fd)
            log.close()
        self.result_fd, self.buffer = read_fd, b""
        self.starts += 1
        self._receive(STARTUP_TIMEOUT_S, "starting")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def run(self, job: Job) -> dict[str, Any]:
        if not self.alive:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(asdict(job)) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerFailure(self._death_reason("receiving the job")) from None
        return self._receive(job.timeout_s, "running it")

    def _receive(self, timeout_s: float, doing: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise WorkerFailure(f"timeout: no result after {timeout_s:.0f} s {doing}; worker restarted")
            ready, _, _ = select.select([self.result_fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self.result_fd, 1 << 16)
            if not chunk:
                reason = self._death_reason(doing)
                self.stop()
                raise WorkerFailure(reason)
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def _death_reason(self, doing: str) -> str:
        assert self.proc is not None
        code = self.proc.wait()
        if code < 0:
            try:
                what = signal.Signals(-code).name
            except ValueError:
                what = f"signal {-code}"
            return f"worker crashed ({what}) while {doing}; worker restarted"
        return f"worker exited with code {code} while {doing}; worker restarted (log: {self.log_path})"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        if self.result_fd >= 0:
            os.close(self.result_fd)
            self.result_fd = -1
        self.proc = None


def run_jobs(jobs: list[Job], workers: list[Worker], progress: Callable[[str], None] = print) -> dict[str, Outcome]:
    """Spread jobs over the workers (one thread each pulls from a shared queue); {relative path: outcome}."""
    pending: queue.Queue[Job] = queue.Queue()
    for job in jobs:
        pending.put(job)
    outcomes: dict[str, Outcome] = {}
    lock = threading.Lock()
    done = [0]

    def drive(worker: Worker) -> None:
        while True:
            try:
                job = pending.get_nowait()
            except queue.Empty:
                return
            results = _run_one(worker, job)
            with lock:
                outcomes.update(results)
                done[0] += 1
                failed = sum(1 for o in results.values() if o.error)
                status = f"{failed} failed" if failed else "ok"
                progress(f"kernels: [{done[0]}/{len(jobs)}] {worker.name} {Path(job.path).name}: {status}")

    threads = [threading.Thread(target=drive, args=(w,), daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for worker in workers:
        worker.stop()
    return outcomes


def _run_one(worker: Worker, job: Job) -> dict[str, Outcome]:
    try:
        reply = worker.run(job)
    except WorkerFailure as exc:
        return {path: Outcome(error=str(exc)) for path in job.kernels.values()}
    results: dict[str, Outcome] = {}
    for name, path in job.kernels.items():
        entry = reply.get("results", {}).get(name, {})
        results[path] = Outcome(samples=list(entry.get("samples", [])),
                                error=entry.get("error") or reply.get("error") or "")
    return results


# --- worker process (worker side) ------------------------------------------------------------------------------


def worker_main(result_fd: int) -> int:
    from stages.environment import apply_inductor_config

    apply_inductor_config()
    if os.environ.get("TRITON_INTERPRET") == "1":
        from stages import triton_cpu

        triton_cpu.install()
    timer = _make_timer()
    results = os.fdopen(result_fd, "w", buffering=1)
    results.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        job = Job(**json.loads(line))
        try:
            reply = execute(job, timer)
        except BaseException as exc:  # noqa: BLE001 - any kernel failure is this kernel's row, not the worker's end
            reply = {"error": one_line_error(exc)}
        results.write(json.dumps(reply) + "\n")
    return 0


def _make_timer() -> DeviceEventTimer | WallTimer:
    import torch

    if os.environ.get("PRBENCH_WORKER_DEVICE") == "gpu" and torch.cuda.is_available():
        return cuda_event_timer()
    return WallTimer()


def one_line_error(exc: BaseException) -> str:
    """``Type: message`` on one line, with the kernel file's line number when the error points into it."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    where = ""
    if isinstance(exc, SyntaxError) and exc.lineno:
        where = f" (line {exc.lineno})"
    return f"{type(exc).__name__}: {message}{where}"[:500]


def load_module(path: str, name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def execute(job: Job, timer: DeviceEventTimer | WallTimer) -> dict[str, Any]:
    if job.kind == "triton":
        module = load_module(job.path, f"prbench_kernel_{job.id}")
        args = module.get_args()
        samples = timer.time(lambda: module.call(args), job.warmup, job.iterations)
        (name,) = job.kernels
        return {"results": {name: {"samples": samples}}}
    return {"results": time_graph_kernels(job)}


def time_graph_kernels(job: Job) -> dict[str, dict[str, Any]]:
    """Run a graph module under torch.profiler; per-kernel samples = self CPU time of each kernel event."""
    from torch.profiler import ProfilerActivity, profile

    module = load_module(job.path, f"prbench_graph_{job.id}")
    args = module.get_args()
    for _ in range(job.warmup):
        module.call(list(args))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(job.iterations):
            module.call(list(args))
    samples: dict[str, list[float]] = {}
    for event in prof.events():
        match = _GRAPH_EVENT.match(event.name)
        if match:
            samples.setdefault(match.group("kernel"), []).append(event.self_cpu_time_total / 1000.0)
    results: dict[str, dict[str, Any]] = {}
    for name in job.kernels:
        if samples.get(name):
            results[name] = {"samples": samples[name]}
        else:
            results[name] = {"error": f"no profiler events for {name}: compile with "
                                      "torch._inductor.config.cpp.enable_kernel_profile = True"}
    return results


# --- results ----------------------------------------------------------------------------------------------------


def summarize(row: IndexRow, outcome: Outcome, gb: float | None) -> KernelRow:
    return summarize_samples(row, outcome.samples, outcome.error, gb)


def write_outputs(out: Path, rows: list[KernelRow], outcomes: dict[str, Outcome]) -> None:
    write_results(out, rows, {r.index.path: outcomes[r.index.path].samples for r in rows if r.status == "ok"})


# --- stage ----------------------------------------------------------------------------------------------------


@dataclass
class RunSettings:
    organized: Path
    out: Path
    devices: list[str]
    platform: str
    warmup: int
    iterations: int
    timeout_s: float
    cache_dir: Path | None
    work_dir: Path
    filter: str | None
    interpreter_iterations: int


def parse_devices(spec: str) -> list[str]:
    """``cpu``, ``0,1,2``, or ``cpu,cpu`` (two CPU workers); each entry gets one worker."""
    devices = [d.strip() for d in spec.split(",") if d.strip()]
    for device in devices:
        if device != "cpu" and not device.isdigit():
            raise UserError(f"--devices: '{device}' is neither 'cpu' nor a GPU index")
    if not devices:
        raise UserError("--devices: empty")
    return devices


def detect_platform(devices: list[str]) -> str:
    if all(d == "cpu" for d in devices):
        return "cpu"
    import torch

    return "rocm" if torch.version.hip else "cuda"


def load_rows(organized: Path, pattern: str | None) -> list[IndexRow]:
    index = organized / "index.csv"
    if not index.is_file():
        raise UserError(f"--dir {organized}: no index.csv (run organize first)")
    try:
        rows = read_index(index)
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{index}: not an organized index ({' '.join(str(exc).split())})") from None
    if pattern:
        regex = re.compile(pattern)
        rows = [r for r in rows if regex.search(r.path)]
    if not rows:
        raise UserError(f"{index}: no kernels to run" + (f" matching --filter {pattern}" if pattern else ""))
    return rows


def run(settings: RunSettings) -> list[KernelRow]:
    rows = load_rows(settings.organized, settings.filter)
    for stale in settings.organized.rglob("*.best_config"):
        stale.unlink()  # a previous run's autotune choice must not spare this run the autotuning
    on_cpu = all(d == "cpu" for d in settings.devices)
    interpreted = on_cpu and any(r.backend == "triton" for r in rows)
    jobs = plan_jobs(rows, settings.organized, settings.warmup, settings.iterations, settings.timeout_s,
                     settings.interpreter_iterations if interpreted else None)
    base_env = dict(os.environ)
    if interpreted:
        base_env["TRITON_INTERPRET"] = "1"
        print("kernels: Triton kernels on CPU run in the Triton interpreter: correctness only, timings are "
              "not performance", flush=True)
    workers = [
        Worker(f"worker{i}[{device}]",
               worker_env(device, settings.platform, base_env, settings.work_dir / f"worker{i}", settings.cache_dir),
               settings.work_dir / f"worker{i}.log")
        for i, device in enumerate(settings.devices)
    ]
    print(f"kernels: {len(rows)} kernels in {len(jobs)} jobs on {len(workers)} worker(s)", flush=True)
    outcomes = run_jobs(jobs, workers, progress=lambda line: print(line, flush=True))
    texts = {r.path: _read_text(settings.organized / r.path) for r in rows}
    results = [summarize(r, outcomes.get(r.path, Outcome(error="not run")), kernel_num_gb(texts[r.path]))
               for r in rows]
    write_outputs(settings.out, results, outcomes)
    return results


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stages.kernels", description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result-fd", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help="organized kernels directory (with index.csv)")
    parser.add_argument("--out", type=Path, help="where kernels.csv & co. go (default: the parent of --dir)")
    parser.add_argument("--devices", default="cpu", help="'cpu' or GPU indices '0,1,...'; one worker each")
    parser.add_argument("--platform", default="auto", choices=("auto", "cpu", "cuda", "rocm"),
                        help="how workers are pinned (HIP_VISIBLE_DEVICES on rocm); auto asks torch")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls before timing (autotuning included)")
    parser.add_argument("--iterations", type=int, default=30, help="timed calls per kernel")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per kernel before its worker is killed")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="TORCHINDUCTOR_CACHE_DIR of the compile (C++ graphs reuse their compiled kernels)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="worker caches and logs (default: <out>/work/kernels)")
    parser.add_argument("--filter", default=None, help="only kernels whose organized path matches this regex")
    parser.add_argument("--interpreter-iterations", type=int, default=1,
                        help="timed calls for Triton kernels in the CPU interpreter (~1 s each; no warm-up)")
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.result_fd)
    from stages.environment import apply_inductor_config

    apply_inductor_config()
    try:
        if args.dir is None:
            raise UserError("--dir is required")
        devices = parse_devices(args.devices)
        out = args.out or args.dir.resolve().parent
        settings = RunSettings(
            organized=args.dir.resolve(), out=out, devices=devices,
            platform=detect_platform(devices) if args.platform == "auto" else args.platform,
            warmup=args.warmup, iterations=args.iterations, timeout_s=args.timeout,
            cache_dir=args.cache_dir.resolve() if args.cache_dir else None,
            work_dir=(args.work_dir or out / "work" / "kernels").resolve(), filter=args.filter,
            interpreter_iterations=args.interpreter_iterations,
        )
        results = run(settings)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    failed = [r for r in results if r.status != "ok"]
    print(f"kernels: {len(results) - len(failed)} timed, {len(failed)} failed → {settings.out / 'kernels.csv'}",
          flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001 - a bug in the runner itself: keep the traceback in the log
        traceback.print_exc()
        sys.exit(1)
