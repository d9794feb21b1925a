"""Time one kernel pair of a prbench run, base and PR interleaved (A B B A, then B A A B), and check their outputs.

    python run.py [--rounds N] [--warmup N] [--iterations N] [--device cpu|cuda]

Needs only torch (Triton too for a Triton kernel; a C++ compiler for a C++ kernel, as torch.compile on a CPU does).
The timers are prbench's kernel stage's own (prbench_timer.py): a C++ kernel's time is the self time of its
profiler event, replayed with the buffers it writes restored first; a Triton kernel's is CUDA events with the L2
flushed before each call (wall clock on a CPU).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # compile in this process: no worker pool left behind
THREADS = json.loads((HERE / "environment.json").read_text(encoding="utf-8")).get("omp_num_threads")
if THREADS:  # as the kernel stage ran (a C++ kernel's time depends on it); set OMP_NUM_THREADS to choose
    os.environ.setdefault("OMP_NUM_THREADS", THREADS)

import torch  # noqa: E402  (after OMP_NUM_THREADS: torch reads it when it starts)

sys.path.insert(0, str(HERE))
import prbench_timer as timer  # type: ignore[import-not-found]  # noqa: E402  (the folder's own copy)

RTOL, ATOL = 1e-4, 1e-5  # a reordered float reduction differs in its last bits, a wrong one by far more


class Side:
    """One side's kernel, its recorded launch, and a pristine copy to restore what the kernel writes."""

    def __init__(self, name: str, device: str) -> None:
        self.name = name
        self.meta = json.loads((HERE / name / "launch.json").read_text(encoding="utf-8"))
        spec = importlib.util.spec_from_file_location(f"repro_{name}", HERE / name / "kernel.py")
        if spec is None or spec.loader is None:
            raise SystemExit(f"{name}/kernel.py cannot be loaded")
        self.module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.module)
        self.args = self._load(device)
        pristine = self._load(device)
        self.saved = [(_whole(live), _whole(before)) for live, before in _storages(self.args, pristine)]

    def _load(self, device: str) -> list[Any]:
        return list(torch.load(HERE / self.name / "launch.pt", map_location=device, weights_only=True))

    def restore(self) -> None:
        for live, before in self.saved:
            live.copy_(before)

    def call(self) -> None:
        self.call_on(self.args)

    def time(self, warmup: int, iterations: int, device: str) -> list[float]:
        if self.meta["backend"] == "cpp":
            launch = timer.Launch(self.meta["kernel"], self.module.kernel, tuple(self.args), self.saved)
            with timer._quiet_stderr():  # the profiler prints two lines to stderr on every start and stop
                samples = timer.time_launches([launch], warmup, iterations)
            return [ms for values in samples.values() for ms in values]
        clock = timer.cuda_event_timer() if device.startswith("cuda") else timer.WallTimer()
        return clock.time(self.call, warmup, iterations)

    def call_on(self, args: list[Any]) -> None:
        if self.meta["backend"] == "cpp":
            self.module.kernel(*args)
        else:
            self.module.call(args)

    def written_on(self, launch: Side, device: str) -> list[Any]:
        """What this side's kernel writes when run once on a fresh copy of ``launch``'s recorded arguments."""
        args = launch._load(device)
        self.call_on(args)
        return [args[i] for i in self.meta["written"]]


def _storages(args: list[Any], pristine: list[Any]) -> list[tuple[Any, Any]]:
    seen: dict[int, tuple[Any, Any]] = {}
    for live, before in zip(args, pristine, strict=True):
        if isinstance(live, torch.Tensor):
            seen.setdefault(live.untyped_storage().data_ptr(), (live, before))
    return list(seen.values())


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """A byte view of the tensor's whole storage: a kernel may write past the view it was given."""
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())


