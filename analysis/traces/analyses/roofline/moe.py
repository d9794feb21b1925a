"""The MoE families: fused MoE (vLLM's AITER call, AITER's direct and two-stage kernels, SGLang's Triton grouped
GEMM) on the up/down projections of each token's top-k experts with the weights of the experts expected to be hit,
MoE routing (every recorded operand touched once) and MoE comm (dispatch/combine: traffic only, judged on no peak).
"""

from __future__ import annotations

from analysis.traces.analyses.roofline.work import (
    MOE,
    MOE_COMM,
    MOE_ROUTING,
    ModelEntry,
    OpWork,
    arg_at,
    bpe_of,
    bytes_per_element,
    logical_width,
    numel,
    priced,
    tensor_dims,
)
from analysis.traces.model import OpShape

FUSED_MOE_OPS = {"vllm::rocm_aiter_fused_moe"}
MOE_GEMM_OPS = {"sglang_profiler::fused_moe_triton_kernels_invoke_fused_moe_kernel"}
# AITER's fused MoE called directly: (out [M, K], x [M, K], w1 [E, N or 2·N, K], w2 [E, K, N], ..., topk (8), ...).
AITER_FUSED_MOE_OPS = {"aiter::fmoe_g1u1", "aiter::fmoe_fp8_blockscale_g1u1"}
# AITER's two-stage (unfused) MoE: where the activations, the experts' weights and the output sit. The up stage
# reads x [T, K] and writes [T, topk, N] (the activation applied when gated); the down stage reads that and writes
# [T, K].
MOE_UP_OPS = {"aiter::moe_cktile2stages_gemm1_ck": (0, 1, 2), "aiter::ck_moe_stage1": (0, 1, 6)}
MOE_DOWN_OPS = {"aiter::moe_cktile2stages_gemm2_ck": (0, 1, 2), "aiter::ck_moe_stage2": (0, 2, 6)}
# Router top-k, the token sort into expert order and the sum over each token's experts: every recorded operand
# touched once (AITER's allocation-padded alignment buffers, moe_align_block_size, are left out).
MOE_ROUTING_OPS = {"aiter::biased_grouped_topk_hip", "aiter::moe_sorting_fwd", "aiter::mxfp4_moe_sort_hip",
                   "aiter::topk_softplus", "aiter::topk_softmax", "aiter::topk_softmax_asm", "aiter::topk_sigmoid",
                   "aiter::grouped_topk", "aiter::moe_fused_gate", "aiter::moe_sum"}
MOE_COMM_OPS = {"MoEDispatch", "MoECombine"}
# SGLang's shared-expert append: (topk_ids [M, K], topk_weights [M, K], num_fused_shared_experts, scale_factor, N).
APPEND_SHARED_EXPERTS_OPS = {"sglang_profiler::fused_moe_triton_kernels_fused_append_shared_experts"}


def _experts_hit(experts: int, topk: int, tokens: int) -> float:
    """Expected distinct experts ``tokens`` tokens reach, each routed to ``topk`` of ``experts`` uniformly."""
    return experts * (1 - ((experts - topk) / experts) ** tokens)


def _fused_moe(shape: OpShape) -> OpWork | None:
    """(hidden [M, K], w1 [E, N or 2·N gated, K], w2 [E, K, N], topk_weights [M, topk], ...)."""
    x, w1, w2, topk_w = (tensor_dims(d) for d in shape.dims[:4])
    if x is None or w1 is None or w2 is None or topk_w is None or len(w1) != 3 or len(w2) != 3:
        return None
    (m, k), (experts, up, _), n, topk = x, w1, w2[2], topk_w[1]
    if w1[2] != k or w2[1] != k:  # packed (INT4) weights: their logical width is not in the shapes
        return None
    gated = up == 2 * n
    flops = 2 * m * k * n * topk * (3 if gated else 2) + m * k * (2 * topk - 1)
    weights = _experts_hit(experts, topk, m) * n * k * (3 if gated else 2)
    nbytes = 2 * m * k * bpe_of(shape.types, 0) + weights * bpe_of(shape.types, 1)
    return priced(MOE, flops, nbytes, shape.types[0],
                   f"M={m} K={k} N={n} E={experts} topk={topk}" + (" gated" if gated else ""))


