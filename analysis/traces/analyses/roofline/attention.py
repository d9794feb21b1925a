"""The attention families: dense SDPA (ATen's, flash-attn's, AITER's entry points; forward and backward),
variable-length and paged attention (a lower bound from the recorded counts, totals and longest lengths), Evoformer,
sparse (top-k) MLA prefill, and the attention over a KV cache whose pairs come from the serving step's sums
(:data:`KV_ATTENTION_OPS`: vLLM's unified attention, AITER's varlen and paged decode, SGLang's ragged paged
attention, gated-delta linear attention).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from analysis.traces.analyses.categories import SDPA
from analysis.traces.analyses.roofline.work import (
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
from analysis.traces.analyses.serving_steps import PhaseSums, StepSums
from analysis.traces.model import OpShape


# Where each attention op keeps Q, K, V, whether they are [B, N, H, d] (else [B, H, N, d]), and which argument
# says causal (the argument schemas of torch 2.13 and flash-attn 2's Python ops).
@dataclass(frozen=True)
class _Attention:
    q_at: int
    bnhd: bool
    causal_at: int
    causal_is_mask_type: bool = False  # efficient attention's custom_mask_type: 0 none, 1 or 2 causal
    backward: bool = False


SDPA_OPS: dict[str, _Attention] = {
    "aten::_scaled_dot_product_flash_attention": _Attention(0, False, 4),
    "aten::_scaled_dot_product_flash_attention_for_cpu": _Attention(0, False, 4),
    "aten::_scaled_dot_product_efficient_attention": _Attention(0, False, 6),
    "aten::_scaled_dot_product_cudnn_attention": _Attention(0, False, 6),
    "aten::_flash_attention_forward": _Attention(0, True, 8),
    "aten::_efficient_attention_forward": _Attention(0, True, 9, causal_is_mask_type=True),
    "flash_attn::_flash_attn_forward": _Attention(0, True, 5),
    # (grad_out, query, key, value, ...): the inputs sit one place further right.
    "aten::_scaled_dot_product_flash_attention_backward": _Attention(1, False, 11, backward=True),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": _Attention(1, False, 7, backward=True),
    "aten::_scaled_dot_product_efficient_attention_backward": _Attention(1, False, 11, backward=True),
    "aten::_scaled_dot_product_cudnn_attention_backward": _Attention(1, False, 14, backward=True),
    "aten::_flash_attention_backward": _Attention(1, True, 11, backward=True),
    "aten::_efficient_attention_backward": _Attention(1, True, 14, causal_is_mask_type=True, backward=True),
    "flash_attn::_flash_attn_backward": _Attention(1, True, 11, backward=True),
    # flash-attn's autograd function and FA3, AITER's flash/MHA entry points ([B, N, H, d] each; the positions of
    # q and is_causal as their bindings take them, e.g. aiter::mha_bwd(dout, q, k, v, out, lse, dropout_p, scale,
    # is_causal, ...)).
    "FlashAttnFunc": _Attention(0, True, 5),
    "flash_attn_3::fwd": _Attention(0, True, 24),
    "aiter::_flash_attn_forward": _Attention(0, True, 5),
    "aiter::mha_fwd": _Attention(0, True, 5),
    "aiter::fmha_v3_fwd": _Attention(0, True, 5),
    "aiter::wrapper_fmha_v3_fwd": _Attention(1, True, 6),
    "aiter::_flash_attn_backward": _Attention(1, True, 12, backward=True),
    "aiter::mha_bwd": _Attention(1, True, 8, backward=True),
    "aiter::wrapper_fmha_v3_bwd": _Attention(1, True, 9, backward=True),
}


@dataclass(frozen=True)
class _VarlenAttention:
    """Where a variable-length (packed [T, H, d]) attention op keeps q (k, v follow), the cumulative sequence
    offsets of the queries and keys (n + 1 entries each), the longest query and key lengths, and is_causal; a paged
    op's K/V are its whole cache, and the slots it attends are listed at ``page_indices_at``."""

    q_at: int
    cu_q_at: int
    cu_k_at: int
    max_q_at: int
    max_k_at: int
    causal_at: int
    backward: bool = False
    page_indices_at: int | None = None


