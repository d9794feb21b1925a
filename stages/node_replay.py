"""Node replay: time each shape of a replay set alone on this machine's GPU, with torch and with the vendors'
benchmark tools that are on PATH.

    python -m stages.node_replay --replay-set SET.json --out RESULTS.json [--warmup 10] [--iterations 100]

Each shape's op is called as ``torch.ops.aten.<op>(*inputs)`` on tensors of the recorded sizes, strides and
dtype (random values), ``--warmup`` times, then ``--iterations`` times each between two device events, with
the L2 cache flushed before each (outside the events) by the kernel stage's timer. Besides giving every call
the same cold cache, the flush keeps the GPU busy while the call is dispatched: without it a GEMM of a few
microseconds is timed as its launch latency (on an H100, 33 µs per call for an addmm whose kernel ran 6 µs in
its trace). The median, mean and standard deviation of those times go into the results (format in
:mod:`analysis.traces.reports.replay_report`). Then every command line of the set whose tool is on PATH runs (each
with ``--tool-timeout``) and the time it prints is read. Without a CUDA or ROCm device the stage stops with one
line saying so (exit 2), before it times anything.
"""

from __future__ import annotations

import shlex
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.traces.analyses.replay import read_replay_set
from analysis.traces.reports.bench_commands import PARSERS, TOOLS
from foundation import atomic_io
from foundation.errors import UserError
from stages.entry import StageArgumentParser, run_as_script
from stages.kernels import DeviceEventTimer, cuda_event_timer
from stages.support.environment import prepare_inductor
from stages.support.progress import progress

MIN_ITERATIONS = 10


def build_parser() -> StageArgumentParser:
    parser = StageArgumentParser(prog="python -m stages.node_replay", description=__doc__.splitlines()[0])
    parser.add_argument("--replay-set", type=Path, required=True, help="replay set written by perf-report -r")
    parser.add_argument("--out", type=Path, required=True, help="results JSON to write")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls before timing (default: 10)")
    parser.add_argument("--iterations", type=int, default=100,
                        help=f"timed calls per shape, at least {MIN_ITERATIONS} (default: 100)")
    parser.add_argument("--tool-timeout", type=float, default=300.0,
                        help="seconds one vendor command may run (default: 300)")
    return parser


def require_gpu(replay_set: Path) -> Any:
    """torch with a CUDA or ROCm device (ROCm builds answer through torch.cuda), else the one-line error."""
    import torch

    if not torch.cuda.is_available():
        builds = f"CUDA {torch.version.cuda}" if torch.version.cuda else (
            f"HIP {torch.version.hip}" if getattr(torch.version, "hip", None) else "CPU only")
        raise UserError(f"node replay needs a GPU: no CUDA or ROCm device found (torch {torch.__version__}, "
                        f"{builds}); the replay set and the vendor command lines are "
                        f"in {replay_set.parent}")
    return torch


def make_tensor(torch: Any, spec: dict[str, Any], device: Any) -> Any:
    """A tensor with the recorded sizes and strides, over just enough storage, filled with random values."""
    dtype = getattr(torch, spec["dtype"])
    sizes = spec["sizes"]
    strides = spec["strides"] if spec["strides"] is not None else torch.empty(sizes, device="meta").stride()
    extent = 1 + sum((s - 1) * st for s, st in zip(sizes, strides, strict=True)) if all(sizes) else 0
    if dtype.is_floating_point:
        storage = torch.randn(extent, device=device, dtype=torch.float32).to(dtype)
    elif dtype == torch.bool:
        storage = torch.zeros(extent, device=device, dtype=dtype)
    else:
        storage = torch.randint(0, 8, (extent,), device=device, dtype=dtype)
    return torch.as_strided(storage, sizes, strides)


def overload_for(torch: Any, op_name: str, kinds: list[str]) -> Any:
    """The op's overload whose schema takes the arguments the profiler recorded, by count and kind (it records
    keyword-only ones such as addmm's beta and alpha in schema order, and an ``out=`` tensor last, as Inductor's
    ``extern_kernels.mm(a, b, out=buf)`` passes it). An overload that writes no ``out`` tensor is preferred: with
    count alone, ``mm(a, b, out=buf)``'s three arguments would pick ``mm.dtype``, whose third is a dtype."""
    packet = getattr(torch.ops.aten, op_name.split("::", 1)[1])
    names = sorted(packet.overloads(), key=lambda name: name != "default")
    matching = [getattr(packet, name) for name in names
                if _takes(getattr(packet, name)._schema.arguments, kinds)]
    if not matching:
        raise ValueError(f"no overload of {op_name} takes arguments of the kinds {', '.join(kinds) or 'none'} "
                         f"(overloads: {', '.join(names)})")
    return min(matching, key=lambda overload: any(a.is_out for a in overload._schema.arguments))


