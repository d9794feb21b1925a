"""The convolutions: ATen's conv ops and apex's fused conv + bias (+ ReLU) at 2 FLOPs per multiply-add of the
convolution, the depthwise ``causal_conv1d`` (vector work) and Mamba-2's conv + chunked SSD scan (family SSM,
judged on the matrix peak). :func:`conv_arg` reads a conv op's arguments, for the replay too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from analysis.traces.analyses.categories import CONV
from analysis.traces.analyses.roofline.work import (
    CAUSAL_CONV1D,
    SSM,
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

CONV_OPS = {"aten::convolution", "aten::_convolution", "aten::cudnn_convolution", "aten::miopen_convolution",
             "aten::mkldnn_convolution", "aten::convolution_backward"}
CAUSAL_CONV1D_OPS = {"DaoAILab::_causal_conv1d_fwd_cpp"}
MAMBA_SSD_OPS = {"MambaSplitConv1dScanCombinedFn"}


def conv_arg(op: str, key: str, values: Sequence[Any], default: Any) -> Any:
    """A conv op's argument ``key`` (stride, padding, dilation, transposed, output_padding, groups) from its
    positional argument values (None where not recorded), or ``default`` when the op has no such argument."""
    at = _CONV_LAYOUT[op].get(key)
    return default if at is None or at >= len(values) or values[at] is None else values[at]


# Where each conv op keeps its arguments (positions in the recorded inputs).
_CONV_LAYOUT: dict[str, dict[str, int]] = {
    "aten::convolution": {"bias": 2, "stride": 3, "padding": 4, "dilation": 5, "transposed": 6,
                          "output_padding": 7, "groups": 8},
    "aten::_convolution": {"bias": 2, "stride": 3, "padding": 4, "dilation": 5, "transposed": 6,
                           "output_padding": 7, "groups": 8},
    "aten::cudnn_convolution": {"padding": 2, "stride": 3, "dilation": 4, "groups": 5},
    "aten::miopen_convolution": {"bias": 2, "padding": 3, "stride": 4, "dilation": 5, "groups": 6},
    "aten::mkldnn_convolution": {"bias": 2, "padding": 3, "stride": 4, "dilation": 5, "groups": 6},
    # (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
    #  output_mask): the tensors sit one place further right.
    "aten::convolution_backward": {"stride": 4, "padding": 5, "dilation": 6, "transposed": 7,
                                   "output_padding": 8, "groups": 9, "output_mask": 10},
    # apex's fused conv + bias (+ ReLU) autograd functions: forward(ctx, x, weight, bias, padding, stride), one int
    # each for every spatial dim (apex/contrib/conv_bias_relu; the bias add and ReLU are not counted, as aten's).
    **{op: {"bias": 2, "padding": 3, "stride": 4} for op in ("ConvBias_", "ConvBiasReLU_")},
}
# Kept out of CONV_OPS: the replay re-runs CONV_OPS through aten::convolution, and these are apex's.
APEX_CONV_OPS = {"ConvBias_", "ConvBiasReLU_"}


def _conv(name: str, shape: OpShape) -> OpWork | None:
    layout = _CONV_LAYOUT[name]
    first = 1 if name == "aten::convolution_backward" else 0
    x, w = tensor_dims(shape.dims[first]), tensor_dims(shape.dims[first + 1])
    if x is None or w is None or len(x) < 3 or len(x) != len(w):
        return None
    spatial = len(x) - 2

    def ints(key: str, default: int) -> list[int]:
        value = arg_at(shape, layout[key], [default]) if key in layout else [default]
        value = value if isinstance(value, list) else [value]
        return (value * spatial)[:spatial] if len(value) == 1 else value

    stride, padding, dilation = ints("stride", 1), ints("padding", 0), ints("dilation", 1)
    transposed = bool(arg_at(shape, layout["transposed"], False)) if "transposed" in layout else False
    groups = int(arg_at(shape, layout["groups"], 1)) if "groups" in layout else 1
    if transposed:
        out_channels = w[1] * groups
        out = [(i - 1) * s - 2 * p + d * (k - 1) + o + 1 for i, s, p, d, k, o in
               zip(x[2:], stride, padding, dilation, w[2:], ints("output_padding", 0), strict=True)]
    else:
        out_channels = w[0]
        out = [(i + 2 * p - d * (k - 1) - 1) // s + 1 for i, s, p, d, k in
               zip(x[2:], stride, padding, dilation, w[2:], strict=True)]
    if min(out) <= 0:
        return None
    y = (x[0], out_channels, *out)
    # A forward conv output element is a dot product over w[1] (= C_in/groups) · prod(kernel) taps; a
    # transposed conv scatters every input element over the same number of taps.
    flops = 2 * (numel(x) if transposed else numel(y)) * numel(w[1:])
    has_bias = "bias" in layout and bool(tensor_dims(shape.dims[layout["bias"]]) if layout["bias"] < len(shape.dims)
                                         else False)
    elements = numel(x) + numel(w) + numel(y) + (out_channels if has_bias else 0)
    if name == "aten::convolution_backward":
        # The input and weight gradients each cost one forward conv; output_mask says which were computed.
        mask = arg_at(shape, layout["output_mask"], [True, True, True])
        grads = [bool(m) for m in mask[:2]] if isinstance(mask, list) else [True, True]
        flops *= sum(grads)
        elements = numel(y) + numel(x) + numel(w) + grads[0] * numel(x) + grads[1] * numel(w)
    text = f"x={list(x)} w={list(w)} stride={stride} pad={padding} groups={groups}"
    return work_of(CONV, flops, elements, shape.types[first], text)


def _causal_conv1d(shape: OpShape) -> OpWork | None:
    """Depthwise causal conv of x [B, C, L] with w [C, K] (+ bias [C]): each output element a K-tap multiply-add,
    2·B·C·L·K FLOPs; x read, y written, w and the bias read."""
    x, w = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[1])
    if x is None or w is None or len(x) != 3 or len(w) != 2 or w[0] != x[1]:
        return None
    bias = tensor_dims(shape.dims[2]) if len(shape.dims) > 2 else None
    (b, c, length), taps = x, w[1]
    nbytes = 2 * numel(x) * bpe_of(shape.types, 0) + numel(w) * bpe_of(shape.types, 1) \
        + (c * bpe_of(shape.types, 2) if bias else 0)
    return priced(CAUSAL_CONV1D, 2 * b * c * length * taps, nbytes, shape.types[0],
                   f"B={b} C={c} L={length} K={taps}")


# MambaSplitConv1dScanCombinedFn's recorded arguments: zxbcdt, conv1d weight, conv1d bias, dt_bias, A, D, then
# chunk_size (6), ..., headdim (15), ngroups (16).
_SSD_CHUNK_AT, _SSD_HEADDIM_AT, _SSD_NGROUPS_AT = 6, 15, 16


def _mamba_ssd(shape: OpShape) -> OpWork | None:
    """Mamba-2's fused conv1d + chunked SSD scan. zxbcdt [B, T, 2·d_inner + 2·G·N + H] holds z, x, B, C and dt; the
    conv runs over x, B, C (conv weight [d_inner + 2·G·N, d_conv]), so d_inner = width − conv channels − H, the
    head dim P = d_inner / H and the state size N = (conv channels − d_inner) / (2·G). With chunks of Q tokens:
    conv 2·B·(conv channels)·T·d_conv; within each chunk C·Bᵀ (2·Q²·N per group) and its masked product with X
    (2·Q²·P per head), so 2·B·T·Q·(G·N + d_inner) over the T/Q chunks; each chunk's final state Bᵀ·X and the
    states' contribution to the outputs C·h, 2·B·T·N·d_inner each. The state passing between chunks (1/Q of one
    state term) and the optional gated RMSNorm are not counted. Bytes: zxbcdt, the conv weight and bias, dt_bias,
    A and D read once, y [B, T, d_inner] written."""
    zxbcdt, conv_w, heads_shape = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[1]), tensor_dims(shape.dims[3])
    if zxbcdt is None or conv_w is None or heads_shape is None or len(zxbcdt) != 3 or len(conv_w) != 2:
        return None
    (b, t, width), (channels, d_conv), heads = zxbcdt, conv_w, heads_shape[0]
    chunk, groups = int(arg_at(shape, _SSD_CHUNK_AT)), int(arg_at(shape, _SSD_NGROUPS_AT, 1))
    d_inner = width - channels - heads
    state_width = channels - d_inner  # 2·G·N
    head_dim = arg_at(shape, _SSD_HEADDIM_AT, d_inner // heads if heads else 0)
    if heads <= 0 or d_inner <= 0 or head_dim * heads != d_inner or state_width <= 0 \
            or state_width % (2 * groups):
        return None
    n = state_width // (2 * groups)
    flops = 2 * b * channels * t * d_conv + 2 * b * t * chunk * (groups * n + d_inner) + 2 * 2 * b * t * n * d_inner
    params = sum(numel(p) * bpe_of(shape.types, i) for i in range(2, 6)
                 if (p := tensor_dims(shape.dims[i])) is not None)
    bpe = bpe_of(shape.types, 0)
    nbytes = numel(zxbcdt) * bpe + numel(conv_w) * bpe_of(shape.types, 1) + params + b * t * d_inner * bpe
    return priced(SSM, flops, nbytes, shape.types[0],
                   f"B={b} T={t} H={heads} P={head_dim} G={groups} N={n} chunk={chunk}")


MODELS: tuple[ModelEntry, ...] = (
    (CONV_OPS, _conv),
    (CAUSAL_CONV1D_OPS, lambda n, s: _causal_conv1d(s)),
    (MAMBA_SSD_OPS, lambda n, s: _mamba_ssd(s)),
    (APEX_CONV_OPS, _conv),
)
