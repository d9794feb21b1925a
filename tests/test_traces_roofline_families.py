"""The op families priced beyond the training set of ops: inference serving ops (AITER, SGLang, vLLM), Mamba's SSM
ops, FP8/MXFP4 GEMMs and quantizes, and the attention variants of flash-attn and AITER. Each family's FLOPs and bytes
are checked against a hand computation on a real-shaped call; the serving ops on the calls of TraceLens's
inference test traces (tests/fixtures/traces/README.md), read end to end into the unified summary."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
import pytest

from analysis.traces import read_trace
from analysis.traces.analyses.op_shapes import unified_perf_summary
from analysis.traces.analyses.ops import attribute
from analysis.traces.analyses.roofline import (
    RMS_NORM_MXFP4_OPS,
    RMS_NORM_PAD_OPS,
    attention,
    conv,
    device_peaks,
    elementwise,
    gemm,
    inductor,
    mhc,
    moe,
    norm,
    op_work,
    quantize,
    reduction,
    rope,
    unpriced_reason,
)
from analysis.traces.model import OpShape
from tests.support.trace_support import kernels_by_op_call

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
SGLANG = FIXTURES / "mi300_sglang_qwen3_ops_excerpt.json.gz"  # SGLang serving Qwen3-8B on an MI300X (AITER ops)
VLLM = FIXTURES / "b200_vllm_ops_excerpt.json.gz"  # vLLM on a B200, FP8 KV cache
FAMILY_MODULES = (attention, conv, elementwise, gemm, inductor, mhc, moe, norm, quantize, reduction, rope)
BF16, FP8, FP4, E8M0 = "c10::BFloat16", "c10::Float8_e4m3fn", "c10::Float4_e2m1fn_x2", "c10::Float8_e8m0fnu"


def _summary(path: Path) -> pd.DataFrame:
    trace = read_trace(path)
    return unified_perf_summary(trace, attribute(trace), device_peaks(trace.device_names)).set_index("op")


def _kernel_seconds(path: Path, op: str) -> float:
    """Independently of the reader: the op call's kernel time in the raw trace."""
    (_, kernels), = kernels_by_op_call(path, (op,))
    return sum(us for _, us in kernels) / 1e6