VARLEN_ATTENTION_OPS: dict[str, _VarlenAttention] = {
    # (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, ...)
    "flash_attn::_flash_attn_varlen_forward": _VarlenAttention(0, 3, 4, 5, 6, 9),
    # (dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
    #  dropout_p, softmax_scale, causal, ...)
    "flash_attn::_flash_attn_varlen_backward": _VarlenAttention(1, 9, 10, 11, 12, 15, backward=True),
    # (q, k_cache, v_cache, cu_seqlens_q, kv_indptr, kv_page_indices, max_seqlen_q, max_seqlen_k, dropout_p,
    #  softmax_scale, logits_soft_cap, zero_tensors, is_causal, ...)
    "aiter::mha_batch_prefill": _VarlenAttention(0, 3, 4, 6, 7, 12, page_indices_at=5),
}
# DeepSpeed's Evoformer attention (Q, K, V [B, S, R, H, d], res_mask [B, S, 1, 1, R], pair_bias [B, 1, H, R, R]).
EVOFORMER_OPS = {"EvoformerAttention"}
# SGLang's DeepSeek sparse (top-k) MLA prefill: (q [S, H, d_qk], kv [S_kv, H_kv, d_qk], indices [S, H_kv, top-k],
# sm_scale, d_v), V being the first d_v of each kv row.
SPARSE_MLA_OPS = {"sglang_profiler::tilelang_kernel_tilelang_sparse_fwd"}
OPUS_SPARSE_PREFILL_OPS = {"aiter::pa_sparse_prefill_opus_fwd"}


def _sdpa(op: _Attention, shape: OpShape) -> OpWork | None:
    dims = shape.dims
    q, k, v = tensor_dims(dims[op.q_at]), tensor_dims(dims[op.q_at + 1]), tensor_dims(dims[op.q_at + 2])
    if q is None or k is None or v is None or not len(q) == len(k) == len(v) == 4:
        return None
    if op.bnhd:
        b, n_q, h_q, d_qk = q
        n_kv, h_kv, d_v = k[1], k[2], v[3]
    else:
        b, h_q, n_q, d_qk = q
        h_kv, n_kv, d_v = k[1], k[2], v[3]
    causal_arg = arg_at(shape, op.causal_at, 0 if op.causal_is_mask_type else False)
    causal = causal_arg != 0 if op.causal_is_mask_type else bool(causal_arg)
    q_elems, k_elems, v_elems, o_elems = b * n_q * h_q * d_qk, b * n_kv * h_kv * d_qk, b * n_kv * h_kv * d_v, \
        b * n_q * h_q * d_v
    if op.backward:
        # Recomputed Q·Kᵀ, then dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q; dK and dV summed over the
        # h_q / h_kv query heads that share a K/V head.
        shared = h_q // h_kv - 1 if h_kv else 0
        flops = 2 * b * h_q * n_q * n_kv * (3 * d_qk + 2 * d_v) + b * n_kv * (d_qk + d_v) * shared
        elements = 2 * (q_elems + k_elems + v_elems) + o_elems  # Q, K, V and dO read; dQ, dK, dV written
    else:
        flops = 2 * b * h_q * n_q * n_kv * (d_qk + d_v)
        elements = q_elems + k_elems + v_elems + o_elems
    if causal and n_q == n_kv:
        flops //= 2
    text = f"B={b} H={h_q} N_q={n_q} N_kv={n_kv} d={d_qk}" + (" causal" if causal else "") \
        + (" backward" if op.backward else "")
    return work_of(SDPA, flops, elements, shape.types[op.q_at], text)


def _lengths(count: int, total: int, longest: int) -> tuple[float, float]:
    """(longest, each other) of ``count`` sequences of ``total`` tokens whose longest is ``longest``: the other
    ``count`` − 1 equal, which for fixed totals makes Σ lengths² (and the attention work) smallest. A ``longest``
    below the mean is a cap rather than the longest sequence: then all are taken equal."""
    if count <= 1:
        return float(total), float(total)
    rest = (total - longest) / (count - 1)
    return (float(longest), rest) if 0 <= rest <= longest else (total / count, total / count)


def _pairs(n_q: float, n_k: float, causal: bool) -> float:
    """Query-key pairs one sequence scores: all, or under a causal mask aligned to the last key (flash-attn's)
    n_q·n_k − n_q²/2 (n_q²/2 when n_q = n_k, as the dense ops count)."""
    if not causal:
        return n_q * n_k
    return n_q * n_k - n_q * n_q / 2 if n_q <= n_k else n_k * n_k / 2


