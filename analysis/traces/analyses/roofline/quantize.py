"""The quantize family: per-tensor, per-token and per-group FP8 casts, MXFP4 casts (packed values plus one E8M0
scale per :data:`MXFP4_BLOCK` values) and AITER's MX casts fused with the MoE token sort: bytes in, (packed) bytes
and scales out.
"""

from __future__ import annotations

from analysis.traces.analyses.roofline.work import (
    QUANTIZE,
    ModelEntry,
    OpWork,
    arg_at,
    bpe_of,
    numel,
    priced,
    tensor_dims,
)
from analysis.traces.model import OpShape

# Per-tensor FP8 casts: (where the high-precision input sits, FLOPs per element). Primus-Turbo's (input, scale_inv,
# amax) scales each element and folds it into the running amax of delayed scaling (2); vLLM's static
# (out, input, scale) only scales (1).
QUANTIZE_FP8_OPS = {"primus_turbo_cpp_extension::quantize_fp8_tensorwise": (0, 2),
                    "primus_turbo::quantize_fp8_tensorwise": (0, 2), "_C::static_scaled_fp8_quant": (1, 1)}
# MXFP4 casts: (where the input sits, directions). The dual casts write a row-wise and a column-wise copy.
QUANTIZE_MXFP4_OPS = {**dict.fromkeys(("primus_turbo_cpp_extension::quantize_mxfp4_dual",
                                       "primus_turbo::quantize_mxfp4_dual", "primus::quantize_mxfp4_dual"), (0, 2)),
                      "sglang_profiler::quant_dynamic_mxfp4_quant": (0, 1),
                      "sglang_profiler::fused_mxfp4_quant_fused_flatten_mxfp4_quant": (0, 1),  # x [M, N1, N2]
                      "aiter::dynamic_per_group_scaled_quant_fp4": (1, 1)}  # (out, input, scales, ...)
# Dynamic casts that find their scales themselves (per token, per group of a row, per tensor): (out, input,
# scales, ...).
DYNAMIC_QUANT_OPS = {"aiter::dynamic_per_token_scaled_quant", "aiter::dynamic_per_group_scaled_quant",
                     "aiter::dynamic_per_tensor_quant"}
# vLLM's Triton per-token-group FP8 cast (x [M, N], group_size): FP8 values and one float32 scale per group out.
GROUP_QUANT_FP8_OPS = {"vllm::triton_per_token_group_quant_fp8"}
# AITER's MX casts fused with the MoE token sort: (out [M, N/2] packed, scales (sorted, padded layout), input [M, N],
# sorted ids, valid-id count).
MOE_SORT_QUANT_OPS = {"aiter::fused_dynamic_mx_quant_moe_sort_hip", "aiter::fused_dynamic_mxfp4_quant_moe_sort_hip"}


def _quantize_fp8(input_at: int, flops_per_element: int, shape: OpShape) -> OpWork | None:
    """A per-tensor cast to FP8: the input read, one byte per element written, ``flops_per_element`` each."""
    x = tensor_dims(shape.dims[input_at])
    if x is None:
        return None
    elements = numel(x)
    return priced(QUANTIZE, flops_per_element * elements, elements * (bpe_of(shape.types, input_at) + 1),
                   shape.types[input_at], f"{list(x)} → fp8")


MXFP4_BLOCK = 32  # values sharing one E8M0 scale


def _quantize_mxfp4(input_at: int, directions: int, shape: OpShape) -> OpWork | None:
    """x [M, N] cast to MXFP4 along rows (and, for the dual casts, again along columns: the NT GEMM's A and the
    weight gradient's copy): x read once; per direction a packed copy (half a byte per value) and its scales (one
    byte per 32 values: M·⌈N/32⌉ along rows, N·⌈M/32⌉ along columns) written. Per element and direction a block
    max and a scale multiply: 2 FLOPs."""
    x = tensor_dims(shape.dims[input_at])
    if x is None or len(x) < 2:
        return None
    m, n = numel(x[:-1]), x[-1]
    scales = m * -(-n // MXFP4_BLOCK) + (n * -(-m // MXFP4_BLOCK) if directions == 2 else 0)
    nbytes = m * n * bpe_of(shape.types, input_at) + directions * -(-(m * n) // 2) + scales
    text = f"M={m} N={n} → mxfp4" + (" rows and columns" if directions == 2 else "")
    return priced(QUANTIZE, 2 * directions * m * n, nbytes, shape.types[input_at], text)


def _dynamic_quant(shape: OpShape) -> OpWork | None:
    """(out, input, scales): each value's group max found and the value scaled, 2 FLOPs per element; the input read,
    the low-precision output and the scales written, each at its dtype."""
    out, x, scales = (tensor_dims(shape.dims[i]) for i in range(3))
    if out is None or x is None or numel(out) != numel(x):
        return None
    nbytes = numel(x) * bpe_of(shape.types, 1) + numel(out) * bpe_of(shape.types, 0) \
        + (numel(scales) * bpe_of(shape.types, 2) if scales else 0)
    return priced(QUANTIZE, 2 * numel(x), nbytes, shape.types[1], f"{list(x)} → {shape.types[0]}")


def _group_quant_fp8(shape: OpShape) -> OpWork | None:
    """x [..., N] in groups of ``group_size`` along N: 2 FLOPs per element (group max, scale); x read, one FP8 byte
    per value and a float32 scale per group written."""
    x = tensor_dims(shape.dims[0])
    group = int(arg_at(shape, 1))
    if x is None or group <= 0:
        return None
    rows, n = numel(x[:-1]), x[-1]
    nbytes = numel(x) * (bpe_of(shape.types, 0) + 1) + rows * -(-n // group) * 4
    return priced(QUANTIZE, 2 * numel(x), nbytes, shape.types[0], f"{list(x)} groups of {group} → fp8")


def _moe_sort_quant(shape: OpShape) -> OpWork | None:
    """The MX cast of the activation x [M, N] (2 FLOPs per element: block max and scale) written in the experts' sorted
    order: x read, the recorded output (packed FP4, or FP8) written at its width and one E8M0 scale per 32 values of
    x. The scale buffer and the sorted ids are padded to their allocation (their filled part depends on the
    routing), so they count for the values the cast produces, and the small id arrays not at all."""
    out, x = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[2])
    if out is None or x is None or len(x) != 2:
        return None
    m, n = x
    nbytes = m * n * bpe_of(shape.types, 2) + numel(out) * bpe_of(shape.types, 0) + m * -(-n // MXFP4_BLOCK)
    return priced(QUANTIZE, 2 * m * n, nbytes, shape.types[2], f"M={m} N={n} → {shape.types[0]}, expert-sorted")


MODELS: tuple[ModelEntry, ...] = (
    (QUANTIZE_FP8_OPS, lambda n, s: _quantize_fp8(*QUANTIZE_FP8_OPS[n], s)),
    (QUANTIZE_MXFP4_OPS, lambda n, s: _quantize_mxfp4(*QUANTIZE_MXFP4_OPS[n], s)),
    (DYNAMIC_QUANT_OPS, lambda n, s: _dynamic_quant(s)),
    (GROUP_QUANT_FP8_OPS, lambda n, s: _group_quant_fp8(s)),
    (MOE_SORT_QUANT_OPS, lambda n, s: _moe_sort_quant(s)),
)
