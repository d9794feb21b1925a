"""The mHC family: AITER's manifold-constrained hyper-connection ops over n residual streams of width C.
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.traces.analyses.roofline.work import MHC, ModelEntry, OpWork, bpe_of, numel, priced, tensor_dims
from analysis.traces.model import OpShape


# AITER's manifold-constrained hyper-connection (mHC) ops over n residual streams of width C (aiter/ops/mhc.py):
# where the [M, n, C] streams, the [M, C] layer tensor and the [hc3, K = n·C] projection sit (None: not an argument).
@dataclass(frozen=True)
class _Mhc:
    streams_at: int
    layer_at: int | None
    fn_at: int | None
    post: bool  # recombines: out[m, i] = post_mix[m, i]·layer[m] + Σ_j comb[m, i, j]·residual[m, j]
    pre_fold: bool = False  # folds the streams into the layer input, RMS-normalized, from split-K partials at 3


MHC_OPS: dict[str, _Mhc] = {
    # (out [M, n, C], layer x [M, C], residual [M, n, C], post_layer_mix [M, n, 1], comb_res_mix [M, n, n], store_nt)
    "aiter::mhc_post": _Mhc(0, 1, None, post=True),
    # (out [split_k, M, hc3], sqrsum [split_k, M], x [M, n, C], fn [hc3, n·C], tile_k, is_fn_pack_bf16)
    "aiter::mhc_pre_gemm_sqrsum": _Mhc(2, None, 3, post=False),
    # (post_mix [M, n, 1], comb_mix [M, n, n], out [M, C], gemm_out_mul [split_k, M, hc3], gemm_out_sqrsum,
    #  hc_scale, hc_base, residual [M, n, C], norm_weight [C], ...)
    "aiter::mhc_pre_big_fuse_rmsnorm": _Mhc(7, 2, None, post=False, pre_fold=True),
    # (gemm_out_mul, gemm_out_sqrsum, next_residual [M, n, C], layer_input [M, C], residual_in [M, n, C],
    #  post_layer_mix, comb_res_mix, fn [hc3, n·C], ...)
    "aiter::mhc_fused_post_pre_gemm_sqrsum": _Mhc(4, 3, 7, post=True),
}


def _mhc(op: _Mhc, shape: OpShape) -> OpWork | None:
    """mHC keeps n residual streams [M, n, C]. Its post step recombines them with the layer's output x [M, C]:
    out[m, i, c] = post[m, i]·x[m, c] + Σ_j comb[m, i, j]·res[m, j, c], 2·(n + 1) FLOPs per output element. Its pre
    projection multiplies the flattened streams [M, K = n·C] by fn [hc3, K] (2·M·hc3·K) and sums each token's squares
    (2·M·K). Its pre epilogue sums the split-K partials (split_k·M·hc3), folds the streams into the layer input with
    the pre mix (2·M·n·C) and RMS-normalizes it (5·M·C; the few Sinkhorn steps over the n × n mix are not counted).
    Bytes: every recorded tensor once, each either read or written once (the fused post + pre keeps the new streams
    it projects on chip). Vector work here: hc3 = n² + 2n is a few dozen columns, too few for the matrix units to
    set the pace, so it is judged on bandwidth."""
    streams = tensor_dims(shape.dims[op.streams_at])
    if streams is None or len(streams) != 3:
        return None
    m, n, c = streams
    flops = 2 * (n + 1) * m * n * c if op.post else 0
    if op.fn_at is not None:
        fn = tensor_dims(shape.dims[op.fn_at])
        if fn is None or len(fn) != 2 or fn[1] != n * c:
            return None
        flops += 2 * m * fn[0] * fn[1] + 2 * m * fn[1]
    if op.pre_fold:
        partials = tensor_dims(shape.dims[3])
        flops += (numel(partials) if partials else 0) + 2 * m * n * c + 5 * m * c
    nbytes = sum(numel(t) * bpe_of(shape.types, i)
                 for i, d in enumerate(shape.dims) if (t := tensor_dims(d)) is not None)
    return priced(MHC, flops, nbytes, shape.types[op.streams_at], f"M={m} n={n} C={c}")


MODELS: tuple[ModelEntry, ...] = (
    (MHC_OPS, lambda n, s: _mhc(MHC_OPS[n], s)),
)
