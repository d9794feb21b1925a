"""The normalization family: forward norms (5 FLOPs per element), their backwards (10), and the inference
libraries' RMS norms (with a fused residual add, FP8 or MXFP4 cast, padding) and Primus's LayerNorm-modulate.
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.traces.analyses.categories import NORM
from analysis.traces.analyses.roofline.quantize import MXFP4_BLOCK
from analysis.traces.analyses.roofline.work import (
    ModelEntry,
    OpWork,
    arg_at,
    bpe_of,
    numel,
    priced,
    tensor_dims,
    work_of,
)
from analysis.traces.model import OpShape

# Normalization backwards (torch 2.13's schemas): where the weight sits and how many parameter gradients (weight,
# bias) they write; grad_out and input come first (miopen/cudnn: input, then grad_output).
NORM_BACKWARD_OPS = {"aten::native_layer_norm_backward": (5, 2), "aten::native_batch_norm_backward": (2, 2),
                     "aten::native_group_norm_backward": (4, 2), "aten::_fused_rms_norm_backward": (4, 1),
                     "aten::miopen_batch_norm_backward": (2, 2), "aten::cudnn_batch_norm_backward": (2, 2),
                     "aten::batch_norm_backward": (2, 2),
                     # Primus's (grad_out [T, B, H], x_norm [T, B, H], mean, rstd, modulation grad [B, H]): dx and
                     # the scale and shift gradients [B, H]
                     "primus::fused_ln_modulate_backward": (4, 2)}
# Primus's LayerNorm fused with a DiT modulation: (x [T, B, H], scale [B, H], shift [B, H], eps).
LN_MODULATE_OPS = {"primus::fused_ln_modulate"}
# AITER's residual add + RMS norm + zero pad of the hidden dim (vLLM's wrapper has the same arguments):
# (x [M, N], weight [N], epsilon, residual [M, N], x_pad_to_multiple) → (out [M, N_out], residual_out [M, N]).
RMS_NORM_PAD_OPS = {"aiter::fused_add_rmsnorm_pad_", "vllm::rocm_aiter_triton_add_rmsnorm_pad"}
# AITER's RMS norm fused with an MXFP4 cast (SGLang's profiler name and AITER's op):
# (x1 [M, N1], x1_weight [N1], x1_epsilon, x2 [M, N2] or None, x2_weight, x2_epsilon, res1 [M, N1] or None, shuffle,
#  scale_shuffle_padding, output_unquantized_inp1) → x1 normalized (after res1 is added) and cast to MXFP4; x2
# normalized alone; x1 + res1 and, when asked, x1's unquantized normalization written.
RMS_NORM_MXFP4_OPS = {"sglang_profiler::fused_mxfp4_quant_fused_rms_mxfp4_quant", "aiter::_fuse_rmsnorm_fp4_quant"}
# RMS norms of the inference libraries: where the input and the weight sit, and whether a residual is added first
# (then input and residual are read, the normalized output and the updated residual written).
@dataclass(frozen=True)
class _RmsNorm:
    x_at: int
    weight_at: int
    residual: bool = False


INFERENCE_NORM_OPS: dict[str, _RmsNorm] = {
    "aiter::rms_norm": _RmsNorm(0, 1), "aiter::rmsnorm2d_fwd_ck": _RmsNorm(0, 1), "aiter::rmsnorm": _RmsNorm(1, 2),
    "_C::rms_norm": _RmsNorm(1, 2),  # vLLM's (out, input, weight, epsilon)
    **dict.fromkeys(("aiter::add_rmsnorm", "aiter::rmsnorm2d_fwd_with_add_ck"), _RmsNorm(1, 4, residual=True)),
    "_C::fused_add_rms_norm": _RmsNorm(0, 2, residual=True),  # vLLM's (input, residual, weight, epsilon), in place
}
# RMS norms fused with an FP8 cast of their output (per token or per group of a row): where the input, the weight, the
# FP8 output and the scales sit when recorded (None: returned, so not recorded), or the position of the group size
# that sizes the scales (float32, one per group), and whether a residual is added first (read, and the sum written).
@dataclass(frozen=True)
class _RmsNormQuant:
    x_at: int
    weight_at: int
    out_at: int | None
    scales_at: int | None
    group_at: int | None = None
    residual: bool = False


RMS_NORM_QUANT_OPS: dict[str, _RmsNormQuant] = {
    # (out, input, yscale [M, 1], weight, epsilon, ...)
    "aiter::rmsnorm2d_fwd_with_dynamicquant_ck": _RmsNormQuant(1, 3, 0, 2),
    # (out, input, scale [M, N / group], weight, epsilon, group_size, ...)
    "aiter::rmsnorm_quant": _RmsNormQuant(1, 3, 0, 2),
    # (x, weight, eps, group_size) → (x_quant, scales)
    "vllm::rocm_aiter_rmsnorm_fp8_group_quant": _RmsNormQuant(0, 1, None, None, group_at=3),
    # (x, residual, weight, eps, group_size) → (x_quant, residual_out, scales)
    "vllm::rocm_aiter_rmsnorm_with_add_fp8_group_quant": _RmsNormQuant(0, 2, None, None, group_at=4, residual=True),
}
# Forward normalizations: (input, normalized shape or weight, ...) as their schemas record them.
NORM_OPS = {f"aten::{p}{kind}_norm" for p in ("", "native_") for kind in ("layer", "batch", "group", "instance")} \
    | {"aten::rms_norm", "aten::_fused_rms_norm", "aten::miopen_batch_norm", "aten::cudnn_batch_norm",
       "aiter::_groupnorm_run"}  # AITER's: aten::group_norm's arguments


def _norm(shape: OpShape) -> OpWork | None:
    """Input read, output written, and the weight and bias vectors (when given) read once."""
    x = tensor_dims(shape.dims[0])
    if x is None:
        return None
    params = sum(numel(t) for t in map(tensor_dims, shape.dims[1:]) if t is not None)
    return work_of(NORM, 5 * numel(x), 2 * numel(x) + params, shape.types[0], f"{list(x)}")


def _rms_norm(op: _RmsNorm, shape: OpShape) -> OpWork | None:
    """The normalizations' convention (5 FLOPs per element), plus the residual add when fused (1 more); bytes the
    input read and the output written (with a residual: input and residual read, output and the updated residual
    written), and the weight read once."""
    x, w = tensor_dims(shape.dims[op.x_at]), tensor_dims(shape.dims[op.weight_at])
    if x is None:
        return None
    elements = numel(x)
    tensors = 4 if op.residual else 2
    nbytes = tensors * elements * bpe_of(shape.types, op.x_at) + (numel(w) * bpe_of(shape.types, op.weight_at) if w
                                                                 else 0)
    return priced(NORM, (6 if op.residual else 5) * elements, nbytes, shape.types[op.x_at],
                   f"{list(x)}" + (" + residual" if op.residual else ""))


def _rms_norm_quant(op: _RmsNormQuant, shape: OpShape) -> OpWork | None:
    """The RMS norm's convention (5 FLOPs per element, +1 for a residual add) plus the cast's group max and scale (2);
    bytes the input and the weight read (with a residual: the residual read and the sum written at the input's
    width), the FP8 output written (one byte per value) and the float32 scales."""
    x, w = tensor_dims(shape.dims[op.x_at]), tensor_dims(shape.dims[op.weight_at])
    if x is None or w is None:
        return None
    elements, rows, bpe = numel(x), numel(x[:-1]), bpe_of(shape.types, op.x_at)
    out_bytes = numel(tensor_dims(shape.dims[op.out_at]) or ()) * bpe_of(shape.types, op.out_at) \
        if op.out_at is not None else elements
    if op.group_at is not None:
        scale_bytes = rows * -(-x[-1] // int(arg_at(shape, op.group_at))) * 4
    else:
        scales = tensor_dims(shape.dims[op.scales_at]) if op.scales_at is not None else None
        scale_bytes = numel(scales) * bpe_of(shape.types, op.scales_at) if scales and op.scales_at is not None else 0
    nbytes = elements * bpe * (3 if op.residual else 1) + numel(w) * bpe_of(shape.types, op.weight_at) + out_bytes \
        + scale_bytes
    return priced(NORM, (8 if op.residual else 7) * elements, nbytes, shape.types[op.x_at],
                   f"{list(x)}" + (" + residual" if op.residual else "") + " → fp8")


def _norm_backward(weight_at: int, param_grads: int, shape: OpShape) -> OpWork | None:
    """dx from grad_out and input: x̂ recomputed, the two sums per row (or channel) and dx, with the weight and bias
    gradients, 10 FLOPs per element (twice the forward's convention). Bytes: every recorded tensor read once
    (grad_out, input, the saved statistics, the weight), dx written, and the parameter gradients written when a
    weight is given."""
    tensors = [(t, i) for i, d in enumerate(shape.dims) if (t := tensor_dims(d)) is not None]
    if len(tensors) < 2 or tensors[0][0] != tensors[1][0]:
        return None
    x, x_at = tensors[0]
    weight = tensor_dims(shape.dims[weight_at]) if weight_at < len(shape.dims) else None
    nbytes = sum(numel(t) * bpe_of(shape.types, i) for t, i in tensors) + numel(x) * bpe_of(shape.types, x_at) \
        + (param_grads * numel(weight) * bpe_of(shape.types, weight_at) if weight else 0)
    return priced(NORM, 10 * numel(x), nbytes, shape.types[x_at], f"{list(x)} backward")


def _ln_modulate(shape: OpShape) -> OpWork | None:
    """y = LayerNorm(x) · (1 + scale) + shift over H, scale and shift per (B, H): the normalizations' 5 FLOPs per
    element (the modulation takes the affine's place); bytes x read and y written, scale and shift read once, and
    per row of H a float32 mean and reciprocal std written for the backward."""
    x = tensor_dims(shape.dims[0])
    if x is None or len(x) != 3:
        return None
    params = sum(numel(t) * bpe_of(shape.types, i) for i in (1, 2) if (t := tensor_dims(shape.dims[i])) is not None)
    rows = numel(x[:-1])
    nbytes = 2 * numel(x) * bpe_of(shape.types, 0) + params + 2 * rows * 4
    return priced(NORM, 5 * numel(x), nbytes, shape.types[0], f"{list(x)} modulated")


def _rms_norm_pad(shape: OpShape) -> OpWork | None:
    """r = x + residual; out = RMSNorm(r) · weight, zero-padded to N_out = ⌈N / multiple⌉ · multiple columns: the RMS
    norm's 5 FLOPs per element and 1 for the add; bytes x, residual and the weight read, r written, and out written
    with its padding (the zeros are stores too)."""
    x, w, res = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[1]), tensor_dims(shape.dims[3])
    if x is None or w is None or len(x) != 2 or res != x:
        return None
    m, n = x
    multiple = int(arg_at(shape, 4, 0))
    n_out = -(-n // multiple) * multiple if multiple > 0 else n
    bpe = bpe_of(shape.types, 0)
    nbytes = (3 * m * n + m * n_out) * bpe + numel(w) * bpe_of(shape.types, 1)
    return priced(NORM, 6 * m * n, nbytes, shape.types[0], f"[{m}, {n}] + residual → [{m}, {n_out}]")


def _rms_norm_mxfp4(shape: OpShape) -> OpWork | None:
    """RMS norm of x1 (5 FLOPs per element; +1 when res1 is added first) cast to MXFP4 (2 per element: block max
    and scale), and of x2 when given (5 per element). Bytes: x1, its weight, res1, x2 and its weight read; x1's
    packed FP4 (half a byte per value) and E8M0 scales (one byte per 32 values) written, x1 + res1 written when
    res1 is given, x2's normalization written, and x1's unquantized normalization when ``output_unquantized_inp1``."""
    x1, w1 = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[1])
    if x1 is None or w1 is None or len(x1) != 2:
        return None
    m, n1 = x1
    bpe = bpe_of(shape.types, 0)
    x2 = tensor_dims(shape.dims[3]) if len(shape.dims) > 3 else None
    x2 = x2 if x2 and len(x2) == 2 else None
    res = tensor_dims(shape.dims[6]) if len(shape.dims) > 6 else None
    has_res = res == x1
    w2 = tensor_dims(shape.dims[4]) if x2 and len(shape.dims) > 4 else None
    flops = (8 if has_res else 7) * m * n1 + (5 * numel(x2) if x2 else 0)
    nbytes = m * n1 * bpe * (1 + 2 * has_res + bool(arg_at(shape, 9, False))) + numel(w1) * bpe_of(shape.types, 1) \
        + -(-(m * n1) // 2) + m * -(-n1 // MXFP4_BLOCK) \
        + (2 * numel(x2) * bpe_of(shape.types, 3) if x2 else 0) + (numel(w2) * bpe_of(shape.types, 4) if w2 else 0)
    text = f"[{m}, {n1}]" + (" + residual" if has_res else "") + " → mxfp4" + (f", x2 {list(x2)}" if x2 else "")
    return priced(NORM, flops, nbytes, shape.types[0], text)


MODELS: tuple[ModelEntry, ...] = (
    (NORM_OPS, lambda n, s: _norm(s)),
    (INFERENCE_NORM_OPS, lambda n, s: _rms_norm(INFERENCE_NORM_OPS[n], s)),
    (RMS_NORM_QUANT_OPS, lambda n, s: _rms_norm_quant(RMS_NORM_QUANT_OPS[n], s)),
    (NORM_BACKWARD_OPS, lambda n, s: _norm_backward(*NORM_BACKWARD_OPS[n], s)),
    (LN_MODULATE_OPS, lambda n, s: _ln_modulate(s)),
    (RMS_NORM_PAD_OPS, lambda n, s: _rms_norm_pad(s)),
    (RMS_NORM_MXFP4_OPS, lambda n, s: _rms_norm_mxfp4(s)),
)
