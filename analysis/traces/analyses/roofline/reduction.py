"""The reduction family: ATen's reductions (one FLOP per input element) and scans (cumsum, cumprod), the fused
cross-entropy (5 FLOPs per logit) and AITER's exponential-race sampler.
"""

from __future__ import annotations

from analysis.traces.analyses.categories import REDUCTION
from analysis.traces.analyses.roofline.work import (
    CROSS_ENTROPY,
    ModelEntry,
    OpWork,
    arg_at,
    bpe_of,
    bytes_per_element,
    numel,
    priced,
    tensor_dims,
    work_of,
)
from analysis.traces.model import OpShape

CROSS_ENTROPY_OPS = {"CrossEntropyFunction"}
# AITER's exponential-race sampler: (out ids [T], logits [T, V], exponential noise [T, V], ...).
SAMPLING_OPS = {"aiter::mixed_sample_outer_exponential"}
REDUCE_OPS = {f"aten::{n}" for n in ("sum", "mean", "amax", "amin", "max", "min", "norm", "linalg_vector_norm",
                                     "linalg_norm", "std", "var", "logsumexp", "prod")}
# Where a reduction's dims sit (torch 2.13's schemas): (self, dim, ...) for most, (self, p, dim, keepdim, ...) for
# the norms (aten::norm.ScalarOpt_dim, linalg_vector_norm, linalg_norm), whose dim is an int list.
_NORM_DIM_AT = {"aten::norm": 2, "aten::linalg_vector_norm": 2, "aten::linalg_norm": 2}
# Scans (self, dim, dtype): every prefix kept, so the output is the input's size.
SCAN_OPS = {"aten::cumsum", "aten::cumprod"}


def _reduce(name: str, shape: OpShape) -> OpWork | None:
    """Input read once, output written once; the output's size from the reduced dims (all when none given: an
    overload without dims, e.g. ``aten::norm(self, p)``, or a dims argument that is not an int or an int list, e.g.
    ``aten::std(self, unbiased)``'s flag). One FLOP per input element. ``aten::linalg_norm`` over two dims with
    ``ord`` 2, -2 or 'nuc' is a matrix norm computed from singular values, which this count does not describe:
    unpriced."""
    x = tensor_dims(shape.dims[0])
    if x is None:
        return None
    dims_at = _NORM_DIM_AT.get(name, 1)
    dims = arg_at(shape, dims_at, None) if dims_at < len(shape.types) and shape.types[dims_at] in (
        "Scalar", "ScalarList") else None
    listed = dims if isinstance(dims, list) else [dims] if dims is not None else []
    if not all(type(d) is int for d in listed):
        listed = []
    reduced = sorted({d % len(x) for d in listed}) if x else []
    if name == "aten::linalg_norm" and arg_at(shape, 1, None) in (2, -2, 2.0, -2.0, "nuc") \
            and (len(reduced) == 2 or (not reduced and len(x) == 2)):
        return None
    out = numel([n for i, n in enumerate(x) if i not in reduced]) if reduced else 1
    return work_of(REDUCTION, numel(x), numel(x) + out, shape.types[0], f"{list(x)} over {reduced or 'all'}")


def _scan(shape: OpShape) -> OpWork | None:
    """A running sum or product along one dim (``aten::cumsum``/``cumprod``): one FLOP per element, the input read
    and an output of the same size written, both at the input's width."""
    x = tensor_dims(shape.dims[0])
    if x is None:
        return None
    return work_of(REDUCTION, numel(x), 2 * numel(x), shape.types[0], f"{list(x)} scan over dim {arg_at(shape, 1)}")


def _cross_entropy(shape: OpShape) -> OpWork | None:
    """Logits [..., V] and one target per row read; one float32 loss per row written."""
    logits = tensor_dims(shape.dims[0])
    if logits is None or not logits or logits[-1] == 0:
        return None
    rows = numel(logits) // logits[-1]
    target_bpe = bytes_per_element(shape.types[1]) if len(shape.types) > 1 else None
    nbytes = numel(logits) * bpe_of(shape.types, 0) + rows * (target_bpe or 8) + rows * 4
    return priced(CROSS_ENTROPY, 5 * numel(logits), nbytes, shape.types[0], f"rows={rows} V={logits[-1]}")


def _sampling(shape: OpShape) -> OpWork | None:
    """token[t] = argmax_v logits[t, v] / noise[t, v] (exponential race, which samples the softmax): a divide and a
    compare per logit (2 FLOPs); logits and noise read, every other recorded tensor (the ids written, per-row
    temperatures read) once."""
    logits, noise = tensor_dims(shape.dims[1]), tensor_dims(shape.dims[2])
    if logits is None or noise is None or len(logits) != 2:
        return None
    nbytes = sum(numel(t) * bpe_of(shape.types, i)
                 for i, d in enumerate(shape.dims) if (t := tensor_dims(d)) is not None)
    return priced(REDUCTION, 2 * numel(logits), nbytes, shape.types[1], f"T={logits[0]} V={logits[1]} sampled")


MODELS: tuple[ModelEntry, ...] = (
    (REDUCE_OPS, _reduce),
    (SCAN_OPS, lambda n, s: _scan(s)),
    (CROSS_ENTROPY_OPS, lambda n, s: _cross_entropy(s)),
    (SAMPLING_OPS, lambda n, s: _sampling(s)),
)
