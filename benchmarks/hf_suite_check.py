"""The builtin HF suite on this machine: does every entry build and step, and how much of a step is Inductor's.

    python benchmarks/hf_suite_check.py build [--models all] [--size tiny]
    python benchmarks/hf_suite_check.py share [--models A,B] [--sizes tiny,small] [--mode inference] [--steps 5]

``build`` builds each model (``stages.support.hf_models``) on the CPU, runs one no-grad forward and one training step
as the suite times it (``stages.support.training``: optimizer step included), eager, and prints one line per model and
how many of the list's entries built, with the reasons of those that cannot be built: a check of the whole list
that costs seconds per model where ``invoke compare --models all`` costs minutes.

``share`` compiles each model with Inductor (C++ kernels with ``cpp.enable_kernel_profile``, so every kernel is
a named profiler event), warms it up, profiles ``--steps`` steps and prints the share of the step's wall time
spent in Inductor's generated kernels (``cpp_fused_*``): what a PR that changes Inductor's code generation can
move at that size. The rest is library calls (GEMMs in oneDNN/MKL), the optimizer and Python.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from foundation.formats.hf_entries import ENTRIES, unbuildable
from foundation.formats.suite_options import SIZES, UnknownModelError, resolve_models
from prbench.commands.cli import OneLineParser

INDUCTOR_KERNEL_PREFIX = "cpp_fused"  # in a kernel's profiler event (graph_N_cpp_fused_...) with enable_kernel_profile


@dataclass(frozen=True)
class Built:
    name: str
    ok: bool
    detail: str  # the training loss and seconds, or the error


@dataclass(frozen=True)
class Share:
    name: str
    size: str
    step_ms: float
    kernel_ms: float

    @property
    def percent(self) -> float:
        return 100.0 * self.kernel_ms / self.step_ms if self.step_ms else 0.0


def build_and_step(name: str, size: str) -> Built:
    """Build ``name`` at ``size``, one training step and one no-grad forward, eager on the CPU."""
    import torch

    from stages.suite import step_factory
    from stages.support import hf_models

    started = time.monotonic()
    try:
        built = hf_models.build(name, size=size, mode="training")
        loss = step_factory("training", "float32", "cpu")(built.model)(built.model, built.inputs)
        built.model.eval()
        with torch.no_grad():
            forward_loss = hf_models.loss_of(built.model(**built.inputs))
        if not (torch.isfinite(loss) and torch.isfinite(forward_loss)):
            return Built(name, False, f"non-finite loss {loss.item()} / {forward_loss.item()}")
    except Exception as exc:  # one model's failure is its line, the others go on
        return Built(name, False, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}")
    return Built(name, True, f"loss {loss.item():.3f}, {time.monotonic() - started:.1f} s")


def kernel_share(name: str, size: str, mode: str, steps: int, warmup: int = 3) -> Share:
    """Wall time of one compiled step and the part of it inside Inductor's C++ kernels."""
    import torch
    import torch._dynamo
    from torch._inductor import config as inductor_config

    from stages.suite import timed_step
    from stages.support import hf_models

    torch._dynamo.reset()
    inductor_config.cpp.enable_kernel_profile = True
    built = hf_models.build(name, size=size, mode=mode)
    compiled = timed_step(built.model, mode, "float32", "cpu", "inductor").compiled
    for _ in range(warmup):
        compiled(built.model, built.inputs)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        for _ in range(steps):
            compiled(built.model, built.inputs)
        wall_ms = (time.perf_counter() - started) * 1e3 / steps
    kernel_us = sum(event.self_cpu_time_total for event in prof.key_averages()
                    if INDUCTOR_KERNEL_PREFIX in event.key)
    return Share(name, size, wall_ms, kernel_us / 1e3 / steps)


def run_build(models: list[str], size: str) -> int:
    results = []
    for name in models:
        result = build_and_step(name, size)
        results.append(result)
        print(f"{'ok  ' if result.ok else 'FAIL'} {name}: {result.detail}", flush=True)
    built = sum(r.ok for r in results)
    print(f"{built} of {len(ENTRIES)} list entries built and stepped at size {size} "
          f"({len(models)} tried, {len(models) - built} failed)")
    for name, why in unbuildable().items():
        print(f"cannot be built: {name}: {why}")
    return 0 if built == len(models) else 1


def run_share(models: list[str], sizes: list[str], mode: str, steps: int) -> int:
    print(f"{'model':34} {'size':6} {'step ms':>9} {'Inductor kernels ms':>20} {'share':>7}")
    for name in models:
        for size in sizes:
            share = kernel_share(name, size, mode, steps)
            print(f"{name:34} {size:6} {share.step_ms:9.2f} {share.kernel_ms:20.2f} {share.percent:6.1f}%",
                  flush=True)
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog="hf_suite_check.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build every model and run a forward and a training step")
    b.add_argument("--models", default="all", help="a group (all, tiny-default, ...) or A,B,...")
    b.add_argument("--size", default="tiny", choices=SIZES)
    s = sub.add_parser("share", help="the share of Inductor's kernels in a compiled step")
    s.add_argument("--models", default="BertForMaskedLM,GPT2ForSequenceClassification,T5Small")
    s.add_argument("--sizes", default="tiny,small", help="comma-separated sizes")
    s.add_argument("--mode", default="inference", choices=("inference", "training"))
    s.add_argument("--steps", type=int, default=5)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        models = resolve_models(args.models)
    except UnknownModelError as exc:
        print(f"error: --models: {exc}", file=sys.stderr)
        return 2
    # --sizes is checked before transformers (and torch) is imported: a mistyped flag is answered at once.
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()] if args.command == "share" else []
    bad = [s for s in sizes if s not in SIZES]
    if bad:
        print(f"error: --sizes: {', '.join(bad)}: expected of {', '.join(SIZES)}", file=sys.stderr)
        return 2
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")  # config classes only, never the Hub
    import transformers

    transformers.logging.set_verbosity_error()
    if args.command == "build":
        return run_build(models, args.size)
    return run_share(models, sizes, args.mode, args.steps)


if __name__ == "__main__":
    sys.exit(main())
