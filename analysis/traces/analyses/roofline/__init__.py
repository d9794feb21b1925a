"""Roofline view of the op families TraceLens models: FLOPs and bytes from the shapes the profiler recorded
(``record_shapes=True``: ``Input Dims``, ``Input type``, ``Concrete Inputs``), achieved TFLOP/s and TB/s over the
op's kernel time, and the fraction of the device's peak.

Conventions: FLOPs count a multiply-add as 2 and only the matrix products (GEMM 2·M·N·K, the bias add is not counted;
SDPA the two products Q·Kᵀ and P·V, halved when causal; softmax is not counted); elementwise ops count one FLOP per
output element; a normalization (layer, batch, group, instance, RMS norm forward) 5 per element (mean, variance,
normalize, scale, shift) and a reduction one per input element. Bytes are the minimum traffic: every input tensor read
once and the output written once (no cache reuse, no re-reads). TB/s and MB are decimal (1e12, 1e6). The op's time is
the sum of the durations of the kernels it launched. A float32 GEMM is compared with the FP32 peak: the trace does not
say whether TF32 was allowed.

The newer families, on the same conventions and with TraceLens's formulas (PerfModel/perf_model.py and
extensions/moe_perf_model_extensions.py, read 2026-11; the code here is this project's own):

- grouped GEMM (``aten::_grouped_mm``, ``aten::_scaled_grouped_mm``, Primus-Turbo's grouped GEMMs): Σ 2·mᵢ·kᵢ·nᵢ
  over the groups; bytes A + B read at the input's width, the output written at its own;
- SDPA backward (flash-style: the scores are recomputed): 2·B·H_q·N_q·N_kv·(3·d_qk + 2·d_v) for the recomputed
  Q·Kᵀ and the four gradient products, plus the sums over the query heads that share a K/V head (GQA),
  halved when causal; bytes Q, K, V, dO read and dQ, dK, dV written;
- fused MoE (``vllm::rocm_aiter_fused_moe``): the up (×2 when gated) and down projections of each token's top-k
  experts, 2·M·K·N·topk·(3 gated, else 2), plus the weighted sum M·K·(2·topk − 1); bytes the tokens read and
  written and the weights of the experts expected to be hit under uniform routing, E·(1 − (1 − topk/E)^M);
  SGLang's Triton MoE grouped GEMM likewise (2·M·topk·N·K); ``MoEDispatch``/``MoECombine`` move
  tokens × hidden elements and do no FLOPs (family ``MoE comm``: judged on no peak, the traffic is the network's);
- RoPE (``FusedRoPEFunc`` and its backward): a rotation costs 3 FLOPs per element (4 multiplies and 2 adds per
  pair); bytes the input read and the output written;
- cross-entropy (``CrossEntropyFunction``): 5 FLOPs per logit (max, exp, sum, log, subtract); bytes the logits and
  targets read and a float32 loss per row written.

The families of the serving and low-precision libraries TraceLens also models (its extensions, read 2026-11), each
derived in its function's docstring here:

- SDPA entry points of flash-attn (``FlashAttnFunc``, FA3's ``flash_attn_3::fwd``) and AITER (``mha_fwd``/``bwd``,
  ``fmha_v3``, ``_flash_attn_forward``/``backward``): the dense formulas above on their [B, N, H, d] arguments;
  Evoformer attention over the residues of each row; variable-length and paged attention (flash-attn's varlen
  forward/backward, ``aiter::mha_batch_prefill``): the record holds the sequences' count, totals and longest lengths
  only, so the FLOPs are the least work these allow (the other sequences equal), a lower bound;
- GEMMs of the serving and FP8/FP4 libraries (Primus-Turbo's hipBLASLt FP8/FP4, AITER's 16-bit, 8-bit and FP4 GEMMs,
  vLLM's, Transformer Engine's): 2·M·N·K, packed FP4 holding two values per byte, bytes the stored operands, their
  scales and a 16-bit output; ``aiter::gemm_a16w16`` and vLLM's ``rocm_unquantized_gemm`` as ``aten::linear``;
  variable-K grouped GEMMs;
- SSM: Mamba-2's ``MambaSplitConv1dScanCombinedFn`` (conv + chunked SSD scan, judged on the matrix peak) and the
  depthwise ``causal_conv1d`` (vector work);
- quantize: per-tensor, dynamic (per token, per group) FP8 casts and MXFP4 casts, bytes in and (packed) bytes plus
  scales out;
- normalization backwards (layer, batch, group, RMS): 10 FLOPs per element, every recorded tensor read, dx and the
  parameter gradients written;
- MoE: AITER's direct fused call and its two-stage (up, down) kernels on the fused formula's terms; MoE routing
  (router top-k, token sort, the sum over experts): every recorded tensor touched once;
- the serving ops around attention: fused gated activations (``silu_and_mul``, Liger's SwiGLU: 2 FLOPs per output),
  RMS norms with or without a fused residual add or FP8 cast, rotary embedding on the query and key, KV-cache
  writes (traffic only, a scale per element into an FP8 cache); padding and nearest upsampling (data movement);
- Inductor Triton: the ops PyTorch records around Inductor's generated Triton kernels, priced from their pointers'
  shapes, their iteration sizes and the ATen ops their names list (:func:`_inductor_triton`).

And, on the same conventions, each derived from what the op computes in its function's docstring: apex's fused
conv + bias (+ ReLU), bitsandbytes' int8 GEMM, ``aten::linalg_norm`` and the scans ``cumsum``/``cumprod``, Primus's
LayerNorm-modulate (and backward), AITER's add-RMSNorm-pad, RMSNorm + MXFP4 cast, MX casts in expert-sorted order,
mHC hyper-connection ops, exponential sampler and MLA RoPE + KV-cache write, SGLang's shared-expert append and sparse
(top-k) MLA prefill.

Attention over a KV cache (vLLM's unified attention, AITER's varlen, FMHA v3 and paged decode kernels, SGLang's
ragged paged attention, gated-delta linear attention) records its packed tensors but not the context each request
attends: :func:`op_work` takes the sums of the serving step around the call
(:mod:`analysis.traces.analyses.serving_steps`) and prices the pairs they give (:func:`_kv_attention`,
:func:`_gated_delta`); AITER's DeepSeek-V4 sparse prefill records its picked slots and needs no step.

An op no family prices keeps its row in the unified summary with the reason (:func:`unpriced_reason`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.traces.analyses.categories import CONV, ELEMENTWISE, ELEMENTWISE_OPS, GEMM, NORM, REDUCTION, SDPA
from analysis.traces.analyses.ops import Attribution
from analysis.traces.analyses.serving_steps import NO_STEP, PhaseSums, StepSums, call_steps
from analysis.traces.model import OpShape, TraceData

# Bytes per element of the dtype names Kineto writes (lower-cased), after TraceLens' name2bpe.
_BYTES = {"double": 8, "long int": 8, "long": 8, "c10::complex<float>": 8, "float": 4, "int": 4,
          "unsigned int": 4, "c10::half": 2, "c10::bfloat16": 2, "short": 2, "bool": 1, "unsigned char": 1,
          "signed char": 1, "c10::float8_e4m3fn": 1, "c10::float8_e4m3fnuz": 1, "c10::float8_e5m2": 1,
          "c10::float8_e5m2fnuz": 1, "c10::float8_e8m0fnu": 1,
          # Two FP4 values packed in one byte: the recorded shape counts bytes (K/2 columns), not values.
          "c10::float4_e2m1fn_x2": 1}
_PRECISION = {"c10::bfloat16": "bf16", "c10::half": "fp16", "float": "fp32", "double": "fp64"}

GEMM_OPS = {"aten::mm", "aten::addmm", "aten::_addmm_activation", "aten::bmm", "aten::baddbmm", "aten::matmul",
             "aten::linear", "aten::_scaled_mm"}
CONV_OPS = {"aten::convolution", "aten::_convolution", "aten::cudnn_convolution", "aten::miopen_convolution",
             "aten::mkldnn_convolution", "aten::convolution_backward"}
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
GROUPED_GEMM_OPS = {"aten::_grouped_mm", "aten::_scaled_grouped_mm", "primus_turbo::grouped_gemm",
                    "primus_turbo::grouped_gemm_impl", "primus_turbo_cpp_extension::grouped_gemm",
                    "primus_turbo_cpp_extension::ck_grouped_gemm"}
# Variable-K grouped GEMMs (the weight gradients of a MoE): per-group lists, or the compact X [M, K], dY [M, N] with
# M cut into the groups.
GROUPED_GEMM_VARIABLE_K_OPS = {"primus_turbo::grouped_gemm_variable_k", "primus_turbo::grouped_gemm_variable_k_impl",
                               "primus_turbo_cpp_extension::grouped_gemm_variable_k",
                               "primus_turbo_cpp_extension::ck_grouped_gemm_variable_k"}
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
ROPE_OPS = {"FusedRoPEFunc", "FusedRoPEFuncBackward"}
CROSS_ENTROPY_OPS = {"CrossEntropyFunction"}
GROUPED_GEMM, MOE, MOE_COMM, ROPE, CROSS_ENTROPY = "grouped GEMM", "MoE", "MoE comm", "RoPE", "cross-entropy"
SSM, CAUSAL_CONV1D, QUANTIZE, KV_CACHE = "SSM", "causal conv1d", "quantize", "KV cache"
MOE_ROUTING, INDUCTOR_TRITON, MHC = "MoE routing", "Inductor Triton", "mHC"
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
CAUSAL_CONV1D_OPS = {"DaoAILab::_causal_conv1d_fwd_cpp"}
MAMBA_SSD_OPS = {"MambaSplitConv1dScanCombinedFn"}
# Per-tensor FP8 casts: (where the high-precision input sits, FLOPs per element). Primus-Turbo's (input, scale_inv,
# amax) scales each element and folds it into the running amax of delayed scaling (2); vLLM's static
# (out, input, scale) only scales (1).
QUANTIZE_FP8_OPS = {"primus_turbo_cpp_extension::quantize_fp8_tensorwise": (0, 2),
                    "primus_turbo::quantize_fp8_tensorwise": (0, 2), "_C::static_scaled_fp8_quant": (1, 1)}
# MXFP4 casts: (where the input sits, directions). The dual casts write a row-wise and a column-wise copy.
QUANTIZE_MXFP4_OPS = {**dict.fromkeys(("primus_turbo_cpp_extension::quantize_mxfp4_dual",
                                       "primus_turbo::quantize_mxfp4_dual", "primus::quantize_mxfp4_dual"), (0, 2)),
                      "sglang_profiler::quant_dynamic_mxfp4_quant": (0, 1),
                      "sglang_profiler::fused_mxfp4_quant_fused_flatten_mxfp4_quant": (0, 1),  # x [M, N1, N2]
                      "aiter::dynamic_per_group_scaled_quant_fp4": (1, 1)}  # (out, input, scales, ...)
# Dynamic casts that find their scales themselves (per token, per group of a row, per tensor): (out, input,
# scales, ...).
DYNAMIC_QUANT_OPS = {"aiter::dynamic_per_token_scaled_quant", "aiter::dynamic_per_group_scaled_quant",
                     "aiter::dynamic_per_tensor_quant"}
# vLLM's Triton per-token-group FP8 cast (x [M, N], group_size): FP8 values and one float32 scale per group out.
GROUP_QUANT_FP8_OPS = {"vllm::triton_per_token_group_quant_fp8"}
# Fused gated activations: (out [T, N], input [T, 2·N]) → out = act(input[:, :N]) · input[:, N:].
GATED_ACTIVATION_OPS = {"aiter::silu_and_mul", "_C::silu_and_mul", "sgl_kernel::silu_and_mul",
                        "aiter::gelu_and_mul", "aiter::gelu_tanh_and_mul"}
# Normalization backwards (torch 2.13's schemas): where the weight sits and how many parameter gradients (weight,
# bias) they write; grad_out and input come first (miopen/cudnn: input, then grad_output).
NORM_BACKWARD_OPS = {"aten::native_layer_norm_backward": (5, 2), "aten::native_batch_norm_backward": (2, 2),
                     "aten::native_group_norm_backward": (4, 2), "aten::_fused_rms_norm_backward": (4, 1),
                     "aten::miopen_batch_norm_backward": (2, 2), "aten::cudnn_batch_norm_backward": (2, 2),
                     "aten::batch_norm_backward": (2, 2),
                     # Primus's (grad_out [T, B, H], x_norm [T, B, H], mean, rstd, modulation grad [B, H]): dx and
                     # the scale and shift gradients [B, H]
                     "primus::fused_ln_modulate_backward": (4, 2)}
# Pure data movement into a larger tensor: (input, padding [left, right, top, bottom, ...]) and (input, output_size,
# scales...) or (input, output_size, scale_factors).
PAD_OPS = {f"aten::replication_pad{d}d" for d in (1, 2, 3)}
UPSAMPLE_OPS = {f"aten::upsample_nearest{d}d" for d in (1, 2, 3)}
# Liger-Kernel's SwiGLU (a, b) → silu(a) · b, all three the same shape.
SILU_MUL_OPS = {"LigerSiLUMulFunction"}
# DeepSpeed's Evoformer attention (Q, K, V [B, S, R, H, d], res_mask [B, S, 1, 1, R], pair_bias [B, 1, H, R, R]).
EVOFORMER_OPS = {"EvoformerAttention"}
# bitsandbytes' int8 GEMM: int8_linear_matmul(A [..., K], B [N, K]) → int32 [..., N].
INT8_GEMM_OPS = {"bitsandbytes::int8_linear_matmul"}
# Primus's LayerNorm fused with a DiT modulation: (x [T, B, H], scale [B, H], shift [B, H], eps).
LN_MODULATE_OPS = {"primus::fused_ln_modulate"}
# AITER's residual add + RMS norm + zero pad of the hidden dim (vLLM's wrapper has the same arguments):
# (x [M, N], weight [N], epsilon, residual [M, N], x_pad_to_multiple) → (out [M, N_out], residual_out [M, N]).
RMS_NORM_PAD_OPS = {"aiter::fused_add_rmsnorm_pad_", "vllm::rocm_aiter_triton_add_rmsnorm_pad"}
# AITER's RMS norm fused with an MXFP4 cast (SGLang's profiler name and AITER's op):
# (x1 [M, N1], x1_weight [N1], x1_epsilon, x2 [M, N2] or None, x2_weight, x2_epsilon, res1 [M, N1] or None, shuffle,
#  scale_shuffle_padding, output_unquantized_inp1) → x1 normalized (after res1 is added) and cast to MXFP4; x2
# normalized alone; x1 + res1 and, when asked, x1's unquantized normalization written.
RMS_NORM_MXFP4_OPS = {"sglang_profiler::fused_mxfp4_quant_fused_rms_mxfp4_quant", "aiter::_fuse_rmsnorm_fp4_quant"}
# AITER's MX casts fused with the MoE token sort: (out [M, N/2] packed, scales (sorted, padded layout), input [M, N],
# sorted ids, valid-id count).
MOE_SORT_QUANT_OPS = {"aiter::fused_dynamic_mx_quant_moe_sort_hip", "aiter::fused_dynamic_mxfp4_quant_moe_sort_hip"}
# SGLang's shared-expert append: (topk_ids [M, K], topk_weights [M, K], num_fused_shared_experts, scale_factor, N).
APPEND_SHARED_EXPERTS_OPS = {"sglang_profiler::fused_moe_triton_kernels_fused_append_shared_experts"}
# AITER's exponential-race sampler: (out ids [T], logits [T, V], exponential noise [T, V], ...).
SAMPLING_OPS = {"aiter::mixed_sample_outer_exponential"}
# AITER's RoPE on the rotary slices of MLA's query and key, with the key (latent ‖ rotary) written into the cache:
# (q_nope [T, H, D_lora], q_pe [T, H, D_pe], k_nope [T, (H_kv,) D_lora], k_pe [T, (H_kv,) D_pe], kv_cache, then, for
# the concat variant, q_out [T, H, D_lora + D_pe]).
# SGLang's DeepSeek sparse (top-k) MLA prefill: (q [S, H, d_qk], kv [S_kv, H_kv, d_qk], indices [S, H_kv, top-k],
# sm_scale, d_v), V being the first d_v of each kv row.
SPARSE_MLA_OPS = {"sglang_profiler::tilelang_kernel_tilelang_sparse_fwd"}
OPUS_SPARSE_PREFILL_OPS = {"aiter::pa_sparse_prefill_opus_fwd"}
MLA_ROPE_CACHE_OPS = {"aiter::fused_qk_rope_cat_and_cache_mla", "aiter::fused_qk_rope_concat_and_cache_mla"}
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
# RMS norms of the inference libraries: where the input and the weight sit, and whether a residual is added first
# (then input and residual are read, the normalized output and the updated residual written).
@dataclass(frozen=True)
class _RmsNorm:
    x_at: int
    weight_at: int
    residual: bool = False


INFERENCE_NORM_OPS: dict[str, _RmsNorm] = {
    "aiter::rms_norm": _RmsNorm(0, 1), "aiter::rmsnorm2d_fwd_ck": _RmsNorm(0, 1), "aiter::rmsnorm": _RmsNorm(1, 2),
    "_C::rms_norm": _RmsNorm(1, 2),  # vLLM's (out, input, weight, epsilon)
    **dict.fromkeys(("aiter::add_rmsnorm", "aiter::rmsnorm2d_fwd_with_add_ck"), _RmsNorm(1, 4, residual=True)),
    "_C::fused_add_rms_norm": _RmsNorm(0, 2, residual=True),  # vLLM's (input, residual, weight, epsilon), in place
}
# RMS norms fused with an FP8 cast of their output (per token or per group of a row): where the input, the weight, the
# FP8 output and the scales sit when recorded (None: returned, so not recorded), or the position of the group size
# that sizes the scales (float32, one per group), and whether a residual is added first (read, and the sum written).
@dataclass(frozen=True)
class _RmsNormQuant:
    x_at: int
    weight_at: int
    out_at: int | None
    scales_at: int | None
    group_at: int | None = None
    residual: bool = False


RMS_NORM_QUANT_OPS: dict[str, _RmsNormQuant] = {
    # (out, input, yscale [M, 1], weight, epsilon, ...)
    "aiter::rmsnorm2d_fwd_with_dynamicquant_ck": _RmsNormQuant(1, 3, 0, 2),
    # (out, input, scale [M, N / group], weight, epsilon, group_size, ...)
    "aiter::rmsnorm_quant": _RmsNormQuant(1, 3, 0, 2),
    # (x, weight, eps, group_size) → (x_quant, scales)
    "vllm::rocm_aiter_rmsnorm_fp8_group_quant": _RmsNormQuant(0, 1, None, None, group_at=3),
    # (x, residual, weight, eps, group_size) → (x_quant, residual_out, scales)
    "vllm::rocm_aiter_rmsnorm_with_add_fp8_group_quant": _RmsNormQuant(0, 2, None, None, group_at=4, residual=True),
}
# Rotary embedding in place on the query and key: (positions [T], query [T, H_q·d], key [T, H_kv·d], head_size,
# cos_sin_cache [max_position, rotary_dim], is_neox).
ROTARY_EMBEDDING_OPS = {"sgl_kernel::rotary_embedding", "_C::rotary_embedding"}
# AITER's two-channel RoPE: (out_x, out_y, x [B, S, H_q, d], y [B, S, H_kv, d], cos, sin [max_pos, 1, 1, d_cs],
# positions [B, S], ...).
ROPE_2C_OPS = {"aiter::rope_cached_positions_2c_fwd_impl"}
# KV-cache writes: the new tokens' K and V copied into their cache slots.
KV_CACHE_OPS = {"sglang::store_cache", "_C_cache_ops::reshape_and_cache_flash"}
MATRIX_FAMILIES = (GEMM, CONV, SDPA, GROUPED_GEMM, MOE, SSM)  # judged against the matrix peak

# Forward normalizations: (input, normalized shape or weight, ...) as their schemas record them.
NORM_OPS = {f"aten::{p}{kind}_norm" for p in ("", "native_") for kind in ("layer", "batch", "group", "instance")} \
    | {"aten::rms_norm", "aten::_fused_rms_norm", "aten::miopen_batch_norm", "aten::cudnn_batch_norm",
       "aiter::_groupnorm_run"}  # AITER's: aten::group_norm's arguments
REDUCE_OPS = {f"aten::{n}" for n in ("sum", "mean", "amax", "amin", "max", "min", "norm", "linalg_vector_norm",
                                     "linalg_norm", "std", "var", "logsumexp", "prod")}
# Where a reduction's dims sit (torch 2.13's schemas): (self, dim, ...) for most, (self, p, dim, keepdim, ...) for
# the norms (aten::norm.ScalarOpt_dim, linalg_vector_norm, linalg_norm), whose dim is an int list.
_NORM_DIM_AT = {"aten::norm": 2, "aten::linalg_vector_norm": 2, "aten::linalg_norm": 2}
# Scans (self, dim, dtype): every prefix kept, so the output is the input's size.
SCAN_OPS = {"aten::cumsum", "aten::cumprod"}

ROOFLINE_COLUMNS = ["family", "op", "shape", "dtype", "calls", "kernel time ms", "mean us", "GFLOP per call",
                    "MB per call", "FLOP/byte", "TFLOP/s", "TB/s", "peak TFLOP/s", "% of peak FLOP/s",
                    "% of peak TB/s", "bound", "% of roofline"]


@dataclass(frozen=True)
class OpWork:
    family: str  # GEMM, CONV, SDPA, elementwise, NORM, reduction, grouped GEMM, MoE, MoE comm, RoPE, cross-entropy,
    # SSM (and gated-delta linear attention), causal conv1d, quantize, KV cache, MoE routing, mHC, Inductor Triton
    flops: float
    bytes: float
    shape: str
    dtype: str
    precision: str | None  # key into a device's peak table, None when the dtype has none


def bytes_per_element(dtype: str) -> int | None:
    return _BYTES.get(dtype.lower())


def precision_of(dtype: str) -> str | None:
    d = dtype.lower()
    return "fp8" if "float8" in d else "fp4" if "float4" in d else _PRECISION.get(d)


def _tensor(dims: Any) -> tuple[int, ...] | None:
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


def conv_arg(op: str, key: str, values: Sequence[Any], default: Any) -> Any:
    """A conv op's argument ``key`` (stride, padding, dilation, transposed, output_padding, groups) from its
    positional argument values (None where not recorded), or ``default`` when the op has no such argument."""
    at = _CONV_LAYOUT[op].get(key)
    return default if at is None or at >= len(values) or values[at] is None else values[at]


def _arg(shape: OpShape, i: int, default: Any = None) -> Any:
    return parse_concrete(shape.concrete[i]) if i < len(shape.concrete) and shape.concrete[i] != "" else default


def _numel(t: Sequence[int]) -> int:
    return math.prod(t)


def op_work(name: str, shape: OpShape, step: StepSums | str | None = None) -> OpWork | None:
    """FLOPs and bytes of one op call, or None when the op has no model or its shapes are not usable. ``step``:
    the sums of the serving step around the call (:mod:`analysis.traces.analyses.serving_steps`), which attention over a
    KV cache (:data:`KV_ATTENTION_OPS`) needs; a text (why there are none) or None leaves such an op unpriced."""
    kv = KV_ATTENTION_OPS.get(name)
    try:
        if kv is not None:
            return kv(shape, step) if isinstance(step, StepSums) else None
        model = _model_of(name)
        return None if model is None else model(name, shape)
    except (IndexError, TypeError, ValueError, ZeroDivisionError):
        return None  # a shape list that does not fit the op's schema: the op stays in the tables, unpriced


def _model_of(name: str) -> Callable[[str, OpShape], OpWork | None] | None:
    """The model that prices op ``name`` (:data:`_MODELS`), None when no family has one."""
    return next((model for ops, model in _MODELS if name in ops), None)


def _work(family: str, flops: float, elements: float, dtype: str, shape_text: str) -> OpWork | None:
    bpe = bytes_per_element(dtype)
    if bpe is None:
        return None
    return OpWork(family, float(flops), float(elements) * bpe, shape_text, dtype, precision_of(dtype))


def _gemm(name: str, shape: OpShape) -> OpWork | None:
    dims, types = shape.dims, shape.types
    bias: tuple[int, ...] | None = None
    if name in ("aten::addmm", "aten::_addmm_activation", "aten::baddbmm"):  # (bias, A, B, beta, alpha)
        bias, a, b, dtype = _tensor(dims[0]), _tensor(dims[1]), _tensor(dims[2]), types[1]
    elif name == "aten::linear":  # (input [..., K], weight [N, K], bias [N])
        x, w = _tensor(dims[0]), _tensor(dims[1])
        if x is None or w is None or len(w) != 2:
            return None
        bias = _tensor(dims[2]) if len(dims) > 2 else None
        a, b, dtype = (math.prod(x[:-1]), x[-1]), (w[1], w[0]), types[0]
    else:  # mm, bmm, matmul, _scaled_mm: (A, B, ...)
        a, b, dtype = _tensor(dims[0]), _tensor(dims[1]), types[0]
    if a is None or b is None or len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    m, k, n = a[-2], a[-1], b[-1]
    batch = max(math.prod(a[:-2]), math.prod(b[:-2]))
    flops = 2 * batch * m * n * k
    elements = _numel(a) + _numel(b) + batch * m * n + (_numel(bias) if bias else 0)
    text = f"M={m} N={n} K={k}" + (f" B={batch}" if batch > 1 else "")
    return _work(GEMM, flops, elements, dtype, text)


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
    x, w = _tensor(shape.dims[first]), _tensor(shape.dims[first + 1])
    if x is None or w is None or len(x) < 3 or len(x) != len(w):
        return None
    spatial = len(x) - 2

    def ints(key: str, default: int) -> list[int]:
        value = _arg(shape, layout[key], [default]) if key in layout else [default]
        value = value if isinstance(value, list) else [value]
        return (value * spatial)[:spatial] if len(value) == 1 else value

    stride, padding, dilation = ints("stride", 1), ints("padding", 0), ints("dilation", 1)
    transposed = bool(_arg(shape, layout["transposed"], False)) if "transposed" in layout else False
    groups = int(_arg(shape, layout["groups"], 1)) if "groups" in layout else 1
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
    flops = 2 * (_numel(x) if transposed else _numel(y)) * _numel(w[1:])
    has_bias = "bias" in layout and bool(_tensor(shape.dims[layout["bias"]]) if layout["bias"] < len(shape.dims)
                                         else False)
    elements = _numel(x) + _numel(w) + _numel(y) + (out_channels if has_bias else 0)
    if name == "aten::convolution_backward":
        # The input and weight gradients each cost one forward conv; output_mask says which were computed.
        mask = _arg(shape, layout["output_mask"], [True, True, True])
        grads = [bool(m) for m in mask[:2]] if isinstance(mask, list) else [True, True]
        flops *= sum(grads)
        elements = _numel(y) + _numel(x) + _numel(w) + grads[0] * _numel(x) + grads[1] * _numel(w)
    text = f"x={list(x)} w={list(w)} stride={stride} pad={padding} groups={groups}"
    return _work(CONV, flops, elements, shape.types[first], text)


def _sdpa(op: _Attention, shape: OpShape) -> OpWork | None:
    dims = shape.dims
    q, k, v = _tensor(dims[op.q_at]), _tensor(dims[op.q_at + 1]), _tensor(dims[op.q_at + 2])
    if q is None or k is None or v is None or not len(q) == len(k) == len(v) == 4:
        return None
    if op.bnhd:
        b, n_q, h_q, d_qk = q
        n_kv, h_kv, d_v = k[1], k[2], v[3]
    else:
        b, h_q, n_q, d_qk = q
        h_kv, n_kv, d_v = k[1], k[2], v[3]
    causal_arg = _arg(shape, op.causal_at, 0 if op.causal_is_mask_type else False)
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
    return _work(SDPA, flops, elements, shape.types[op.q_at], text)


def _elementwise(shape: OpShape) -> OpWork | None:
    tensors = [(t, dt) for t, dt in zip(map(_tensor, shape.dims), shape.types, strict=False)
               if t is not None and bytes_per_element(dt) is not None]
    if not tensors:
        return None
    out_shape = np.broadcast_shapes(*(t for t, _ in tensors))
    out_elems = _numel(out_shape)
    widest = max((dt for _, dt in tensors), key=lambda dt: bytes_per_element(dt) or 0)
    in_bytes = sum(_numel(t) * (bytes_per_element(dt) or 0) for t, dt in tensors)
    bpe = bytes_per_element(widest) or 0
    return OpWork(ELEMENTWISE, float(out_elems), float(in_bytes + out_elems * bpe), f"{list(out_shape)}",
                  widest, precision_of(widest))


def _norm(shape: OpShape) -> OpWork | None:
    """Input read, output written, and the weight and bias vectors (when given) read once."""
    x = _tensor(shape.dims[0])
    if x is None:
        return None
    params = sum(_numel(t) for t in map(_tensor, shape.dims[1:]) if t is not None)
    return _work(NORM, 5 * _numel(x), 2 * _numel(x) + params, shape.types[0], f"{list(x)}")


def _reduce(name: str, shape: OpShape) -> OpWork | None:
    """Input read once, output written once; the output's size from the reduced dims (all when none given: an
    overload without dims, e.g. ``aten::norm(self, p)``, or a dims argument that is not an int or an int list, e.g.
    ``aten::std(self, unbiased)``'s flag). One FLOP per input element. ``aten::linalg_norm`` over two dims with
    ``ord`` 2, -2 or 'nuc' is a matrix norm computed from singular values, which this count does not describe:
    unpriced."""
    x = _tensor(shape.dims[0])
    if x is None:
        return None
    dims_at = _NORM_DIM_AT.get(name, 1)
    dims = _arg(shape, dims_at, None) if dims_at < len(shape.types) and shape.types[dims_at] in (
        "Scalar", "ScalarList") else None
    listed = dims if isinstance(dims, list) else [dims] if dims is not None else []
    if not all(type(d) is int for d in listed):
        listed = []
    reduced = sorted({d % len(x) for d in listed}) if x else []
    if name == "aten::linalg_norm" and _arg(shape, 1, None) in (2, -2, 2.0, -2.0, "nuc") \
            and (len(reduced) == 2 or (not reduced and len(x) == 2)):
        return None
    out = _numel([n for i, n in enumerate(x) if i not in reduced]) if reduced else 1
    return _work(REDUCTION, _numel(x), _numel(x) + out, shape.types[0], f"{list(x)} over {reduced or 'all'}")


def _scan(shape: OpShape) -> OpWork | None:
    """A running sum or product along one dim (``aten::cumsum``/``cumprod``): one FLOP per element, the input read
    and an output of the same size written, both at the input's width."""
    x = _tensor(shape.dims[0])
    if x is None:
        return None
    return _work(REDUCTION, _numel(x), 2 * _numel(x), shape.types[0], f"{list(x)} scan over dim {_arg(shape, 1)}")


