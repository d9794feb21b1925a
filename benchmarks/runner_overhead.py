"""Per-kernel orchestration overhead: the seed's ``python kernel.py`` per file vs prbench's worker runner.

    python benchmarks/runner_overhead.py [--kernels 8]

What it measures, honestly: the same N real Inductor Triton kernel files (torch 2.13 output generated on this
machine: the pointwise fixtures in tests/fixtures/kernels/triton213, copied under N names) are run

* the seed's way: one ``python <kernel>.py`` process per file (``TRITON_INTERPRET=1``: there is no GPU), the
  harness's benchmark line set to ``warmup=0, rep=0`` so ``benchmark_cpu`` makes exactly 2 calls; the printed
  ``<ms>ms <GB>GB <GB/s>GB/s`` line is parsed, as run_triton_new.sh does;
* prbench's way: ``python -m stages.kernels`` with one worker, warm-up 1 and 1 timed call (also 2 calls).

Orchestration overhead per kernel = wall time per kernel − the time spent inside the 2 kernel calls (from each
method's own per-call time). The kernels work on a few hundred elements, so the interpreter's per-call cost is
small and orchestration (interpreter start-up, torch/triton imports, worker start-up amortized over the run)
dominates. On a GPU the absolute numbers differ (CUDA context creation per process adds to the seed's side);
this measures only the orchestration structure. Goal: ours ≤ 1/10 of the seed's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.benchmark_line import rewrite_benchmark_line  # noqa: E402
from analysis.kernel_identity import identify_triton  # noqa: E402
from analysis.kernel_index import IndexRow, write_index  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "kernels" / "triton213"
SOURCES = ("triton_poi_fused_add_relu_sin_0", "triton_poi_fused_add_t_0")  # no libdevice: runnable without a shim
KERNEL_LINE = re.compile(r"^\s*(?P<ms>\d+\.\d+|inf|nan)ms\s+(?P<gb>\d+\.\d+)GB\s+(?P<gbps>\d+\.\d+|inf|nan)GB/s\s*$",
                         re.M)
CALLS_PER_KERNEL = 2


def build_organized(root: Path, count: int) -> list[Path]:
    rows, paths = [], []
    for i in range(count):
        name = SOURCES[i % len(SOURCES)]
        text = (FIXTURES / f"{name}.py").read_text()
        renamed = f"{name}_copy{i}"
        text = rewrite_benchmark_line(text.replace(name, renamed), rep=0, warmup=0)
        path = root / "pointwise" / f"{renamed}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        identity = identify_triton(text)
        rows.append(IndexRow(identity.category, identity.kernel_name, identity.body_hash, identity.shape_key,
                             identity.legacy_key, path.relative_to(root).as_posix(), 1, "", "triton", ""))
        paths.append(path)
    write_index(root / "index.csv", rows)
    return paths


def clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TRITON_"))}
    env.update(TMPDIR=str(tmp), OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), TORCHINDUCTOR_CACHE_DIR=str(tmp / "ind"))
    return env


def seed_way(paths: list[Path], env: dict[str, str]) -> tuple[float, float]:
    """(wall s per kernel, kernel-call s per kernel) for one process per file."""
    env = {**env, "TRITON_INTERPRET": "1"}
    walls, calls = [], []
    for path in paths:
        begin = time.perf_counter()
        done = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - begin)
        matches = list(KERNEL_LINE.finditer(done.stdout))
        if done.returncode != 0 or not matches:
            raise SystemExit(f"seed way: {path.name} failed: {done.stderr[-500:]}")
        calls.append(float(matches[-1].group("ms")) / 1e3 * CALLS_PER_KERNEL)
    return statistics.fmean(walls), statistics.fmean(calls)


def our_way(organized: Path, out: Path, env: dict[str, str]) -> tuple[float, float]:
    argv = [sys.executable, "-m", "stages.kernels", "--dir", str(organized), "--out", str(out), "--devices", "cpu",
            "--interpreter-iterations", "1"]
    begin = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - begin
    if done.returncode != 0:
        raise SystemExit(f"our way failed: {done.stdout[-500:]}{done.stderr[-500:]}")
    samples = json.loads((out / "kernel_samples.json").read_text())
    if len(samples) != len(list((organized / "pointwise").glob("*.py"))):
        raise SystemExit(f"our way: only {len(samples)} kernels timed; see {out / 'kernels.csv'}")
    # The runner's interpreter mode makes no warm-up call; the worker imports the module and calls once.
    per_call = statistics.fmean(s[0] for s in samples.values()) / 1e3
    return wall / len(samples), per_call * CALLS_PER_KERNEL


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=8, help="number of kernel files (default 8)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="prbench-overhead-"))
    try:
        organized = tmp / "organized"
        paths = build_organized(organized, args.kernels)
        env = clean_env(tmp)
        seed_wall, seed_calls = seed_way(paths, env)
        ours_wall, ours_calls = our_way(organized, tmp, env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    seed_overhead, ours_overhead = seed_wall - seed_calls, ours_wall - ours_calls
    print(f"kernels: {args.kernels} real Inductor Triton files "
          f"(CPU, Triton interpreter, {CALLS_PER_KERNEL} calls each)")
    print(f"seed (python kernel.py per file): {seed_wall * 1e3:9.1f} ms/kernel wall, "
          f"{seed_calls * 1e3:7.1f} ms in kernel calls, overhead {seed_overhead * 1e3:9.1f} ms/kernel")
    print(f"prbench (worker runner)         : {ours_wall * 1e3:9.1f} ms/kernel wall, "
          f"{ours_calls * 1e3:7.1f} ms in kernel calls, overhead {ours_overhead * 1e3:9.1f} ms/kernel")
    ratio = ours_overhead / seed_overhead
    print(f"overhead ratio prbench/seed: {ratio:.3f} (goal <= 0.100: {'met' if ratio <= 0.1 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