def _varlen_attention(op: _VarlenAttention, shape: OpShape) -> OpWork | None:
    """Packed sequences, q [T_q, H_q, d_qk], k and v [T_k, H_kv, d] (or a paged cache [pages, page, H_kv, d] of
    which ``kv_page_indices`` lists the attended pages). The record gives the sequences' count (the offsets' length
    − 1), the totals and the longest lengths, not each length: the FLOPs are those of the smallest work these allow
    (:func:`_lengths`), a lower bound, 2·H_q·pairs·(d_qk + d_v) forward and 2·H_q·pairs·(3·d_qk + 2·d_v) backward
    (plus the sums over the query heads sharing a K/V head), as the dense ops count. Bytes: Q, the attended K and V
    and O (backward: Q, K, V, dO read, dQ, dK, dV written), each at its own dtype."""
    dims = shape.dims
    q, k, v = (tensor_dims(dims[op.q_at + i]) for i in range(3))
    cu_q, cu_k = tensor_dims(dims[op.cu_q_at]), tensor_dims(dims[op.cu_k_at])
    if q is None or k is None or v is None or cu_q is None or cu_k is None or len(q) != 3 or len(k) not in (3, 4):
        return None
    (t_q, h_q, d_qk), (h_kv, d_v) = q, (k[-2], v[-1])
    if op.page_indices_at is None:
        t_k = k[0]
    else:
        pages = tensor_dims(dims[op.page_indices_at])
        if pages is None:
            return None
        t_k = pages[0] * (k[1] if len(k) == 4 else 1)
    count = cu_q[0] - 1
    causal = bool(arg_at(shape, op.causal_at, False))
    longest_q, other_q = _lengths(count, t_q, int(arg_at(shape, op.max_q_at)))
    longest_k, other_k = _lengths(count, t_k, int(arg_at(shape, op.max_k_at)))
    pairs = _pairs(longest_q, longest_k, causal) + (count - 1) * _pairs(other_q, other_k, causal)
    bpe_q, bpe_kv = bpe_of(shape.types, op.q_at), bpe_of(shape.types, op.q_at + 1)
    q_bytes, kv_bytes = t_q * h_q * d_qk * bpe_q, t_k * h_kv * (d_qk + d_v) * bpe_kv
    o_bytes = t_q * h_q * d_v * bpe_q
    if op.backward:
        shared = h_q // h_kv - 1 if h_kv else 0
        flops = 2 * h_q * pairs * (3 * d_qk + 2 * d_v) + t_k * (d_qk + d_v) * shared
        nbytes = 2 * (q_bytes + kv_bytes) + o_bytes
    else:
        flops, nbytes = 2 * h_q * pairs * (d_qk + d_v), q_bytes + kv_bytes + o_bytes
    text = f"seqs={count} T_q={t_q} T_kv={t_k} H={h_q} H_kv={h_kv} d={d_qk}" + (" causal" if causal else "") \
        + (" backward" if op.backward else "")
    return priced(SDPA, flops, nbytes, shape.types[op.q_at], text)


def _evoformer(shape: OpShape) -> OpWork | None:
    """Attention over the R residues of each of the B·S rows (never causal), with a pair bias shared by the rows and
    a mask per row: Q·Kᵀ and P·V, 2·B·S·H·R²·(d_qk + d_v) FLOPs (the bias add, like the softmax, not counted);
    bytes Q, K, V, the mask and the pair bias read, O written."""
    q, k, v = (tensor_dims(shape.dims[i]) for i in range(3))
    if q is None or k is None or v is None or not len(q) == len(k) == len(v) == 5:
        return None
    b, rows, residues, heads, d_qk = q
    d_v = v[4]
    extras = sum(numel(t) * bpe_of(shape.types, i) for i in (3, 4)
                 if i < len(shape.dims) and (t := tensor_dims(shape.dims[i])) is not None)
    nbytes = (numel(q) + numel(k) + numel(v) + b * rows * residues * heads * d_v) * bpe_of(shape.types, 0) + extras
    return priced(SDPA, 2 * b * rows * heads * residues * residues * (d_qk + d_v), nbytes, shape.types[0],
                   f"B={b} S={rows} R={residues} H={heads} d={d_qk}")


def _sparse_mla(shape: OpShape) -> OpWork | None:
    """Each query token attends the top-k KV rows its indexer picked: Q·Kᵀ over d_qk and P·V over d_v, 2·S·H·k·(d_qk
    + d_v) FLOPs, an upper bound (a token with fewer than k predecessors pads its index row, and the padding is
    masked). Bytes Q and the indices read, O [S, H, d_v] written at Q's width, and each KV row that can be picked
    read once: min(S_kv, S·k) rows (rows picked by several tokens read once: the least traffic)."""
    q, kv, idx = (tensor_dims(shape.dims[i]) for i in range(3))
    if q is None or kv is None or idx is None or len(q) != 3 or len(kv) != 3 or len(idx) != 3:
        return None
    s_q, heads, d_qk = q
    top_k, d_v = idx[2], int(arg_at(shape, 4, 512))
    kv_rows = min(kv[0], s_q * top_k) * kv[1]
    bpe_q = bpe_of(shape.types, 0)
    nbytes = numel(q) * bpe_q + numel(idx) * bpe_of(shape.types, 2) + kv_rows * kv[2] * bpe_of(shape.types, 1) \
        + s_q * heads * d_v * bpe_q
    return priced(SDPA, 2 * s_q * heads * top_k * (d_qk + d_v), nbytes, shape.types[0],
                   f"S={s_q} H={heads} top-k={top_k} d={d_qk}/{d_v} sparse")


