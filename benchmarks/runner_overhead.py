"""Per-kernel orchestration overhead: the seed's ``python kernel.py`` per file vs prbench's worker runner.

    python benchmarks/runner_overhead.py [--kernels 8]                                    # CPU, Triton interpreter
    python benchmarks/runner_overhead.py --organized RUN/base/organized --device 0 [--kernels 8]   # one GPU

The same N real Inductor Triton kernel files are run two ways:

* the seed's way: one ``python <kernel>.py`` process per file, as run_triton_new.sh did. Its harness's benchmark
  line is set to ``warmup=0, rep=0`` so the benchmarker makes as few calls as it will (one per phase for
  ``benchmark_cpu``; Inductor's ``benchmark_gpu`` ignores both and still makes ~100). Nobody can know from
  outside how many calls a harness makes, so a probe wrapped around the file's ``call`` counts and times them,
  printed at exit; the harness's own ``<ms>ms <GB>GB <GB/s>GB/s`` line must still be there, as
  run_triton_new.sh expects;
* prbench's way: ``python -m stages.kernels`` with one worker. Its calls are the samples it recorded in
  kernel_samples.json (a flat list per kernel, or one list per round).

Orchestration overhead per kernel = wall time per kernel − the time inside the kernel calls that method made:
each method subtracts its own calls, counted and timed, never an assumed number, so neither is charged for the
other's amount of timing work. Untimed warm-up calls would count as prbench's overhead, which can only make
prbench look worse; there are none in either mode.

* CPU (default): the pointwise fixtures in tests/fixtures/kernels/triton213 (torch 2.13 output), copied under
  N names, through the Triton interpreter (``TRITON_INTERPRET=1``, prbench with 1 timed call). They work on a
  few hundred elements, so orchestration (interpreter start-up, torch/triton imports, worker start-up
  amortized over the run) dominates. Only the structure is measured: there is no CUDA context per process.
* GPU (``--organized DIR --device I``): the first N Triton kernels (by path) of an organized directory from a
  real run, so the seed's side pays what it really pays on a GPU (a CUDA context per process). prbench runs
  with ``--warmup 0`` and as many timed calls as the seed's harness made, so the first call, which compiles and
  autotunes, is timed (and subtracted) on both sides; each side gets fresh Triton and Inductor caches, so both
  compile. Per call the probe sees the Python launch time (calls are asynchronous) while prbench records
  device-event time: both are microseconds for these kernels, so apart from that first call the subtraction
  changes almost nothing either way.

Both methods find torch's bytecode compiled, kept where a local run's stages keep it (``prbench.runs.pipeline``), and
one untimed seed process fills that cache first: on a machine whose install keeps no bytecode, each process would
otherwise compile some 1,200 modules again (5 s on an H200 machine), a cost neither method should be charged.

Goal: ours <= 1/10 of the seed's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.kernels.benchmark_line import rewrite_benchmark_line  # noqa: E402
from analysis.kernels.identity import identify_triton  # noqa: E402
from foundation.errors import UserError  # noqa: E402
from foundation.formats.kernel_index import IndexRow, read_index, write_index  # noqa: E402
from prbench.commands.cli import OneLineParser  # noqa: E402
from prbench.runners.local import python_keeps_bytecode  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "kernels" / "triton213"
SOURCES = ("triton_poi_fused_add_relu_sin_0", "triton_poi_fused_add_t_0")  # no libdevice: runnable without a shim
KERNEL_LINE = re.compile(r"^\s*(?P<ms>\d+\.\d+|inf|nan)ms\s+(?P<gb>\d+\.\d+)GB\s+(?P<gbps>\d+\.\d+|inf|nan)GB/s\s*$",
                         re.M)
MAIN_GUARD = re.compile(r"^if __name__ == ['\"]__main__['\"]:", re.M)
SEED_TIMEOUT_S = 600  # one seed process (a kernel that hangs must not hang the benchmark)
PROBE_LINE = re.compile(r"^prbench-probe: (?P<calls>\d+) calls (?P<ms>\d+\.\d+) ms$", re.M)
# Wrapped around the seed file's `call` (before its main block): the harness's lambda looks `call` up at call
# time, so every call it makes is counted and timed; the total is printed when the process exits.
CALL_PROBE = """
import atexit as _probe_atexit
import time as _probe_time

_probe_inner, _probe_ms = call, []


def call(args):
    begin = _probe_time.perf_counter()
    try:
        return _probe_inner(args)
    finally:
        _probe_ms.append((_probe_time.perf_counter() - begin) * 1e3)


_probe_atexit.register(lambda: print(f"prbench-probe: {len(_probe_ms)} calls {sum(_probe_ms):.6f} ms", flush=True))


"""


@dataclass(frozen=True)
class MethodCost:
    """One method's cost per kernel: wall time, and the calls it made inside that wall time."""

    wall_s: float
    calls: float  # mean number of kernel calls per kernel
    call_s: float  # mean time inside those calls per kernel

    @property
    def overhead_s(self) -> float:
        return self.wall_s - self.call_s