def _moe_gemm(shape: OpShape) -> OpWork | None:
    """SGLang's ``invoke_fused_moe_kernel(A, B [E, N, K], C, …, topk_ids [tokens, topk] (9th), …)``: the
    gathered rows of A, one per (token, expert), times their expert's weight."""
    b, topk_ids = tensor_dims(shape.dims[1]), tensor_dims(shape.dims[8])
    if b is None or topk_ids is None or len(b) != 3 or len(topk_ids) != 2:
        return None
    (experts, n, k), (tokens, topk) = b, topk_ids
    rows = tokens * topk
    out_bpe = bpe_of(shape.types, 3) if len(shape.types) > 3 and shape.types[3] else bpe_of(shape.types, 0)
    nbytes = rows * k * bpe_of(shape.types, 0) + _experts_hit(experts, topk, tokens) * n * k * bpe_of(shape.types, 1) \
        + rows * n * out_bpe
    text = f"tokens={tokens} topk={topk} N={n} K={k} E={experts}"
    return priced(MOE, 2 * rows * n * k, nbytes, shape.types[1], text)


def _expert_bytes(weights: tuple[int, ...], bpe: int, experts_hit: float) -> float:
    """The stored bytes of the experts a batch reaches, of a weight tensor [E, ...]."""
    return experts_hit * numel(weights[1:]) * bpe


