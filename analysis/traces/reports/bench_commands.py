"""The vendors' benchmark command lines for a replay shape, and the time each tool prints.

Tools and the options used (only documented ones):

- ``hipblaslt-bench`` (ROCm hipBLASLt, ``clients/``; options as ``hipblaslt-bench --help`` lists them in
  hipBLASLt's docs/conceptual/hipblaslt-clients.rst): ``-m -n -k --lda --ldb --ldc --ldd --stride_a --stride_b
  --stride_c --stride_d --batch_count --transA --transB --a_type --b_type --c_type --d_type --compute_type
  --alpha --beta --bias_vector --bias_type --cold_iters --iters --use_gpu_timer``. It prints a CSV header
  (``transA,transB,...,hipblaslt-Gflops,us``) and a row whose ``us`` column is the time per call.
- ``MIOpenDriver`` (ROCm MIOpen; ``MIOpenDriver conv|convfp16|convbfp16``, flags of ``driver/conv_driver.hpp``
  ``AddCmdLineArgs`` and driver/README.md): ``-n -c -H -W -k -y -x -p -q -u -v -l -j -g -m conv|trans -F
  -t 1 -V 0 -i``, for 3-D ``-_ 3 -! -@ -$ -# -^``, transposed output padding ``-Y -X -%``, layouts ``-I -O
  -f``, bias ``-b 1``. With ``-t 1`` it prints ``GPU Kernel Time Forward Conv. Elapsed: X ms`` (and Backward
  Data / Backward Weights).
- NVIDIA: ``cutlass_profiler`` (NVIDIA CUTLASS, tools/profiler; options of media/docs/profiler.md and
  tools/profiler/src/options.cu): ``--operation=Gemm --m --n --k --A=<type>:<row|column> --B --C --accum
  --alpha --beta --batch_count`` and ``--operation=Conv2d --conv_kind=fprop|dgrad|wgrad --n --h --w --c --k --r
  --s --pad_h --pad_w --stride_h --stride_w --dilation_h --dilation_w --g --Activation --Filter --Output``;
  ``--providers=cutlass,cublas`` (GEMM) / ``cutlass,cudnn`` (Conv2d) also profiles cuBLAS / cuDNN on the same
  problem, which is what PyTorch calls; ``--warmup-iterations --profiling-iterations``. It prints a block per
  kernel with ``Provider: CUBLAS`` and ``Runtime: X ms``. cuBLAS and cuDNN ship no benchmark command line of
  their own; CUTLASS's profiler is NVIDIA's documented one. CUTLASS convolutions are NHWC only.

A command line whose problem the tool cannot express is left out, with the reason in the shape's notes.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from analysis.traces.analyses.replay import CONV, GEMM

HIPBLASLT_BENCH = "hipblaslt-bench"
MIOPEN_DRIVER = "MIOpenDriver"
CUTLASS_PROFILER = "cutlass_profiler"
TOOLS = (HIPBLASLT_BENCH, MIOPEN_DRIVER, CUTLASS_PROFILER)

WARMUP = 10
ITERATIONS = 100

_HIPBLASLT_TYPES = {"float32": "f32_r", "float16": "f16_r", "bfloat16": "bf16_r", "float64": "f64_r",
                    "int8": "i8_r", "float8_e4m3fn": "f8_r", "float8_e5m2": "bf8_r",
                    "float8_e4m3fnuz": "f8_fnuz_r", "float8_e5m2fnuz": "bf8_fnuz_r"}
_MIOPEN_BASE = {"float32": "conv", "float16": "convfp16", "bfloat16": "convbfp16", "int8": "convint8"}
_CUTLASS_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
                  "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "int8": "s8"}
_CUTLASS_CONV_KIND = {"forward": "fprop", "backward_data": "dgrad", "backward_weight": "wgrad"}
_MIOPEN_DIRECTION = {("forward",): 1, ("backward_data",): 2, ("backward_weight",): 4,
                     ("backward_data", "backward_weight"): 6}


def _line(tool: str, args: list[tuple[str, Any]], sep: str = " ", prefix: list[str] | None = None) -> str:
    words = [tool, *(prefix or [])]
    for flag, value in args:
        words += [flag] if value is None else ([f"{flag}{sep}{value}"] if sep == "=" else [flag, str(value)])
    return shlex.join(words)


def _num(x: float) -> str:
    return f"{x:g}"


def hipblaslt_command(p: dict[str, Any], dtype: str, warmup: int = WARMUP, iterations: int = ITERATIONS) -> str:
    """hipBLASLt is column-major: torch's row-major C = A·B is Cᵀ = Bᵀ·Aᵀ, so BLAS A is torch's B (m = n of
    torch, n = m) and a row-major torch operand is a non-transposed BLAS operand with ld = its row stride."""
    kind = _HIPBLASLT_TYPES[dtype]
    compute = "f64_r" if dtype == "float64" else "i32_r" if dtype == "int8" else "f32_r"
    trans_a = "N" if p["b_layout"] == "row" else "T"
    trans_b = "N" if p["a_layout"] == "row" else "T"
    # PyTorch adds a 1-D bias with beta = 1 in the GEMM's epilogue (the Lt path), not as C.
    epilogue_bias = p["bias"] == "vector" and p["beta"] == 1.0
    args: list[tuple[str, Any]] = [
        ("--transA", trans_a), ("--transB", trans_b), ("-m", p["n"]), ("-n", p["m"]), ("-k", p["k"]),
        ("--lda", p["ldb"]), ("--ldb", p["lda"]), ("--ldc", p["ldc"]), ("--ldd", p["ldc"]),
        ("--a_type", kind), ("--b_type", kind), ("--c_type", kind), ("--d_type", kind),
        ("--compute_type", compute), ("--alpha", _num(p["alpha"])),
        ("--beta", _num(0.0 if epilogue_bias else p["beta"])),
    ]
    if p["batch"] > 1:
        args += [("--batch_count", p["batch"]), ("--stride_a", p["stride_b"]), ("--stride_b", p["stride_a"]),
                 ("--stride_c", p["stride_c"]), ("--stride_d", p["stride_c"])]
    if epilogue_bias:
        args += [("--bias_vector", None), ("--bias_type", kind)]
    args += [("--cold_iters", warmup), ("--iters", iterations), ("--use_gpu_timer", None)]
    return _line(HIPBLASLT_BENCH, args)


def miopen_commands(p: dict[str, Any], dtype: str, iterations: int = ITERATIONS) -> list[str]:
    spatial = len(p["spatial"])
    args: list[tuple[str, Any]] = []
    if spatial == 3:
        args += [("-_", 3), ("-!", p["spatial"][0]), ("-@", p["kernel"][0]), ("-$", p["padding"][0]),
                 ("-#", p["stride"][0]), ("-^", p["dilation"][0])]
    h, w = (p["spatial"][-2], p["spatial"][-1])
    y, x = p["kernel"][-2], p["kernel"][-1]
    args += [("-n", p["n"]), ("-c", p["c"]), ("-H", h), ("-W", w), ("-k", p["k"]), ("-y", y), ("-x", x),
             ("-p", p["padding"][-2]), ("-q", p["padding"][-1]), ("-u", p["stride"][-2]), ("-v", p["stride"][-1]),
             ("-l", p["dilation"][-2]), ("-j", p["dilation"][-1]), ("-g", p["groups"]),
             ("-m", "trans" if p["transposed"] else "conv")]
    if p["transposed"]:
        if spatial == 3:
            args.append(("-%", p["output_padding"][0]))
        args += [("-Y", p["output_padding"][-2]), ("-X", p["output_padding"][-1])]
    if p["layout"] in ("NHWC", "NDHWC"):
        args += [("-I", p["layout"]), ("-O", p["layout"]), ("-f", p["layout"])]
    if p["bias"] and p["passes"] == ["forward"]:
        args.append(("-b", 1))
    args += [("-F", _MIOPEN_DIRECTION[tuple(p["passes"])]), ("-t", 1), ("-V", 0), ("-i", iterations)]
    return [_line(MIOPEN_DRIVER, args, prefix=[_MIOPEN_BASE[dtype]])]


def cutlass_gemm_command(p: dict[str, Any], dtype: str, warmup: int = WARMUP, iterations: int = ITERATIONS) -> str:
    kind = _CUTLASS_TYPES[dtype]
    accum = "f64" if dtype == "float64" else "s32" if dtype == "int8" else "f32"
    args: list[tuple[str, Any]] = [
        ("--operation", "Gemm"), ("--m", p["m"]), ("--n", p["n"]), ("--k", p["k"]),
        ("--A", f"{kind}:{'column' if p['a_layout'] == 'column' else 'row'}"),
        ("--B", f"{kind}:{'column' if p['b_layout'] == 'column' else 'row'}"), ("--C", f"{kind}:row"),
        ("--accum", accum), ("--alpha", _num(p["alpha"])), ("--beta", _num(p["beta"])),
        ("--batch_count", p["batch"]), ("--providers", "cutlass,cublas"),
        ("--warmup-iterations", warmup), ("--profiling-iterations", iterations),
    ]
    return _line(CUTLASS_PROFILER, args, sep="=")


def cutlass_conv_commands(p: dict[str, Any], dtype: str, warmup: int = WARMUP,
                          iterations: int = ITERATIONS) -> list[str]:
    kind = _CUTLASS_TYPES[dtype]
    accum = "f64" if dtype == "float64" else "f32"
    out = []
    for direction in p["passes"]:
        args: list[tuple[str, Any]] = [
            ("--operation", "Conv2d"), ("--conv_kind", _CUTLASS_CONV_KIND[direction]), ("--n", p["n"]),
            ("--h", p["spatial"][0]), ("--w", p["spatial"][1]), ("--c", p["c"]), ("--k", p["k"]),
            ("--r", p["kernel"][0]), ("--s", p["kernel"][1]), ("--pad_h", p["padding"][0]),
            ("--pad_w", p["padding"][1]), ("--stride_h", p["stride"][0]), ("--stride_w", p["stride"][1]),
            ("--dilation_h", p["dilation"][0]), ("--dilation_w", p["dilation"][1]), ("--g", p["groups"]),
            ("--Activation", f"{kind}:nhwc"), ("--Filter", f"{kind}:nhwc"), ("--Output", f"{kind}:nhwc"),
            ("--accum", accum), ("--providers", "cutlass,cudnn"),
            ("--warmup-iterations", warmup), ("--profiling-iterations", iterations),
        ]
        out.append(_line(CUTLASS_PROFILER, args, sep="="))
    return out


def commands_for(family: str, problem: dict[str, Any], dtype: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Every tool's command lines for one shape, and a note per tool that has none (or approximates)."""
    commands: dict[str, list[str]] = {}
    notes: dict[str, str] = {}
    if family == GEMM:
        strided = "strided" in (problem["a_layout"], problem["b_layout"])
        approx = "an operand is neither row- nor column-major; the command uses the dense layout" if strided else ""
        if dtype in _HIPBLASLT_TYPES:
            commands[HIPBLASLT_BENCH] = [hipblaslt_command(problem, dtype)]
            if problem["bias"] == "matrix":
                notes[HIPBLASLT_BENCH] = "the bias is a matrix: run as C with the recorded beta"
            elif approx:
                notes[HIPBLASLT_BENCH] = approx
        else:
            notes[HIPBLASLT_BENCH] = f"no hipBLASLt type for {dtype}"
        if dtype in _CUTLASS_TYPES:
            commands[CUTLASS_PROFILER] = [cutlass_gemm_command(problem, dtype)]
            if problem["bias"] != "none":
                notes[CUTLASS_PROFILER] = "the bias add is not part of the profiled problem (beta as recorded)"
            elif approx:
                notes[CUTLASS_PROFILER] = approx
        else:
            notes[CUTLASS_PROFILER] = f"no CUTLASS type for {dtype}"
        return commands, notes
    if family == CONV:
        spatial = len(problem["spatial"])
        if dtype in _MIOPEN_BASE and spatial in (2, 3):
            commands[MIOPEN_DRIVER] = miopen_commands(problem, dtype)
        else:
            notes[MIOPEN_DRIVER] = (f"MIOpenDriver runs 2-D and 3-D convolutions in fp32/fp16/bf16/int8 "
                                    f"({spatial}-D, {dtype})")
        if spatial == 2 and not problem["transposed"] and dtype in _CUTLASS_TYPES:
            commands[CUTLASS_PROFILER] = cutlass_conv_commands(problem, dtype)
            if problem["layout"] != "NHWC":
                notes[CUTLASS_PROFILER] = "CUTLASS convolutions are NHWC; the trace's tensors are NCHW"
        else:
            notes[CUTLASS_PROFILER] = "only 2-D, non-transposed convolutions are written for cutlass_profiler"
    return commands, notes