def _priced(family: str, flops: float, nbytes: float, dtype: str, shape_text: str) -> OpWork:
    return OpWork(family, float(flops), float(nbytes), shape_text, dtype, precision_of(dtype))


def _bpe(types: Sequence[str], i: int) -> int:
    """Bytes per element of argument ``i``; a dtype with no width known makes the op unpriced (ValueError)."""
    bpe = bytes_per_element(types[i]) if i < len(types) else None
    if bpe is None:
        raise ValueError(f"no element width for argument {i}")
    return bpe


def _shape_list(value: Any) -> list[tuple[int, ...]] | None:
    """A list of 2-D shapes (Primus-Turbo's per-group operands: [[M₁, K], [M₂, K], …]), or None."""
    if not isinstance(value, list) or not value:
        return None
    shapes = [_tensor(v) for v in value]
    return [s for s in shapes if s is not None] if all(s is not None and len(s) == 2 for s in shapes) else None


def _grouped_gemm(name: str, shape: OpShape) -> OpWork | None:
    """One GEMM per group. ``aten::_grouped_mm(A, B, offs, bias, out_dtype)`` comes in four layouts (torch 2.13,
    checked by running it): A [M, K] × B [G, K, N] (offs cut M), [G, M, K] × [G, K, N] (batched),
    [M, K] × [K, N] (offs cut K; output [G, M, N]), [G, M, K] × [K, N] (offs cut N; output [M, N]).
    Primus-Turbo writes B as [G, K, N] or [G, N, K], or both operands as per-group lists of 2-D shapes."""
    dims, types = shape.dims, shape.types
    bpe_a, bpe_b = _bpe(types, 0), _bpe(types, 1)
    # _scaled_grouped_mm takes FP8 operands and writes bfloat16 (the only out_dtype it accepts).
    bpe_out = 2 if name == "aten::_scaled_grouped_mm" else bpe_a
    a, b = _tensor(dims[0]), _tensor(dims[1])
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
        offs = _tensor(dims[offs_at]) if len(dims) > offs_at else None
        (m, k), n, groups = a, b[1], offs[0] if offs else 1
        flops, a_elems, b_elems, out_elems = 2 * m * k * n, m * k, k * n, groups * m * n
    elif a is not None and b is not None and len(a) == 3 and len(b) == 2 and a[2] == b[0]:  # jagged N
        groups, m, k = a
        n = b[1]
        flops, a_elems, b_elems, out_elems = 2 * m * k * n, groups * m * k, k * n, m * n
    else:
        lhs, rhs = _shape_list(dims[0]), _shape_list(dims[1])
        if lhs is None or rhs is None or len(lhs) != len(rhs) or any(x[1] != w[0] for x, w in zip(lhs, rhs,
                                                                                                   strict=True)):
            return None
        groups, m, k, n = len(lhs), sum(x[0] for x in lhs), lhs[0][1], rhs[0][1]
        flops = sum(2 * x[0] * x[1] * w[1] for x, w in zip(lhs, rhs, strict=True))
        a_elems, b_elems, out_elems = sum(map(_numel, lhs)), sum(map(_numel, rhs)), \
            sum(x[0] * w[1] for x, w in zip(lhs, rhs, strict=True))
    nbytes = a_elems * bpe_a + b_elems * bpe_b + out_elems * bpe_out
    return _priced(GROUPED_GEMM, flops, nbytes, types[0], f"G={groups} M={m} N={n} K={k}")