def _same_signature(base: Side, pr: Side) -> bool:
    """The two launches take the same arguments (kinds, shapes, strides, dtypes) and write the same positions."""
    def shape(arg: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(arg.get(k) for k in ("kind", "shape", "stride", "dtype", "storage_offset"))

    return ([shape(a) for a in base.meta["args"]] == [shape(a) for a in pr.meta["args"]]
            and base.meta["written"] == pr.meta["written"])


def check_outputs(base: Side, pr: Side, device: str) -> tuple[bool, str]:
    """Run both kernels once and compare what they write. On base's recorded launch when the signatures agree:
    the same inputs, and the same bytes wherever a kernel leaves part of an output buffer unwritten (the graph
    allocates them uninitialized); otherwise each on its own launch."""
    shared = _same_signature(base, pr)
    a, b = base.written_on(base, device), pr.written_on(base if shared else pr, device)
    how = "both on base's recorded launch" if shared else "each on its own launch (their arguments differ)"
    if len(a) != len(b):
        return False, f"not comparable: base writes {len(a)} arguments, the PR {len(b)}"
    worst = worst_rel = 0.0
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False, (f"not comparable: written argument {i} is {x.dtype}{list(x.shape)} vs "
                           f"{y.dtype}{list(y.shape)}")
        if not x.is_floating_point():
            if not torch.equal(x, y):
                return False, f"MISMATCH in written argument {i} ({x.dtype}): values differ; {how}"
            continue
        finite = torch.isfinite(x) & torch.isfinite(y)
        if not torch.equal(x[~finite].nan_to_num(), y[~finite].nan_to_num()):
            return False, f"MISMATCH in written argument {i}: inf/NaN in different places; {how}"
        diff = (x[finite].double() - y[finite].double()).abs()
        if diff.numel():
            worst = max(worst, float(diff.max()))
            worst_rel = max(worst_rel, float((diff / y[finite].double().abs().clamp_min(ATOL)).max()))
        if not torch.allclose(x, y, rtol=RTOL, atol=ATOL, equal_nan=True):
            return False, (f"MISMATCH in written argument {i}: max abs diff {worst:.3g}, max rel diff {worst_rel:.3g} "
                           f"(rtol {RTOL}, atol {ATOL}); {how}")
    return True, (f"match: {len(a)} written tensors, max abs diff {worst:.3g}, max rel diff {worst_rel:.3g} "
                  f"(rtol {RTOL}, atol {ATOL}); {how}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="A B B A blocks (default 5)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls per visit (default 10)")
    parser.add_argument("--iterations", type=int, default=30, help="timed calls per visit (default 30)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cpu or cuda (default: cuda when there is one)")
    args = parser.parse_args()
    backend = json.loads((HERE / "base" / "launch.json").read_text(encoding="utf-8"))["backend"]
    if backend == "triton" and not args.device.startswith("cuda"):  # before its import, which needs a GPU driver
        raise SystemExit("a Triton kernel runs on a GPU: this machine has none (--device cuda)")
    base, pr = Side("base", args.device), Side("pr", args.device)
    print(f"kernel: base {base.meta['kernel']}, PR {pr.meta['kernel']} ({base.meta['backend']}, {args.device})")
    samples: dict[str, list[float]] = {"base": [], "pr": []}
    base.time(args.warmup, 2, args.device)  # one untimed visit each: first-call costs stay out of round 1
    pr.time(args.warmup, 2, args.device)
    ratios = []
    for number in range(1, args.rounds + 1):
        medians: dict[str, list[float]] = {"base": [], "pr": []}
        first, second = (base, pr) if number % 2 else (pr, base)  # the side that opens alternates, as in prbench
        for side in (first, second, second, first):
            visit = side.time(args.warmup, args.iterations, args.device)
            samples[side.name] += visit
            medians[side.name].append(statistics.median(visit))
        b, p = statistics.fmean(medians["base"]), statistics.fmean(medians["pr"])
        ratios.append(p / b)
        print(f"round {number}: base {b:.4g} ms, PR {p:.4g} ms, PR/base {p / b:.3f}")
    b, p = statistics.median(samples["base"]), statistics.median(samples["pr"])
    print(f"base: median {b:.4g} ms over {len(samples['base'])} calls")
    print(f"PR:   median {p:.4g} ms over {len(samples['pr'])} calls")
    print(f"PR/base time: {statistics.median(ratios):.3f} (median over {len(ratios)} rounds; above 1 = PR slower)")
    ok, line = check_outputs(base, pr, args.device)
    print(f"output check: {line}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
