"""RoPE and the KV-cache writes it feeds: fused RoPE (3 FLOPs per element), rotary embedding on the query and key,
AITER's two-channel RoPE, KV-cache writes (traffic only, a scale per element into an FP8 cache) and MLA's RoPE +
KV-cache write.
"""

from __future__ import annotations

from analysis.traces.analyses.roofline.work import (
    KV_CACHE,
    ROPE,
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

ROPE_OPS = {"FusedRoPEFunc", "FusedRoPEFuncBackward"}
# AITER's RoPE on the rotary slices of MLA's query and key, with the key (latent ‖ rotary) written into the cache:
# (q_nope [T, H, D_lora], q_pe [T, H, D_pe], k_nope [T, (H_kv,) D_lora], k_pe [T, (H_kv,) D_pe], kv_cache, then, for
# the concat variant, q_out [T, H, D_lora + D_pe]).
MLA_ROPE_CACHE_OPS = {"aiter::fused_qk_rope_cat_and_cache_mla", "aiter::fused_qk_rope_concat_and_cache_mla"}
# Rotary embedding in place on the query and key: (positions [T], query [T, H_q·d], key [T, H_kv·d], head_size,
# cos_sin_cache [max_position, rotary_dim], is_neox).
ROTARY_EMBEDDING_OPS = {"sgl_kernel::rotary_embedding", "_C::rotary_embedding"}
# AITER's two-channel RoPE: (out_x, out_y, x [B, S, H_q, d], y [B, S, H_kv, d], cos, sin [max_pos, 1, 1, d_cs],
# positions [B, S], ...).
ROPE_2C_OPS = {"aiter::rope_cached_positions_2c_fwd_impl"}
# KV-cache writes: the new tokens' K and V copied into their cache slots.
KV_CACHE_OPS = {"sglang::store_cache", "_C_cache_ops::reshape_and_cache_flash"}


def _rope(shape: OpShape) -> OpWork | None:
    """Input [s, b, h, d] rotated pairwise (4 multiplies, 2 adds per pair) and written."""
    x = tensor_dims(shape.dims[0])
    if x is None or len(x) != 4:
        return None
    return work_of(ROPE, 3 * numel(x), 2 * numel(x), shape.types[0], f"{list(x)}")


def _rotary_embedding(shape: OpShape) -> OpWork | None:
    """Query and key rotated in place, the first ``rotary_dim`` (the cache's width) of each head of head_size:
    3 FLOPs per rotated element (the RoPE convention); the rotated elements read and written, and per token its
    position (int64) and its cos/sin row of the cache read."""
    positions, q, k, cache = (tensor_dims(shape.dims[i]) for i in (0, 1, 2, 4))
    head_size = int(arg_at(shape, 3))
    if positions is None or q is None or cache is None or len(cache) != 2 or head_size <= 0:
        return None
    tokens, rotary_dim = numel(positions), cache[1]
    heads = (numel(q) + (numel(k) if k else 0)) // tokens // head_size
    rotated = tokens * heads * rotary_dim
    nbytes = (2 * rotated * bpe_of(shape.types, 1)
              + tokens * (bpe_of(shape.types, 0) + rotary_dim * bpe_of(shape.types, 4)))
    return priced(ROPE, 3 * rotated, nbytes, shape.types[1], f"tokens={tokens} heads={heads} rotary_dim={rotary_dim}")


def _rope_2c(shape: OpShape) -> OpWork | None:
    """Query (x) and key (y) rotated whole, 3 FLOPs per element (the RoPE convention); x and y read, the outputs
    written, and per token its int64 position and its cos and sin rows read."""
    x, y, cos, positions = (tensor_dims(shape.dims[i]) for i in (2, 3, 4, 6))
    if x is None or y is None or cos is None or positions is None:
        return None
    elements, tokens = numel(x) + numel(y), numel(positions)
    nbytes = (2 * elements * bpe_of(shape.types, 2)
              + tokens * (bpe_of(shape.types, 6) + 2 * cos[-1] * bpe_of(shape.types, 4)))
    return priced(ROPE, 3 * elements, nbytes, shape.types[2], f"x={list(x)} y={list(y)}")


def _kv_cache_write(shape: OpShape) -> OpWork | None:
    """(key, value, key_cache, value_cache, slots [T], ...): the new tokens' K and V read and written into the cache
    at the cache's width, and their slot indices read. A cache narrower than K (an FP8 cache) means a scale per
    element: 1 FLOP each; a plain copy does none."""
    key, value, slots = tensor_dims(shape.dims[0]), tensor_dims(shape.dims[1]), tensor_dims(shape.dims[4])
    if key is None or value is None or slots is None:
        return None
    elements = numel(key) + numel(value)
    bpe_in, bpe_cache = bpe_of(shape.types, 0), bpe_of(shape.types, 2)
    nbytes = elements * (bpe_in + bpe_cache) + numel(slots) * bpe_of(shape.types, 4)
    return priced(KV_CACHE, elements if bpe_cache < bpe_in else 0, nbytes, shape.types[0],
                   f"tokens={slots[0]} K={list(key)} V={list(value)}")


def _mla_rope_cache(shape: OpShape) -> OpWork | None:
    """The rotary slices of Q and K rotated (3 FLOPs per element, the RoPE convention); the four inputs read; Q written
    whole (latent ‖ rotary, at q_out's width when it is an argument, else the input's) and each token's K row
    (latent ‖ rotary) written into the cache at the cache's width, a scale per element when that is narrower (1 FLOP
    each, as a KV-cache write). The positions and cos/sin rows are not counted (a few bytes per token)."""
    q_nope, q_pe, k_nope, k_pe = (tensor_dims(shape.dims[i]) for i in range(4))
    if q_nope is None or q_pe is None or k_nope is None or k_pe is None or len(q_nope) != 3 or len(q_pe) != 3:
        return None
    tokens, heads, d_lora = q_nope
    d_pe = q_pe[2]
    kv_heads = k_nope[1] if len(k_nope) == 3 else 1
    q_out = tensor_dims(shape.dims[5]) if len(shape.dims) > 5 else None
    bpe_in, bpe_cache = bpe_of(shape.types, 0), bpe_of(shape.types, 4)
    bpe_q = bpe_of(shape.types, 5) if q_out == (tokens, heads, d_lora + d_pe) else bpe_in
    q_written, k_written = tokens * heads * (d_lora + d_pe), tokens * kv_heads * (d_lora + d_pe)
    read = sum(numel(t) for t in (q_nope, q_pe, k_nope, k_pe)) * bpe_in
    flops = 3 * tokens * (heads + kv_heads) * d_pe + (q_written if bpe_q < bpe_in else 0) \
        + (k_written if bpe_cache < bpe_in else 0)
    return priced(ROPE, flops, read + q_written * bpe_q + k_written * bpe_cache, shape.types[0],
                   f"tokens={tokens} heads={heads} kv_heads={kv_heads} d={d_lora}+{d_pe}, cached")


MODELS: tuple[ModelEntry, ...] = (
    (ROPE_OPS, lambda n, s: _rope(s)),
    (ROTARY_EMBEDDING_OPS, lambda n, s: _rotary_embedding(s)),
    (ROPE_2C_OPS, lambda n, s: _rope_2c(s)),
    (KV_CACHE_OPS, lambda n, s: _kv_cache_write(s)),
    (MLA_ROPE_CACHE_OPS, lambda n, s: _mla_rope_cache(s)),
)