def _experts_hit(experts: int, topk: int, tokens: int) -> float:
    """Expected distinct experts ``tokens`` tokens reach, each routed to ``topk`` of ``experts`` uniformly."""
    return experts * (1 - ((experts - topk) / experts) ** tokens)


def _fused_moe(shape: OpShape) -> OpWork | None:
    """(hidden [M, K], w1 [E, N or 2·N gated, K], w2 [E, K, N], topk_weights [M, topk], ...)."""
    x, w1, w2, topk_w = (_tensor(d) for d in shape.dims[:4])
    if x is None or w1 is None or w2 is None or topk_w is None or len(w1) != 3 or len(w2) != 3:
        return None
    (m, k), (experts, up, _), n, topk = x, w1, w2[2], topk_w[1]
    if w1[2] != k or w2[1] != k:  # packed (INT4) weights: their logical width is not in the shapes
        return None
    gated = up == 2 * n
    flops = 2 * m * k * n * topk * (3 if gated else 2) + m * k * (2 * topk - 1)
    weights = _experts_hit(experts, topk, m) * n * k * (3 if gated else 2)
    nbytes = 2 * m * k * _bpe(shape.types, 0) + weights * _bpe(shape.types, 1)
    return _priced(MOE, flops, nbytes, shape.types[0],
                   f"M={m} K={k} N={n} E={experts} topk={topk}" + (" gated" if gated else ""))


def _moe_gemm(shape: OpShape) -> OpWork | None:
    """SGLang's ``invoke_fused_moe_kernel(A, B [E, N, K], C, …, topk_ids [tokens, topk] (9th), …)``: the
    gathered rows of A, one per (token, expert), times their expert's weight."""
    b, topk_ids = _tensor(shape.dims[1]), _tensor(shape.dims[8])
    if b is None or topk_ids is None or len(b) != 3 or len(topk_ids) != 2:
        return None
    (experts, n, k), (tokens, topk) = b, topk_ids
    rows = tokens * topk
    out_bpe = _bpe(shape.types, 3) if len(shape.types) > 3 and shape.types[3] else _bpe(shape.types, 0)
    nbytes = rows * k * _bpe(shape.types, 0) + _experts_hit(experts, topk, tokens) * n * k * _bpe(shape.types, 1) \
        + rows * n * out_bpe
    text = f"tokens={tokens} topk={topk} N={n} K={k} E={experts}"
    return _priced(MOE, 2 * rows * n * k, nbytes, shape.types[1], text)


def _logical_width(width: int, dtype: str) -> int:
    """Values along a packed dimension: two per byte for packed FP4."""
    return 2 * width if "float4" in dtype.lower() else width


def _expert_bytes(weights: tuple[int, ...], bpe: int, experts_hit: float) -> float:
    """The stored bytes of the experts a batch reaches, of a weight tensor [E, ...]."""
    return experts_hit * _numel(weights[1:]) * bpe