def _takes(arguments: Any, kinds: list[str]) -> bool:
    """Each recorded argument fits its schema slot: a tensor a Tensor, None an optional, a value anything else."""
    if len(arguments) != len(kinds):
        return False
    for argument, kind in zip(arguments, kinds, strict=True):
        declared = argument.type
        optional = declared.kind() == "OptionalType"
        inner = declared.getElementType() if optional else declared
        if kind == "none" and not optional:
            return False
        if kind != "none" and (kind == "tensor") != (inner.kind() == "TensorType"):
            return False
    return True


def build_call(torch: Any, entry: dict[str, Any], device: Any) -> Callable[[], Any]:
    values = []
    for item in entry["inputs"]:
        if item["kind"] == "tensor":
            values.append(make_tensor(torch, item, device))
        elif item["kind"] == "value":
            values.append(item["value"])
        else:
            values.append(None)
    overload = overload_for(torch, entry["op"], [item["kind"] for item in entry["inputs"]])
    arguments = overload._schema.arguments
    args = [v for a, v in zip(arguments, values, strict=True) if not a.kwarg_only]
    kwargs = {a.name: v for a, v in zip(arguments, values, strict=True) if a.kwarg_only}
    return lambda: overload(*args, **kwargs)


def replay_shape(torch: Any, timer: DeviceEventTimer, entry: dict[str, Any], warmup: int, iterations: int,
                 device: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"id": entry["id"], "replay_median_us": None, "replay_mean_us": None,
                              "replay_std_us": None, "samples": 0, "error": None, "tools": {}}
    try:
        call = build_call(torch, entry, device)
        samples = [1e3 * ms for ms in timer.time(call, warmup, iterations)]
    except (RuntimeError, TypeError, ValueError, AttributeError) as exc:  # an op torch cannot rebuild or run
        result["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return result
    result.update(replay_median_us=statistics.median(samples), replay_mean_us=statistics.fmean(samples),
                  replay_std_us=statistics.stdev(samples) if len(samples) > 1 else 0.0, samples=len(samples))
    return result


def run_tool(tool: str, commands: list[str], timeout_s: float) -> dict[str, Any]:
    """Run a tool's command lines for one shape; the time is the sum of what each printed (e.g. dgrad + wgrad)."""
    total = 0.0
    for command in commands:
        try:
            done = subprocess.run(shlex.split(command), capture_output=True, text=True, errors="replace",
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return {"us": None, "error": f"timed out after {timeout_s:g}s", "commands": commands}
        except OSError as exc:
            return {"us": None, "error": f"cannot start {tool}: {exc.strerror}", "commands": commands}
        us = PARSERS[tool](done.stdout + "\n" + done.stderr)
        if done.returncode != 0 or us is None:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
            return {"us": None, "error": f"exit {done.returncode}, no time printed: {tail[0][:200]}",
                    "commands": commands}
        total += us
    return {"us": total, "error": None, "commands": commands}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.iterations < MIN_ITERATIONS:
        raise UserError(f"--iterations {args.iterations}: expected at least {MIN_ITERATIONS}")
    if args.warmup < 1:
        raise UserError(f"--warmup {args.warmup}: expected at least 1")
    prepare_inductor()
    shapes = read_replay_set(args.replay_set)["shapes"]
    if not shapes:
        raise UserError(f"{args.replay_set}: no shapes to replay (no GEMM or CONV op with recorded shapes)")
    torch = require_gpu(args.replay_set)
    tools = [t for t in TOOLS if shutil.which(t)]
    print(f"[node_replay] {torch.cuda.get_device_name()}; tools on PATH: {', '.join(tools) or 'none'}", flush=True)
    timer = cuda_event_timer()
    results = []
    for i, entry in enumerate(shapes, 1):
        progress("node_replay", i, len(shapes), f"{entry['id']} {entry['op']} start")
        result = replay_shape(torch, timer, entry, args.warmup, args.iterations, torch.device("cuda"))
        for tool in tools:
            if entry.get("commands", {}).get(tool):
                result["tools"][tool] = run_tool(tool, entry["commands"][tool], args.tool_timeout)
        results.append(result)
    atomic_io.write_json(args.out, {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                    "warmup": args.warmup, "iterations": args.iterations, "l2_flush": True,
                                    "python": sys.version.split()[0], "results": results})
    progress("node_replay", len(shapes), len(shapes), f"done: {args.out}")
    return 0


if __name__ == "__main__":
    run_as_script(main)