# --- reading what the tools print -------------------------------------------------------------------------

_BENCH_PREFIX = re.compile(r"^\s*(\[\d+\]:)?\s*")
_MIOPEN_TIME = re.compile(r"GPU Kernel Time (Forward|Backward Data|Backward Weights) Conv\. Elapsed: ([0-9.eE+-]+) ms")
_CUTLASS_BLOCK = re.compile(r"Provider:\s*(\w+).*?Runtime:\s*([0-9.eE+-]+)\s*ms", re.S)


def hipblaslt_us(output: str) -> float | None:
    """The ``us`` column of the row under hipblaslt-bench's CSV header (the last such row)."""
    lines = [_BENCH_PREFIX.sub("", line).strip() for line in output.splitlines()]
    found = None
    for i, line in enumerate(lines[:-1]):
        header = [h.strip() for h in line.split(",")]
        if header and header[0] == "transA" and "us" in header:
            values = [v.strip() for v in lines[i + 1].split(",")]
            if len(values) == len(header):
                try:
                    found = float(values[header.index("us")])
                except ValueError:
                    continue
    return found


def miopen_us(output: str) -> float | None:
    """MIOpenDriver's kernel time: the sum over the passes it ran (fwd, bwd data, bwd weights), in µs."""
    times = [float(ms) * 1e3 for _, ms in _MIOPEN_TIME.findall(output)]
    return sum(times) if times else None


def cutlass_us(output: str) -> float | None:
    """The fastest ``Runtime`` cutlass_profiler printed for a cuBLAS/cuDNN block, else for any block, in µs."""
    blocks = [(provider.lower(), float(ms) * 1e3) for provider, ms in _CUTLASS_BLOCK.findall(output)]
    library = [us for provider, us in blocks if provider in ("cublas", "cudnn")]
    pool = library or [us for _, us in blocks]
    return min(pool) if pool else None


PARSERS = {HIPBLASLT_BENCH: hipblaslt_us, MIOPEN_DRIVER: miopen_us, CUTLASS_PROFILER: cutlass_us}
