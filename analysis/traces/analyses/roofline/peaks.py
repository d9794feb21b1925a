"""The device peaks and the roofline judged against them: :data:`DEVICE_PEAKS` (the vendors' dense figures by
device name), the matrix peak an op is judged on (:data:`MATRIX_FAMILIES`), the fraction of peak and the bound of
one op, and :func:`roofline_table` (one row per op, shapes and dtypes of a trace).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.traces.analyses.categories import CONV, GEMM, SDPA
from analysis.traces.analyses.ops import Attribution
from analysis.traces.analyses.roofline.attention import KV_ATTENTION_OPS
from analysis.traces.analyses.roofline.table import op_work
from analysis.traces.analyses.roofline.work import GROUPED_GEMM, MOE, MOE_COMM, SSM, OpWork
from analysis.traces.analyses.serving_steps import StepSums, call_steps
from analysis.traces.model import TraceData

MATRIX_FAMILIES = (GEMM, CONV, SDPA, GROUPED_GEMM, MOE, SSM)  # judged against the matrix peak
ROOFLINE_COLUMNS = ["family", "op", "shape", "dtype", "calls", "kernel time ms", "mean us", "GFLOP per call",
                    "MB per call", "FLOP/byte", "TFLOP/s", "TB/s", "peak TFLOP/s", "% of peak FLOP/s",
                    "% of peak TB/s", "bound", "% of roofline"]


@dataclass(frozen=True)
class DevicePeaks:
    """Dense (no sparsity) peak matrix TFLOP/s per precision and HBM bandwidth, as the vendor publishes them."""

    name: str
    tflops: dict[str, float]
    hbm_tbs: float
    source: str


# Peaks are the vendors' published dense figures (NVIDIA datasheets print sparse Tensor Core numbers with a
# footnote, "shown with sparsity, specifications 1/2 lower without sparsity"; dense is half of those, as the
# Hopper architecture whitepaper's table lists). FP32 is the matrix/Tensor FP32 rate where the vendor has one
# (AMD), else the CUDA-core FP32 rate (NVIDIA: PyTorch runs FP32 GEMMs there unless TF32 is allowed); FP64 is the
# matrix / FP64 Tensor Core rate. MI355X (CDNA 4) has no TF32 in its datasheet. Sources, re-checked for this
# table:
# - MI300X, MI325X: AMD's product pages (amd.com/en/products/accelerators/instinct/mi300/mi300x.html,
#   .../mi325x.html) and ROCm's "AMD Instinct MI300 series microarchitecture" peak-performance table
#   (rocm.docs.amd.com, conceptual/gpu-arch/mi300): FP64/FP32 matrix 163.4, TF32 653.7, FP16/BF16 1307.4,
#   FP8 2614.9 TFLOP/s non-sparse; HBM3 5.3 TB/s (MI300X), HBM3E 6 TB/s (MI325X, same compute).
# - MI355X: AMD's product page (amd.com/en/products/accelerators/instinct/mi350/mi355x.html) and the CDNA 4
#   white paper: FP64 78.6, FP32 157.3, FP16/BF16 2516.6, FP8 5033.2 TFLOP/s dense (10.1 PFLOP/s FP8 with
#   sparsity); HBM3E 8 TB/s.
# - H100 SXM5: NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100) and the NVIDIA H100 Tensor Core GPU
#   Architecture whitepaper: FP64 Tensor 66.9, FP32 66.9, TF32 494.7, FP16/BF16 989.4, FP8 1978.9 TFLOP/s
#   dense (datasheet: 67 / 67 / 989* / 1979* / 3958*, * sparse); HBM3 3.35 TB/s.
# - H200 SXM: NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200): the same Tensor Core rates as H100 SXM
#   (67 / 67 / 989* / 1979* / 3958*, * sparse), HBM3e 4.8 TB/s. H200 NVL (lower clocks) is not this entry.
DEVICE_PEAKS = (
    (re.compile(r"MI300X"), DevicePeaks(
        "AMD Instinct MI300X", {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4,
                                "fp8": 2614.9}, 5.3,
        "AMD Instinct MI300X Accelerator data sheet (peak matrix, dense; 5.3 TB/s HBM3)")),
    (re.compile(r"MI325X"), DevicePeaks(
        "AMD Instinct MI325X", {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4,
                                "fp8": 2614.9}, 6.0,
        "AMD Instinct MI325X Accelerator data sheet (peak matrix, dense; 6 TB/s HBM3E)")),
    (re.compile(r"MI355X"), DevicePeaks(
        "AMD Instinct MI355X", {"fp64": 78.6, "fp32": 157.3, "fp16": 2516.6, "bf16": 2516.6, "fp8": 5033.2}, 8.0,
        "AMD Instinct MI355X GPU data sheet (peak matrix, dense; 8 TB/s HBM3E)")),
    (re.compile(r"H100 80GB HBM3|H100 SXM"), DevicePeaks(
        "NVIDIA H100 SXM", {"fp64": 66.9, "fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4,
                            "fp8": 1978.9}, 3.35,
        "NVIDIA H100 Tensor Core GPU datasheet and H100 architecture whitepaper (SXM5, dense; 3.35 TB/s HBM3)")),
    (re.compile(r"H200(?! NVL)"), DevicePeaks(
        "NVIDIA H200 SXM", {"fp64": 66.9, "fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4,
                            "fp8": 1978.9}, 4.8,
        "NVIDIA H200 Tensor Core GPU datasheet (SXM, dense = half the sparse figures; 4.8 TB/s HBM3e)")),
)


def device_peaks(device_names: Sequence[str]) -> DevicePeaks | None:
    """The peak table entry for the trace's device (``deviceProperties`` names), None when unknown."""
    for name in device_names:
        for pattern, peaks in DEVICE_PEAKS:
            if pattern.search(name):
                return peaks
    return None


