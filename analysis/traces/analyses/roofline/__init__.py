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
  shapes, their iteration sizes and the ATen ops their names list (:mod:`analysis.traces.analyses.roofline.inductor`).

And, on the same conventions, each derived from what the op computes in its function's docstring: apex's fused
conv + bias (+ ReLU), bitsandbytes' int8 GEMM, ``aten::linalg_norm`` and the scans ``cumsum``/``cumprod``, Primus's
LayerNorm-modulate (and backward), AITER's add-RMSNorm-pad, RMSNorm + MXFP4 cast, MX casts in expert-sorted order,
mHC hyper-connection ops, exponential sampler and MLA RoPE + KV-cache write, SGLang's shared-expert append and sparse
(top-k) MLA prefill.

Attention over a KV cache (vLLM's unified attention, AITER's varlen, FMHA v3 and paged decode kernels, SGLang's
ragged paged attention, gated-delta linear attention) records its packed tensors but not the context each request
attends: :func:`op_work` takes the sums of the serving step around the call
(:mod:`analysis.traces.analyses.serving_steps`) and prices the pairs they give
(:mod:`analysis.traces.analyses.roofline.attention`);
AITER's DeepSeek-V4 sparse prefill records its picked slots and needs no step.

The package: :mod:`.work` (what a model returns, the shared argument readers), one module per op family
(:mod:`.gemm`, :mod:`.conv`, :mod:`.attention`, :mod:`.elementwise`, :mod:`.norm`, :mod:`.reduction`, :mod:`.moe`,
:mod:`.quantize`, :mod:`.rope`, :mod:`.mhc`, :mod:`.inductor`: its op tables and FLOP/byte models), :mod:`.table`
(op name → family model, :func:`op_work`, the unpriced reasons) and :mod:`.peaks` (the device peaks and the roofline
table judged against them). This module is the public face: callers import from it only.

An op no family prices keeps its row in the unified summary with the reason (:func:`unpriced_reason`).
"""

from analysis.traces.analyses.roofline.attention import KV_ATTENTION_OPS
from analysis.traces.analyses.roofline.conv import CONV_OPS, conv_arg
from analysis.traces.analyses.roofline.gemm import GEMM_OPS
from analysis.traces.analyses.roofline.norm import RMS_NORM_MXFP4_OPS, RMS_NORM_PAD_OPS
from analysis.traces.analyses.roofline.peaks import (
    DevicePeaks,
    device_peaks,
    device_sentence,
    matrix_peak,
    roofline_table,
    versus_peak,
)
from analysis.traces.analyses.roofline.table import op_work, unpriced_reason
from analysis.traces.analyses.roofline.work import parse_concrete

__all__ = [
    "CONV_OPS", "GEMM_OPS", "KV_ATTENTION_OPS", "RMS_NORM_MXFP4_OPS", "RMS_NORM_PAD_OPS", "DevicePeaks", "conv_arg",
    "device_peaks", "device_sentence", "matrix_peak", "op_work", "parse_concrete", "roofline_table",
    "unpriced_reason", "versus_peak",
]