def add_probe(source: str, name: str = "kernel file") -> str:
    match = MAIN_GUARD.search(source)
    if match is None:
        raise SystemExit(f"seed way: {name} has no `if __name__ == '__main__':` harness")
    return source[:match.start()] + CALL_PROBE + source[match.start():]


def place_kernel(root: Path, relative: str, source: str) -> Path:
    """One kernel file, its harness making the fewest calls: at ``root/relative`` for prbench, and probed at the
    same relative path under ``root/../seed`` for the seed way (that path is returned)."""
    text = rewrite_benchmark_line(source, rep=0, warmup=0)
    timed, seed = root / relative, root.parent / "seed" / relative
    for path in (timed, seed):
        path.parent.mkdir(parents=True, exist_ok=True)
    timed.write_text(text)
    seed.write_text(add_probe(text, relative))
    return seed


def build_organized(root: Path, count: int) -> list[Path]:
    """CPU mode: the fixtures copied under ``count`` names into an organized directory; the seed way's copies."""
    rows, seed_paths = [], []
    for i in range(count):
        name = SOURCES[i % len(SOURCES)]
        renamed = f"{name}_copy{i}"
        text = (FIXTURES / f"{name}.py").read_text().replace(name, renamed)
        relative = f"pointwise/{renamed}.py"
        seed_paths.append(place_kernel(root, relative, text))
        identity = identify_triton(text)
        rows.append(IndexRow(identity.category, identity.kernel_name, identity.body_hash, identity.shape_key,
                             identity.legacy_key, relative, 1, "", "triton", ""))
    write_index(root / "index.csv", rows)
    return seed_paths


def triton_rows(organized: Path, count: int) -> list[IndexRow]:
    """GPU mode: the first ``count`` Triton rows of an organized index by path (the same kernels every time)."""
    index = organized / "index.csv"
    if not index.is_file():
        raise UserError(f"--organized {organized}: no index.csv (not an organized directory)")
    rows = sorted((row for row in read_index(index) if row.backend == "triton"), key=lambda row: row.path)[:count]
    if not rows:
        raise UserError(f"--organized {organized}: index.csv lists no Triton kernels")
    missing = [row.path for row in rows if not (organized / row.path).is_file()]
    if missing:
        raise UserError(f"--organized {organized}: {missing[0]} is in index.csv but not in the directory")
    return rows


def copy_organized(source: Path, rows: list[IndexRow], root: Path) -> list[Path]:
    """GPU mode: the rows' files copied into a fresh organized directory indexing only them; the seed way's copies."""
    seed_paths = [place_kernel(root, row.path, (source / row.path).read_text()) for row in rows]
    write_index(root / "index.csv", rows)
    return seed_paths