def device_sentence(trace: TraceData, peaks: DevicePeaks | None) -> str:
    shown = ", ".join(sorted(set(trace.device_names))) or "not recorded (no deviceProperties)"
    if peaks is None:
        return f"Device: {shown}. Not in the peak table, so no fraction of peak is given."
    return f"Device: {shown} → {peaks.name}; peaks from {peaks.source}."


def roofline_table(trace: TraceData, attr: Attribution, peaks: DevicePeaks | None) -> pd.DataFrame:
    """One row per (op, shapes, dtypes) that launched kernels and has a FLOP/byte model (attention over a KV
    cache: per serving step sums too, which the shape text states)."""
    ops = trace.ops
    if not len(ops) or not ops.shapes:
        return pd.DataFrame(columns=ROOFLINE_COLUMNS)
    linked = attr.op_index >= 0
    time_per_op = np.bincount(attr.op_index[linked], weights=trace.dur_ns[linked], minlength=len(ops))
    priced = np.flatnonzero((ops.shape_id >= 0) & (time_per_op > 0))
    kv = [i for i in priced.tolist() if trace.names[int(ops.name_id[i])] in KV_ATTENTION_OPS]
    steps = call_steps(trace, kv) if kv else {}  # only attention over a KV cache needs its serving step
    groups: dict[tuple[int, int, StepSums | str | None], list[float]] = {}
    for i in priced.tolist():
        key = (int(ops.name_id[i]), int(ops.shape_id[i]), steps.get(i))
        entry = groups.setdefault(key, [0, 0.0])
        entry[0] += 1
        entry[1] += float(time_per_op[i])
    rows = []
    for (name_id, shape_id, step), (calls, ns) in groups.items():
        name = trace.names[name_id]
        work = op_work(name, ops.shapes[shape_id], step)
        if work is None or ns <= 0:
            continue
        seconds = ns / 1e9
        tflops = work.flops * calls / seconds / 1e12
        tbs = work.bytes * calls / seconds / 1e12
        peak = matrix_peak(work, peaks)
        rows.append({
            "family": work.family, "op": name, "shape": work.shape, "dtype": work.dtype, "calls": calls,
            "kernel time ms": ns / 1e6, "mean us": ns / calls / 1e3, "GFLOP per call": work.flops / 1e9,
            "MB per call": work.bytes / 1e6, "FLOP/byte": work.flops / work.bytes if work.bytes else np.nan,
            "TFLOP/s": tflops, "TB/s": tbs, "peak TFLOP/s": peak if peak is not None else np.nan,
            **versus_peak(work, tflops, tbs, peak, peaks, ns / calls / 1e9),
        })
    if not rows:
        return pd.DataFrame(columns=ROOFLINE_COLUMNS)
    df = pd.DataFrame(rows, columns=ROOFLINE_COLUMNS)
    return df.sort_values(["kernel time ms", "op"], ascending=[False, True], kind="stable").reset_index(drop=True)


def matrix_peak(work: OpWork, peaks: DevicePeaks | None) -> float | None:
    """The matrix peak TFLOP/s the op is judged against (:data:`MATRIX_FAMILIES`); None for vector work
    (elementwise, normalization, reduction, RoPE, cross-entropy: the table holds no vector peaks, so they are judged
    on bandwidth), MoE traffic, or an unknown precision."""
    matrix = work.family in MATRIX_FAMILIES
    return peaks.tflops.get(work.precision) if peaks and work.precision and matrix else None


def versus_peak(work: OpWork, tflops: float, tbs: float, peak: float | None, peaks: DevicePeaks | None,
                 seconds_per_call: float) -> dict[str, Any]:
    if peaks is None:
        return {"% of peak FLOP/s": np.nan, "% of peak TB/s": np.nan, "bound": "unknown device",
                "% of roofline": np.nan}
    if work.family == MOE_COMM:  # all-to-all traffic: bound by the network, which the peak table does not hold
        return {"% of peak FLOP/s": np.nan, "% of peak TB/s": np.nan, "bound": "communication",
                "% of roofline": np.nan}
    memory_s = work.bytes / (peaks.hbm_tbs * 1e12)
    compute_s = work.flops / (peak * 1e12) if peak else 0.0
    bound = "memory" if memory_s >= compute_s else "compute"
    return {"% of peak FLOP/s": 100.0 * tflops / peak if peak else np.nan,
            "% of peak TB/s": 100.0 * tbs / peaks.hbm_tbs, "bound": bound,
            "% of roofline": 100.0 * max(memory_s, compute_s) / seconds_per_call if seconds_per_call else np.nan}
