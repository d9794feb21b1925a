"""What every family model returns and the helpers they share: :class:`OpWork` (an op call's FLOPs, bytes and the
precision its peak is looked up by), the family names, the element widths of Kineto's dtype names, and the readers of
a recorded call's arguments (``Input Dims``, ``Input type``, ``Concrete Inputs``). A family model is a
:data:`Model`: it takes the op's name and its recorded shapes and gives its work, None, or raises
(IndexError, TypeError, ValueError, ZeroDivisionError) when the shapes do not fit, which
:func:`analysis.traces.analyses.roofline.table.op_work` turns into None.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from typing import Any

from analysis.traces.model import OpShape

# Bytes per element of the dtype names Kineto writes (lower-cased), after TraceLens' name2bpe.
_BYTES = {"double": 8, "long int": 8, "long": 8, "c10::complex<float>": 8, "float": 4, "int": 4,
          "unsigned int": 4, "c10::half": 2, "c10::bfloat16": 2, "short": 2, "bool": 1, "unsigned char": 1,
          "signed char": 1, "c10::float8_e4m3fn": 1, "c10::float8_e4m3fnuz": 1, "c10::float8_e5m2": 1,
          "c10::float8_e5m2fnuz": 1, "c10::float8_e8m0fnu": 1,
          # Two FP4 values packed in one byte: the recorded shape counts bytes (K/2 columns), not values.
          "c10::float4_e2m1fn_x2": 1}
_PRECISION = {"c10::bfloat16": "bf16", "c10::half": "fp16", "float": "fp32", "double": "fp64"}
# The families this package names besides the categories' (GEMM, CONV, SDPA, elementwise, NORM, reduction).
GROUPED_GEMM, MOE, MOE_COMM, ROPE, CROSS_ENTROPY = "grouped GEMM", "MoE", "MoE comm", "RoPE", "cross-entropy"
SSM, CAUSAL_CONV1D, QUANTIZE, KV_CACHE = "SSM", "causal conv1d", "quantize", "KV cache"
MOE_ROUTING, INDUCTOR_TRITON, MHC = "MoE routing", "Inductor Triton", "mHC"


@dataclass(frozen=True)
class OpWork:
    family: str  # GEMM, CONV, SDPA, elementwise, NORM, reduction, grouped GEMM, MoE, MoE comm, RoPE, cross-entropy,
    # SSM (and gated-delta linear attention), causal conv1d, quantize, KV cache, MoE routing, mHC, Inductor Triton
    flops: float
    bytes: float
    shape: str
    dtype: str
    precision: str | None  # key into a device's peak table, None when the dtype has none


# A family model: the op's name and its recorded shapes → its work, or None when it cannot price them.
Model = Callable[[str, OpShape], OpWork | None]
ModelEntry = tuple[Container[str], Model]  # the ops a model prices, and the model


def bytes_per_element(dtype: str) -> int | None:
    return _BYTES.get(dtype.lower())


def precision_of(dtype: str) -> str | None:
    d = dtype.lower()
    return "fp8" if "float8" in d else "fp4" if "float4" in d else _PRECISION.get(d)


def tensor_dims(dims: Any) -> tuple[int, ...] | None:
    if isinstance(dims, list) and dims and all(type(d) is int and d >= 0 for d in dims):
        return tuple(dims)
    return None


def parse_concrete(value: str) -> Any:
    """A ``Concrete Inputs`` entry: '1', '0.', 'False', '[1, 1]' → int, float, bool, list; else the text."""
    text = value.strip()
    if text in ("True", "False"):
        return text == "True"
    if text.startswith("[") and text.endswith("]"):
        parts = [p.strip() for p in text[1:-1].split(",") if p.strip()]
        return [parse_concrete(p) for p in parts]
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def arg_at(shape: OpShape, i: int, default: Any = None) -> Any:
    return parse_concrete(shape.concrete[i]) if i < len(shape.concrete) and shape.concrete[i] != "" else default


def numel(t: Sequence[int]) -> int:
    return math.prod(t)


def work_of(family: str, flops: float, elements: float, dtype: str, shape_text: str) -> OpWork | None:
    bpe = bytes_per_element(dtype)
    if bpe is None:
        return None
    return OpWork(family, float(flops), float(elements) * bpe, shape_text, dtype, precision_of(dtype))


def priced(family: str, flops: float, nbytes: float, dtype: str, shape_text: str) -> OpWork:
    return OpWork(family, float(flops), float(nbytes), shape_text, dtype, precision_of(dtype))


def bpe_of(types: Sequence[str], i: int) -> int:
    """Bytes per element of argument ``i``; a dtype with no width known makes the op unpriced (ValueError)."""
    bpe = bytes_per_element(types[i]) if i < len(types) else None
    if bpe is None:
        raise ValueError(f"no element width for argument {i}")
    return bpe


def shape_list(value: Any) -> list[tuple[int, ...]] | None:
    """A list of 2-D shapes (Primus-Turbo's per-group operands: [[M₁, K], [M₂, K], …]), or None."""
    if not isinstance(value, list) or not value:
        return None
    shapes = [tensor_dims(v) for v in value]
    return [s for s in shapes if s is not None] if all(s is not None and len(s) == 2 for s in shapes) else None


def logical_width(width: int, dtype: str) -> int:
    """Values along a packed dimension: two per byte for packed FP4."""
    return 2 * width if "float4" in dtype.lower() else width