def clean_env(tmp: Path) -> dict[str, str]:
    """Both methods' environment: fresh caches, and torch's bytecode kept as a local run's stages keep it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TRITON_"))}
    env.update(TMPDIR=str(tmp), OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), TORCHINDUCTOR_CACHE_DIR=str(tmp / "ind"))
    if not python_keeps_bytecode(sys.executable):
        env.update(PYTHONPYCACHEPREFIX=str(tmp / "bytecode"), PYTHONDONTWRITEBYTECODE="")
    return env


def warm_bytecode(seed_path: Path, env: dict[str, str]) -> None:
    """One seed process, untimed, so that neither method is charged for compiling torch's bytecode (the first
    process on a machine whose install has none would be)."""
    warm = Path(env["TMPDIR"]) / "warm"
    warm.mkdir()
    copy = warm / seed_path.name  # a copy: nothing the run leaves beside its file reaches the timed runs
    shutil.copyfile(seed_path, copy)
    run_seed_file(copy, {**env, "TORCHINDUCTOR_CACHE_DIR": str(warm / "ind"), "TRITON_CACHE_DIR": str(warm / "triton")})


def run_seed_file(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, check=False,
                              timeout=SEED_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"seed way: {path} did not finish in {SEED_TIMEOUT_S} s") from None


def seed_way(paths: list[Path], env: dict[str, str]) -> MethodCost:
    """One process per file; its calls are what the probe counted."""
    walls, calls, call_s = [], [], []
    for path in paths:
        begin = time.perf_counter()
        done = run_seed_file(path, env)
        walls.append(time.perf_counter() - begin)
        probe = PROBE_LINE.search(done.stdout)
        if done.returncode != 0 or not KERNEL_LINE.search(done.stdout) or probe is None:
            raise SystemExit(f"seed way: {path} failed (exit status {done.returncode}): "
                             f"{done.stdout[-300:]}{done.stderr[-500:]}")
        calls.append(int(probe.group("calls")))
        call_s.append(float(probe.group("ms")) / 1e3)
    return MethodCost(statistics.fmean(walls), statistics.fmean(calls), statistics.fmean(call_s))


def recorded_calls(samples: dict[str, Any]) -> dict[str, list[float]]:
    """kernel_samples.json → every recorded call per kernel (ms): a flat list, or one list per round."""
    calls: dict[str, list[float]] = {}
    for path, values in samples.items():
        if not isinstance(values, list):
            raise SystemExit(f"our way: kernel_samples.json: {path}: expected a list, got {type(values).__name__}")
        rounds = values if values and all(isinstance(v, list) for v in values) else [values]
        calls[path] = [float(ms) for one_round in rounds for ms in one_round]
    return calls


def our_way(organized: Path, out: Path, env: dict[str, str], runner_args: list[str], count: int) -> MethodCost:
    """One ``stages.kernels`` run over the ``count`` kernels of ``organized``; its calls are the samples it kept."""
    argv = [sys.executable, "-m", "stages.kernels", "--dir", str(organized), "--out", str(out), *runner_args]
    begin = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - begin
    if done.returncode != 0:
        raise SystemExit(f"our way failed: {done.stdout[-500:]}{done.stderr[-500:]}")
    calls = recorded_calls(json.loads((out / "kernel_samples.json").read_text()))
    timed = {path: ms for path, ms in calls.items() if ms}
    if len(timed) != count:
        raise SystemExit(f"our way: only {len(timed)} of {count} kernels timed: {done.stdout[-500:]}")
    return MethodCost(wall / len(timed), statistics.fmean(len(ms) for ms in timed.values()),
                      statistics.fmean(sum(ms) for ms in timed.values()) / 1e3)


def describe(label: str, cost: MethodCost) -> str:
    return (f"{label}: {cost.wall_s * 1e3:9.1f} ms/kernel wall, {cost.calls:g} calls taking "
            f"{cost.call_s * 1e3:7.1f} ms, overhead {cost.overhead_s * 1e3:9.1f} ms/kernel")


def cpu_run(count: int, tmp: Path) -> tuple[str, MethodCost, MethodCost]:
    """The fixtures through the Triton interpreter: (what was run, seed, ours)."""
    organized = tmp / "organized"
    seed_paths = build_organized(organized, count)
    env = clean_env(tmp)
    warm_bytecode(seed_paths[0], {**env, "TRITON_INTERPRET": "1"})
    seed = seed_way(seed_paths, {**env, "TRITON_INTERPRET": "1"})
    ours = our_way(organized, tmp, env, ["--devices", "cpu", "--interpreter-iterations", "1"], count)
    return f"kernels: {count} real Inductor Triton files (CPU, Triton interpreter)", seed, ours


def gpu_run(source: Path, rows: list[IndexRow], device: str, tmp: Path) -> tuple[str, MethodCost, MethodCost]:
    """The rows' kernels on GPU ``device``, each side with fresh caches: (what was run, seed, ours)."""
    organized = tmp / "organized"
    seed_paths = copy_organized(source, rows, organized)
    env = clean_env(tmp)
    warm_bytecode(seed_paths[0], {**env, "CUDA_VISIBLE_DEVICES": device})
    seed = seed_way(seed_paths, {**env, "CUDA_VISIBLE_DEVICES": device, "TRITON_CACHE_DIR": str(tmp / "seed-triton"),
                                 "TORCHINDUCTOR_CACHE_DIR": str(tmp / "seed-ind")})
    iterations = max(1, round(seed.calls))  # as many calls as the seed's harness made; the first one compiles
    ours = our_way(organized, tmp, env, ["--devices", device, "--warmup", "0", "--iterations", str(iterations)],
                   len(rows))
    return (f"kernels: {len(rows)} real Inductor Triton files from {source} (GPU {device}); prbench ran --warmup 0 "
            f"--iterations {iterations}, the seed harness's mean calls per kernel, so both time the first "
            "(compiling, autotuning) call; caveat: per call the seed's probe sees the Python launch time (calls are "
            "asynchronous) and prbench device-event time, microseconds either way, so past that first call "
            "subtracting the calls changes almost nothing"), seed, ours


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=8, help="number of kernel files (default 8)")
    parser.add_argument("--organized", type=Path, default=None,
                        help="GPU mode: an organized directory (index.csv); its first N Triton kernels by path")
    parser.add_argument("--device", default=None, help="GPU mode: the GPU index to run on (with --organized)")
    args = parser.parse_args(argv)
    if args.kernels < 1:
        parser.error(f"--kernels {args.kernels}: expected at least 1")
    if args.organized is not None and args.device is None:
        parser.error("--organized needs --device (the GPU to run its kernels on)")
    if args.device is not None and args.organized is None:
        parser.error("--device needs --organized (the organized directory whose kernels to run)")
    if args.device is not None and not args.device.isdigit():
        parser.error(f"--device {args.device!r}: expected a GPU index such as 0")
    try:
        rows = triton_rows(args.organized, args.kernels) if args.organized is not None else []
    except UserError as exc:
        parser.error(str(exc))
    tmp = Path(tempfile.mkdtemp(prefix="prbench-overhead-"))
    try:
        what, seed, ours = gpu_run(args.organized, rows, args.device, tmp) if rows else cpu_run(args.kernels, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(what)
    print(describe("seed (python kernel.py per file)", seed))
    print(describe("prbench (worker runner)         ", ours))
    ratio = ours.overhead_s / seed.overhead_s
    print(f"overhead ratio prbench/seed: {ratio:.3f} (goal <= 0.100: {'met' if ratio <= 0.1 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