def _aiter_fused_moe(shape: OpShape) -> OpWork | None:
    """The fused MoE's formula (:func:`_fused_moe`) on AITER's direct call, whose hidden width K comes from w2
    [E, K, N] (x and w1 may be stored packed) and whose N is w2's last width unpacked by the same factor."""
    out, x, w1, w2 = (_tensor(d) for d in shape.dims[:4])
    if out is None or x is None or w1 is None or w2 is None or len(w1) != 3 or len(w2) != 3 or len(out) != 2:
        return None
    topk, (experts, up, k_stored), (m, k) = int(_arg(shape, 8)), w1, out
    n = w2[2] * (w2[1] // k_stored)
    gated = up == 2 * n
    if not gated and up != n:
        return None
    hit = _experts_hit(experts, topk, m)
    flops = 2 * m * k * n * topk * (3 if gated else 2) + m * k * (2 * topk - 1)
    nbytes = _numel(x) * _bpe(shape.types, 1) + _numel(out) * _bpe(shape.types, 0) \
        + _expert_bytes(w1, _bpe(shape.types, 2), hit) + _expert_bytes(w2, _bpe(shape.types, 3), hit)
    return _priced(MOE, flops, nbytes, shape.types[1],
                   f"M={m} K={k} N={n} E={experts} topk={topk}" + (" gated" if gated else ""))


def _moe_up(x_at: int, w_at: int, out_at: int, shape: OpShape) -> OpWork | None:
    """Each token times the up (and, gated, gate) projection of each of its top-k experts: x [T, K] · w1
    [E, N or 2·N, K] → [T, topk, N], 2·T·topk·N·K FLOPs (×2 gated); bytes x read, the weights of the experts
    expected to be hit under uniform routing (:func:`_experts_hit`) read as stored, the output written."""
    x, w, out = _tensor(shape.dims[x_at]), _tensor(shape.dims[w_at]), _tensor(shape.dims[out_at])
    if x is None or w is None or out is None or len(x) != 2 or len(w) != 3 or len(out) != 3:
        return None
    (t, k_stored), (experts, up, _), (_, topk, n) = x, w, out
    k = _logical_width(k_stored, shape.types[x_at])
    gated = up == 2 * n
    if not gated and up != n:
        return None
    hit = _experts_hit(experts, topk, t)
    nbytes = _numel(x) * _bpe(shape.types, x_at) + _expert_bytes(w, _bpe(shape.types, w_at), hit) \
        + _numel(out) * _bpe(shape.types, out_at)
    return _priced(MOE, 2 * t * topk * n * k * (2 if gated else 1), nbytes, shape.types[x_at],
                   f"up T={t} K={k} N={n} E={experts} topk={topk}" + (" gated" if gated else ""))


def _moe_down(inter_at: int, w_at: int, out_at: int, shape: OpShape) -> OpWork | None:
    """Each (token, expert) row of the up stage's output times that expert's down projection, summed per token:
    [T, topk, N] · w2 [E, K, N] → [T, K], 2·T·topk·N·K FLOPs; bytes as :func:`_moe_up`."""
    inter, w, out = _tensor(shape.dims[inter_at]), _tensor(shape.dims[w_at]), _tensor(shape.dims[out_at])
    if inter is None or w is None or out is None or len(inter) != 3 or len(w) != 3 or len(out) != 2:
        return None
    (t, topk, n_stored), (experts, k, _) = inter, w
    n = _logical_width(n_stored, shape.types[inter_at])
    hit = _experts_hit(experts, topk, t)
    nbytes = _numel(inter) * _bpe(shape.types, inter_at) + _expert_bytes(w, _bpe(shape.types, w_at), hit) \
        + _numel(out) * _bpe(shape.types, out_at)
    return _priced(MOE, 2 * t * topk * n * k, nbytes, shape.types[inter_at],
                   f"down T={t} N={n} K={k} E={experts} topk={topk}")


def _moe_routing(shape: OpShape) -> OpWork | None:
    """Bookkeeping over the router's logits and the token-to-expert lists: every recorded tensor read or written
    once; one FLOP per element of the largest (a compare or a move each)."""
    tensors = [(t, i) for i, d in enumerate(shape.dims) if (t := _tensor(d)) is not None
               and bytes_per_element(shape.types[i] if i < len(shape.types) else "")]
    if not tensors:
        return None
    largest, at = max(tensors, key=lambda ti: _numel(ti[0]))
    nbytes = sum(_numel(t) * _bpe(shape.types, i) for t, i in tensors)
    return _priced(MOE_ROUTING, _numel(largest), nbytes, shape.types[at], f"{[list(t) for t, _ in tensors]}")


def _moe_comm(shape: OpShape) -> OpWork | None:
    """Tokens [T, hidden] sent to (or gathered from) the expert ranks: traffic only."""
    tokens = _tensor(shape.dims[0])
    if tokens is None or len(tokens) != 2:
        return None
    return _priced(MOE_COMM, 0, _numel(tokens) * _bpe(shape.types, 0), shape.types[0], f"tokens={list(tokens)}")


def _rope(shape: OpShape) -> OpWork | None:
    """Input [s, b, h, d] rotated pairwise (4 multiplies, 2 adds per pair) and written."""
    x = _tensor(shape.dims[0])
    if x is None or len(x) != 4:
        return None
    return _work(ROPE, 3 * _numel(x), 2 * _numel(x), shape.types[0], f"{list(x)}")


def _cross_entropy(shape: OpShape) -> OpWork | None:
    """Logits [..., V] and one target per row read; one float32 loss per row written."""
    logits = _tensor(shape.dims[0])
    if logits is None or not logits or logits[-1] == 0:
        return None
    rows = _numel(logits) // logits[-1]
    target_bpe = bytes_per_element(shape.types[1]) if len(shape.types) > 1 else None
    nbytes = _numel(logits) * _bpe(shape.types, 0) + rows * (target_bpe or 8) + rows * 4
    return _priced(CROSS_ENTROPY, 5 * _numel(logits), nbytes, shape.types[0], f"rows={rows} V={logits[-1]}")


def _scaled_gemm(op: _ScaledGemm, shape: OpShape) -> OpWork | None:
    """C [M, N] = A · B from FP8 or packed FP4 operands with their scales. The flags say which operand is stored
    transposed; transC asks for Cᵀ, which the library computes as Bᵀ·Aᵀ (the operands swap and both flags flip).
    A packed FP4 operand holds two values per byte, so its recorded K is half the product's. Bytes: A and B as
    stored, the scale tensors as recorded (a per-tensor scale records no shape and counts nothing; MXFP4 has one
    E8M0 byte per 32 values), C written in 16 bits (the bindings take BF16 or FP16 outputs only)."""
    a, b = _tensor(shape.dims[op.a_at]), _tensor(shape.dims[op.b_at])
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    if op.trans_at is None:
        trans_a, trans_b, trans_c = False, True, False
    else:
        trans_a, trans_b, trans_c = (bool(_arg(shape, op.trans_at + i, False)) for i in range(3))
    if trans_c:
        a, b, trans_a, trans_b = b, a, not trans_b, not trans_a
    (m, k_stored), (k_b, n) = (a[::-1] if trans_a else a), (b[::-1] if trans_b else b)
    if k_stored != k_b:
        return None
    k = 2 * k_stored if op.fp4 else k_stored
    scales = sum(_numel(t) * _bpe(shape.types, i) for i in op.scales_at
                 if (t := _tensor(shape.dims[i]) if i < len(shape.dims) else None) is not None)
    nbytes = m * k_stored * _bpe(shape.types, op.a_at) + n * k_stored * _bpe(shape.types, op.b_at) + scales \
        + 2 * m * n
    return _priced(GEMM, 2 * m * n * k, nbytes, shape.types[op.a_at], f"M={m} N={n} K={k}")


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
    q, k, v = (_tensor(dims[op.q_at + i]) for i in range(3))
    cu_q, cu_k = _tensor(dims[op.cu_q_at]), _tensor(dims[op.cu_k_at])
    if q is None or k is None or v is None or cu_q is None or cu_k is None or len(q) != 3 or len(k) not in (3, 4):
        return None
    (t_q, h_q, d_qk), (h_kv, d_v) = q, (k[-2], v[-1])
    if op.page_indices_at is None:
        t_k = k[0]
    else:
        pages = _tensor(dims[op.page_indices_at])
        if pages is None:
            return None
        t_k = pages[0] * (k[1] if len(k) == 4 else 1)
    count = cu_q[0] - 1
    causal = bool(_arg(shape, op.causal_at, False))
    longest_q, other_q = _lengths(count, t_q, int(_arg(shape, op.max_q_at)))
    longest_k, other_k = _lengths(count, t_k, int(_arg(shape, op.max_k_at)))
    pairs = _pairs(longest_q, longest_k, causal) + (count - 1) * _pairs(other_q, other_k, causal)
    bpe_q, bpe_kv = _bpe(shape.types, op.q_at), _bpe(shape.types, op.q_at + 1)
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
    return _priced(SDPA, flops, nbytes, shape.types[op.q_at], text)


def _causal_conv1d(shape: OpShape) -> OpWork | None:
    """Depthwise causal conv of x [B, C, L] with w [C, K] (+ bias [C]): each output element a K-tap multiply-add,
    2·B·C·L·K FLOPs; x read, y written, w and the bias read."""
    x, w = _tensor(shape.dims[0]), _tensor(shape.dims[1])
    if x is None or w is None or len(x) != 3 or len(w) != 2 or w[0] != x[1]:
        return None
    bias = _tensor(shape.dims[2]) if len(shape.dims) > 2 else None
    (b, c, length), taps = x, w[1]
    nbytes = 2 * _numel(x) * _bpe(shape.types, 0) + _numel(w) * _bpe(shape.types, 1) \
        + (c * _bpe(shape.types, 2) if bias else 0)
    return _priced(CAUSAL_CONV1D, 2 * b * c * length * taps, nbytes, shape.types[0],
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
    zxbcdt, conv_w, heads_shape = _tensor(shape.dims[0]), _tensor(shape.dims[1]), _tensor(shape.dims[3])
    if zxbcdt is None or conv_w is None or heads_shape is None or len(zxbcdt) != 3 or len(conv_w) != 2:
        return None
    (b, t, width), (channels, d_conv), heads = zxbcdt, conv_w, heads_shape[0]
    chunk, groups = int(_arg(shape, _SSD_CHUNK_AT)), int(_arg(shape, _SSD_NGROUPS_AT, 1))
    d_inner = width - channels - heads
    state_width = channels - d_inner  # 2·G·N
    head_dim = _arg(shape, _SSD_HEADDIM_AT, d_inner // heads if heads else 0)
    if heads <= 0 or d_inner <= 0 or head_dim * heads != d_inner or state_width <= 0 \
            or state_width % (2 * groups):
        return None
    n = state_width // (2 * groups)
    flops = 2 * b * channels * t * d_conv + 2 * b * t * chunk * (groups * n + d_inner) + 2 * 2 * b * t * n * d_inner
    params = sum(_numel(p) * _bpe(shape.types, i) for i in range(2, 6)
                 if (p := _tensor(shape.dims[i])) is not None)
    bpe = _bpe(shape.types, 0)
    nbytes = _numel(zxbcdt) * bpe + _numel(conv_w) * _bpe(shape.types, 1) + params + b * t * d_inner * bpe
    return _priced(SSM, flops, nbytes, shape.types[0],
                   f"B={b} T={t} H={heads} P={head_dim} G={groups} N={n} chunk={chunk}")


def _quantize_fp8(input_at: int, flops_per_element: int, shape: OpShape) -> OpWork | None:
    """A per-tensor cast to FP8: the input read, one byte per element written, ``flops_per_element`` each."""
    x = _tensor(shape.dims[input_at])
    if x is None:
        return None
    elements = _numel(x)
    return _priced(QUANTIZE, flops_per_element * elements, elements * (_bpe(shape.types, input_at) + 1),
                   shape.types[input_at], f"{list(x)} → fp8")


MXFP4_BLOCK = 32  # values sharing one E8M0 scale


def _quantize_mxfp4(input_at: int, directions: int, shape: OpShape) -> OpWork | None:
    """x [M, N] cast to MXFP4 along rows (and, for the dual casts, again along columns: the NT GEMM's A and the
    weight gradient's copy): x read once; per direction a packed copy (half a byte per value) and its scales (one
    byte per 32 values: M·⌈N/32⌉ along rows, N·⌈M/32⌉ along columns) written. Per element and direction a block
    max and a scale multiply: 2 FLOPs."""
    x = _tensor(shape.dims[input_at])
    if x is None or len(x) < 2:
        return None
    m, n = _numel(x[:-1]), x[-1]
    scales = m * -(-n // MXFP4_BLOCK) + (n * -(-m // MXFP4_BLOCK) if directions == 2 else 0)
    nbytes = m * n * _bpe(shape.types, input_at) + directions * -(-(m * n) // 2) + scales
    text = f"M={m} N={n} → mxfp4" + (" rows and columns" if directions == 2 else "")
    return _priced(QUANTIZE, 2 * directions * m * n, nbytes, shape.types[input_at], text)


def _dynamic_quant(shape: OpShape) -> OpWork | None:
    """(out, input, scales): each value's group max found and the value scaled, 2 FLOPs per element; the input read,
    the low-precision output and the scales written, each at its dtype."""
    out, x, scales = (_tensor(shape.dims[i]) for i in range(3))
    if out is None or x is None or _numel(out) != _numel(x):
        return None
    nbytes = _numel(x) * _bpe(shape.types, 1) + _numel(out) * _bpe(shape.types, 0) \
        + (_numel(scales) * _bpe(shape.types, 2) if scales else 0)
    return _priced(QUANTIZE, 2 * _numel(x), nbytes, shape.types[1], f"{list(x)} → {shape.types[0]}")


def _group_quant_fp8(shape: OpShape) -> OpWork | None:
    """x [..., N] in groups of ``group_size`` along N: 2 FLOPs per element (group max, scale); x read, one FP8 byte
    per value and a float32 scale per group written."""
    x = _tensor(shape.dims[0])
    group = int(_arg(shape, 1))
    if x is None or group <= 0:
        return None
    rows, n = _numel(x[:-1]), x[-1]
    nbytes = _numel(x) * (_bpe(shape.types, 0) + 1) + rows * -(-n // group) * 4
    return _priced(QUANTIZE, 2 * _numel(x), nbytes, shape.types[0], f"{list(x)} groups of {group} → fp8")


def _gated_activation(shape: OpShape) -> OpWork | None:
    """(out [..., N], input [..., 2·N]): out = act(input[..., :N]) · input[..., N:], an activation and a product per
    output element (2 FLOPs); the input read, the output written."""
    out, x = _tensor(shape.dims[0]), _tensor(shape.dims[1])
    if out is None or x is None or x[-1] != 2 * out[-1] or x[:-1] != out[:-1]:
        return None
    return _priced(ELEMENTWISE, 2 * _numel(out), _numel(x) * _bpe(shape.types, 1) + _numel(out) *
                   _bpe(shape.types, 0), shape.types[1], f"{list(x)} → {list(out)}")


def _rms_norm(op: _RmsNorm, shape: OpShape) -> OpWork | None:
    """The normalizations' convention (5 FLOPs per element), plus the residual add when fused (1 more); bytes the
    input read and the output written (with a residual: input and residual read, output and the updated residual
    written), and the weight read once."""
    x, w = _tensor(shape.dims[op.x_at]), _tensor(shape.dims[op.weight_at])
    if x is None:
        return None
    elements = _numel(x)
    tensors = 4 if op.residual else 2
    nbytes = tensors * elements * _bpe(shape.types, op.x_at) + (_numel(w) * _bpe(shape.types, op.weight_at) if w
                                                                 else 0)
    return _priced(NORM, (6 if op.residual else 5) * elements, nbytes, shape.types[op.x_at],
                   f"{list(x)}" + (" + residual" if op.residual else ""))


def _rms_norm_quant(op: _RmsNormQuant, shape: OpShape) -> OpWork | None:
    """The RMS norm's convention (5 FLOPs per element, +1 for a residual add) plus the cast's group max and scale (2);
    bytes the input and the weight read (with a residual: the residual read and the sum written at the input's
    width), the FP8 output written (one byte per value) and the float32 scales."""
    x, w = _tensor(shape.dims[op.x_at]), _tensor(shape.dims[op.weight_at])
    if x is None or w is None:
        return None
    elements, rows, bpe = _numel(x), _numel(x[:-1]), _bpe(shape.types, op.x_at)
    out_bytes = _numel(_tensor(shape.dims[op.out_at]) or ()) * _bpe(shape.types, op.out_at) \
        if op.out_at is not None else elements
    if op.group_at is not None:
        scale_bytes = rows * -(-x[-1] // int(_arg(shape, op.group_at))) * 4
    else:
        scales = _tensor(shape.dims[op.scales_at]) if op.scales_at is not None else None
        scale_bytes = _numel(scales) * _bpe(shape.types, op.scales_at) if scales and op.scales_at is not None else 0
    nbytes = elements * bpe * (3 if op.residual else 1) + _numel(w) * _bpe(shape.types, op.weight_at) + out_bytes \
        + scale_bytes
    return _priced(NORM, (8 if op.residual else 7) * elements, nbytes, shape.types[op.x_at],
                   f"{list(x)}" + (" + residual" if op.residual else "") + " → fp8")


def _rotary_embedding(shape: OpShape) -> OpWork | None:
    """Query and key rotated in place, the first ``rotary_dim`` (the cache's width) of each head of head_size:
    3 FLOPs per rotated element (the RoPE convention); the rotated elements read and written, and per token its
    position (int64) and its cos/sin row of the cache read."""
    positions, q, k, cache = (_tensor(shape.dims[i]) for i in (0, 1, 2, 4))
    head_size = int(_arg(shape, 3))
    if positions is None or q is None or cache is None or len(cache) != 2 or head_size <= 0:
        return None
    tokens, rotary_dim = _numel(positions), cache[1]
    heads = (_numel(q) + (_numel(k) if k else 0)) // tokens // head_size
    rotated = tokens * heads * rotary_dim
    nbytes = 2 * rotated * _bpe(shape.types, 1) + tokens * (_bpe(shape.types, 0) + rotary_dim * _bpe(shape.types, 4))
    return _priced(ROPE, 3 * rotated, nbytes, shape.types[1], f"tokens={tokens} heads={heads} rotary_dim={rotary_dim}")


def _rope_2c(shape: OpShape) -> OpWork | None:
    """Query (x) and key (y) rotated whole, 3 FLOPs per element (the RoPE convention); x and y read, the outputs
    written, and per token its int64 position and its cos and sin rows read."""
    x, y, cos, positions = (_tensor(shape.dims[i]) for i in (2, 3, 4, 6))
    if x is None or y is None or cos is None or positions is None:
        return None
    elements, tokens = _numel(x) + _numel(y), _numel(positions)
    nbytes = 2 * elements * _bpe(shape.types, 2) + tokens * (_bpe(shape.types, 6) + 2 * cos[-1] * _bpe(shape.types, 4))
    return _priced(ROPE, 3 * elements, nbytes, shape.types[2], f"x={list(x)} y={list(y)}")


def _kv_cache_write(shape: OpShape) -> OpWork | None:
    """(key, value, key_cache, value_cache, slots [T], ...): the new tokens' K and V read and written into the cache
    at the cache's width, and their slot indices read. A cache narrower than K (an FP8 cache) means a scale per
    element: 1 FLOP each; a plain copy does none."""
    key, value, slots = _tensor(shape.dims[0]), _tensor(shape.dims[1]), _tensor(shape.dims[4])
    if key is None or value is None or slots is None:
        return None
    elements = _numel(key) + _numel(value)
    bpe_in, bpe_cache = _bpe(shape.types, 0), _bpe(shape.types, 2)
    nbytes = elements * (bpe_in + bpe_cache) + _numel(slots) * _bpe(shape.types, 4)
    return _priced(KV_CACHE, elements if bpe_cache < bpe_in else 0, nbytes, shape.types[0],
                   f"tokens={slots[0]} K={list(key)} V={list(value)}")


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
    sizes = [v for v in (_arg(shape, i) for i, t in enumerate(shape.types) if t == "Scalar") if type(v) is int]
    reduction = not name.startswith("triton_poi_")
    if len(sizes) < (2 if reduction else 1):
        return None
    xnumel, rnumel = (sizes[-2], sizes[-1]) if reduction else (sizes[-1], 1)
    tensors = [(t, i) for i, d in enumerate(shape.dims) if (t := _tensor(d)) is not None]
    if not tensors:
        return None
    arithmetic = sum(op in _ARITHMETIC for op in fused_ops(name))
    nbytes = sum(_numel(t) * _bpe(shape.types, i) for t, i in tensors)
    text = f"xnumel={xnumel}" + (f" rnumel={rnumel}" if reduction else "")
    return _priced(INDUCTOR_TRITON, arithmetic * xnumel * rnumel, nbytes, shape.types[tensors[0][1]], text)


def _norm_backward(weight_at: int, param_grads: int, shape: OpShape) -> OpWork | None:
    """dx from grad_out and input: x̂ recomputed, the two sums per row (or channel) and dx, with the weight and bias
    gradients, 10 FLOPs per element (twice the forward's convention). Bytes: every recorded tensor read once
    (grad_out, input, the saved statistics, the weight), dx written, and the parameter gradients written when a
    weight is given."""
    tensors = [(t, i) for i, d in enumerate(shape.dims) if (t := _tensor(d)) is not None]
    if len(tensors) < 2 or tensors[0][0] != tensors[1][0]:
        return None
    x, x_at = tensors[0]
    weight = _tensor(shape.dims[weight_at]) if weight_at < len(shape.dims) else None
    nbytes = sum(_numel(t) * _bpe(shape.types, i) for t, i in tensors) + _numel(x) * _bpe(shape.types, x_at) \
        + (param_grads * _numel(weight) * _bpe(shape.types, weight_at) if weight else 0)
    return _priced(NORM, 10 * _numel(x), nbytes, shape.types[x_at], f"{list(x)} backward")


def _grouped_gemm_variable_k(name: str, shape: OpShape) -> OpWork | None:
    """Per-group lists as :func:`_grouped_gemm` reads them; the compact form X [M, K], dY [M, N] (M cut into the
    groups) is Σ 2·mᵢ·K·N = 2·M·K·N FLOPs, X and dY read and the groups' [K, N] results written, counted once
    since the compact form does not record how many groups there are (a lower bound)."""
    a, b = _tensor(shape.dims[0]), _tensor(shape.dims[1])
    if a is None or b is None:
        return _grouped_gemm(name, shape)
    if len(a) != 2 or len(b) != 2 or a[0] != b[0]:
        return None
    (m, k), n = a, b[1]
    bpe_in = _bpe(shape.types, 0)
    bpe_out = bytes_per_element(shape.types[1]) or bpe_in
    return _priced(GROUPED_GEMM, 2 * m * k * n, m * (k + n) * bpe_in + k * n * bpe_out, shape.types[0],
                   f"M={m} N={n} K={k} variable K")


def _dynamic_quant_gemm(shape: OpShape) -> OpWork | None:
    """x [M, K] (16-bit, cast to MXFP4 inside the op) times the packed FP4 weight [N, K/2]: 2·M·N·K FLOPs at the
    weight's precision; bytes x and the stored weight read, y [M, N] written at x's width."""
    x, w = _tensor(shape.dims[0]), _tensor(shape.dims[1])
    if x is None or w is None or len(x) != 2 or len(w) != 2 or _logical_width(w[1], shape.types[1]) != x[1]:
        return None
    (m, k), n, bpe_x = x, w[0], _bpe(shape.types, 0)
    nbytes = m * k * bpe_x + _numel(w) * _bpe(shape.types, 1) + m * n * bpe_x
    return _priced(GEMM, 2 * m * n * k, nbytes, shape.types[1], f"M={m} N={n} K={k}")


def _batched_gemm(fp4_weight: bool, shape: OpShape) -> OpWork | None:
    """B products of x [M, K] (16-bit, cast inside the op) and the stored w [N, K]: 2·B·M·N·K FLOPs at the weight's
    precision; bytes x, w and the other recorded tensors (the weight scales) read once, y [B, M, N] written at x's
    width."""
    x, w = _tensor(shape.dims[0]), _tensor(shape.dims[1])
    if x is None or w is None or len(x) != 3 or len(w) != 3 or (2 * w[2] if fp4_weight else w[2]) != x[2]:
        return None
    (b, n, _), k = w, x[2]
    m = x[1] if x[0] == b else x[0]
    read = sum(_numel(t) * _bpe(shape.types, i) for i, d in enumerate(shape.dims) if (t := _tensor(d)) is not None)
    return _priced(GEMM, 2 * b * m * n * k, read + b * m * n * _bpe(shape.types, 0), shape.types[1],
                   f"B={b} M={m} N={n} K={k}")


def _te_gemm(shape: OpShape) -> OpWork | None:
    """D = op(A) · op(B) with A, B, D at 0, 5, 10: whatever the transpose flags, |A|·|B| = M·K·K·N and |D| = M·N, so
    K = √(|A|·|B| / |D|) and the FLOPs are 2·|D|·K. Bytes A and B read, D written, each at its dtype."""
    a, b, d = (_tensor(shape.dims[i]) for i in (0, 5, 10))
    if a is None or b is None or d is None or len(a) != 2 or len(b) != 2:
        return None
    k = math.isqrt(_numel(a) * _numel(b) // _numel(d))
    if k * k * _numel(d) != _numel(a) * _numel(b) or k not in a or k not in b:
        return None
    nbytes = _numel(a) * _bpe(shape.types, 0) + _numel(b) * _bpe(shape.types, 5) + _numel(d) * _bpe(shape.types, 10)
    return _priced(GEMM, 2 * _numel(d) * k, nbytes, shape.types[0], f"D={list(d)} K={k}")


def _moved(x: tuple[int, ...], out: Sequence[int], dtype: str, what: str) -> OpWork | None:
    """Data movement: the input read once and the output written, no FLOPs."""
    bpe = bytes_per_element(dtype)
    if bpe is None or min(out) <= 0:
        return None
    return _priced(ELEMENTWISE, 0, (_numel(x) + _numel(out)) * bpe, dtype, f"{list(x)} → {list(out)} {what}")


def _replication_pad(shape: OpShape) -> OpWork | None:
    """The edge values repeated outward: padding pairs (first, last) widen the last dims, the first pair the last
    dim."""
    x, padding = _tensor(shape.dims[0]), _arg(shape, 1)
    if x is None or not isinstance(padding, list) or len(padding) % 2 or len(padding) // 2 > len(x):
        return None
    out = list(x)
    for i in range(len(padding) // 2):
        out[-1 - i] += padding[2 * i] + padding[2 * i + 1]
    return _moved(x, out, shape.types[0], "padded")


def _upsample_nearest(shape: OpShape) -> OpWork | None:
    """Each output element a copy of its nearest input element: the spatial dims from ``output_size``, else from
    the scale factors (⌊size · scale⌋)."""
    x, size = _tensor(shape.dims[0]), _arg(shape, 1)
    if x is None:
        return None
    spatial = len(x) - 2
    if not isinstance(size, list):
        scales = _arg(shape, 2)
        scales = scales if isinstance(scales, list) else [_arg(shape, 2 + i) for i in range(spatial)]
        size = [math.floor(n * float(f)) for n, f in zip(x[2:], scales, strict=True)]
    if len(size) != spatial:
        return None
    return _moved(x, [*x[:2], *size], shape.types[0], "nearest")


def _silu_mul(shape: OpShape) -> OpWork | None:
    """silu(a) · b over a and b of one shape: an activation and a product per element (2 FLOPs); a and b read,
    the product written at a's dtype."""
    a, b = _tensor(shape.dims[0]), _tensor(shape.dims[1])
    if a is None or b is None or a != b:
        return None
    bpe_a = _bpe(shape.types, 0)
    return _priced(ELEMENTWISE, 2 * _numel(a), _numel(a) * (2 * bpe_a + _bpe(shape.types, 1)), shape.types[0],
                   f"{list(a)}")


def _evoformer(shape: OpShape) -> OpWork | None:
    """Attention over the R residues of each of the B·S rows (never causal), with a pair bias shared by the rows and
    a mask per row: Q·Kᵀ and P·V, 2·B·S·H·R²·(d_qk + d_v) FLOPs (the bias add, like the softmax, not counted);
    bytes Q, K, V, the mask and the pair bias read, O written."""
    q, k, v = (_tensor(shape.dims[i]) for i in range(3))
    if q is None or k is None or v is None or not len(q) == len(k) == len(v) == 5:
        return None
    b, rows, residues, heads, d_qk = q
    d_v = v[4]
    extras = sum(_numel(t) * _bpe(shape.types, i) for i in (3, 4)
                 if i < len(shape.dims) and (t := _tensor(shape.dims[i])) is not None)
    nbytes = (_numel(q) + _numel(k) + _numel(v) + b * rows * residues * heads * d_v) * _bpe(shape.types, 0) + extras
    return _priced(SDPA, 2 * b * rows * heads * residues * residues * (d_qk + d_v), nbytes, shape.types[0],
                   f"B={b} S={rows} R={residues} H={heads} d={d_qk}")


def _int8_gemm(shape: OpShape) -> OpWork | None:
    """A [..., K] · Bᵀ with B [N, K], both int8, accumulated into an int32 output: 2·M·N·K; bytes A and B read at one
    byte per value and the int32 output written. No peak table holds int8 rates: judged on bandwidth only."""
    a, b = _tensor(shape.dims[0]), _tensor(shape.dims[1])
    if a is None or b is None or len(a) < 2 or len(b) != 2 or a[-1] != b[1]:
        return None
    m, k, n = _numel(a[:-1]), a[-1], b[0]
    nbytes = m * k * _bpe(shape.types, 0) + n * k * _bpe(shape.types, 1) + 4 * m * n
    return _priced(GEMM, 2 * m * n * k, nbytes, shape.types[0], f"M={m} N={n} K={k}")


def _ln_modulate(shape: OpShape) -> OpWork | None:
    """y = LayerNorm(x) · (1 + scale) + shift over H, scale and shift per (B, H): the normalizations' 5 FLOPs per
    element (the modulation takes the affine's place); bytes x read and y written, scale and shift read once, and
    per row of H a float32 mean and reciprocal std written for the backward."""
    x = _tensor(shape.dims[0])
    if x is None or len(x) != 3:
        return None
    params = sum(_numel(t) * _bpe(shape.types, i) for i in (1, 2) if (t := _tensor(shape.dims[i])) is not None)
    rows = _numel(x[:-1])
    nbytes = 2 * _numel(x) * _bpe(shape.types, 0) + params + 2 * rows * 4
    return _priced(NORM, 5 * _numel(x), nbytes, shape.types[0], f"{list(x)} modulated")


def _rms_norm_pad(shape: OpShape) -> OpWork | None:
    """r = x + residual; out = RMSNorm(r) · weight, zero-padded to N_out = ⌈N / multiple⌉ · multiple columns: the RMS
    norm's 5 FLOPs per element and 1 for the add; bytes x, residual and the weight read, r written, and out written
    with its padding (the zeros are stores too)."""
    x, w, res = _tensor(shape.dims[0]), _tensor(shape.dims[1]), _tensor(shape.dims[3])
    if x is None or w is None or len(x) != 2 or res != x:
        return None
    m, n = x
    multiple = int(_arg(shape, 4, 0))
    n_out = -(-n // multiple) * multiple if multiple > 0 else n
    bpe = _bpe(shape.types, 0)
    nbytes = (3 * m * n + m * n_out) * bpe + _numel(w) * _bpe(shape.types, 1)
    return _priced(NORM, 6 * m * n, nbytes, shape.types[0], f"[{m}, {n}] + residual → [{m}, {n_out}]")


def _rms_norm_mxfp4(shape: OpShape) -> OpWork | None:
    """RMS norm of x1 (5 FLOPs per element; +1 when res1 is added first) cast to MXFP4 (2 per element: block max
    and scale), and of x2 when given (5 per element). Bytes: x1, its weight, res1, x2 and its weight read; x1's
    packed FP4 (half a byte per value) and E8M0 scales (one byte per 32 values) written, x1 + res1 written when
    res1 is given, x2's normalization written, and x1's unquantized normalization when ``output_unquantized_inp1``."""
    x1, w1 = _tensor(shape.dims[0]), _tensor(shape.dims[1])
    if x1 is None or w1 is None or len(x1) != 2:
        return None
    m, n1 = x1
    bpe = _bpe(shape.types, 0)
    x2 = _tensor(shape.dims[3]) if len(shape.dims) > 3 else None
    x2 = x2 if x2 and len(x2) == 2 else None
    res = _tensor(shape.dims[6]) if len(shape.dims) > 6 else None
    has_res = res == x1
    w2 = _tensor(shape.dims[4]) if x2 and len(shape.dims) > 4 else None
    flops = (8 if has_res else 7) * m * n1 + (5 * _numel(x2) if x2 else 0)
    nbytes = m * n1 * bpe * (1 + 2 * has_res + bool(_arg(shape, 9, False))) + _numel(w1) * _bpe(shape.types, 1) \
        + -(-(m * n1) // 2) + m * -(-n1 // MXFP4_BLOCK) \
        + (2 * _numel(x2) * _bpe(shape.types, 3) if x2 else 0) + (_numel(w2) * _bpe(shape.types, 4) if w2 else 0)
    text = f"[{m}, {n1}]" + (" + residual" if has_res else "") + " → mxfp4" + (f", x2 {list(x2)}" if x2 else "")
    return _priced(NORM, flops, nbytes, shape.types[0], text)


def _moe_sort_quant(shape: OpShape) -> OpWork | None:
    """The MX cast of the activation x [M, N] (2 FLOPs per element: block max and scale) written in the experts' sorted
    order: x read, the recorded output (packed FP4, or FP8) written at its width and one E8M0 scale per 32 values of
    x. The scale buffer and the sorted ids are padded to their allocation (their filled part depends on the
    routing), so they count for the values the cast produces, and the small id arrays not at all."""
    out, x = _tensor(shape.dims[0]), _tensor(shape.dims[2])
    if out is None or x is None or len(x) != 2:
        return None
    m, n = x
    nbytes = m * n * _bpe(shape.types, 2) + _numel(out) * _bpe(shape.types, 0) + m * -(-n // MXFP4_BLOCK)
    return _priced(QUANTIZE, 2 * m * n, nbytes, shape.types[2], f"M={m} N={n} → {shape.types[0]}, expert-sorted")


def _append_shared_experts(shape: OpShape) -> OpWork | None:
    """Each token's top-K expert ids and weights copied into rows of K + S, the S shared experts' ids and the common
    weight filled in after them: no arithmetic; ids and weights read, the wider rows written."""
    ids, weights = _tensor(shape.dims[0]), _tensor(shape.dims[1])
    shared = int(_arg(shape, 2))
    if ids is None or weights is None or len(ids) != 2 or ids != weights or shared < 0:
        return None
    m, k = ids
    width = _bpe(shape.types, 0) + _bpe(shape.types, 1)
    return _priced(MOE_ROUTING, 0, m * k * width + m * (k + shared) * width, shape.types[1],
                   f"M={m} top-k={k} + {shared} shared")


def _sampling(shape: OpShape) -> OpWork | None:
    """token[t] = argmax_v logits[t, v] / noise[t, v] (exponential race, which samples the softmax): a divide and a
    compare per logit (2 FLOPs); logits and noise read, every other recorded tensor (the ids written, per-row
    temperatures read) once."""
    logits, noise = _tensor(shape.dims[1]), _tensor(shape.dims[2])
    if logits is None or noise is None or len(logits) != 2:
        return None
    nbytes = sum(_numel(t) * _bpe(shape.types, i) for i, d in enumerate(shape.dims) if (t := _tensor(d)) is not None)
    return _priced(REDUCTION, 2 * _numel(logits), nbytes, shape.types[1], f"T={logits[0]} V={logits[1]} sampled")


def _mla_rope_cache(shape: OpShape) -> OpWork | None:
    """The rotary slices of Q and K rotated (3 FLOPs per element, the RoPE convention); the four inputs read; Q written
    whole (latent ‖ rotary, at q_out's width when it is an argument, else the input's) and each token's K row
    (latent ‖ rotary) written into the cache at the cache's width, a scale per element when that is narrower (1 FLOP
    each, as a KV-cache write). The positions and cos/sin rows are not counted (a few bytes per token)."""
    q_nope, q_pe, k_nope, k_pe = (_tensor(shape.dims[i]) for i in range(4))
    if q_nope is None or q_pe is None or k_nope is None or k_pe is None or len(q_nope) != 3 or len(q_pe) != 3:
        return None
    tokens, heads, d_lora = q_nope
    d_pe = q_pe[2]
    kv_heads = k_nope[1] if len(k_nope) == 3 else 1
    q_out = _tensor(shape.dims[5]) if len(shape.dims) > 5 else None
    bpe_in, bpe_cache = _bpe(shape.types, 0), _bpe(shape.types, 4)
    bpe_q = _bpe(shape.types, 5) if q_out == (tokens, heads, d_lora + d_pe) else bpe_in
    q_written, k_written = tokens * heads * (d_lora + d_pe), tokens * kv_heads * (d_lora + d_pe)
    read = sum(_numel(t) for t in (q_nope, q_pe, k_nope, k_pe)) * bpe_in
    flops = 3 * tokens * (heads + kv_heads) * d_pe + (q_written if bpe_q < bpe_in else 0) \
        + (k_written if bpe_cache < bpe_in else 0)
    return _priced(ROPE, flops, read + q_written * bpe_q + k_written * bpe_cache, shape.types[0],
                   f"tokens={tokens} heads={heads} kv_heads={kv_heads} d={d_lora}+{d_pe}, cached")


def _sparse_mla(shape: OpShape) -> OpWork | None:
    """Each query token attends the top-k KV rows its indexer picked: Q·Kᵀ over d_qk and P·V over d_v, 2·S·H·k·(d_qk
    + d_v) FLOPs, an upper bound (a token with fewer than k predecessors pads its index row, and the padding is
    masked). Bytes Q and the indices read, O [S, H, d_v] written at Q's width, and each KV row that can be picked
    read once: min(S_kv, S·k) rows (rows picked by several tokens read once: the least traffic)."""
    q, kv, idx = (_tensor(shape.dims[i]) for i in range(3))
    if q is None or kv is None or idx is None or len(q) != 3 or len(kv) != 3 or len(idx) != 3:
        return None
    s_q, heads, d_qk = q
    top_k, d_v = idx[2], int(_arg(shape, 4, 512))
    kv_rows = min(kv[0], s_q * top_k) * kv[1]
    bpe_q = _bpe(shape.types, 0)
    nbytes = _numel(q) * bpe_q + _numel(idx) * _bpe(shape.types, 2) + kv_rows * kv[2] * _bpe(shape.types, 1) \
        + s_q * heads * d_v * bpe_q
    return _priced(SDPA, 2 * s_q * heads * top_k * (d_qk + d_v), nbytes, shape.types[0],
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
    q, k = _tensor(shape.dims[op.q_at]), _tensor(shape.dims[op.k_at])
    v = _tensor(shape.dims[op.v_at]) if op.v_at is not None else None
    if q is None or k is None or len(q) != 3 or (op.v_at is not None and not v):
        return None
    _, h_q, d_qk = q
    h_kv, d_v = k[op.heads_kv_axis], (v[-1] if v else d_qk)
    phases = [step.generation] if op.decode_only else [step.context, step.generation]
    window = int(_arg(shape, op.window_at, 0)) if op.window_at is not None else 0
    if op.decode_only and window > 0:
        g = step.generation
        phases = [PhaseSums(g.q, min(g.k, g.q * window), g.qq, min(g.qk, g.q * window))]
    pairs = sum(_attended_pairs(p) for p in phases)
    n_q, n_k = sum(p.q for p in phases), sum(p.k for p in phases)
    if n_q <= 0:
        return None
    bpe_q, bpe_kv = _bpe(shape.types, op.q_at), _bpe(shape.types, op.k_at)
    nbytes = n_q * h_q * (d_qk + d_v) * bpe_q + n_k * h_kv * (d_qk + d_v) * bpe_kv
    text = f"Σq={n_q} Σk={n_k} pairs={pairs:.0f} H={h_q} H_kv={h_kv} d={d_qk}" + (f"/{d_v}" if d_v != d_qk else "") \
        + (f" window={window}" if window > 0 else "")
    return _priced(SDPA, 2 * h_q * (d_qk + d_v) * pairs, nbytes, shape.types[op.q_at], text)


def _gated_delta(shape: OpShape, step: StepSums) -> OpWork | None:
    """Gated-delta linear attention (Qwen3-Next's GDN): mixed_qkv [T, 2·H_k·d_k + H_v·d_v], b and a [T, H_v], out
    [T, H_v, d_v]. Each value head keeps a d_v × d_k state that every new token decays (1 FLOP per entry), reads
    with k (2), updates with the delta (2) and reads with q (2): 7·H_v·d_v·d_k per token, over the step's Σq tokens
    (context and generation), whatever the context (no KV cache). d_k = (D − H_v·d_v) / (2·H_k) with H_k = H_v/2, the
    head ratio of the models that use it. Bytes each token's q, k, v, a, b read and its output written at the
    input's width; the recurrent state carried from the previous step is not counted (a lower bound)."""
    qkv, b, out = _tensor(shape.dims[0]), _tensor(shape.dims[1]), _tensor(shape.dims[3])
    if qkv is None or b is None or out is None or len(qkv) != 2 or len(b) != 2 or len(out) != 3:
        return None
    width, h_v, d_v = qkv[1], b[1], out[2]
    d_k = (width - h_v * d_v) // h_v
    tokens = step.context.q + step.generation.q
    if d_k <= 0 or tokens <= 0:
        return None
    nbytes = tokens * (width + 2 * h_v + h_v * d_v) * _bpe(shape.types, 0)
    return _priced(SSM, 7 * tokens * h_v * d_v * d_k, nbytes, shape.types[0],
                   f"tokens={tokens} H_v={h_v} d_k={d_k} d_v={d_v} gated delta")


def _opus_sparse_prefill(shape: OpShape) -> OpWork | None:
    """AITER's sparse MLA prefill over picked KV slots: q [N, H, d] and the slot lists kv_indices_prefix (the
    history each token picked) and kv_indices_extend (its in-chunk window), whose lengths sum to the (token, slot)
    pairs scored; one latent K/V head of width d: 2·H·pairs·(d + d) FLOPs. Bytes Q read and O written at Q's width
    and each pair's latent row at the cache's (a slot picked by several tokens counted each time: an upper bound,
    the record not saying how many slots are distinct)."""
    q, prefix, extend = _tensor(shape.dims[0]), _tensor(shape.dims[2]), _tensor(shape.dims[5])
    if q is None or prefix is None or extend is None or len(q) != 3 or not prefix or not extend:
        return None
    n, heads, d = q
    pairs = prefix[0] + extend[0]
    nbytes = 2 * n * heads * d * _bpe(shape.types, 0) + pairs * d * _bpe(shape.types, 1)
    return _priced(SDPA, 2 * heads * pairs * 2 * d, nbytes, shape.types[0],
                   f"N={n} H={heads} d={d} pairs={pairs} sparse")


def _mhc(op: _Mhc, shape: OpShape) -> OpWork | None:
    """mHC keeps n residual streams [M, n, C]. Its post step recombines them with the layer's output x [M, C]:
    out[m, i, c] = post[m, i]·x[m, c] + Σ_j comb[m, i, j]·res[m, j, c], 2·(n + 1) FLOPs per output element. Its pre
    projection multiplies the flattened streams [M, K = n·C] by fn [hc3, K] (2·M·hc3·K) and sums each token's squares
    (2·M·K). Its pre epilogue sums the split-K partials (split_k·M·hc3), folds the streams into the layer input with
    the pre mix (2·M·n·C) and RMS-normalizes it (5·M·C; the few Sinkhorn steps over the n × n mix are not counted).
    Bytes: every recorded tensor once, each either read or written once (the fused post + pre keeps the new streams
    it projects on chip). Vector work here: hc3 = n² + 2n is a few dozen columns, too few for the matrix units to
    set the pace, so it is judged on bandwidth."""
    streams = _tensor(shape.dims[op.streams_at])
    if streams is None or len(streams) != 3:
        return None
    m, n, c = streams
    flops = 2 * (n + 1) * m * n * c if op.post else 0
    if op.fn_at is not None:
        fn = _tensor(shape.dims[op.fn_at])
        if fn is None or len(fn) != 2 or fn[1] != n * c:
            return None
        flops += 2 * m * fn[0] * fn[1] + 2 * m * fn[1]
    if op.pre_fold:
        partials = _tensor(shape.dims[3])
        flops += (_numel(partials) if partials else 0) + 2 * m * n * c + 5 * m * c
    nbytes = sum(_numel(t) * _bpe(shape.types, i) for i, d in enumerate(shape.dims) if (t := _tensor(d)) is not None)
    return _priced(MHC, flops, nbytes, shape.types[op.streams_at], f"M={m} n={n} C={c}")


# --- which model prices which op, and why an op stays unpriced -----------------------------------------------

# The models, in the order they are tried (an op is in one table only).
_MODELS: tuple[tuple[Container[str], Callable[[str, OpShape], OpWork | None]], ...] = (
    (GEMM_OPS, _gemm), (CONV_OPS, _conv), (SDPA_OPS, lambda n, s: _sdpa(SDPA_OPS[n], s)),
    (ELEMENTWISE_OPS, lambda n, s: _elementwise(s)), (NORM_OPS, lambda n, s: _norm(s)),
    (REDUCE_OPS, _reduce), (SCAN_OPS, lambda n, s: _scan(s)), (GROUPED_GEMM_OPS, _grouped_gemm),
    (GROUPED_GEMM_VARIABLE_K_OPS, _grouped_gemm_variable_k), (SCALED_MM_OPS, lambda n, s: _gemm("aten::_scaled_mm", s)),
    (TE_GEMM_OPS, lambda n, s: _te_gemm(s)), (BATCHED_GEMM_OPS, lambda n, s: _batched_gemm(BATCHED_GEMM_OPS[n], s)),
    (DYNAMIC_QUANT_GEMM_OPS, lambda n, s: _dynamic_quant_gemm(s)),
    (FUSED_MOE_OPS, lambda n, s: _fused_moe(s)), (MOE_GEMM_OPS, lambda n, s: _moe_gemm(s)),
    (MOE_COMM_OPS, lambda n, s: _moe_comm(s)), (AITER_FUSED_MOE_OPS, lambda n, s: _aiter_fused_moe(s)),
    (MOE_UP_OPS, lambda n, s: _moe_up(*MOE_UP_OPS[n], s)), (MOE_DOWN_OPS, lambda n, s: _moe_down(*MOE_DOWN_OPS[n], s)),
    (MOE_ROUTING_OPS, lambda n, s: _moe_routing(s)), (ROPE_OPS, lambda n, s: _rope(s)),
    (CROSS_ENTROPY_OPS, lambda n, s: _cross_entropy(s)), (LINEAR_OPS, lambda n, s: _gemm("aten::linear", s)),
    (SCALED_GEMM_OPS, lambda n, s: _scaled_gemm(SCALED_GEMM_OPS[n], s)),
    (VARLEN_ATTENTION_OPS, lambda n, s: _varlen_attention(VARLEN_ATTENTION_OPS[n], s)),
    (CAUSAL_CONV1D_OPS, lambda n, s: _causal_conv1d(s)), (MAMBA_SSD_OPS, lambda n, s: _mamba_ssd(s)),
    (QUANTIZE_FP8_OPS, lambda n, s: _quantize_fp8(*QUANTIZE_FP8_OPS[n], s)),
    (QUANTIZE_MXFP4_OPS, lambda n, s: _quantize_mxfp4(*QUANTIZE_MXFP4_OPS[n], s)),
    (DYNAMIC_QUANT_OPS, lambda n, s: _dynamic_quant(s)), (GROUP_QUANT_FP8_OPS, lambda n, s: _group_quant_fp8(s)),
    (GATED_ACTIVATION_OPS, lambda n, s: _gated_activation(s)),
    (INFERENCE_NORM_OPS, lambda n, s: _rms_norm(INFERENCE_NORM_OPS[n], s)),
    (RMS_NORM_QUANT_OPS, lambda n, s: _rms_norm_quant(RMS_NORM_QUANT_OPS[n], s)),
    (ROTARY_EMBEDDING_OPS, lambda n, s: _rotary_embedding(s)), (ROPE_2C_OPS, lambda n, s: _rope_2c(s)),
    (KV_CACHE_OPS, lambda n, s: _kv_cache_write(s)),
    (NORM_BACKWARD_OPS, lambda n, s: _norm_backward(*NORM_BACKWARD_OPS[n], s)),
    (PAD_OPS, lambda n, s: _replication_pad(s)), (UPSAMPLE_OPS, lambda n, s: _upsample_nearest(s)),
    (SILU_MUL_OPS, lambda n, s: _silu_mul(s)), (EVOFORMER_OPS, lambda n, s: _evoformer(s)),
    (APEX_CONV_OPS, _conv), (INT8_GEMM_OPS, lambda n, s: _int8_gemm(s)),
    (LN_MODULATE_OPS, lambda n, s: _ln_modulate(s)), (RMS_NORM_PAD_OPS, lambda n, s: _rms_norm_pad(s)),
    (RMS_NORM_MXFP4_OPS, lambda n, s: _rms_norm_mxfp4(s)),
    (MOE_SORT_QUANT_OPS, lambda n, s: _moe_sort_quant(s)),
    (APPEND_SHARED_EXPERTS_OPS, lambda n, s: _append_shared_experts(s)), (SAMPLING_OPS, lambda n, s: _sampling(s)),
    (MLA_ROPE_CACHE_OPS, lambda n, s: _mla_rope_cache(s)), (SPARSE_MLA_OPS, lambda n, s: _sparse_mla(s)),
    (MHC_OPS, lambda n, s: _mhc(MHC_OPS[n], s)),
    (INDUCTOR_TRITON_OPS, _inductor_triton), (OPUS_SPARSE_PREFILL_OPS, lambda n, s: _opus_sparse_prefill(s)),
)
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
_LABEL_ONLY = "TraceLens labels it but has no FLOP/byte model either"
# Ops TraceLens's performance model names (PerfModel/torch_op_mapping.py and its extensions, read 2026-11) that
# stay unpriced here, with the reason the unified summary gives.
UNPRICED_REASONS: dict[str, str] = {
    **dict.fromkeys(("MambaSplitConv1dScanCombinedFnBackward", "DaoAILab::_causal_conv1d_bwd_cpp",
                     "CrossEntropyFunctionBackward", "MoEDispatchBackward", "MoECombineBackward",
                     "TokenPermuteMaskMap", "TokenPermuteMaskMapBackward", "aiter::moe_sorting_opus_fwd",
                     "aiter::moe_align_block_size", "_moe_C::moe_align_block_size",
                     "_C_cache_ops::concat_and_cache_mla", "aiter::get_mla_metadata_v1",
                     "aiter::indexer_score_topk"), _LABEL_ONLY),
    **dict.fromkeys(("aten::copy_", "aten::copy"), "a copy may cross the host link (host to device), which the HBM "
                    "roofline does not judge"),
    **dict.fromkeys(("_C_custom_ar::all_reduce", "_C_custom_ar::qr_all_reduce", "aiter::all_gather_reg",
                     "aiter::reduce_scatter", "aiter::fused_allreduce_rmsnorm", "aiter::fused_allreduce_rmsnorm_",
                     "sgl_kernel::all_reduce_reg", "sgl_kernel::qr_all_reduce", "sglang::reg_all_gather_into_tensor"),
                    "a collective: its traffic crosses the links between GPUs, which the HBM roofline does not judge"),
    **dict.fromkeys(("ConvBias_Backward", "ConvBiasReLU_Backward"),
                    "its record holds only the incoming gradient: the conv's shapes are on its forward's record "
                    "(TraceLens pairs the two by sequence number, which this reader does not keep)"),
}


def unpriced_reason(name: str, shape: OpShape | None, step: StepSums | str | None = None) -> str:
    """Why :func:`op_work` gives an op call no FLOPs and bytes (call it only when it gave none)."""
    if shape is None:
        return "no arguments recorded (profile with record_shapes=True)"
    if name in KV_ATTENTION_OPS and not isinstance(step, StepSums):
        return f"attention over a KV cache: {step or NO_STEP}"
    if _model_of(name) is not None or name in KV_ATTENTION_OPS:
        return "its recorded arguments do not fit its family's model (shapes, dtypes or flags)"
    return UNPRICED_REASONS.get(name, "no FLOP/byte model for this op")


# --- device peaks -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DevicePeaks:
    """Dense (no sparsity) peak matrix TFLOP/s per precision and HBM bandwidth, as the vendor publishes them."""

    name: str
    tflops: dict[str, float]
    hbm_tbs: float
    source: str


# Peaks are the vendors' published dense figures (NVIDIA datasheets print sparse Tensor Core numbers with a
# footnote, "shown with sparsity, specifications 1/2 lower without sparsity"; dense is half of those, as the
# Hopper architecture whitepaper's table lists). FP32 is the matrix/Tensor FP32 rate where the vendor has one
# (AMD), else the CUDA-core FP32 rate (NVIDIA: PyTorch runs FP32 GEMMs there unless TF32 is allowed); FP64 is the
# matrix / FP64 Tensor Core rate. MI355X (CDNA 4) has no TF32 in its datasheet. Sources, re-checked for this
# table:
# - MI300X, MI325X: AMD's product pages (amd.com/en/products/accelerators/instinct/mi300/mi300x.html,
#   .../mi325x.html) and ROCm's "AMD Instinct MI300 series microarchitecture" peak-performance table
#   (rocm.docs.amd.com, conceptual/gpu-arch/mi300): FP64/FP32 matrix 163.4, TF32 653.7, FP16/BF16 1307.4,
#   FP8 2614.9 TFLOP/s non-sparse; HBM3 5.3 TB/s (MI300X), HBM3E 6 TB/s (MI325X, same compute).
# - MI355X: AMD's product page (amd.com/en/products/accelerators/instinct/mi350/mi355x.html) and the CDNA 4
#   white paper: FP64 78.6, FP32 157.3, FP16/BF16 2516.6, FP8 5033.2 TFLOP/s dense (10.1 PFLOP/s FP8 with
#   sparsity); HBM3E 8 TB/s.
# - H100 SXM5: NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100) and the NVIDIA H100 Tensor Core GPU
#   Architecture whitepaper: FP64 Tensor 66.9, FP32 66.9, TF32 494.7, FP16/BF16 989.4, FP8 1978.9 TFLOP/s
#   dense (datasheet: 67 / 67 / 989* / 1979* / 3958*, * sparse); HBM3 3.35 TB/s.
# - H200 SXM: NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200): the same Tensor Core rates as H100 SXM
#   (67 / 67 / 989* / 1979* / 3958*, * sparse), HBM3e 4.8 TB/s. H200 NVL (lower clocks) is not this entry.
DEVICE_PEAKS = (
    (re.compile(r"MI300X"), DevicePeaks(
        "AMD Instinct MI300X", {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4,
                                "fp8": 2614.9}, 5.3,
        "AMD Instinct MI300X Accelerator data sheet (peak matrix, dense; 5.3 TB/s HBM3)")),
    (re.compile(r"MI325X"), DevicePeaks(
        "AMD Instinct MI325X", {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4,
                                "fp8": 2614.9}, 6.0,
        "AMD Instinct MI325X Accelerator data sheet (peak matrix, dense; 6 TB/s HBM3E)")),
    (re.compile(r"MI355X"), DevicePeaks(
        "AMD Instinct MI355X", {"fp64": 78.6, "fp32": 157.3, "fp16": 2516.6, "bf16": 2516.6, "fp8": 5033.2}, 8.0,
        "AMD Instinct MI355X GPU data sheet (peak matrix, dense; 8 TB/s HBM3E)")),
    (re.compile(r"H100 80GB HBM3|H100 SXM"), DevicePeaks(
        "NVIDIA H100 SXM", {"fp64": 66.9, "fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4,
                            "fp8": 1978.9}, 3.35,
        "NVIDIA H100 Tensor Core GPU datasheet and H100 architecture whitepaper (SXM5, dense; 3.35 TB/s HBM3)")),
    (re.compile(r"H200(?! NVL)"), DevicePeaks(
        "NVIDIA H200 SXM", {"fp64": 66.9, "fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4,
                            "fp8": 1978.9}, 4.8,
        "NVIDIA H200 Tensor Core GPU datasheet (SXM, dense = half the sparse figures; 4.8 TB/s HBM3e)")),
)


def device_peaks(device_names: Sequence[str]) -> DevicePeaks | None:
    """The peak table entry for the trace's device (``deviceProperties`` names), None when unknown."""
    for name in device_names:
        for pattern, peaks in DEVICE_PEAKS:
            if pattern.search(name):
                return peaks
    return None


def device_sentence(trace: TraceData, peaks: DevicePeaks | None) -> str:
    shown = ", ".join(sorted(set(trace.device_names))) or "not recorded (no deviceProperties)"
    if peaks is None:
        return f"Device: {shown}. Not in the peak table, so no fraction of peak is given."
    return f"Device: {shown} → {peaks.name}; peaks from {peaks.source}."


def roofline_table(trace: TraceData, attr: Attribution, peaks: DevicePeaks | None) -> pd.DataFrame:
    """One row per (op, shapes, dtypes) that launched kernels and has a FLOP/byte model (attention over a KV
    cache: per serving step sums too, which the shape text states)."""
    ops = trace.ops
    if not len(ops) or not ops.shapes:
        return pd.DataFrame(columns=ROOFLINE_COLUMNS)
    linked = attr.op_index >= 0
    time_per_op = np.bincount(attr.op_index[linked], weights=trace.dur_ns[linked], minlength=len(ops))
    priced = np.flatnonzero((ops.shape_id >= 0) & (time_per_op > 0))
    kv = [i for i in priced.tolist() if trace.names[int(ops.name_id[i])] in KV_ATTENTION_OPS]
    steps = call_steps(trace, kv) if kv else {}  # only attention over a KV cache needs its serving step
    groups: dict[tuple[int, int, StepSums | str | None], list[float]] = {}
    for i in priced.tolist():
        key = (int(ops.name_id[i]), int(ops.shape_id[i]), steps.get(i))
        entry = groups.setdefault(key, [0, 0.0])
        entry[0] += 1
        entry[1] += float(time_per_op[i])
    rows = []
    for (name_id, shape_id, step), (calls, ns) in groups.items():
        name = trace.names[name_id]
        work = op_work(name, ops.shapes[shape_id], step)
        if work is None or ns <= 0:
            continue
        seconds = ns / 1e9
        tflops = work.flops * calls / seconds / 1e12
        tbs = work.bytes * calls / seconds / 1e12
        peak = matrix_peak(work, peaks)
        rows.append({
            "family": work.family, "op": name, "shape": work.shape, "dtype": work.dtype, "calls": calls,
            "kernel time ms": ns / 1e6, "mean us": ns / calls / 1e3, "GFLOP per call": work.flops / 1e9,
            "MB per call": work.bytes / 1e6, "FLOP/byte": work.flops / work.bytes if work.bytes else np.nan,
            "TFLOP/s": tflops, "TB/s": tbs, "peak TFLOP/s": peak if peak is not None else np.nan,
            **versus_peak(work, tflops, tbs, peak, peaks, ns / calls / 1e9),
        })
    if not rows:
        return pd.DataFrame(columns=ROOFLINE_COLUMNS)
    df = pd.DataFrame(rows, columns=ROOFLINE_COLUMNS)
    return df.sort_values(["kernel time ms", "op"], ascending=[False, True], kind="stable").reset_index(drop=True)


def matrix_peak(work: OpWork, peaks: DevicePeaks | None) -> float | None:
    """The matrix peak TFLOP/s the op is judged against (:data:`MATRIX_FAMILIES`); None for vector work
    (elementwise, normalization, reduction, RoPE, cross-entropy: the table holds no vector peaks, so they are judged
    on bandwidth), MoE traffic, or an unknown precision."""
    matrix = work.family in MATRIX_FAMILIES
    return peaks.tflops.get(work.precision) if peaks and work.precision and matrix else None


def versus_peak(work: OpWork, tflops: float, tbs: float, peak: float | None, peaks: DevicePeaks | None,
                 seconds_per_call: float) -> dict[str, Any]:
    if peaks is None:
        return {"% of peak FLOP/s": np.nan, "% of peak TB/s": np.nan, "bound": "unknown device",
                "% of roofline": np.nan}
    if work.family == MOE_COMM:  # all-to-all traffic: bound by the network, which the peak table does not hold
        return {"% of peak FLOP/s": np.nan, "% of peak TB/s": np.nan, "bound": "communication",
                "% of roofline": np.nan}
    memory_s = work.bytes / (peaks.hbm_tbs * 1e12)
    compute_s = work.flops / (peak * 1e12) if peak else 0.0
    bound = "memory" if memory_s >= compute_s else "compute"
    return {"% of peak FLOP/s": 100.0 * tflops / peak if peak else np.nan,
            "% of peak TB/s": 100.0 * tbs / peaks.hbm_tbs, "bound": bound,
            "% of roofline": 100.0 * max(memory_s, compute_s) / seconds_per_call if seconds_per_call else np.nan}
