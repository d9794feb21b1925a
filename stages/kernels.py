"""Stage ``kernels``: time every organized kernel in long-lived, crash-isolated worker processes.

    python -m stages.kernels --dir ORGANIZED [--out DIR] [--devices cpu|0,1,...] [--warmup N] [--iterations N]
                             [--timeout S] [--cache-dir DIR] [--filter REGEX] [--jobs 0-31,40 --device D --node N]
                             [--modules-per-worker N]

One worker per device (pinned with CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES) imports kernel modules and
times them in-process, so a kernel costs one import and its timed calls instead of a Python start-up
(the seed ran ``python kernel.py`` per file). A worker that crashes (segfault) or hangs past ``--timeout`` is
killed and restarted: the kernel gets a failure row with the reason, the run goes on. A worker that has loaded
``--modules-per-worker`` kernel modules is replaced by a fresh one (default: ROCm's limit, none elsewhere:
``foundation.hip_modules``; one process runs out of HIP modules after thousands), and a job whose reply
carries error 209 (``hipErrorNoBinaryForGpu``) runs once more in a fresh worker before its error is recorded.

* Triton kernels: ``get_args()`` then ``call(args)``; on a GPU each timed call is bracketed by device events,
  with the L2 cache flushed (a 256 MiB buffer zeroed) before each one; ``*.best_config`` files are deleted
  and each worker has a private Triton cache, so base and PR autotune alike. On CPU they run through the
  Triton interpreter (``stages.support.triton_cpu``): correctness and mechanics only, by default a single call.
* C++ kernels (the default CPU backend): per graph module, the graph runs once to record its launches, then
  each kernel's launches are replayed alone, on buffers placed afresh at every visit, with the buffers they may
  write restored first (``stages.support.cpp_replay``); each
  sample is the self CPU time of the kernel's ``graph_<n>_<kernel>`` profiler event, which exists only when the
  graph was compiled with ``torch._inductor.config.cpp.enable_kernel_profile = True``. The worker needs the
  compile's ``TORCHINDUCTOR_CACHE_DIR`` (``--cache-dir``), or it recompiles every kernel.

A job naming a ``cache_dir`` loads its module's compiled kernels from that Inductor cache (the PR's worker timing an
identical-code C++ pair from base's graph module: ``prbench.stages.paired.timed_from_base``): the binaries that side
built, found by their source (``stages.support.borrowed_binaries``), not a build of this worker's own.

A worker keeps the modules it loaded, and a C++ graph's recorded launches (recorded when a paired round's
prepare loads the module), so visiting a job again (paired rounds do, many times) costs only the timing; a
Triton job's visit draws its inputs again from the same seed, a C++ graph's launches were recorded on that draw.

Writes ``kernels.csv`` (index columns + ``n,median_ms,mean_ms,std_ms,min_ms,gb,gb_per_s,status,error``),
``kernel_samples.json`` in the round format with this run as its one round ({organized relative path:
[[ms, ...]]}) and ``kernels_seed.csv`` (the seed's ``relative_dir,filename,kernel_name,ms_per_call,gb_per_s``).
``--jobs`` (with ``--device``, ``--node``) is one shard of ``invoke kernels`` over an executor
(``prbench.compare.kernel_shards``): those jobs of the plan on that one device, the outputs holding only their kernels.
The worker protocol is ``stages.support.worker_process``; ``invoke compare`` drives the same workers through the paired
orchestrator ``stages.paired`` (jobs from `plan_jobs`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from analysis.kernels.results import KernelRow, kernel_gb, summarize_rounds, write_results
from foundation.errors import UserError
from foundation.formats.kernel_index import IndexRow, graph_module_problem
from foundation.formats.round_shards import parse_block_ranges
from foundation.formats.run_layout import WORK_DIR
from foundation.formats.stage_records import (
    INTERPRETER_ITERATIONS,
    KERNEL_WORKER,
    LOAD,
    WORKER_DEVICE_ENV,
    Job,
    load_rows,
    parse_devices,
    plan_jobs,
    worker_env,
)
from foundation.hip_modules import is_error_209, modules_per_worker
from stages.entry import StageArgumentParser, run_as_script
from stages.support import cpp_replay, kernel_numerics
from stages.support.borrowed_binaries import borrowed_binaries
from stages.support.progress import progress_line
from stages.support.worker_process import (
    JobHandler,
    Worker,
    WorkerFailure,
    one_line_error,
    reply_outcomes,
    serve,
    watch_lifeline,
)

L2_FLUSH_BYTES = 256 * 1024 * 1024  # as Triton's do_bench and Inductor's benchmarker: larger than any L2
# The recorded launches a worker keeps (their arguments and saved buffers): the tiny default's 7 graph modules
# hold a few MB; a full-size suite's graphs can hold GBs, and past this a job is recorded again at every visit.
RECORDED_BYTES_MAX = 2 << 30


# --- timing (worker side; torch objects are passed in so the logic is testable without a GPU) ------------------


class DeviceEventTimer:
    """Device-event timing: flush L2, record start, call, record end; read all events after one synchronize."""

    def __init__(self, event_factory: Callable[[], Any], synchronize: Callable[[], None],
                 flush_l2: Callable[[], object]) -> None:
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
class Outcome:
    samples: list[float] = field(default_factory=list)
    error: str = ""


def split_unrunnable(jobs: list[Job], organized: Path) -> tuple[list[Job], dict[str, Outcome]]:
    """Graph jobs whose module is missing or cut short become failure outcomes for each of their kernels
    (with a warning line) instead of costing a worker start that can only fail."""
    runnable: list[Job] = []
    failed: dict[str, Outcome] = {}
    for job in jobs:
        problem = graph_job_problem(job, organized) if job.kind == "graph" else None
        if problem is None:
            runnable.append(job)
            continue
        print(f"warning: {problem}; {len(job.kernels)} kernels not run", flush=True)
        failed.update({path: Outcome(error=problem) for path in job.kernels.values()})
    return runnable, failed


def graph_job_problem(job: Job, organized: Path) -> str | None:
    path = Path(job.path)
    shown = path.relative_to(organized).as_posix() if path.is_relative_to(organized) else str(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"graph module {shown} cannot be read ({exc.strerror or type(exc).__name__})"
    problem = graph_module_problem(text)
    return f"graph module {shown} {problem}" if problem else None


# --- worker process (host side) ----------------------------------------------------------------------------------


def run_jobs(jobs: list[Job], workers: list[Worker], progress: Callable[[str], None] = print,
             modules_per_worker: int = 0) -> dict[str, Outcome]:
    """Spread jobs over the workers (one thread each pulls from a shared queue); {relative path: outcome}. A worker
    is replaced by a fresh one after ``modules_per_worker`` jobs (0: never) and after an error 209
    (`RecycledWorker`)."""
    pending: queue.Queue[Job] = queue.Queue()
    for job in jobs:
        pending.put(job)
    outcomes: dict[str, Outcome] = {}
    lock = threading.Lock()
    done = [0]

    def drive(worker: Worker) -> None:
        recycled = RecycledWorker(worker, modules_per_worker, progress)
        while True:
            try:
                job = pending.get_nowait()
            except queue.Empty:
                return
            try:
                results = recycled.run(job)
            except Exception as exc:
                worker.stop()
                results = {path: Outcome(error=f"runner error: {one_line_error(exc)}") for path in job.kernels.values()}
            with lock:
                outcomes.update(results)
                done[0] += 1
                failed = sum(1 for o in results.values() if o.error)
                status = f"{failed} failed" if failed else "ok"
                progress(progress_line("kernels", done[0], len(jobs), f"{worker.name} {Path(job.path).name}: {status}"))

    threads = [threading.Thread(target=drive, args=(w,), daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for worker in workers:
        worker.stop()
    return outcomes


class RecycledWorker:
    """A worker that loads at most ``limit`` kernel modules (0: no limit) before a fresh one takes over, and whose
    job that failed with error 209 runs once more in a fresh worker (``foundation.hip_modules``)."""

    def __init__(self, worker: Worker, limit: int, say: Callable[[str], None]) -> None:
        self.worker = worker
        self.limit = limit
        self.say = say
        self.starts = worker.starts  # the worker process the count is for
        self.loaded = 0

    def run(self, job: Job) -> dict[str, Outcome]:
        results = self._once(job)
        if not _error_209(results):
            return results
        self.say(f"kernels: {self.worker.name} {Path(job.path).name}: error 209; run again in a fresh worker")
        self.worker.stop()
        results = self._once(job)
        if _error_209(results):
            self.worker.stop()  # its module table may be full: the next job starts a fresh worker
        return results

    def _once(self, job: Job) -> dict[str, Outcome]:
        if self.limit and self.loaded >= self.limit:
            self.worker.stop()
        results = _run_one(self.worker, job)  # starts a worker that is not running
        if self.worker.starts != self.starts:
            self.starts, self.loaded = self.worker.starts, 0
        self.loaded += 1
        return results


def _error_209(results: dict[str, Outcome]) -> bool:
    return any(is_error_209(outcome.error) for outcome in results.values())


def _run_one(worker: Worker, job: Job) -> dict[str, Outcome]:
    """One job on one worker: {relative path: outcome}; a crash, hang or garbled reply fails this job only."""
    try:
        reply = worker.run(asdict(job), job.timeout_s)
    except WorkerFailure as exc:
        return {path: Outcome(error=str(exc)) for path in job.kernels.values()}
    per_name = reply_outcomes(reply, list(job.kernels))
    return {path: Outcome(*per_name[name]) for name, path in job.kernels.items()}


# --- worker process (worker side) ------------------------------------------------------------------------------


def worker_main(result_fd: int) -> int:
    watch_lifeline()  # before the seconds of imports: a worker never outlives its stage
    return serve(result_fd, worker_setup()())


def worker_setup() -> Callable[[], JobHandler]:
    """This process made ready to be a kernel worker (Inductor prepared); returns what makes the worker's job
    handler, its timer and placement draws its own (a process forked after the setup makes one of its own:
    ``benchmarks/forked_workers.py``)."""
    from stages.support.environment import prepare_inductor

    prepare_inductor()
    if os.environ.get("TRITON_INTERPRET") == "1":
        from stages.support import triton_cpu

        triton_cpu.install()

    def handler() -> JobHandler:
        worker = KernelWorker(_make_timer())
        return lambda job: worker.execute(Job(**job))

    return handler


def _make_timer() -> DeviceEventTimer | WallTimer:
    import torch

    if os.environ.get(WORKER_DEVICE_ENV) == "gpu" and torch.cuda.is_available():
        return cuda_event_timer()
    return WallTimer()


def load_module(path: str, name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def inductor_cache(cache_dir: str) -> Iterator[None]:
    """Inductor's cache is ``cache_dir`` while the block runs ("" = the worker's own): a graph module loads its
    compiled C++ kernels from the cache its source hashes into while it is imported (Inductor reads
    TORCHINDUCTOR_CACHE_DIR at each lookup), and then holds them, so only the import needs it."""
    if not cache_dir:
        yield
        return
    own = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    try:
        yield
    finally:
        if own is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = own


def load_from_cache(path: str, name: str, cache_dir: str) -> Any:
    """Import a graph module whose C++ kernels were compiled into ``cache_dir`` ("" = this process's own cache),
    running the binaries found there (``stages.support.borrowed_binaries``), not a build of this process's own."""
    with inductor_cache(cache_dir):
        if not cache_dir:
            return load_module(path, name)
        with borrowed_binaries(cache_dir) as found:
            module = load_module(path, name)
    if found.compiled:
        print(f"{path}: {len(found.compiled)} C++ source(s) not built in {cache_dir}, compiled here",
              file=sys.stderr, flush=True)
    return module


def seeded_args(module: Any) -> Any:
    """The module's example inputs, drawn from the same seed on every visit of either side.

    Kernel time can depend on the values (a C++ GELU + layer-norm kernel measured 39 µs on one random draw and
    98 µs on another, each stable to 1 %): unseeded, every visit would time different inputs and the
    comparison would measure the draw, not the change.
    """
    from stages.support.hf_models import seed_everything

    seed_everything()
    return module.get_args()


class KernelWorker:
    """One worker process: its timer, and the modules it has loaded and the C++ graphs' launches it has recorded,
    kept for the next visit of the same job (a paired round visits every job many times; loading a graph module
    again would cost more than timing it, and recording its launches again — the graph's call() with the
    writable arguments cloned — about as much as its samples)."""

    def __init__(self, timer: DeviceEventTimer | WallTimer) -> None:
        self.timer = timer
        self.modules: dict[str, Any] = {}
        self.writable: dict[str, dict[str, set[int] | None]] = {}
        self.recorded: dict[tuple[str, tuple[str, ...]], list[cpp_replay.Launch]] = {}
        self.recorded_bytes = 0
        self.profiler_warm = False
        self.numerics = kernel_numerics.Recorder.from_environment()
        # Where each visit places a C++ kernel's buffers and which copy of its code it runs (`cpp_replay.placed`):
        # drawn per worker, so no side keeps one placement for the whole comparison.
        self.placement = random.Random()
        self.code: dict[Callable[..., Any], tuple[Callable[..., Any], ...]] = {}  # a kernel's code → its copies

    def module(self, job: Job) -> Any:
        if job.path not in self.modules:
            self.modules[job.path] = load_from_cache(job.path, f"prbench_kernels_{len(self.modules)}", job.cache_dir)
        return self.modules[job.path]

    def execute(self, job: Job) -> dict[str, Any]:
        module = self.module(job)
        if job.kind == LOAD:
            if self.writable_of(job.path):  # a C++ graph module: recorded now and kept for the round's visits
                self.launches(job, module, keep=True)
            return {"results": {name: {} for name in job.kernels}}
        if job.kind == "triton":
            args = seeded_args(module)
            self.numerics.guarded(job.id, lambda: self.numerics.record_call(job.id, job.kernels, module, list(args)))
            samples = self.timer.time(lambda: module.call(args), job.warmup, job.iterations)
            (name,) = job.kernels
            return {"results": {name: {"samples": samples}}}
        return {"results": self.time_graph_kernels(job, module)}

    def writable_of(self, path: str) -> dict[str, set[int] | None]:
        if path not in self.writable:
            self.writable[path] = cpp_replay.writable_arguments(path)
        return self.writable[path]

    def launches(self, job: Job, module: Any, keep: bool) -> list[cpp_replay.Launch]:
        """The job's launches: those kept, else recorded now, and kept if ``keep`` (a paired round's prepare: many
        visits follow; ``invoke kernels`` visits a job once) while the worker's recorded buffers stay under
        ``RECORDED_BYTES_MAX``; beyond it, recorded again at every visit.

        Every visit replays the same recorded launches: each replay restores what its kernel may write, so the
        kernels compute on the values of the seeded draw at every visit, as when each visit recorded its own.
        """
        key = (job.path, tuple(sorted(job.kernels)))
        if key in self.recorded:
            return self.recorded[key]
        if not self.profiler_warm:
            cpp_replay.warm_profiler()
            self.profiler_warm = True
        launches = cpp_replay.with_copies(
            cpp_replay.record_launches(module, seeded_args(module), job.kernels, self.writable_of(job.path)),
            cpp_replay.CODE_COPIES, self.code)
        size = cpp_replay.held_bytes(launches)
        if keep and self.recorded_bytes + size <= RECORDED_BYTES_MAX:
            self.recorded[key] = launches
            self.recorded_bytes += size
        return launches

    def time_graph_kernels(self, job: Job, module: Any) -> dict[str, dict[str, Any]]:
        """Each of the job's C++ kernels replayed alone (``stages.support.cpp_replay``): {kernel: samples}."""
        launches = self.launches(job, module, keep=False)
        self.numerics.guarded(job.id, lambda: self.numerics.record_graph(  # once per run: numerical A/B records
            job.id, job.kernels, module, lambda: seeded_args(module), self.writable_of(job.path)))
        samples = cpp_replay.time_launches(launches, job.warmup, job.iterations, self.placement)
        launched = {launch.kernel for launch in launches}
        results: dict[str, dict[str, Any]] = {}
        for name in job.kernels:
            if samples.get(name):
                results[name] = {"samples": samples[name]}
            elif name not in launched:
                results[name] = {"error": f"the graph's call() did not launch {name}"}
            else:
                results[name] = {"error": f"no profiler events for {name}: compile with "
                                          "torch._inductor.config.cpp.enable_kernel_profile = True"}
        return results


# --- results ----------------------------------------------------------------------------------------------------


def summarize(row: IndexRow, outcome: Outcome, gb: float | None) -> KernelRow:
    """This run is one round: the kernel's samples, or its failure."""
    return summarize_rounds(row, [] if outcome.error else [outcome.samples], gb, outcome.error)


def write_outputs(out: Path, rows: list[KernelRow], outcomes: dict[str, Outcome]) -> None:
    write_results(out, rows, {r.index.path: [outcomes[r.index.path].samples] for r in rows if r.status == "ok"})


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
    jobs: list[int] | None = None  # one shard of the plan's jobs (``prbench.compare.kernel_shards``); None: every job
    modules_per_worker: int = 0  # kernel modules per worker process before a fresh one (0: no limit)


def detect_platform(devices: list[str]) -> str:
    if all(d == "cpu" for d in devices):
        return "cpu"
    import torch

    return "rocm" if torch.version.hip else "cuda"


def shard_of(jobs: list[Job], rows: list[IndexRow], chosen: list[int]) -> tuple[list[Job], list[IndexRow]]:
    """The chosen jobs of the plan and the index rows they time (one shard of an executor's run)."""
    beyond = [j for j in chosen if j >= len(jobs)]
    if beyond:
        raise UserError(f"--jobs: job {beyond[0]} is beyond the plan's {len(jobs)} jobs (0-{len(jobs) - 1})")
    wanted = set(chosen)
    picked = [job for job in jobs if job.id in wanted]
    covered = {path for job in picked for path in job.kernels.values()}
    return picked, [row for row in rows if row.path in covered]


def run(settings: RunSettings) -> list[KernelRow]:
    rows = load_rows(settings.organized, settings.filter)
    on_cpu = all(d == "cpu" for d in settings.devices)
    interpreted = on_cpu and any(r.backend == "triton" for r in rows)
    jobs = plan_jobs(rows, settings.organized, settings.warmup, settings.iterations, settings.timeout_s,
                     settings.interpreter_iterations if interpreted else None)
    if settings.jobs is not None:
        jobs, rows = shard_of(jobs, rows, settings.jobs)
        stale = [(settings.organized / r.path).with_suffix(".best_config") for r in rows]  # other shards' are theirs
    else:
        stale = list(settings.organized.rglob("*.best_config"))
    for path in stale:
        path.unlink(missing_ok=True)  # a previous run's autotune choice must not spare this run the autotuning
    base_env = dict(os.environ)
    if interpreted:
        base_env["TRITON_INTERPRET"] = "1"
        print("kernels: Triton kernels on CPU run in the Triton interpreter: correctness only, timings are "
              "not performance", flush=True)
    workers = [
        Worker(f"worker{i}[{device}]", KERNEL_WORKER,
               worker_env(device, settings.platform, base_env, settings.work_dir / f"worker{i}", settings.cache_dir),
               settings.work_dir / f"worker{i}.log")
        for i, device in enumerate(settings.devices)
    ]
    jobs, unrunnable = split_unrunnable(jobs, settings.organized)
    print(f"kernels: {len(rows)} kernels in {len(jobs)} jobs on {len(workers)} worker(s)", flush=True)
    outcomes = {**unrunnable, **run_jobs(jobs, workers, progress=lambda line: print(line, flush=True),
                                         modules_per_worker=settings.modules_per_worker)}
    results = [summarize(r, outcomes.get(r.path, Outcome(error="not run")), kernel_gb(settings.organized / r.path))
               for r in rows]
    write_outputs(settings.out, results, outcomes)
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = StageArgumentParser(prog="python -m stages.kernels", description=__doc__.splitlines()[0])
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
    parser.add_argument("--interpreter-iterations", type=int, default=INTERPRETER_ITERATIONS,
                        help="timed calls for Triton kernels in the CPU interpreter (~1 s each; no warm-up)")
    parser.add_argument("--jobs", default=None,
                        help="only these jobs of the plan, as ranges like 0-31,40 (one shard of an executor's run; "
                             "the outputs then hold only their kernels)")
    parser.add_argument("--device", default=None,
                        help="the one device to time on instead of --devices (an executor's placement): cpu or a "
                             "GPU index")
    parser.add_argument("--node", default="", help="the node's name (an executor's placement), shown in the log")
    parser.add_argument("--modules-per-worker", type=int, default=None,
                        help="kernel modules a worker loads before a fresh one takes over (0: no limit; default: "
                             "the platform's, foundation.hip_modules)")
    return parser


def _per_worker(given: int | None, platform: str) -> int:
    if given is None:
        return modules_per_worker(platform)
    if given < 0:
        raise UserError(f"--modules-per-worker {given}: expected 0 (no limit) or a positive number")
    return given


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        return worker_main(args.result_fd)
    from stages.support.environment import prepare_inductor

    prepare_inductor()
    if args.dir is None:
        raise UserError("--dir is required")
    devices = parse_devices(args.device or args.devices)
    if args.device is not None and len(devices) != 1:
        raise UserError(f"--device {args.device!r}: expected cpu or one GPU index")
    if args.node:
        print(f"kernels: on node {args.node}, device {devices[0]}", flush=True)
    out = args.out or args.dir.resolve().parent
    platform = detect_platform(devices) if args.platform == "auto" else args.platform
    settings = RunSettings(
        organized=args.dir.resolve(), out=out, devices=devices, platform=platform,
        warmup=args.warmup, iterations=args.iterations, timeout_s=args.timeout,
        cache_dir=args.cache_dir.resolve() if args.cache_dir else None,
        work_dir=(args.work_dir or out / WORK_DIR / "kernels").resolve(), filter=args.filter,
        interpreter_iterations=args.interpreter_iterations,
        jobs=parse_block_ranges(args.jobs, "--jobs") if args.jobs is not None else None,
        modules_per_worker=_per_worker(args.modules_per_worker, platform),
    )
    results = run(settings)
    failed = [r for r in results if r.status != "ok"]
    print(f"kernels: {len(results) - len(failed)} timed, {len(failed)} failed → {settings.out / 'kernels.csv'}",
          flush=True)
    return 0


if __name__ == "__main__":
    run_as_script(main)
