"""The GEMM families: dense GEMMs (ATen's, the serving libraries' linear and scaled GEMMs, Transformer Engine's,
bitsandbytes' int8, AITER's batched NT GEMMs) at 2·M·N·K, and the grouped GEMMs (Σ 2·mᵢ·kᵢ·nᵢ, with the variable-K
ones of a MoE's weight gradients). Bytes: the stored operands (and scales) read once, the output written once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analysis.traces.analyses.categories import GEMM
from analysis.traces.analyses.roofline.work import (
    GROUPED_GEMM,
    ModelEntry,
    OpWork,
    arg_at,
    bpe_of,
    bytes_per_element,
    logical_width,
    numel,
    priced,
    shape_list,
    tensor_dims,
    work_of,
)
from analysis.traces.model import OpShape

GEMM_OPS = {"aten::mm", "aten::addmm", "aten::_addmm_activation", "aten::bmm", "aten::baddbmm", "aten::matmul",
             "aten::linear", "aten::_scaled_mm"}
GROUPED_GEMM_OPS = {"aten::_grouped_mm", "aten::_scaled_grouped_mm", "primus_turbo::grouped_gemm",
                    "primus_turbo::grouped_gemm_impl", "primus_turbo_cpp_extension::grouped_gemm",
                    "primus_turbo_cpp_extension::ck_grouped_gemm"}
# Variable-K grouped GEMMs (the weight gradients of a MoE): per-group lists, or the compact X [M, K], dY [M, N] with
# M cut into the groups.
GROUPED_GEMM_VARIABLE_K_OPS = {"primus_turbo::grouped_gemm_variable_k", "primus_turbo::grouped_gemm_variable_k_impl",
                               "primus_turbo_cpp_extension::grouped_gemm_variable_k",
                               "primus_turbo_cpp_extension::ck_grouped_gemm_variable_k"}
# Dense GEMMs recorded as (x [..., K], weight [N, K], bias [N] or nothing), priced as aten::linear. Kept out of
# GEMM_OPS, whose ops the replay re-runs with torch.
LINEAR_OPS = {"aiter::gemm_a16w16", "vllm::rocm_unquantized_gemm"}
# GEMMs recorded as aten::_scaled_mm records them (A [M, K], B [K, N], scales, ...), priced as it is.
SCALED_MM_OPS = {"trtllm::cublas_scaled_mm"}
# vLLM's (Quark OCP MX) GEMM that casts x [M, K] to MXFP4 itself: (x, weight packed [N, K/2], ...).
DYNAMIC_QUANT_GEMM_OPS = {"vllm::gemm_with_dynamic_quant"}
# Batched NT GEMMs of AITER that cast x themselves: (x [B, M, K] or [M, B, K] in 16 bits, w [B, N, K] (FP4: K/2
# bytes), w_scales, ...) → y [B, M, N] in 16 bits.
BATCHED_GEMM_OPS = {
    "aiter::batched_gemm_a16wfp4_": True,  # packed FP4 weight
    "sglang_profiler::batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant_"
    "batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant": False,
}
# Transformer Engine's TorchScript GEMM: A, B and the output D sit at 0, 5 and 10.
TE_GEMM_OPS = {"tex_ts::te_gemm_ts"}
# NT GEMMs with a 16-bit output, most of them scaled low-precision ones: where A, B and their scales sit, whether
# the operands are packed FP4, and where the transA/transB/transC flags are (None: the binding only takes the NT
# layout, B given as [N, K]).
@dataclass(frozen=True)
class _ScaledGemm:
    a_at: int
    b_at: int
    scales_at: tuple[int, ...]
    fp4: bool
    trans_at: int | None


SCALED_GEMM_OPS: dict[str, _ScaledGemm] = {
    # hipblaslt_gemm_fp8/fp4(A, scale_a, B, scale_b, out_dtype, transA, transB, transC, granularity)
    **dict.fromkeys(("primus_turbo_cpp_extension::hipblaslt_gemm_fp8", "primus_turbo::hipblaslt_gemm_fp8"),
                    _ScaledGemm(0, 2, (1, 3), False, 5)),
    **dict.fromkeys(("primus_turbo_cpp_extension::hipblaslt_gemm_fp4", "primus_turbo::hipblaslt_gemm_fp4"),
                    _ScaledGemm(0, 2, (1, 3), True, 5)),
    # gemm_a4w4(A, B, scale_a, scale_b, out, dtype, alpha, beta, bpreshuffle): NT only
    **dict.fromkeys(("aiter::gemm_a4w4", "aiter::_gemm_a4w4_asm"), _ScaledGemm(0, 1, (2, 3), True, None)),
    # The 8-bit GEMMs of AITER and their vLLM/SGLang wrappers: (X [M, K], W [N, K], x_scale, w_scale, ...), NT only.
    **dict.fromkeys((
        "aiter::gemm_a8w8_ck", "aiter::gemm_a8w8_bpreshuffle_ck", "aiter::gemm_a8w8_bpreshuffle",
        "aiter::gemm_a8w8_blockscale_ck", "aiter::gemm_a8w8_blockscale_cktile",
        "aiter::gemm_a8w8_blockscale_bpreshuffle_ck", "aiter::gemm_a8w8_blockscale_bpreshuffle_cktile",
        "aiter::_gemm_a8w8_blockscale_bpreshuffle_asm", "aiter::flatmm_a8w8_blockscale_asm",
        "aiter::gfx950_a8w8_blockscale_asm",
        "vllm::rocm_aiter_triton_gemm_a8w8_blockscale", "vllm::_rocm_aiter_preshuffled_per_token_w8a8_gemm",
        "sglang_profiler::fp8_utils_gemm_a8w8_blockscale", "sglang_profiler::gemm_a8w8_blockscale_gemm_a8w8_blockscale",
    ), _ScaledGemm(0, 1, (2, 3), False, None)),
    # AITER's 16-bit GEMMs (x [M, K], w [N, K], ...) and its FP4 × FP4 one (packed x, w, x_scales, w_scales, ...).
    **dict.fromkeys(("aiter::gemm_a16w16_atomic_", "aiter::_gemm_a16w16_asm",
                     "sglang_profiler::gemm_kernels_flydsl_hgemm"), _ScaledGemm(0, 1, (), False, None)),
    "aiter::gemm_afp4wfp4_": _ScaledGemm(0, 1, (2, 3), True, None),
}
# bitsandbytes' int8 GEMM: int8_linear_matmul(A [..., K], B [N, K]) → int32 [..., N].
INT8_GEMM_OPS = {"bitsandbytes::int8_linear_matmul"}


def _gemm(name: str, shape: OpShape) -> OpWork | None:
    dims, types = shape.dims, shape.types
    bias: tuple[int, ...] | None = None
    if name in ("aten::addmm", "aten::_addmm_activation", "aten::baddbmm"):  # (bias, A, B, beta, alpha)
        bias, a, b, dtype = tensor_dims(dims[0]), tensor_dims(dims[1]), tensor_dims(dims[2]), types[1]
    elif name == "aten::linear":  # (input [..., K], weight [N, K], bias [N])
        x, w = tensor_dims(dims[0]), tensor_dims(dims[1])
        if x is None or w is None or len(w) != 2:
            return None
        bias = tensor_dims(dims[2]) if len(dims) > 2 else None
        a, b, dtype = (math.prod(x[:-1]), x[-1]), (w[1], w[0]), types[0]
    else:  # mm, bmm, matmul, _scaled_mm: (A, B, ...)
        a, b, dtype = tensor_dims(dims[0]), tensor_dims(dims[1]), types[0]
    if a is None or b is None or len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    m, k, n = a[-2], a[-1], b[-1]
    batch = max(math.prod(a[:-2]), math.prod(b[:-2]))
    flops = 2 * batch * m * n * k
    elements = numel(a) + numel(b) + batch * m * n + (numel(bias) if bias else 0)
    text = f"M={m} N={n} K={k}" + (f" B={batch}" if batch > 1 else "")
    return work_of(GEMM, flops, elements, dtype, text)


def _grouped_gemm(name: str, shape: OpShape) -> OpWork | None:
    """One GEMM per group. ``aten::_grouped_mm(A, B, offs, bias, out_dtype)`` comes in four layouts (torch 2.13,
    checked by running it): A [M, K] × B [G, K, N] (offs cut M), [G, M, K] × [G, K, N] (batched),
    [M, K] × [K, N] (offs cut K; output [G, M, N]), [G, M, K] × [K, N] (offs cut N; output [M, N]).
    Primus-Turbo writes B as [G, K, N] or [G, N, K], or both operands as per-group lists of 2-D shapes."""
    dims, types = shape.dims, shape.types
    bpe_a, bpe_b = bpe_of(types, 0), bpe_of(types, 1)
    # _scaled_grouped_mm takes FP8 operands and writes bfloat16 (the only out_dtype it accepts).
    bpe_out = 2 if name == "aten::_scaled_grouped_mm" else bpe_a
    a, b = tensor_dims(dims[0]), tensor_dims(dims[1])
    if a is not None and b is not None and len(a) == 2 and len(b) == 3:  # jagged M: one weight per group
        (m, k), groups = a, b[0]
        n = b[2] if b[1] == k else b[1] if b[2] == k and not name.startswith("aten::") else None
        if n is None:
            return None
        flops, a_elems, b_elems, out_elems = 2 * m * k * n, m * k, groups * k * n, m * n
    elif a is not None and b is not None and len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        groups, m, k = a
        n = b[2]
        flops, a_elems, b_elems, out_elems = 2 * groups * m * k * n, groups * m * k, groups * k * n, groups * m * n
    elif a is not None and b is not None and len(a) == 2 and len(b) == 2 and a[1] == b[0]:  # jagged K
        offs_at = 4 if name == "aten::_scaled_grouped_mm" else 2  # after scale_a, scale_b
        offs = tensor_dims(dims[offs_at]) if len(dims) > offs_at else None
        (m, k), n, groups = a, b[1], offs[0] if offs else 1
        flops, a_elems, b_elems, out_elems = 2 * m * k * n, m * k, k * n, groups * m * n
    elif a is not None and b is not None and len(a) == 3 and len(b) == 2 and a[2] == b[0]:  # jagged N
        groups, m, k = a
        n = b[1]
        flops, a_elems, b_elems, out_elems = 2 * m * k * n, groups * m * k, k * n, m * n
    else:
        lhs, rhs = shape_list(dims[0]), shape_list(dims[1])
        if lhs is None or rhs is None or len(lhs) != len(rhs) or any(x[1] != w[0] for x, w in zip(lhs, rhs,
                                                                                                   strict=True)):
            return None
        groups, m, k, n = len(lhs), sum(x[0] for x in lhs), lhs[0][1], rhs[0][1]
        flops = sum(2 * x[0] * x[1] * w[1] for x, w in zip(lhs, rhs, strict=True))
        a_elems, b_elems, out_elems = sum(map(numel, lhs)), sum(map(numel, rhs)), \
            sum(x[0] * w[1] for x, w in zip(lhs, rhs, strict=True))
    nbytes = a_elems * bpe_a + b_elems * bpe_b + out_elems * bpe_out
    return priced(GROUPED_GEMM, flops, nbytes, types[0], f"G={groups} M={m} N={n} K={k}")


def _scaled_gemm(op: _ScaledGemm, shape: OpShape) -> OpWork | None:
    """C [M, N] = A · B from FP8 or packed FP4 operands with their scales. The flags say which operand is stored
    transposed; transC asks for Cᵀ, which the library computes as Bᵀ·Aᵀ (the operands swap and both flags flip).
    A packed FP4 operand holds two values per byte, so its recorded K is half the product's. Bytes: A and B as
    stored, the scale tensors as recorded (a per-tensor scale records no shape and counts nothing; MXFP4 has one
    E8M0 byte per 32 values), C written in 16 bits (the bindings take BF16 or FP16 outputs only)."""
    a, b = tensor_dims(shape.dims[op.a_at]), tensor_dims(shape.dims[op.b_at])
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    if op.trans_at is None:
        trans_a, trans_b, trans_c = False, True, False
    else:
        trans_a, trans_b, trans_c = (bool(arg_at(shape, op.trans_at + i, False)) for i in range(3))
    if trans_c:
        a, b, trans_a, trans_b = b, a, not trans_b, not trans_a
    (m, k_stored), (k_b, n) = (a[::-1] if trans_a else a), (b[::-1] if trans_b else b)
    if k_stored != k_b:
        return None
    k = 2 * k_stored if op.fp4 else k_stored
    scales = sum(numel(t) * bpe_of(shape.types, i) for i in op.scales_at
                 if (t := tensor_dims(shape.dims[i]) if i < len(shape.dims) else None) is not None)
    nbytes = m * k_stored * bpe_of(shape.types, op.a_at) + n * k_stored * bpe_of(shape.types, op.b_at) + scales \
        + 2 * m * n
    return priced(GEMM, 2 * m * n * k, nbytes, shape.types[op.a_at], f"M={m} N={n} K={k}")


def _grouped_gemm_variable_k(name: str, shape: OpShape) -> OpWork | None:
    """Per-group lists as :func:`_grouped_gemm` reads them; the compact form X [M, K], dY [M, N] (M cut into the
    groups) is Σ 2·mᵢ·K·N = 2·M·K·N FLOPs, X and dY read and the groups' [K, N] results written, counted once
    since the compact form does not record how many groups there are (a lower bound)."""
    a, b = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[1])
    if a is None or b is None:
        return _grouped_gemm(name, shape)
    if len(a) != 2 or len(b) != 2 or a[0] != b[0]:
        return None
    (m, k), n = a, b[1]
    bpe_in = bpe_of(shape.types, 0)
    bpe_out = bytes_per_element(shape.types[1]) or bpe_in
    return priced(GROUPED_GEMM, 2 * m * k * n, m * (k + n) * bpe_in + k * n * bpe_out, shape.types[0],
                   f"M={m} N={n} K={k} variable K")


def _dynamic_quant_gemm(shape: OpShape) -> OpWork | None:
    """x [M, K] (16-bit, cast to MXFP4 inside the op) times the packed FP4 weight [N, K/2]: 2·M·N·K FLOPs at the
    weight's precision; bytes x and the stored weight read, y [M, N] written at x's width."""
    x, w = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[1])
    if x is None or w is None or len(x) != 2 or len(w) != 2 or logical_width(w[1], shape.types[1]) != x[1]:
        return None
    (m, k), n, bpe_x = x, w[0], bpe_of(shape.types, 0)
    nbytes = m * k * bpe_x + numel(w) * bpe_of(shape.types, 1) + m * n * bpe_x
    return priced(GEMM, 2 * m * n * k, nbytes, shape.types[1], f"M={m} N={n} K={k}")


def _batched_gemm(fp4_weight: bool, shape: OpShape) -> OpWork | None:
    """B products of x [M, K] (16-bit, cast inside the op) and the stored w [N, K]: 2·B·M·N·K FLOPs at the weight's
    precision; bytes x, w and the other recorded tensors (the weight scales) read once, y [B, M, N] written at x's
    width."""
    x, w = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[1])
    if x is None or w is None or len(x) != 3 or len(w) != 3 or (2 * w[2] if fp4_weight else w[2]) != x[2]:
        return None
    (b, n, _), k = w, x[2]
    m = x[1] if x[0] == b else x[0]
    read = sum(numel(t) * bpe_of(shape.types, i) for i, d in enumerate(shape.dims) if (t := tensor_dims(d)) is not None)
    return priced(GEMM, 2 * b * m * n * k, read + b * m * n * bpe_of(shape.types, 0), shape.types[1],
                   f"B={b} M={m} N={n} K={k}")


def _te_gemm(shape: OpShape) -> OpWork | None:
    """D = op(A) · op(B) with A, B, D at 0, 5, 10: whatever the transpose flags, |A|·|B| = M·K·K·N and |D| = M·N, so
    K = √(|A|·|B| / |D|) and the FLOPs are 2·|D|·K. Bytes A and B read, D written, each at its dtype."""
    a, b, d = (tensor_dims(shape.dims[i]) for i in (0, 5, 10))
    if a is None or b is None or d is None or len(a) != 2 or len(b) != 2:
        return None
    k = math.isqrt(numel(a) * numel(b) // numel(d))
    if k * k * numel(d) != numel(a) * numel(b) or k not in a or k not in b:
        return None
    nbytes = numel(a) * bpe_of(shape.types, 0) + numel(b) * bpe_of(shape.types, 5) + numel(d) * bpe_of(shape.types, 10)
    return priced(GEMM, 2 * numel(d) * k, nbytes, shape.types[0], f"D={list(d)} K={k}")


def _int8_gemm(shape: OpShape) -> OpWork | None:
    """A [..., K] · Bᵀ with B [N, K], both int8, accumulated into an int32 output: 2·M·N·K; bytes A and B read at one
    byte per value and the int32 output written. No peak table holds int8 rates: judged on bandwidth only."""
    a, b = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[1])
    if a is None or b is None or len(a) < 2 or len(b) != 2 or a[-1] != b[1]:
        return None
    m, k, n = numel(a[:-1]), a[-1], b[0]
    nbytes = m * k * bpe_of(shape.types, 0) + n * k * bpe_of(shape.types, 1) + 4 * m * n
    return priced(GEMM, 2 * m * n * k, nbytes, shape.types[0], f"M={m} N={n} K={k}")


MODELS: tuple[ModelEntry, ...] = (
    (GEMM_OPS, _gemm),
    (GROUPED_GEMM_OPS, _grouped_gemm),
    (GROUPED_GEMM_VARIABLE_K_OPS, _grouped_gemm_variable_k),
    (SCALED_MM_OPS, lambda n, s: _gemm("aten::_scaled_mm", s)),
    (TE_GEMM_OPS, lambda n, s: _te_gemm(s)),
    (BATCHED_GEMM_OPS, lambda n, s: _batched_gemm(BATCHED_GEMM_OPS[n], s)),
    (DYNAMIC_QUANT_GEMM_OPS, lambda n, s: _dynamic_quant_gemm(s)),
    (LINEAR_OPS, lambda n, s: _gemm("aten::linear", s)),
    (SCALED_GEMM_OPS, lambda n, s: _scaled_gemm(SCALED_GEMM_OPS[n], s)),
    (INT8_GEMM_OPS, lambda n, s: _int8_gemm(s)),
)