@dataclass(frozen=True)
class _KvAttention:
    """Where an attention op over a KV cache keeps q [T, H_q, d_qk] and its K (the K/V heads at axis
    ``heads_kv_axis``), the tensor whose last dimension is d_v (None: d_v = d_qk) and, for a decode kernel, its
    sliding-window argument (``Concrete Inputs``; ≤ 0 is full attention). K and V are priced at the recorded K's
    width (vLLM's and the varlen ops record the new tokens' K, which an FP8 cache may store narrower)."""

    q_at: int
    k_at: int
    heads_kv_axis: int
    v_at: int | None
    decode_only: bool = False
    window_at: int | None = None


def _attended_pairs(p: PhaseSums) -> float:
    """Query-key pairs a phase's requests score: request i's j-th new token (0-based) attends the kᵢ − qᵢ cached
    tokens and the new ones up to itself, kᵢ − qᵢ + j + 1 keys, so Σⱼ = qᵢ·kᵢ − (qᵢ² − qᵢ)/2, and over the requests
    Σq·k − (Σq² − Σq)/2 (a decode token, q = 1, attends all k)."""
    return p.qk - (p.qq - p.q) / 2


def _kv_attention(op: _KvAttention, shape: OpShape, step: StepSums) -> OpWork | None:
    """Attention of a serving step's requests over their KV cache, priced from the step's sums
    (:mod:`analysis.traces.analyses.serving_steps`): FLOPs the two products Q·Kᵀ and P·V over the attended pairs,
    2·H_q·(d_qk + d_v)·pairs with pairs = Σq·k − (Σq² − Σq)/2 summed over the context and generation requests
    (:func:`_attended_pairs`; 4·H_q·d·Σq·k for decode with d_qk = d_v = d; TraceLens counts Σq·k − Σq²/2, which
    differs by Σq/2 pairs per prefill step: 0.01 % on 2 requests of 7k tokens). Bytes the least traffic: Q read and O
    written for each new token, Σq·H_q·(d_qk + d_v) at Q's width, and each request's K and V read once over its
    context, Σk·H_kv·(d_qk + d_v) at the cache's width. A decode-only kernel reads the generation sums only; under a
    sliding window W each decode token attends min(k, W) keys, taken over the step as min(Σq·k, Σq·W) (exact when
    every context is on one side of W, else an upper bound)."""
    q, k = tensor_dims(shape.dims[op.q_at]), tensor_dims(shape.dims[op.k_at])
    v = tensor_dims(shape.dims[op.v_at]) if op.v_at is not None else None
    if q is None or k is None or len(q) != 3 or (op.v_at is not None and not v):
        return None
    _, h_q, d_qk = q
    h_kv, d_v = k[op.heads_kv_axis], (v[-1] if v else d_qk)
    phases = [step.generation] if op.decode_only else [step.context, step.generation]
    window = int(arg_at(shape, op.window_at, 0)) if op.window_at is not None else 0
    if op.decode_only and window > 0:
        g = step.generation
        phases = [PhaseSums(g.q, min(g.k, g.q * window), g.qq, min(g.qk, g.q * window))]
    pairs = sum(_attended_pairs(p) for p in phases)
    n_q, n_k = sum(p.q for p in phases), sum(p.k for p in phases)
    if n_q <= 0:
        return None
    bpe_q, bpe_kv = bpe_of(shape.types, op.q_at), bpe_of(shape.types, op.k_at)
    nbytes = n_q * h_q * (d_qk + d_v) * bpe_q + n_k * h_kv * (d_qk + d_v) * bpe_kv
    text = f"Σq={n_q} Σk={n_k} pairs={pairs:.0f} H={h_q} H_kv={h_kv} d={d_qk}" + (f"/{d_v}" if d_v != d_qk else "") \
        + (f" window={window}" if window > 0 else "")
    return priced(SDPA, 2 * h_q * (d_qk + d_v) * pairs, nbytes, shape.types[op.q_at], text)