def _aiter_fused_moe(shape: OpShape) -> OpWork | None:
    """The fused MoE's formula (:func:`_fused_moe`) on AITER's direct call, whose hidden width K comes from w2
    [E, K, N] (x and w1 may be stored packed) and whose N is w2's last width unpacked by the same factor."""
    out, x, w1, w2 = (tensor_dims(d) for d in shape.dims[:4])
    if out is None or x is None or w1 is None or w2 is None or len(w1) != 3 or len(w2) != 3 or len(out) != 2:
        return None
    topk, (experts, up, k_stored), (m, k) = int(arg_at(shape, 8)), w1, out
    n = w2[2] * (w2[1] // k_stored)
    gated = up == 2 * n
    if not gated and up != n:
        return None
    hit = _experts_hit(experts, topk, m)
    flops = 2 * m * k * n * topk * (3 if gated else 2) + m * k * (2 * topk - 1)
    nbytes = numel(x) * bpe_of(shape.types, 1) + numel(out) * bpe_of(shape.types, 0) \
        + _expert_bytes(w1, bpe_of(shape.types, 2), hit) + _expert_bytes(w2, bpe_of(shape.types, 3), hit)
    return priced(MOE, flops, nbytes, shape.types[1],
                   f"M={m} K={k} N={n} E={experts} topk={topk}" + (" gated" if gated else ""))


def _moe_up(x_at: int, w_at: int, out_at: int, shape: OpShape) -> OpWork | None:
    """Each token times the up (and, gated, gate) projection of each of its top-k experts: x [T, K] · w1
    [E, N or 2·N, K] → [T, topk, N], 2·T·topk·N·K FLOPs (×2 gated); bytes x read, the weights of the experts
    expected to be hit under uniform routing (:func:`_experts_hit`) read as stored, the output written."""
    x, w, out = tensor_dims(shape.dims[x_at]), tensor_dims(shape.dims[w_at]), tensor_dims(shape.dims[out_at])
    if x is None or w is None or out is None or len(x) != 2 or len(w) != 3 or len(out) != 3:
        return None
    (t, k_stored), (experts, up, _), (_, topk, n) = x, w, out
    k = logical_width(k_stored, shape.types[x_at])
    gated = up == 2 * n
    if not gated and up != n:
        return None
    hit = _experts_hit(experts, topk, t)
    nbytes = numel(x) * bpe_of(shape.types, x_at) + _expert_bytes(w, bpe_of(shape.types, w_at), hit) \
        + numel(out) * bpe_of(shape.types, out_at)
    return priced(MOE, 2 * t * topk * n * k * (2 if gated else 1), nbytes, shape.types[x_at],
                   f"up T={t} K={k} N={n} E={experts} topk={topk}" + (" gated" if gated else ""))


def _moe_down(inter_at: int, w_at: int, out_at: int, shape: OpShape) -> OpWork | None:
    """Each (token, expert) row of the up stage's output times that expert's down projection, summed per token:
    [T, topk, N] · w2 [E, K, N] → [T, K], 2·T·topk·N·K FLOPs; bytes as :func:`_moe_up`."""
    inter, w, out = tensor_dims(shape.dims[inter_at]), tensor_dims(shape.dims[w_at]), tensor_dims(shape.dims[out_at])
    if inter is None or w is None or out is None or len(inter) != 3 or len(w) != 3 or len(out) != 2:
        return None
    (t, topk, n_stored), (experts, k, _) = inter, w
    n = logical_width(n_stored, shape.types[inter_at])
    hit = _experts_hit(experts, topk, t)
    nbytes = numel(inter) * bpe_of(shape.types, inter_at) + _expert_bytes(w, bpe_of(shape.types, w_at), hit) \
        + numel(out) * bpe_of(shape.types, out_at)
    return priced(MOE, 2 * t * topk * n * k, nbytes, shape.types[inter_at],
                   f"down T={t} N={n} K={k} E={experts} topk={topk}")


def _moe_routing(shape: OpShape) -> OpWork | None:
    """Bookkeeping over the router's logits and the token-to-expert lists: every recorded tensor read or written
    once; one FLOP per element of the largest (a compare or a move each)."""
    tensors = [(t, i) for i, d in enumerate(shape.dims) if (t := tensor_dims(d)) is not None
               and bytes_per_element(shape.types[i] if i < len(shape.types) else "")]
    if not tensors:
        return None
    largest, at = max(tensors, key=lambda ti: numel(ti[0]))
    nbytes = sum(numel(t) * bpe_of(shape.types, i) for t, i in tensors)
    return priced(MOE_ROUTING, numel(largest), nbytes, shape.types[at], f"{[list(t) for t, _ in tensors]}")


def _moe_comm(shape: OpShape) -> OpWork | None:
    """Tokens [T, hidden] sent to (or gathered from) the expert ranks: traffic only."""
    tokens = tensor_dims(shape.dims[0])
    if tokens is None or len(tokens) != 2:
        return None
    return priced(MOE_COMM, 0, numel(tokens) * bpe_of(shape.types, 0), shape.types[0], f"tokens={list(tokens)}")


def _append_shared_experts(shape: OpShape) -> OpWork | None:
    """Each token's top-K expert ids and weights copied into rows of K + S, the S shared experts' ids and the common
    weight filled in after them: no arithmetic; ids and weights read, the wider rows written."""
    ids, weights = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[1])
    shared = int(arg_at(shape, 2))
    if ids is None or weights is None or len(ids) != 2 or ids != weights or shared < 0:
        return None
    m, k = ids
    width = bpe_of(shape.types, 0) + bpe_of(shape.types, 1)
    return priced(MOE_ROUTING, 0, m * k * width + m * (k + shared) * width, shape.types[1],
                   f"M={m} top-k={k} + {shared} shared")


MODELS: tuple[ModelEntry, ...] = (
    (FUSED_MOE_OPS, lambda n, s: _fused_moe(s)),
    (MOE_GEMM_OPS, lambda n, s: _moe_gemm(s)),
    (MOE_COMM_OPS, lambda n, s: _moe_comm(s)),
    (AITER_FUSED_MOE_OPS, lambda n, s: _aiter_fused_moe(s)),
    (MOE_UP_OPS, lambda n, s: _moe_up(*MOE_UP_OPS[n], s)),
    (MOE_DOWN_OPS, lambda n, s: _moe_down(*MOE_DOWN_OPS[n], s)),
    (MOE_ROUTING_OPS, lambda n, s: _moe_routing(s)),
    (APPEND_SHARED_EXPERTS_OPS, lambda n, s: _append_shared_experts(s)),
)
