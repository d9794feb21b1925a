"""Per-kernel orchestration overhead: the seed's ``python kernel.py`` per file vs prbench's worker runner.

    python benchmarks/runner_overhead.py [--kernels 8]

What it measures, honestly: the same N real Inductor Triton kernel files (torch 2.13 output generated on this
machine: the pointwise fixtures in tests/fixtures/kernels/triton213, copied under N names) are run

* the seed's way: one ``python <kernel>.py`` process per file (``TRITON_INTERPRET=1``: there is no GPU), the
  harness's benchmark line set to ``warmup=0, rep=0`` so ``benchmark_cpu`` makes as few calls as it can (one
  per phase). A probe wrapped around the file's ``call`` counts the calls the harness really made and their
  time, printed at exit; the harness's own ``<ms>ms <GB>GB <GB/s>GB/s`` line must still be there, as
  run_triton_new.sh expects;
* prbench's way: ``python -m stages.kernels`` with one worker in interpreter mode (no warm-up, 1 timed call).
  Its calls are the samples it recorded in kernel_samples.json (a flat list per kernel, or one list per round).

Orchestration overhead per kernel = wall time per kernel − the time spent inside the kernel calls that method
made (each method subtracts its own calls, counted and timed, never an assumed number). The kernels work on a
few hundred elements, so the interpreter's per-call cost is small and orchestration (interpreter start-up,
torch/triton imports, worker start-up amortized over the run) dominates. Untimed warm-up calls would count as
prbench's overhead (there are none in interpreter mode), which can only make prbench look worse. On a GPU the
absolute numbers differ (CUDA context creation per process adds to the seed's side); this measures only the
orchestration structure. Goal: ours <= 1/10 of the seed's.
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

from analysis.benchmark_line import rewrite_benchmark_line  # noqa: E402
from analysis.kernel_identity import identify_triton  # noqa: E402
from analysis.kernel_index import IndexRow, write_index  # noqa: E402
from prbench.cli import OneLineParser  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "kernels" / "triton213"
SOURCES = ("triton_poi_fused_add_relu_sin_0", "triton_poi_fused_add_t_0")  # no libdevice: runnable without a shim
KERNEL_LINE = re.compile(r"^\s*(?P<ms>\d+\.\d+|inf|nan)ms\s+(?P<gb>\d+\.\d+)GB\s+(?P<gbps>\d+\.\d+|inf|nan)GB/s\s*$",
                         re.M)
MAIN_GUARD = re.compile(r"^if __name__ == ['\"]__main__['\"]:", re.M)
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


def add_probe(source: str) -> str:
    match = MAIN_GUARD.search(source)
    if match is None:
        raise SystemExit("seed way: kernel file without an `if __name__ == '__main__':` harness")
    return source[:match.start()] + CALL_PROBE + source[match.start():]


def build_organized(root: Path, count: int) -> list[Path]:
    """The organized directory prbench times, and the probed copies of the same files the seed way runs."""
    rows, seed_paths = [], []
    for i in range(count):
        name = SOURCES[i % len(SOURCES)]
        text = (FIXTURES / f"{name}.py").read_text()
        renamed = f"{name}_copy{i}"
        text = rewrite_benchmark_line(text.replace(name, renamed), rep=0, warmup=0)
        path = root / "pointwise" / f"{renamed}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        seed_path = root.parent / "seed" / f"{renamed}.py"
        seed_path.parent.mkdir(parents=True, exist_ok=True)
        seed_path.write_text(add_probe(text))
        identity = identify_triton(text)
        rows.append(IndexRow(identity.category, identity.kernel_name, identity.body_hash, identity.shape_key,
                             identity.legacy_key, path.relative_to(root).as_posix(), 1, "", "triton", ""))
        seed_paths.append(seed_path)
    write_index(root / "index.csv", rows)
    return seed_paths


def clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TRITON_"))}
    env.update(TMPDIR=str(tmp), OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), TORCHINDUCTOR_CACHE_DIR=str(tmp / "ind"))
    return env


def seed_way(paths: list[Path], env: dict[str, str]) -> MethodCost:
    """One process per file; its calls are what the probe counted."""
    env = {**env, "TRITON_INTERPRET": "1"}
    walls, calls, call_s = [], [], []
    for path in paths:
        begin = time.perf_counter()
        done = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - begin)
        probe = PROBE_LINE.search(done.stdout)
        if done.returncode != 0 or not KERNEL_LINE.search(done.stdout) or probe is None:
            raise SystemExit(f"seed way: {path.name} failed: {done.stdout[-300:]}{done.stderr[-500:]}")
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


def our_way(organized: Path, out: Path, env: dict[str, str]) -> MethodCost:
    argv = [sys.executable, "-m", "stages.kernels", "--dir", str(organized), "--out", str(out), "--devices", "cpu",
            "--interpreter-iterations", "1"]
    begin = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - begin
    if done.returncode != 0:
        raise SystemExit(f"our way failed: {done.stdout[-500:]}{done.stderr[-500:]}")
    calls = recorded_calls(json.loads((out / "kernel_samples.json").read_text()))
    timed = {path: ms for path, ms in calls.items() if ms}
    expected = len(list((organized / "pointwise").glob("*.py")))
    if len(timed) != expected:
        raise SystemExit(f"our way: only {len(timed)} of {expected} kernels timed; see {out / 'kernels.csv'}")
    return MethodCost(wall / len(timed), statistics.fmean(len(ms) for ms in timed.values()),
                      statistics.fmean(sum(ms) for ms in timed.values()) / 1e3)


def describe(label: str, cost: MethodCost) -> str:
    return (f"{label}: {cost.wall_s * 1e3:9.1f} ms/kernel wall, {cost.calls:g} calls taking "
            f"{cost.call_s * 1e3:7.1f} ms, overhead {cost.overhead_s * 1e3:9.1f} ms/kernel")


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=8, help="number of kernel files (default 8)")
    args = parser.parse_args(argv)
    if args.kernels < 1:
        parser.error(f"--kernels {args.kernels}: expected at least 1")
    tmp = Path(tempfile.mkdtemp(prefix="prbench-overhead-"))
    try:
        organized = tmp / "organized"
        seed_paths = build_organized(organized, args.kernels)
        env = clean_env(tmp)
        seed = seed_way(seed_paths, env)
        ours = our_way(organized, tmp, env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"kernels: {args.kernels} real Inductor Triton files (CPU, Triton interpreter)")
    print(describe("seed (python kernel.py per file)", seed))
    print(describe("prbench (worker runner)         ", ours))
    ratio = ours.overhead_s / seed.overhead_s
    print(f"overhead ratio prbench/seed: {ratio:.3f} (goal <= 0.100: {'met' if ratio <= 0.1 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