def _gated_delta(shape: OpShape, step: StepSums) -> OpWork | None:
    """Gated-delta linear attention (Qwen3-Next's GDN): mixed_qkv [T, 2·H_k·d_k + H_v·d_v], b and a [T, H_v], out
    [T, H_v, d_v]. Each value head keeps a d_v × d_k state that every new token decays (1 FLOP per entry), reads
    with k (2), updates with the delta (2) and reads with q (2): 7·H_v·d_v·d_k per token, over the step's Σq tokens
    (context and generation), whatever the context (no KV cache). d_k = (D − H_v·d_v) / (2·H_k) with H_k = H_v/2, the
    head ratio of the models that use it. Bytes each token's q, k, v, a, b read and its output written at the
    input's width; the recurrent state carried from the previous step is not counted (a lower bound)."""
    qkv, b, out = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[1]), tensor_dims(shape.dims[3])
    if qkv is None or b is None or out is None or len(qkv) != 2 or len(b) != 2 or len(out) != 3:
        return None
    width, h_v, d_v = qkv[1], b[1], out[2]
    d_k = (width - h_v * d_v) // h_v
    tokens = step.context.q + step.generation.q
    if d_k <= 0 or tokens <= 0:
        return None
    nbytes = tokens * (width + 2 * h_v + h_v * d_v) * bpe_of(shape.types, 0)
    return priced(SSM, 7 * tokens * h_v * d_v * d_k, nbytes, shape.types[0],
                   f"tokens={tokens} H_v={h_v} d_k={d_k} d_v={d_v} gated delta")


def _opus_sparse_prefill(shape: OpShape) -> OpWork | None:
    """AITER's sparse MLA prefill over picked KV slots: q [N, H, d] and the slot lists kv_indices_prefix (the
    history each token picked) and kv_indices_extend (its in-chunk window), whose lengths sum to the (token, slot)
    pairs scored; one latent K/V head of width d: 2·H·pairs·(d + d) FLOPs. Bytes Q read and O written at Q's width
    and each pair's latent row at the cache's (a slot picked by several tokens counted each time: an upper bound,
    the record not saying how many slots are distinct)."""
    q, prefix, extend = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[2]), tensor_dims(shape.dims[5])
    if q is None or prefix is None or extend is None or len(q) != 3 or not prefix or not extend:
        return None
    n, heads, d = q
    pairs = prefix[0] + extend[0]
    nbytes = 2 * n * heads * d * bpe_of(shape.types, 0) + pairs * d * bpe_of(shape.types, 1)
    return priced(SDPA, 2 * heads * pairs * 2 * d, nbytes, shape.types[0],
                   f"N={n} H={heads} d={d} pairs={pairs} sparse")


_UNIFIED = _KvAttention(q_at=0, k_at=1, heads_kv_axis=-2, v_at=1)
# The attention ops over a KV cache whose work the serving step's sums give (op_work's ``step``), with the argument
# layouts of vLLM's, AITER's and SGLang's bindings (as TraceLens reads them, 2026-11).
KV_ATTENTION_OPS: dict[str, Callable[[OpShape, StepSums], OpWork | None]] = {
    **dict.fromkeys(("vllm::unified_attention_with_output", "aiter::mha_varlen_fwd"),
                    lambda s, st: _kv_attention(_UNIFIED, s, st)),
    "aiter::fmha_v3_varlen_fwd": lambda s, st: _kv_attention(_KvAttention(0, 1, -2, 2), s, st),
    # (…, query, key_cache [pages, page, H_kv, d], value_cache, …)
    "sglang_profiler::attention_paged_attention_ragged": lambda s, st: _kv_attention(_KvAttention(2, 3, -2, 4), s, st),
    # (query, …, key_cache [blocks, H_kv, …], …, sliding_window at 19): a decode kernel
    "aiter::pa_decode_gluon": lambda s, st: _kv_attention(_KvAttention(0, 2, 1, None, True, 19), s, st),
    **dict.fromkeys(("vllm::gdn_attention_core", "aiter::linear_attention_with_output_base"), _gated_delta),
}


MODELS: tuple[ModelEntry, ...] = (
    (SDPA_OPS, lambda n, s: _sdpa(SDPA_OPS[n], s)),
    (VARLEN_ATTENTION_OPS, lambda n, s: _varlen_attention(VARLEN_ATTENTION_OPS[n], s)),
    (EVOFORMER_OPS, lambda n, s: _evoformer(s)),
    (SPARSE_MLA_OPS, lambda n, s: _sparse_mla(s)),
    (OPUS_SPARSE_PREFILL_OPS, lambda n, s: _opus_sparse_prefill(s)),
)
