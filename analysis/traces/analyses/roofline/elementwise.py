"""The elementwise family: ATen's pointwise ops (one FLOP per output element), fused gated activations (2 per
output), and pure data movement (replication padding, nearest upsampling: no FLOPs). Bytes: inputs read once, the
output written once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from analysis.traces.analyses.categories import ELEMENTWISE, ELEMENTWISE_OPS
from analysis.traces.analyses.roofline.work import (
    ModelEntry,
    OpWork,
    arg_at,
    bpe_of,
    bytes_per_element,
    numel,
    precision_of,
    priced,
    tensor_dims,
)
from analysis.traces.model import OpShape

# Fused gated activations: (out [T, N], input [T, 2·N]) → out = act(input[:, :N]) · input[:, N:].
GATED_ACTIVATION_OPS = {"aiter::silu_and_mul", "_C::silu_and_mul", "sgl_kernel::silu_and_mul",
                        "aiter::gelu_and_mul", "aiter::gelu_tanh_and_mul"}
# Pure data movement into a larger tensor: (input, padding [left, right, top, bottom, ...]) and (input, output_size,
# scales...) or (input, output_size, scale_factors).
PAD_OPS = {f"aten::replication_pad{d}d" for d in (1, 2, 3)}
UPSAMPLE_OPS = {f"aten::upsample_nearest{d}d" for d in (1, 2, 3)}
# Liger-Kernel's SwiGLU (a, b) → silu(a) · b, all three the same shape.
SILU_MUL_OPS = {"LigerSiLUMulFunction"}


def _elementwise(shape: OpShape) -> OpWork | None:
    tensors = [(t, dt) for t, dt in zip(map(tensor_dims, shape.dims), shape.types, strict=False)
               if t is not None and bytes_per_element(dt) is not None]
    if not tensors:
        return None
    out_shape = np.broadcast_shapes(*(t for t, _ in tensors))
    out_elems = numel(out_shape)
    widest = max((dt for _, dt in tensors), key=lambda dt: bytes_per_element(dt) or 0)
    in_bytes = sum(numel(t) * (bytes_per_element(dt) or 0) for t, dt in tensors)
    bpe = bytes_per_element(widest) or 0
    return OpWork(ELEMENTWISE, float(out_elems), float(in_bytes + out_elems * bpe), f"{list(out_shape)}",
                  widest, precision_of(widest))


def _gated_activation(shape: OpShape) -> OpWork | None:
    """(out [..., N], input [..., 2·N]): out = act(input[..., :N]) · input[..., N:], an activation and a product per
    output element (2 FLOPs); the input read, the output written."""
    out, x = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[1])
    if out is None or x is None or x[-1] != 2 * out[-1] or x[:-1] != out[:-1]:
        return None
    return priced(ELEMENTWISE, 2 * numel(out), numel(x) * bpe_of(shape.types, 1) + numel(out) *
                   bpe_of(shape.types, 0), shape.types[1], f"{list(x)} → {list(out)}")


def _moved(x: tuple[int, ...], out: Sequence[int], dtype: str, what: str) -> OpWork | None:
    """Data movement: the input read once and the output written, no FLOPs."""
    bpe = bytes_per_element(dtype)
    if bpe is None or min(out) <= 0:
        return None
    return priced(ELEMENTWISE, 0, (numel(x) + numel(out)) * bpe, dtype, f"{list(x)} → {list(out)} {what}")


def _replication_pad(shape: OpShape) -> OpWork | None:
    """The edge values repeated outward: padding pairs (first, last) widen the last dims, the first pair the last
    dim."""
    x, padding = tensor_dims(shape.dims[0]), arg_at(shape, 1)
    if x is None or not isinstance(padding, list) or len(padding) % 2 or len(padding) // 2 > len(x):
        return None
    out = list(x)
    for i in range(len(padding) // 2):
        out[-1 - i] += padding[2 * i] + padding[2 * i + 1]
    return _moved(x, out, shape.types[0], "padded")


def _upsample_nearest(shape: OpShape) -> OpWork | None:
    """Each output element a copy of its nearest input element: the spatial dims from ``output_size``, else from
    the scale factors (⌊size · scale⌋)."""
    x, size = tensor_dims(shape.dims[0]), arg_at(shape, 1)
    if x is None:
        return None
    spatial = len(x) - 2
    if not isinstance(size, list):
        scales = arg_at(shape, 2)
        scales = scales if isinstance(scales, list) else [arg_at(shape, 2 + i) for i in range(spatial)]
        size = [math.floor(n * float(f)) for n, f in zip(x[2:], scales, strict=True)]
    if len(size) != spatial:
        return None
    return _moved(x, [*x[:2], *size], shape.types[0], "nearest")


def _silu_mul(shape: OpShape) -> OpWork | None:
    """silu(a) · b over a and b of one shape: an activation and a product per element (2 FLOPs); a and b read,
    the product written at a's dtype."""
    a, b = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[1])
    if a is None or b is None or a != b:
        return None
    bpe_a = bpe_of(shape.types, 0)
    return priced(ELEMENTWISE, 2 * numel(a), numel(a) * (2 * bpe_a + bpe_of(shape.types, 1)), shape.types[0],
                   f"{list(a)}")


MODELS: tuple[ModelEntry, ...] = (
    (ELEMENTWISE_OPS, lambda n, s: _elementwise(s)),
    (GATED_ACTIVATION_OPS, lambda n, s: _gated_activation(s)),
    (PAD_OPS, lambda n, s: _replication_pad(s)),
    (UPSAMPLE_OPS, lambda n, s: _upsample_nearest(s)),
    (SILU_MUL_OPS, lambda n, s: _silu_mul(s)),
)