def test_the_sglang_serving_ops_are_priced_in_the_unified_summary() -> None:
    summary = _summary(SGLANG)

    t, hidden, e = 15360, 4096, 15360 * 4096  # the prefill batch's tokens, Qwen3-8B's width
    expected = {
        # 15 sequences (cu_seqlens_q [16]) of 15360 query tokens, the longest 1024: all 1024. The 15616 attended KV
        # slots (page size 1) average 1041 > max_seqlen_k 1024, so the max is a cap and all 15 are taken equal;
        # causal pairs per sequence 1024 · 15616/15 − 1024²/2, over 32 heads of 128 (Q·Kᵀ and P·V).
        "aiter::mha_batch_prefill": (2 * 32 * (1024 * 15616 - 15 * 1024 ** 2 // 2) * (128 + 128),
                                     2 * (t * 32 * 128 + 15616 * 8 * 256 + t * 32 * 128), "SDPA"),
        # out [T, 12288] = silu(x[:, :12288]) · x[:, 12288:]: x read, out written.
        "sgl_kernel::silu_and_mul": (2 * t * 12288, 2 * (t * 24576 + t * 12288), "elementwise"),
        # (out, input, weight): input read, out written, the weight once; 5 FLOPs per element.
        "aiter::rmsnorm": (5 * e, 2 * (2 * e + hidden), "NORM"),
        # plus the residual: input and residual read, out and the new residual written; 6 FLOPs per element.
        "aiter::add_rmsnorm": (6 * e, 2 * (4 * e + hidden), "NORM"),
        # 32 query + 8 key heads of 128 rotated whole (cache rows of 128): read and written, plus per token its
        # int64 position and its BF16 cos/sin row.
        "sgl_kernel::rotary_embedding": (3 * t * 40 * 128, 2 * 2 * t * 40 * 128 + t * (8 + 128 * 2), "RoPE"),
        # K and V [T, 1024] read and written into a BF16 cache, the int64 slot of each token read: no FLOPs.
        "sglang::store_cache": (0, 2 * t * 1024 * (2 + 2) + t * 8, "KV cache"),
    }
    for op, (flops, nbytes, family) in expected.items():
        row = summary.loc[op]
        assert (row["family"], row["unpriced because"]) == (family, ""), op
        assert row["GFLOP per call"] * 1e9 == pytest.approx(flops, rel=1e-12), op
        assert row["MB per call"] * 1e6 == pytest.approx(nbytes, rel=1e-12), op
        assert row["TFLOP/s"] == pytest.approx(flops / _kernel_seconds(SGLANG, op) / 1e12, rel=1e-9), op
    # The 16-bit GEMM's kernel is launched by the aten::mm it falls back to: that op carries the work.
    assert "aiter::gemm_a16w16" not in summary.index and summary.loc["aten::mm", "family"] == "GEMM"


def test_a_16_bit_inference_gemm_is_priced_as_a_linear() -> None:
    # vLLM's rocm_unquantized_gemm(x [32, 2880], weight [5120, 2880], bias [5120]) from TraceLens's vLLM decode trace.
    shape = OpShape(([32, 2880], [5120, 2880], [5120]), (BF16,) * 3, ("",) * 3)

    work = op_work("vllm::rocm_unquantized_gemm", shape)

    assert work is not None and (work.family, work.shape) == ("GEMM", "M=32 N=5120 K=2880")
    assert (work.flops, work.bytes) == (2 * 32 * 5120 * 2880, 2 * (32 * 2880 + 2880 * 5120 + 32 * 5120 + 5120))


def test_the_vllm_serving_ops_are_priced_and_its_attention_says_why_it_is_not() -> None:
    # (The excerpt holds no step annotation: its attention's context is unknown, tests/test_traces_serving_steps.py)
    summary = _summary(VLLM)

    t, e = 888, 888 * 2880
    expected = {
        # (input, residual, weight) in place: input and residual read and written, the weight read.
        "_C::fused_add_rms_norm": (6 * e, 2 * (4 * e + 2880), "NORM"),
        # (out, input, weight).
        "_C::rms_norm": (5 * e, 2 * (2 * e + 2880), "NORM"),
        # K and V [888, 1, 64] in BF16 written into an FP8 cache ('unsigned char'): a scale per element.
        "_C_cache_ops::reshape_and_cache_flash": (2 * t * 64, 2 * t * 64 * (2 + 1) + t * 8, "KV cache"),
        # 8 query heads + 1 key head of 64, rotated whole.
        "_C::rotary_embedding": (3 * t * 9 * 64, 2 * 2 * t * 9 * 64 + t * (8 + 64 * 2), "RoPE"),
        # (out FP8, input BF16, scale): a scale per element, BF16 read, FP8 written.
        "_C::static_scaled_fp8_quant": (t * 512, t * 512 * (2 + 1), "quantize"),
    }
    for op, (flops, nbytes, family) in expected.items():
        row = summary.loc[op]
        assert row["family"] == family, op
        assert (row["GFLOP per call"] * 1e9, row["MB per call"] * 1e6) == (pytest.approx(flops),
                                                                            pytest.approx(nbytes)), op
    attention = summary.loc["vllm::unified_attention_with_output"]
    assert not attention["has model"] and attention["family"] == ""
    assert "no serving step annotation" in attention["unpriced because"]
    assert summary.loc["_C::rms_norm", "bound"] == "unknown device"  # a B200 is not in the peak table


def test_aiter_and_flash_attention_entry_points_price_the_problem_the_dense_op_does() -> None:
    # Llama-3-8B's attention, 2 × 4096 tokens, 32 query heads sharing 8 K/V heads of 128, causal.
    q, kv = [2, 4096, 32, 128], [2, 4096, 8, 128]  # [B, N, H, d]
    reference = op_work("aten::_flash_attention_forward",
                        OpShape((q, kv, kv, [], [], [], [], [], []), (BF16,) * 3, ("",) * 8 + ("True",)))
    forward = {name: op_work(name, OpShape((q, kv, kv), (BF16,) * 3, ("", "", "", "0.0", "0.088", "True")))
               for name in ("aiter::mha_fwd", "aiter::fmha_v3_fwd", "aiter::_flash_attn_forward", "FlashAttnFunc")}
    # aiter::mha_bwd(dout, q, k, v, out, lse, dropout_p, softmax_scale, is_causal, ...)
    backward = op_work("aiter::mha_bwd", OpShape((q, q, kv, kv, q, [2, 32, 4096]), (BF16,) * 5 + ("float",),
                                                 ("",) * 6 + ("0.0", "0.088", "True")))

    assert reference is not None and backward is not None
    assert reference.flops == 2 * 2 * 32 * 4096 * 4096 * (128 + 128) // 2
    for name, work in forward.items():
        assert work is not None and (work.family, work.flops, work.bytes) == ("SDPA", reference.flops,
                                                                              reference.bytes), name
    products = 2 * 2 * 32 * 4096 * 4096 * (3 * 128 + 2 * 128)
    assert backward.flops == (products + 2 * 4096 * (128 + 128) * 3) // 2  # 4 query heads per K/V head: 3 sums
    q_elems, kv_elems = 2 * 4096 * 32 * 128, 2 * 4096 * 8 * 128
    assert backward.bytes == 2 * (2 * (q_elems + 2 * kv_elems) + q_elems)


def test_varlen_attention_takes_the_least_work_the_recorded_lengths_allow() -> None:
    # 4 packed sequences of 3000 tokens, the longest 1500 (cu_seqlens [5], max_seqlen 1500): the others 500 each.
    q = [3000, 16, 64]  # [T, H, d]
    shape = OpShape((q, q, q, [5], [5]), (BF16, BF16, BF16, "int", "int"),
                    ("", "", "", "", "", "1500", "1500", "0.0", "0.125", "False"))

    work = op_work("flash_attn::_flash_attn_varlen_forward", shape)

    assert work is not None and work.family == "SDPA"
    pairs = 1500 ** 2 + 3 * 500 ** 2  # for a fixed total, equal lengths make Σ n² smallest
    assert work.flops == 2 * 16 * pairs * (64 + 64)
    assert work.bytes == 2 * 4 * 3000 * 16 * 64  # Q, K, V read, O written
    assert work.shape == "seqs=4 T_q=3000 T_kv=3000 H=16 H_kv=16 d=64"


# Mamba-2 370M (state-spaces/mamba2-370m config): d_model 1024, expand 2 → d_inner 2048, head dim 64 → 32 heads,
# one group, d_state 128, d_conv 4, chunks of 256; 2 sequences of 2048 tokens.
B, T, D_INNER, HEADS, STATE, CHUNK = 2, 2048, 2048, 32, 128, 256
CONV_CHANNELS = D_INNER + 2 * STATE  # x, B, C


def test_a_mamba2_ssd_scan_counts_its_conv_and_its_chunked_products() -> None:
    width = 2 * D_INNER + 2 * STATE + HEADS  # z, x, B, C, dt
    dims = [[B, T, width], [CONV_CHANNELS, 4], [CONV_CHANNELS], [HEADS], [HEADS], [HEADS]] + [[]] * 12
    types = [BF16, BF16, BF16, "float", "float", "float", "Scalar"] + [""] * 8 + ["Scalar", "Scalar", "Scalar"]
    concrete = ["", "", "", "", "", "", str(CHUNK)] + [""] * 8 + ["64", "1", "False"]

    work = op_work("MambaSplitConv1dScanCombinedFn", OpShape(tuple(dims), tuple(types), tuple(concrete)))

    assert work is not None and (work.family, work.precision) == ("SSM", "bf16")
    conv = 2 * B * CONV_CHANNELS * T * 4
    within_chunks = 2 * B * T * CHUNK * (1 * STATE + D_INNER)  # C·Bᵀ per group, then its product with X per head
    states = 2 * 2 * B * T * STATE * D_INNER  # Bᵀ·X into each chunk's state, C·h out of it
    assert work.flops == conv + within_chunks + states
    assert work.bytes == 2 * B * T * width + 2 * (CONV_CHANNELS * 4 + CONV_CHANNELS) + 3 * 4 * HEADS \
        + 2 * B * T * D_INNER
    # A head dim that does not divide the projection's width: the op stays unpriced, and the summary says why.
    concrete[15] = "48"
    bad = OpShape(tuple(dims), tuple(types), tuple(concrete))
    assert op_work("MambaSplitConv1dScanCombinedFn", bad) is None
    assert "do not fit" in unpriced_reason("MambaSplitConv1dScanCombinedFn", bad)


def test_the_causal_conv1d_of_mamba_is_a_four_tap_depthwise_conv() -> None:
    shape = OpShape(([B, CONV_CHANNELS, T], [CONV_CHANNELS, 4], [CONV_CHANNELS]), (BF16,) * 3, ("",) * 3)

    work = op_work("DaoAILab::_causal_conv1d_fwd_cpp", shape)

    assert work is not None and work.family == "causal conv1d"
    assert work.flops == 2 * B * CONV_CHANNELS * T * 4
    assert work.bytes == 2 * (2 * B * CONV_CHANNELS * T + CONV_CHANNELS * 4 + CONV_CHANNELS)


def test_fp8_gemm_flags_and_the_transposed_output_give_the_same_product() -> None:
    # hipblaslt_gemm_fp8(A, scale_a, B, scale_b, out_dtype, transA, transB, transC, granularity): 8192 × 8192 × 4096.
    m, n, k = 8192, 4096, 8192
    nt = OpShape(([m, k], [], [n, k], []), (FP8, "float", FP8, "float"), ("", "", "", "", "15", "False", "True",
                                                                           "False", "0"))
    # The same product asked as Cᵀ: the library swaps the operands and flips both flags.
    swapped = OpShape(([n, k], [], [m, k], []), (FP8, "float", FP8, "float"), ("", "", "", "", "15", "False", "True",
                                                                                "True", "0"))

    plain = op_work("primus_turbo::hipblaslt_gemm_fp8", nt)
    as_transposed = op_work("primus_turbo::hipblaslt_gemm_fp8", swapped)

    assert plain is not None and as_transposed is not None
    assert (plain.family, plain.precision, plain.shape) == ("GEMM", "fp8", f"M={m} N={n} K={k}")
    assert plain.flops == 2 * m * n * k and plain.bytes == m * k + n * k + 2 * m * n  # FP8 in, BF16 out
    assert as_transposed.shape == f"M={m} N={n} K={k}" and as_transposed.flops == plain.flops


@pytest.mark.parametrize(("op", "dims"), [
    ("primus_turbo::hipblaslt_gemm_fp4", ([4096, 4096], [4096, 256], [8192, 4096], [8192, 256])),  # A, sA, B, sB
    ("aiter::gemm_a4w4", ([4096, 4096], [8192, 4096], [4096, 256], [8192, 256])),  # A, B, sA, sB
])
def test_an_mxfp4_gemm_unpacks_k_and_reads_one_scale_byte_per_32_values(op: str, dims: tuple[list[int], ...]) -> None:
    m, n, k = 4096, 8192, 8192  # two FP4 values per byte: the stored K is 4096
    types = (FP4, E8M0, FP4, E8M0) if op.startswith("primus") else (FP4, FP4, E8M0, E8M0)
    concrete = ("", "", "", "", "15", "False", "True", "False", "1") if op.startswith("primus") else ("",) * 9

    work = op_work(op, OpShape(dims, types, concrete))

    assert work is not None and (work.precision, work.shape) == ("fp4", f"M={m} N={n} K={k}")
    assert work.flops == 2 * m * n * k
    assert work.bytes == m * k // 2 + n * k // 2 + (m + n) * k // 32 + 2 * m * n


def test_fp8_and_mxfp4_quantizes_are_priced_as_the_casts_they_are() -> None:
    fp8 = op_work("primus_turbo::quantize_fp8_tensorwise", OpShape(([8192, 4096], [], []), (BF16, "float", "float"),
                                                                   ("", "", "")))
    mxfp4 = op_work("primus_turbo::quantize_mxfp4_dual", OpShape(([8192, 4100], [], []), (BF16, "Scalar", "Scalar"),
                                                                 ("", "0", "False")))

    e = 8192 * 4096
    assert fp8 is not None and (fp8.family, fp8.flops, fp8.bytes) == ("quantize", 2 * e, 2 * e + e)
    assert mxfp4 is not None and mxfp4.family == "quantize"
    # Read BF16; write rows and columns packed (half a byte per value) and their E8M0 scales, ⌈4100/32⌉ = 129 per
    # row and ⌈8192/32⌉ = 256 per column.
    assert (mxfp4.flops, mxfp4.bytes) == (4 * 8192 * 4100,
                                          2 * 8192 * 4100 + 8192 * 4100 + 8192 * 129 + 4100 * 256)


def test_an_op_without_a_model_or_without_shapes_says_why_it_is_unpriced() -> None:
    assert "record_shapes" in unpriced_reason("aten::mm", None)
    assert unpriced_reason("aten::index_select", OpShape(([4, 8],), ("float",), ("",))) \
        == "no FLOP/byte model for this op"
    assert "labels it" in unpriced_reason("aiter::moe_align_block_size", OpShape(([8, 2],), ("int",), ("",)))


# Qwen3-30B-A3B's MoE layer: hidden 2048, 128 experts of 768 (gated), top-8; 256 tokens in FP8 with FP8 weights.
TOKENS, HIDDEN, INTER, EXPERTS, TOPK = 256, 2048, 768, 128, 8
HIT = EXPERTS * (1 - (1 - TOPK / EXPERTS) ** TOKENS)  # experts a batch reaches under uniform routing


def test_aiters_two_stage_moe_counts_each_tokens_experts_in_each_stage() -> None:
    # ck_moe_stage1(x, w1, w2, sorted_ids, sorted_expert_ids, num_valid_ids, out [T, topk, N], ...)
    up = OpShape(([TOKENS, HIDDEN], [EXPERTS, 2 * INTER, HIDDEN], [EXPERTS, HIDDEN, INTER], [4096], [64], [1],
                  [TOKENS, TOPK, INTER]), (FP8, FP8, FP8, "int", "int", "int", BF16), ("",) * 7)
    # ck_moe_stage2(inter [T, topk, N], w1, w2, sorted_ids, sorted_expert_ids, num_valid_ids, out [T, K], ...)
    down = OpShape(([TOKENS, TOPK, INTER], [EXPERTS, 2 * INTER, HIDDEN], [EXPERTS, HIDDEN, INTER], [4096], [64], [1],
                    [TOKENS, HIDDEN]), (BF16, FP8, FP8, "int", "int", "int", BF16), ("",) * 7)

    up_work, down_work = op_work("aiter::ck_moe_stage1", up), op_work("aiter::ck_moe_stage2", down)

    assert up_work is not None and down_work is not None
    assert (up_work.family, up_work.precision) == ("MoE", "fp8")
    assert up_work.flops == 2 * TOKENS * TOPK * INTER * HIDDEN * 2  # up and gate
    assert up_work.bytes == pytest.approx(TOKENS * HIDDEN + HIT * 2 * INTER * HIDDEN + 2 * TOKENS * TOPK * INTER)
    assert down_work.flops == 2 * TOKENS * TOPK * INTER * HIDDEN
    assert down_work.bytes == pytest.approx(2 * TOKENS * TOPK * INTER + HIT * HIDDEN * INTER + 2 * TOKENS * HIDDEN)


def test_aiters_direct_fused_moe_is_the_fused_formula() -> None:
    # fmoe_fp8_blockscale_g1u1(out [M, K], x [M, K], w1 [E, 2·N, K], w2 [E, K, N], ..., topk (8), ...)
    shape = OpShape(([TOKENS, HIDDEN], [TOKENS, HIDDEN], [EXPERTS, 2 * INTER, HIDDEN], [EXPERTS, HIDDEN, INTER]),
                    (BF16, FP8, FP8, FP8), ("", "", "", "", "", "", "", "", str(TOPK)))

    work = op_work("aiter::fmoe_fp8_blockscale_g1u1", shape)

    assert work is not None and work.family == "MoE"
    m, k, n = TOKENS, HIDDEN, INTER
    assert work.flops == 2 * m * k * n * TOPK * 3 + m * k * (2 * TOPK - 1)  # up, gate, down; the weighted sum
    assert work.bytes == pytest.approx(m * k + 2 * m * k + HIT * 3 * n * k)  # FP8 x, BF16 out, FP8 weights


def test_moe_routing_touches_each_recorded_tensor_once() -> None:
    # biased_grouped_topk_hip(gating_output [M, E], correction_bias [E], topk_weights [M, k], topk_ids [M, k], ...)
    shape = OpShape(([TOKENS, EXPERTS], [EXPERTS], [TOKENS, TOPK], [TOKENS, TOPK], [], []),
                    (BF16, BF16, "float", "int", "Scalar", "Scalar"), ("",) * 4 + ("8", "4"))

    work = op_work("aiter::biased_grouped_topk_hip", shape)

    assert work is not None and (work.family, work.flops) == ("MoE routing", TOKENS * EXPERTS)
    assert work.bytes == 2 * (TOKENS * EXPERTS + EXPERTS) + 4 * 2 * TOKENS * TOPK


INDUCTOR = FIXTURES / "mi300_inductor_llama_block.json.gz"  # a torch.compile'd Llama block on an MI300X


def test_inductors_triton_kernels_are_priced_from_their_pointers_and_iteration_sizes() -> None:
    summary = _summary(INDUCTOR)

    x = 8 * 4096 * 2048  # the block's activations, BF16
    expected = {
        # RMS norm: x, weight [2048], out; 32768 rows of 2048; add, mean, mul, pow, rsqrt per element.
        "triton_red_fused_add_mean_mul_pow_rsqrt_0": (5 * 32768 * 2048, 2 * (2 * x + 2048)),
        # SwiGLU's product: two [32768, 8192] buffers; 268435456 elements; mul and silu (the view moves nothing).
        "triton_poi_fused__unsafe_view_mul_silu_2": (2 * 268435456, 2 * 2 * 32768 * 8192),
        # The residual add: three [32768, 2048] buffers.
        "triton_poi_fused__unsafe_view_add_3": (67108864, 2 * 3 * x),
    }
    for op, (flops, nbytes) in expected.items():
        row = summary.loc[op]
        assert row["family"] == "Inductor Triton", op
        assert (row["GFLOP per call"] * 1e9, row["MB per call"] * 1e6) == (pytest.approx(flops),
                                                                            pytest.approx(nbytes)), op
        assert row["TB/s"] == pytest.approx(nbytes / _kernel_seconds(INDUCTOR, op) / 1e12, rel=1e-9), op
        assert row["bound"] == "memory"  # vector work on an MI300X
    assert summary["has model"].all()  # the GEMMs and the attention beside them are priced too


def test_ligers_swiglu_and_the_evoformer_attention_are_priced() -> None:
    # Llama-3-8B's MLP on 4 × 2048 tokens: silu(gate) · up over [4, 2048, 14336].
    swiglu = op_work("LigerSiLUMulFunction", OpShape(([4, 2048, 14336], [4, 2048, 14336]), (BF16, BF16), ("", "")))
    # AlphaFold's MSA row attention: 129 sequences of 256 residues, 4 heads of 16, with its mask and pair bias.
    q = [1, 129, 256, 4, 16]
    evoformer = op_work("EvoformerAttention", OpShape((q, q, q, [1, 129, 1, 1, 256], [1, 1, 4, 256, 256]),
                                                      ("c10::Half",) * 5, ("",) * 5))

    e = 4 * 2048 * 14336
    assert swiglu is not None and (swiglu.family, swiglu.flops, swiglu.bytes) == ("elementwise", 2 * e, 2 * 3 * e)
    assert evoformer is not None and evoformer.family == "SDPA"
    assert evoformer.flops == 2 * 129 * 4 * 256 * 256 * (16 + 16)
    assert evoformer.bytes == 2 * (4 * 129 * 256 * 4 * 16 + 129 * 256 + 4 * 256 * 256)  # Q K V O, mask, bias


def test_dynamic_fp8_and_fp4_casts_count_their_values_and_scales() -> None:
    # DeepSeek-V3's hidden 7168 on 4096 tokens.
    m, n = 4096, 7168
    per_token = op_work("aiter::dynamic_per_token_scaled_quant",  # (out, input, scales [M, 1], ...)
                        OpShape(([m, n], [m, n], [m, 1], [], []), (FP8, BF16, "float", "", "Scalar"), ("",) * 5))
    grouped = op_work("vllm::triton_per_token_group_quant_fp8", OpShape(([m, n], []), (BF16, "Scalar"), ("", "128")))
    fp4 = op_work("aiter::dynamic_per_group_scaled_quant_fp4",  # (out packed, input, scales, ...)
                  OpShape(([m, n // 2], [m, n], [m, n // 32]), ("unsigned char", BF16, E8M0), ("",) * 3))

    assert per_token is not None and (per_token.family, per_token.flops) == ("quantize", 2 * m * n)
    assert per_token.bytes == m * n * 2 + m * n + m * 4  # BF16 in, FP8 out, a float32 scale per token
    assert grouped is not None and grouped.bytes == m * n * (2 + 1) + m * (n // 128) * 4
    assert fp4 is not None and (fp4.flops, fp4.bytes) == (2 * m * n, m * n * 2 + m * n // 2 + m * n // 32)


def test_a_block_scaled_fp8_gemm_reads_its_operands_and_their_block_scales() -> None:
    # DeepSeek-V3's q_b projection (1536 → 24576) on 4096 tokens, FP8 with 128 × 128 weight blocks and per-token
    # groups of 128: (X [M, K], W [N, K], x_scale [M, K/128], w_scale [N/128, K/128], ...).
    m, n, k = 4096, 24576, 1536
    shape = OpShape(([m, k], [n, k], [m, k // 128], [n // 128, k // 128]), (FP8, FP8, "float", "float"), ("",) * 4)

    work = op_work("aiter::gemm_a8w8_blockscale_ck", shape)

    assert work is not None and (work.family, work.precision) == ("GEMM", "fp8")
    assert work.flops == 2 * m * n * k
    assert work.bytes == m * k + n * k + 4 * (m * k // 128 + (n // 128) * (k // 128)) + 2 * m * n


def test_a_batch_norm_backward_of_resnet_counts_dx_and_the_parameter_gradients() -> None:
    # A call of TraceLens's ResNet training trace (mi300/resnet_act_checkpoint.json.gz): (grad_out, input, weight,
    # running_mean, running_var, save_mean, save_invstd, train, eps, output_mask).
    e, c = 10 * 512 * 7 * 7, 512
    shape = OpShape(([10, 512, 7, 7], [10, 512, 7, 7], [c], [c], [c], [c], [c], [], [], []),
                    (BF16,) * 5 + ("float", "float", "Scalar", "Scalar", "ScalarList"),
                    ("",) * 7 + ("True", "1.0000000000000001e-05", "[True, True, True]"))

    work = op_work("aten::native_batch_norm_backward", shape)

    assert work is not None and (work.family, work.flops) == ("NORM", 10 * e)
    # grad_out and input read, dx written; weight and running stats (BF16), saved stats (float32) read; dweight and
    # dbias written.
    assert work.bytes == 2 * 3 * e + 2 * 3 * c + 4 * 2 * c + 2 * 2 * c


def test_a_variable_k_grouped_gemm_and_transformer_engines_gemm_count_their_products() -> None:
    # The compact weight-gradient form of TraceLens's Primus-Turbo test: X [24576, 1408], dY [24576, 2048].
    variable_k = op_work("primus_turbo::grouped_gemm_variable_k_impl",
                         OpShape(([24576, 1408], [24576, 2048]), (BF16, BF16), ("", "")))
    # te_gemm_ts(A = weight [N, K] FP8, ..., B = input [M, K] FP8 (5), ..., D [M, N] BF16 (10), ...): 4096 tokens of a
    # 4096 → 14336 projection.
    dims: list[list[int]] = [[]] * 19
    dims[0], dims[5], dims[10] = [14336, 4096], [4096, 4096], [4096, 14336]
    types = [""] * 19
    types[0], types[5], types[10] = FP8, FP8, BF16
    te = op_work("tex_ts::te_gemm_ts", OpShape(tuple(dims), tuple(types), ("",) * 19))

    assert variable_k is not None and variable_k.family == "grouped GEMM"
    assert variable_k.flops == 2 * 24576 * 1408 * 2048
    assert variable_k.bytes == 2 * (24576 * (1408 + 2048) + 1408 * 2048)  # the groups' count is not recorded
    assert te is not None and (te.family, te.precision, te.shape) == ("GEMM", "fp8", "D=[4096, 14336] K=4096")
    assert te.flops == 2 * 4096 * 14336 * 4096
    assert te.bytes == 14336 * 4096 + 4096 * 4096 + 2 * 4096 * 14336


def test_the_vae_decoders_upsample_and_group_norm_and_a_replication_pad_are_priced() -> None:
    # Two calls of TraceLens's Stable Diffusion 3.5 trace (inference/xdit_sd_3.5): the VAE decoder's
    # upsample_nearest2d.vec(input, output_size=None, scale_factors=[2., 2.]) and AITER's group norm
    # (x, num_groups, weight, bias, eps).
    x = [1, 512, 128, 128]
    upsample = op_work("aten::upsample_nearest2d", OpShape((x, [], []), (BF16, "", "ScalarList"), ("", "", "[2., 2.]")))
    group_norm = op_work("aiter::_groupnorm_run", OpShape((x, [], [512], [512], []),
                                                          (BF16, "Scalar", BF16, BF16, "Scalar"),
                                                          ("", "32", "", "", "9.9999999999999995e-07")))
    pad = op_work("aten::replication_pad2d", OpShape(([8, 3, 224, 224], []), ("float", "ScalarList"),
                                                     ("", "[2, 2, 1, 1]")))

    e = 512 * 128 * 128
    assert upsample is not None and (upsample.family, upsample.flops, upsample.bytes) == ("elementwise", 0,
                                                                                        2 * (e + 4 * e))
    assert group_norm is not None and (group_norm.family, group_norm.flops) == ("NORM", 5 * e)
    assert group_norm.bytes == 2 * (2 * e + 2 * 512)
    assert pad is not None and pad.bytes == 4 * 8 * 3 * (224 * 224 + 226 * 228)  # W + 2 + 2, H + 1 + 1


def test_rms_norms_fused_with_an_fp8_cast_write_one_byte_per_value_and_their_scales() -> None:
    # DeepSeek-V3's hidden 7168 on 4 decode tokens, the shapes AITER's and vLLM's bindings document.
    per_token = op_work("aiter::rmsnorm2d_fwd_with_dynamicquant_ck",  # (out, input, yscale, weight, eps, flag)
                        OpShape(([4, 7168], [4, 7168], [4, 1], [7168], [], []),
                                (FP8, BF16, "float", BF16, "Scalar", "Scalar"), ("",) * 4 + ("1e-06", "0")))
    with_add = op_work("vllm::rocm_aiter_rmsnorm_with_add_fp8_group_quant",  # (x, residual, weight, eps, group)
                       OpShape(([4, 7168], [4, 7168], [7168], [], []), (BF16, BF16, BF16, "Scalar", "Scalar"),
                               ("", "", "", "1e-06", "128")))

    e = 4 * 7168
    assert per_token is not None and (per_token.family, per_token.flops) == ("NORM", 7 * e)
    assert per_token.bytes == 2 * e + 2 * 7168 + e + 4 * 4  # input, weight read; FP8 out, a scale per token
    assert with_add is not None and with_add.flops == 8 * e
    # input and residual read, the sum written, the weight read, FP8 out, a float32 scale per group of 128.
    assert with_add.bytes == 3 * 2 * e + 2 * 7168 + e + 4 * (7168 // 128) * 4


def test_aiters_16_bit_and_fp4_nt_gemms_are_priced_as_their_products() -> None:
    m, n, k = 64, 2880, 4096
    a16 = op_work("aiter::gemm_a16w16_atomic_", OpShape(([m, k], [n, k]), (BF16, BF16), ("", "")))
    # gemm_afp4wfp4(x packed [M, K/2], w packed [N, K/2], x_scales [M, K/32], w_scales [N, K/32], ...)
    fp4 = op_work("aiter::gemm_afp4wfp4_", OpShape(([m, k // 2], [n, k // 2], [m, k // 32], [n, k // 32]),
                                                   ("unsigned char", "unsigned char", E8M0, E8M0), ("",) * 4))

    assert a16 is not None and (a16.flops, a16.bytes) == (2 * m * n * k, 2 * (m * k + n * k + m * n))
    assert fp4 is not None and fp4.flops == 2 * m * n * k
    assert fp4.bytes == (m + n) * k // 2 + (m + n) * k // 32 + 2 * m * n


def test_aiters_two_channel_rope_the_flattened_mxfp4_cast_and_a_router_top_k() -> None:
    # Llama-3-8B decode, 32 sequences: q [32, 1, 32, 128], k [32, 1, 8, 128], cos/sin [131072, 1, 1, 64].
    q, k = [32, 1, 32, 128], [32, 1, 8, 128]
    rope = op_work("aiter::rope_cached_positions_2c_fwd_impl",
                   OpShape((q, k, q, k, [131072, 1, 1, 64], [131072, 1, 1, 64], [32, 1]),
                           (BF16,) * 6 + ("long int",), ("",) * 7))
    # DeepSeek MLA's flattened attention output [4096, 128, 128] cast to MXFP4 along rows of 16384.
    flat = op_work("sglang_profiler::fused_mxfp4_quant_fused_flatten_mxfp4_quant",
                   OpShape(([4096, 128, 128],), (BF16,), ("",)))
    # aiter::topk_softmax(topk_weights [M, k], topk_ids [M, k], token_expert_indices [M, k], gating [M, E], renorm)
    topk = op_work("aiter::topk_softmax", OpShape(([256, 8], [256, 8], [256, 8], [256, 128], []),
                                                  ("float", "int", "int", BF16, "Scalar"), ("",) * 4 + ("True",)))

    e = 32 * 32 * 128 + 32 * 8 * 128
    assert rope is not None and (rope.family, rope.flops) == ("RoPE", 3 * e)
    assert rope.bytes == 2 * 2 * e + 32 * (8 + 2 * 64 * 2)
    m, n = 4096 * 128, 128  # rows of the last dim: the same blocks of 32 as rows of 16384
    assert flat is not None and flat.bytes == m * n * 2 + m * n // 2 + m * n // 32
    assert topk is not None and (topk.family, topk.flops) == ("MoE routing", 256 * 128)
    assert topk.bytes == 4 * 3 * 256 * 8 + 2 * 256 * 128


def test_vllms_gemm_that_casts_its_input_to_mxfp4_counts_the_unpacked_k() -> None:
    # Llama-3-8B's o_proj in MXFP4 on 256 tokens: x [256, 4096] BF16, weight [4096, 2048] (two FP4 values a byte).
    work = op_work("vllm::gemm_with_dynamic_quant", OpShape(([256, 4096], [4096, 2048], [], []), (BF16, FP4, "", ""),
                                                            ("",) * 4))

    assert work is not None and (work.family, work.precision, work.shape) == ("GEMM", "fp4", "M=256 N=4096 K=4096")
    assert (work.flops, work.bytes) == (2 * 256 * 4096 * 4096, 2 * 256 * 4096 + 4096 * 2048 + 2 * 256 * 4096)


def test_aiters_batched_fp4_gemm_is_b_products_of_the_unpacked_k() -> None:
    # DeepSeek MLA's per-head absorbed projection: 128 heads of x [128 heads, 64 tokens, 512] BF16 times an FP4 weight
    # [128, 128, 256 bytes] with E8M0 scales [128, 128, 16].
    shape = OpShape(([128, 64, 512], [128, 128, 256], [128, 128, 16]), (BF16, FP4, E8M0), ("",) * 3)

    work = op_work("aiter::batched_gemm_a16wfp4_", shape)

    assert work is not None and (work.precision, work.shape) == ("fp4", "B=128 M=64 N=128 K=512")
    assert work.flops == 2 * 128 * 64 * 128 * 512
    assert work.bytes == 2 * 128 * 64 * 512 + 128 * 128 * 256 + 128 * 128 * 16 + 2 * 128 * 64 * 128


def test_a_norm_reduces_the_dims_of_its_third_argument_not_its_order() -> None:
    # torch.linalg.vector_norm(h, ord=2, dim=-1) and h.norm(2, dim=[1]) over Llama hidden states [8, 4096, 1024]:
    # (self, ord, dim, keepdim, ...), so argument 1 is the order (2), not a dim to reduce.
    h = [8, 4096, 1024]
    vector = op_work("aten::linalg_vector_norm", OpShape((h, [], [], [], []), (BF16, "Scalar", "ScalarList", "Scalar",
                                                                                "ScalarType"),
                                                         ("", "2", "[-1]", "False", "")))
    rows = op_work("aten::norm", OpShape((h, [], [], []), (BF16, "Scalar", "ScalarList", "Scalar"),
                                         ("", "2", "[1]", "False")))
    whole = op_work("aten::norm", OpShape((h, []), (BF16, "Scalar"), ("", "2")))

    e = 8 * 4096 * 1024
    assert vector is not None and (vector.family, vector.flops) == ("reduction", e)
    assert vector.bytes == 2 * (e + 8 * 4096)  # one norm per row of 1024 written, not one per [8, 4096] column
    assert rows is not None and rows.bytes == 2 * (e + 8 * 1024)
    assert whole is not None and whole.bytes == 2 * (e + 1)


def test_a_cumsum_is_a_scan_that_writes_as_much_as_it_reads() -> None:
    # The position ids of a padded batch: attention_mask.long().cumsum(-1) on [16, 2048].
    scan = op_work("aten::cumsum", OpShape(([16, 2048], [], []), ("long int", "Scalar", ""), ("", "-1", "")))

    assert scan is not None and (scan.family, scan.flops) == ("reduction", 16 * 2048)
    assert scan.bytes == 8 * 2 * 16 * 2048  # every prefix sum written, not one value per row


def test_linalg_norm_is_a_reduction_except_a_matrix_norm_from_singular_values() -> None:
    # Gradient-clipping style: torch.linalg.norm(w, dim=-1) on a [4096, 11008] FP32 weight, and its nuclear norm.
    w = [4096, 11008]
    rows = op_work("aten::linalg_norm", OpShape((w, [], [], [], []), ("float", "Scalar", "ScalarList", "Scalar",
                                                                        "ScalarType"), ("", "", "[-1]", "False", "")))
    nuclear = OpShape((w, [], [], [], []), ("float", "", "ScalarList", "Scalar", "ScalarType"),
                      ("", "nuc", "[0, 1]", "False", ""))

    assert rows is not None and (rows.flops, rows.bytes) == (4096 * 11008, 4 * (4096 * 11008 + 4096))
    assert op_work("aten::linalg_norm", nuclear) is None
    assert "do not fit" in unpriced_reason("aten::linalg_norm", nuclear)


def test_apexs_fused_conv_bias_reads_padding_before_stride() -> None:
    # apex ConvBias_.forward(ctx, x, weight, bias, padding, stride): a ResNet-50 stage-2 3×3 conv that halves
    # 56×56 (padding 1, stride 2) on 32 FP16 images of 64 channels, bias [1, 64, 1, 1].
    shape = OpShape(([32, 64, 56, 56], [64, 64, 3, 3], [1, 64, 1, 1], [], []), ("c10::Half",) * 3 + ("Scalar",) * 2,
                    ("", "", "", "1", "2"))

    for op in ("ConvBias_", "ConvBiasReLU_"):
        work = op_work(op, shape)
        y = 32 * 64 * 28 * 28  # (56 + 2·1 − 3) // 2 + 1 = 28; read the other way round (stride 1, padding 2): 58
        assert work is not None and work.family == "CONV", op
        assert (work.flops, work.bytes) == (2 * y * 64 * 9, 2 * (32 * 64 * 56 * 56 + 64 * 64 * 9 + y + 64)), op
    assert "sequence number" in unpriced_reason("ConvBias_Backward", OpShape(([32, 64, 28, 28],), ("c10::Half",),
                                                                               ("",)))


def test_the_int8_gemm_reads_bytes_and_writes_int32() -> None:
    # bitsandbytes' LLM.int8() on Llama-7B's up projection for 4096 tokens: A [4096, 4096] · B [11008, 4096]ᵀ.
    work = op_work("bitsandbytes::int8_linear_matmul", OpShape(([4096, 4096], [11008, 4096]),
                                                               ("signed char", "signed char"), ("", "")))

    assert work is not None and (work.family, work.precision, work.shape) == ("GEMM", None, "M=4096 N=11008 K=4096")
    assert (work.flops, work.bytes) == (2 * 4096 * 11008 * 4096, 4096 * 4096 + 11008 * 4096 + 4 * 4096 * 11008)


def test_the_serving_and_dit_fused_norms_count_their_extra_tensors() -> None:
    # Primus's DiT modulation: x [T=1024, B=2, H=3072], scale and shift [2, 3072].
    modulate = op_work("primus::fused_ln_modulate", OpShape(([1024, 2, 3072], [2, 3072], [2, 3072], []),
                                                            (BF16, BF16, BF16, "Scalar"), ("", "", "", "1e-06")))
    # gpt-oss's add + RMS norm padded to 256 columns for the MoE GEMM: x, residual [64, 2880] → out [64, 3072].
    pad_shape = OpShape(([64, 2880], [2880], [], [64, 2880], []), (BF16, BF16, "Scalar", BF16, "Scalar"),
                        ("", "", "1e-05", "", "256"))
    # DeepSeek-V3's input norm + MXFP4 cast with the residual (x1, res1 [256, 7168]), and its q/kv norm pair
    # (x1 [256, 1536] cast, x2 [256, 512] normalized alone).
    with_res = OpShape(([256, 7168], [7168], [], [], [], [], [256, 7168], [], [], []),
                       (BF16, BF16, "Scalar", "", "", "Scalar", BF16, "Scalar", "Scalar", "Scalar"),
                       ("", "", "1e-06", "", "", "", "", "True", "True", "False"))
    pair = OpShape(([256, 1536], [1536], [], [256, 512], [512], [], [], [], [], []),
                   (BF16, BF16, "Scalar", BF16, BF16, "Scalar", "", "Scalar", "Scalar", "Scalar"),
                   ("", "", "1e-06", "", "", "1e-06", "", "True", "True", "False"))

    e = 1024 * 2 * 3072
    assert modulate is not None and (modulate.family, modulate.flops) == ("NORM", 5 * e)
    assert modulate.bytes == 2 * 2 * e + 2 * 2 * 2 * 3072 + 2 * 4 * 1024 * 2  # x, y; scale, shift; mean, rstd
    for op in RMS_NORM_PAD_OPS:
        pad = op_work(op, pad_shape)
        assert pad is not None and (pad.family, pad.flops) == ("NORM", 6 * 64 * 2880), op
        assert pad.bytes == 2 * (3 * 64 * 2880 + 64 * 3072 + 2880), op  # x, residual, r; padded out; weight
    for op in RMS_NORM_MXFP4_OPS:
        res, both = op_work(op, with_res), op_work(op, pair)
        e1 = 256 * 7168
        assert res is not None and (res.family, res.flops) == ("NORM", 8 * e1), op
        assert res.bytes == 2 * 3 * e1 + 2 * 7168 + e1 // 2 + 256 * 7168 // 32, op  # x1, res1, sum; w; fp4; scales
        assert both is not None and both.flops == 7 * 256 * 1536 + 5 * 256 * 512, op
        assert both.bytes == 2 * 256 * 1536 + 2 * 1536 + 256 * 1536 // 2 + 256 * 1536 // 32 \
            + 2 * 2 * 256 * 512 + 2 * 512, op


def test_moe_side_ops_count_the_values_they_produce() -> None:
    # DeepSeek-V3 on 256 tokens: the activation [256, 7168] cast to MXFP4 in expert-sorted order (scales padded to
    # the sorted layout's 8192 rows), and the shared expert appended to each token's 8 routed experts.
    cast = OpShape(([256, 3584], [8192, 224], [256, 7168], [8192], [2]), (FP4, E8M0, BF16, "int", "int"),
                   ("",) * 5)
    append = op_work("sglang_profiler::fused_moe_triton_kernels_fused_append_shared_experts",
                     OpShape(([256, 8], [256, 8], [], [], []), ("int", "float", "Scalar", "Scalar", "Scalar"),
                             ("", "", "1", "1.0", "256")))

    for op in ("aiter::fused_dynamic_mx_quant_moe_sort_hip", "aiter::fused_dynamic_mxfp4_quant_moe_sort_hip"):
        work = op_work(op, cast)
        assert work is not None and (work.family, work.flops) == ("quantize", 2 * 256 * 7168), op
        assert work.bytes == 2 * 256 * 7168 + 256 * 3584 + 256 * 7168 // 32, op  # not the 8192 padded scale rows
    assert append is not None and (append.family, append.flops) == ("MoE routing", 0)
    assert append.bytes == 256 * 8 * (4 + 4) + 256 * 9 * (4 + 4)


def test_sampling_and_sparse_mla_are_priced_from_their_tensors() -> None:
    # Sampling 64 rows of Qwen's 151936-token vocabulary with float32 noise, and DeepSeek-V3.2's sparse MLA prefill
    # on 4096 tokens (128 heads, d_qk 576, d_v 512, top-2048 of a 4096-row latent cache).
    sample = op_work("aiter::mixed_sample_outer_exponential",
                     OpShape(([64], [64, 151936], [64, 151936], [64], []), ("int", BF16, "float", "float", "Scalar"),
                             ("",) * 4 + ("1e-10",)))
    sparse = op_work("sglang_profiler::tilelang_kernel_tilelang_sparse_fwd",
                     OpShape(([4096, 128, 576], [4096, 1, 576], [4096, 1, 2048], [], []),
                             (BF16, BF16, "int", "Scalar", "Scalar"), ("", "", "", "0.0416", "512")))

    v = 64 * 151936
    assert sample is not None and (sample.family, sample.flops) == ("reduction", 2 * v)
    assert sample.bytes == 64 * 4 + v * (2 + 4) + 64 * 4
    assert sparse is not None and (sparse.family, sparse.precision) == ("SDPA", "bf16")
    assert sparse.flops == 2 * 4096 * 128 * 2048 * (576 + 512)
    assert sparse.bytes == 2 * 4096 * 128 * 576 + 4 * 4096 * 2048 + 2 * 4096 * 576 + 2 * 4096 * 128 * 512


def test_mla_rope_with_the_cache_write_rotates_the_rotary_slices_and_writes_whole_rows() -> None:
    # DeepSeek-V3 decode, 128 tokens, 16 heads of 512 + 64: the concat variant writes an FP8 q_out and an FP8 cache.
    concat = op_work("aiter::fused_qk_rope_concat_and_cache_mla",
                     OpShape(([128, 16, 512], [128, 16, 64], [128, 512], [128, 64], [4096, 1, 576], [128, 16, 576]),
                             (BF16, BF16, BF16, BF16, FP8, FP8), ("",) * 6))
    cat = op_work("aiter::fused_qk_rope_cat_and_cache_mla",
                  OpShape(([128, 16, 512], [128, 16, 64], [128, 1, 512], [128, 1, 64], [4096, 1, 576], [128]),
                          (BF16, BF16, BF16, BF16, BF16, "long int"), ("",) * 6))

    read = 2 * (128 * 16 * 576 + 128 * 576)
    assert concat is not None and concat.family == "RoPE"
    assert concat.flops == 3 * 128 * 17 * 64 + 128 * 16 * 576 + 128 * 576  # rotations, then the FP8 scales
    assert concat.bytes == read + 128 * 16 * 576 + 128 * 576
    assert cat is not None and (cat.flops, cat.bytes) == (3 * 128 * 17 * 64, read + 2 * (128 * 16 * 576 + 128 * 576))


def test_the_mhc_ops_count_their_stream_mixes_and_projection() -> None:
    # DeepSeek's hyper-connections: n = 4 streams of C = 7168 for 256 tokens; hc3 = n² + 2n = 24, split-K 4.
    m, n, c = 256, 4, 7168
    post = op_work("aiter::mhc_post", OpShape(([m, n, c], [m, c], [m, n, c], [m, n, 1], [m, n, n], []),
                                              (BF16, BF16, BF16, "float", "float", "Scalar"), ("",) * 6))
    pre = op_work("aiter::mhc_pre_gemm_sqrsum", OpShape(([4, m, 24], [4, m], [m, n, c], [24, n * c], [], []),
                                                        ("float", "float", BF16, "float", "Scalar", "Scalar"),
                                                        ("",) * 6))

    fold = op_work("aiter::mhc_pre_big_fuse_rmsnorm",
                   OpShape(([m, n, 1], [m, n, n], [m, c], [4, m, 24], [4, m], [3], [24], [m, n, c], [c], [], []),
                           ("float",) * 2 + (BF16,) + ("float",) * 4 + (BF16, BF16, "Scalar", "Scalar"), ("",) * 11))
    fused = op_work("aiter::mhc_fused_post_pre_gemm_sqrsum",
                    OpShape(([4, m, 24], [4, m], [m, n, c], [m, c], [m, n, c], [m, n, 1], [m, n, n], [24, n * c]),
                            ("float", "float", BF16, BF16, BF16, "float", "float", "float"), ("",) * 8))

    assert post is not None and (post.family, post.flops) == ("mHC", 2 * (n + 1) * m * n * c)
    assert post.bytes == 2 * (2 * m * n * c + m * c) + 4 * (m * n + m * n * n)
    assert pre is not None and pre.flops == 2 * m * 24 * n * c + 2 * m * n * c
    assert pre.bytes == 4 * (4 * m * 24 + 4 * m + 24 * n * c) + 2 * m * n * c
    # the split-K partials summed, the streams folded with the pre mix, the result RMS-normalized
    assert fold is not None and fold.flops == 4 * m * 24 + 2 * m * n * c + 5 * m * c
    assert fold.bytes == 4 * (m * n + m * n * n + 4 * m * 24 + 4 * m + 3 + 24) + 2 * (m * c + m * n * c + c)
    # post, then the new streams projected on chip: each tensor once
    assert fused is not None and fused.flops == 2 * (n + 1) * m * n * c + 2 * m * 24 * n * c + 2 * m * n * c
    assert fused.bytes == 4 * (4 * m * 24 + 4 * m + m * n + m * n * n + 24 * n * c) + 2 * (2 * m * n * c + m * c)


def test_the_ln_modulate_backward_writes_dx_and_the_modulation_gradients() -> None:
    # Primus's DiT backward: grad_out and x_norm [1024, 2, 3072], float32 mean and rstd per row, modulation grad.
    t_b_h = 1024 * 2 * 3072
    work = op_work("primus::fused_ln_modulate_backward",
                   OpShape(([1024, 2, 3072], [1024, 2, 3072], [2048], [2048], [2, 3072]),
                           (BF16, BF16, "float", "float", BF16), ("",) * 5))

    assert work is not None and (work.family, work.flops) == ("NORM", 10 * t_b_h)
    assert work.bytes == 2 * 2 * t_b_h + 2 * 4 * 2048 + 2 * 2 * 3072 + 2 * t_b_h + 2 * 2 * 2 * 3072


def test_each_named_op_is_priced_by_one_family_module_only() -> None:
    """The op table tries the family modules' models in no set order, so an op named by two families would be
    priced by whichever comes first: every named op has one family module, and none is an Inductor kernel's name."""
    named = Counter(op for family in FAMILY_MODULES for ops, _ in family.MODELS if isinstance(ops, Iterable)
                    for op in ops)
    assert len(named) > 300
    assert [op for op, seen in named.items() if seen > 1] == []
    assert [op for op in named if op in inductor.INDUCTOR_TRITON_OPS] == []
