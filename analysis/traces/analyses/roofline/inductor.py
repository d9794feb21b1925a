"""The Inductor Triton family: the ops PyTorch records around Inductor's generated Triton kernels, priced from
their pointers' shapes, their iteration sizes and the ATen ops their names list (:func:`fused_ops`).
"""

from __future__ import annotations

import re

from analysis.traces.analyses.categories import ELEMENTWISE_OPS
from analysis.traces.analyses.roofline.reduction import REDUCE_OPS, SCAN_OPS
from analysis.traces.analyses.roofline.work import (
    INDUCTOR_TRITON,
    ModelEntry,
    OpWork,
    arg_at,
    bpe_of,
    numel,
    priced,
    tensor_dims,
)
from analysis.traces.model import OpShape


class _InductorTritonKernels:
    """The ops PyTorch (2.4 and later) records around each Triton kernel Inductor generated, named as the kernel:
    ``triton_poi_fused_…`` (pointwise), ``triton_red_…``/``triton_per_…`` (reductions)."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.startswith(("triton_poi_fused_", "triton_red_fused_",
                                                          "triton_per_fused_"))


INDUCTOR_TRITON_OPS = _InductorTritonKernels()
# The ATen ops a fused kernel's name lists that do arithmetic (one FLOP per element each, the elementwise
# convention), and those that only move or reshape data (none).
_ARITHMETIC = frozenset({n.removeprefix("aten::").rstrip("_") for n in ELEMENTWISE_OPS}
                        | {n.removeprefix("aten::") for n in REDUCE_OPS | SCAN_OPS}
                        | {"_softmax", "_log_softmax", "softmax", "log_softmax", "native_layer_norm", "var_mean",
                           "argmax", "argmin", "any", "all", "bitwise_xor", "remainder", "fmod", "erfinv",
                           "mm", "bmm", "addmm", "native_dropout_backward", "_softmax_backward_data"})
_DATA_MOVEMENT = frozenset({"view", "_unsafe_view", "reshape", "clone", "_to_copy", "copy", "cat", "stack",
                            "embedding", "embedding_dense_backward", "permute", "transpose", "t", "expand",
                            "slice", "select", "squeeze", "unsqueeze", "index", "index_select", "gather",
                            "scatter", "constant_pad_nd", "full", "zeros", "ones", "arange", "iota", "fill",
                            "new_zeros", "empty", "alias", "split", "split_with_sizes", "unbind",
                            "slice_scatter", "select_scatter", "convert_element_type", "lift_fresh_copy"})


def fused_ops(kernel_name: str) -> list[str]:
    """The ATen ops in an Inductor kernel's name, read left to right taking the longest known name at each place
    (a name's words are joined by the same underscores as the names: ``fused__unsafe_view_mul_silu`` is
    ``_unsafe_view``, ``mul``, ``silu``); a word no known name starts is skipped."""
    m = re.match(r"triton_(?:poi|red|per)_fused_(.+)_\d+$", kernel_name)
    words = m.group(1).split("_") if m else []
    known = _ARITHMETIC | _DATA_MOVEMENT
    ops, i = [], 0
    while i < len(words):
        end = next((j for j in range(len(words), i, -1) if "_".join(words[i:j]) in known), None)
        if end is None:
            i += 1
            continue
        ops.append("_".join(words[i:end]))
        i = end
    return ops


def _inductor_triton(name: str, shape: OpShape) -> OpWork | None:
    """An Inductor kernel's recorded arguments are its pointers (tensors) and, last, its iteration sizes: xnumel
    (pointwise), or xnumel and rnumel (reductions: rnumel values reduced per output). FLOPs: one per element of
    the iteration space (xnumel · rnumel) for each arithmetic op the name lists (:func:`fused_ops`; ops that move
    data count none), an estimate, since a fused op may run per row rather than per element. Bytes: each pointer's
    tensor read or written once (a buffer the kernel both reads and writes counts once: a lower bound)."""
    sizes = [v for v in (arg_at(shape, i) for i, t in enumerate(shape.types) if t == "Scalar") if type(v) is int]
    reduction = not name.startswith("triton_poi_")
    if len(sizes) < (2 if reduction else 1):
        return None
    xnumel, rnumel = (sizes[-2], sizes[-1]) if reduction else (sizes[-1], 1)
    tensors = [(t, i) for i, d in enumerate(shape.dims) if (t := tensor_dims(d)) is not None]
    if not tensors:
        return None
    arithmetic = sum(op in _ARITHMETIC for op in fused_ops(name))
    nbytes = sum(numel(t) * bpe_of(shape.types, i) for t, i in tensors)
    text = f"xnumel={xnumel}" + (f" rnumel={rnumel}" if reduction else "")
    return priced(INDUCTOR_TRITON, arithmetic * xnumel * rnumel, nbytes, shape.types[tensors[0][1]], text)


MODELS: tuple[ModelEntry, ...] = (
    (INDUCTOR_TRITON_OPS, _inductor_triton),
)
