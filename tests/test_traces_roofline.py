"""Roofline numbers from recorded shapes: FLOPs and bytes of known GEMM, conv, attention and elementwise shapes,
achieved TFLOP/s on the real H100 trace checked against a join done here, and the device's peak (or a plain
"unknown device")."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from analysis.traces import read_trace
from analysis.traces.analyses.ops import attribute
from analysis.traces.analyses.roofline import device_peaks, device_sentence, op_work, roofline_table, versus_peak
from analysis.traces.model import OpShape

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
H100 = FIXTURES / "h100_bert-small-uncased.json.gz"
MI250 = FIXTURES / "mi250_minitoy_train_rocm6.2.json.gz"
BF16 = "c10::BFloat16"


def test_addmm_flops_are_2mnk_and_bytes_read_bias_a_b_and_write_c() -> None:
    m, k, n = 141, 512, 30522
    shape = OpShape(([n], [m, k], [k, n], [], []), (BF16, BF16, BF16, "Scalar", "Scalar"), ("", "", "", "1", "1"))

    work = op_work("aten::addmm", shape)

    assert work is not None
    assert work.flops == 2 * m * n * k
    assert work.bytes == 2 * (n + m * k + k * n + m * n)
    assert (work.family, work.precision, work.shape) == ("GEMM", "bf16", f"M={m} N={n} K={k}")


def test_linear_mm_and_bmm_price_the_same_product_the_same_way() -> None:
    mm = op_work("aten::mm", OpShape(([64, 32], [32, 16]), ("float", "float"), ("", "")))
    linear = op_work("aten::linear", OpShape(([4, 16, 32], [16, 32]), ("float", "float"), ("", "")))
    bmm = op_work("aten::bmm", OpShape(([4, 16, 32], [4, 32, 16]), ("float", "float"), ("", "")))

    assert mm is not None and linear is not None and bmm is not None
    assert mm.flops == linear.flops == 2 * 64 * 32 * 16
    assert bmm.flops == 4 * 2 * 16 * 32 * 16
    assert mm.bytes == 4 * (64 * 32 + 32 * 16 + 64 * 16)


def test_a_strided_padded_conv_counts_its_output_positions() -> None:
    shape = OpShape(([8, 3, 224, 224], [64, 3, 7, 7], [64], [], [], [], [], [], []),
                    ("float",) * 3 + ("ScalarList",) * 3 + ("Scalar", "ScalarList", "Scalar"),
                    ("", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "False", "[0, 0]", "1"))

    work = op_work("aten::convolution", shape)

    assert work is not None
    out = 8 * 64 * 112 * 112  # (224 + 2·3 − 7) // 2 + 1 = 112
    assert work.flops == 2 * out * 3 * 7 * 7
    assert work.bytes == 4 * (8 * 3 * 224 * 224 + 64 * 3 * 7 * 7 + out + 64)


def test_causal_attention_counts_half_the_two_products() -> None:
    q = [2, 8, 1024, 64]  # [B, H, N, d]
    full = OpShape((q, q, q), (BF16,) * 3, ("", "", "", "0.", "False", "False", "0.125"))
    causal = OpShape((q, q, q), (BF16,) * 3, ("", "", "", "0.", "True", "False", "0.125"))

    dense = op_work("aten::_scaled_dot_product_flash_attention", full)
    masked = op_work("aten::_scaled_dot_product_flash_attention", causal)

    assert dense is not None and masked is not None
    assert dense.flops == 2 * 2 * 8 * 1024 * 1024 * (64 + 64)
    assert masked.flops == dense.flops // 2
    assert dense.bytes == 2 * 4 * (2 * 8 * 1024 * 64)


def test_a_broadcast_add_reads_both_inputs_and_writes_the_broadcast_output() -> None:
    work = op_work("aten::add", OpShape(([4, 1, 8], [1, 5, 8], []), (BF16, BF16, "Scalar"), ("", "", "1")))

    assert work is not None
    assert work.flops == 4 * 5 * 8
    assert work.bytes == 2 * (32 + 40 + 160)


def test_an_op_without_usable_shapes_is_not_priced() -> None:
    assert op_work("aten::mm", OpShape(([64, 32], [16, 16]), ("float", "float"), ("", ""))) is None
    assert op_work("aten::mm", OpShape((), (), ())) is None
    assert op_work("aten::index_select", OpShape(([4, 8], [], [3]), ("float", "Scalar", "long int"), ("", "0", ""))) \
        is None


def test_a_layer_norm_and_a_sum_are_priced_as_the_vector_work_they_do() -> None:
    norm = op_work("aten::native_layer_norm", OpShape(([4, 8], [], [8], [8], []), ("float", "ScalarList", "float",
                                                                                   "float", "Scalar"),
                                                      ("", "[8]", "", "", "1e-05")))
    total = op_work("aten::sum", OpShape(([4, 8], [], [], []), ("float", "ScalarList", "Scalar", ""),
                                         ("", "[-1]", "False", "")))

    assert norm is not None and norm.family == "NORM"
    assert (norm.flops, norm.bytes) == (5 * 32, 4 * (32 + 32 + 8 + 8))  # x read, y written, weight and bias read
    assert total is not None and total.family == "reduction"
    assert (total.flops, total.bytes) == (32, 4 * (32 + 4))  # one add per input element; 4 sums written


def test_the_h100_gemm_roofline_uses_the_ops_kernel_time_and_the_h100_peak() -> None:
    trace = read_trace(H100)
    peaks = device_peaks(trace.device_names)

    table = roofline_table(trace, attribute(trace), peaks)

    # Independently: the kernels of the vocabulary projection addmm, joined on External id with plain json.
    events = json.loads(gzip.decompress(H100.read_bytes()))["traceEvents"]
    ids = {e["args"]["External id"] for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::addmm"
           and e["args"]["Input Dims"][1:3] == [[141, 512], [512, 30522]]}
    seconds = sum(e["dur"] for e in events if e.get("cat") == "kernel" and e["args"].get("External id") in ids) / 1e6
    flops = len(ids) * 2 * 141 * 30522 * 512
    row = table[table["shape"] == "M=141 N=30522 K=512"].iloc[0]
    assert peaks is not None and peaks.name == "NVIDIA H100 SXM"
    assert row["calls"] == len(ids) == 1
    assert row["TFLOP/s"] == pytest.approx(flops / seconds / 1e12, rel=1e-6)
    assert row["peak TFLOP/s"] == 989.4
    assert row["% of peak FLOP/s"] == pytest.approx(100 * row["TFLOP/s"] / 989.4)
    assert row["% of peak TB/s"] == pytest.approx(100 * row["TB/s"] / 3.35)
    assert set(table["family"]) >= {"GEMM", "SDPA", "elementwise"}
    gemm_rows = table[table["family"] == "GEMM"]
    assert gemm_rows["calls"].sum() == 26


def test_an_unknown_device_gets_no_fraction_of_peak() -> None:
    trace = read_trace(MI250)  # deviceProperties name "AMD Radeon Graphics": not in the peak table

    table = roofline_table(trace, attribute(trace), device_peaks(trace.device_names))

    assert device_peaks(trace.device_names) is None
    assert "no fraction of peak" in device_sentence(trace, None)
    assert not table.empty and set(table["bound"]) == {"unknown device"}
    assert table["% of peak TB/s"].isna().all() and table["TFLOP/s"].notna().all()


@pytest.mark.parametrize(("name", "device"), [
    ("AMD Instinct MI300X VF", "AMD Instinct MI300X"), ("AMD Instinct MI325X", "AMD Instinct MI325X"),
    ("AMD Instinct MI355X", "AMD Instinct MI355X"), ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
    ("NVIDIA H200", "NVIDIA H200 SXM"), ("NVIDIA H100 PCIe", None), ("NVIDIA H200 NVL", None),
])
def test_device_names_from_device_properties_select_their_peaks(name: str, device: str | None) -> None:
    peaks = device_peaks([name])

    assert (peaks.name if peaks else None) == device
    if peaks is not None:
        assert peaks.source and peaks.hbm_tbs > 0 and math.isfinite(peaks.tflops["bf16"])


# The op families TraceLens prices beyond GEMM, CONV, SDPA forward, elementwise, NORM and reduction. The shapes
# below are what the profiler recorded: torch 2.13's own (the CPU SDPA backward and the four _grouped_mm layouts,
# recorded here with record_shapes=True), and for the vendor ops (vLLM's AITER MoE, Primus-Turbo, Transformer
# Engine's RoPE and cross-entropy) the events of TraceLens's tests (tests/test_perfmodel_extensions.py,
# tests/test_primus_op_categorization.py).
FP8 = "c10::Float8_e4m3fn"


def test_a_causal_gqa_sdpa_backward_counts_the_recompute_and_four_gradient_products() -> None:
    # F.scaled_dot_product_attention(q [2, 4, 64, 32], k, v [2, 2, 64, 32], is_causal=True, enable_gqa=True),
    # then .backward(), profiled on CPU: (grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, ...).
    q, kv = [2, 4, 64, 32], [2, 2, 64, 32]
    shape = OpShape((q, q, kv, kv, q, [2, 4, 64], [], [], [], []),
                    ("float",) * 6 + ("Scalar", "Scalar", "", ""), ("",) * 6 + ("0.", "True", "", ""))

    work = op_work("aten::_scaled_dot_product_flash_attention_for_cpu_backward", shape)

    assert work is not None and work.family == "SDPA"
    # Q·Kᵀ again, then dV, dP, dQ, dK: 2·B·H·N²·(3·d + 2·d); dK, dV summed over the 2 query heads per K/V head.
    products = 2 * 2 * 4 * 64 * 64 * (3 * 32 + 2 * 32)
    assert work.flops == (products + 2 * 64 * (32 + 32) * 1) // 2  # causal: half
    assert work.bytes == 4 * (2 * (2 * 4 * 64 * 32 + 2 * 2 * 2 * 64 * 32) + 2 * 4 * 64 * 32)  # q k v dO; dq dk dv
    assert work.shape.endswith("causal backward")
    forward = op_work("aten::_scaled_dot_product_flash_attention_for_cpu",
                      OpShape((q, kv, kv, [], [], [], []), ("float",) * 3 + ("Scalar", "Scalar", "", ""),
                              ("", "", "", "0.", "True", "", "")))
    assert forward is not None and forward.flops == 2 * 2 * 4 * 64 * 64 * (32 + 32) // 2


@pytest.mark.parametrize(("dims", "flops", "elements"), [
    # A [M, K] × B [G, K, N], offs cutting M (the MoE layout): one weight per group.
    (([48, 16], [3, 16, 8], [3], [], []), 2 * 48 * 16 * 8, 48 * 16 + 3 * 16 * 8 + 48 * 8),
    # [G, M, K] × [G, K, N]: batched.
    (([3, 16, 16], [3, 16, 8], [], [], []), 2 * 3 * 16 * 16 * 8, 3 * 16 * 16 + 3 * 16 * 8 + 3 * 16 * 8),
    # [M, K] × [K, N], offs cutting K (weight gradients): G outputs [M, N].
    (([16, 48], [48, 8], [3], [], []), 2 * 16 * 48 * 8, 16 * 48 + 48 * 8 + 3 * 16 * 8),
    # [G, M, K] × [K, N], offs cutting N: one output [M, N].
    (([3, 16, 16], [16, 48], [3], [], []), 2 * 16 * 16 * 48, 3 * 16 * 16 + 16 * 48 + 16 * 48),
])
def test_each_grouped_mm_layout_counts_the_products_its_groups_do(dims: tuple[list[int], ...], flops: int,
                                                                  elements: int) -> None:
    shape = OpShape(dims, (BF16, BF16, "int", "", ""), ("",) * 5)

    work = op_work("aten::_grouped_mm", shape)

    assert work is not None
    assert (work.family, work.precision) == ("grouped GEMM", "bf16")
    assert (work.flops, work.bytes) == (flops, 2 * elements)


def test_a_scaled_grouped_mm_reads_fp8_writes_bf16_and_finds_its_groups_after_the_scales() -> None:
    # (self, mat2, scale_a, scale_b, offs, bias, scale_result, out_dtype, use_fast_accum): weight gradients, K cut.
    shape = OpShape(([16, 48], [48, 8], [16], [8], [3], [], [], [], []), (FP8, FP8, "float", "float", "int"),
                    ("",) * 9)

    work = op_work("aten::_scaled_grouped_mm", shape)

    assert work is not None and work.precision == "fp8"
    assert (work.flops, work.bytes) == (2 * 16 * 48 * 8, 16 * 48 + 48 * 8 + 2 * 3 * 16 * 8)


def test_a_primus_grouped_gemm_with_per_group_shapes_sums_its_groups() -> None:
    zipped = OpShape(([[128, 512], [64, 512]], [[512, 256], [512, 256]]), (BF16, BF16), ("", ""))
    compact = OpShape(([192, 512], [2, 256, 512]), (BF16, BF16), ("", ""))  # W as [G, N, K]

    per_group = op_work("primus_turbo::grouped_gemm", zipped)
    whole = op_work("primus_turbo::grouped_gemm_impl", compact)

    assert per_group is not None and whole is not None
    assert per_group.flops == whole.flops == 2 * 192 * 512 * 256
    assert per_group.bytes == whole.bytes == 2 * (192 * 512 + 2 * 512 * 256 + 192 * 256)


def test_a_fused_gated_moe_counts_both_projections_of_each_tokens_experts() -> None:
    # vLLM's rocm_aiter_fused_moe: 32 tokens of 4096, 8 experts (w1 [8, 2·7168, 4096] gated, w2 [8, 4096, 7168],
    # FP8), top-2.
    shape = OpShape(([32, 4096], [8, 14336, 4096], [8, 4096, 7168], [32, 2]), (BF16, FP8, FP8, "c10::Float"),
                    ("",) * 4)

    work = op_work("vllm::rocm_aiter_fused_moe", shape)

    assert work is not None and (work.family, work.precision) == ("MoE", "bf16")
    m, k, n, topk = 32, 4096, 7168, 2
    assert work.flops == 2 * m * k * n * topk * 2 + 2 * m * k * n * topk + m * k * (2 * topk - 1)
    experts_hit = 8 * (1 - (6 / 8) ** 32)  # nearly all 8: 32 tokens × 2 picks
    assert work.bytes == pytest.approx(2 * m * k * 2 + experts_hit * n * k * 3 * 1)


def test_moe_dispatch_moves_its_tokens_and_is_judged_on_no_peak() -> None:
    shape = OpShape(([4096, 7168], [4096, 8], [4096, 8]), (BF16, "long int", "float"), ("",) * 3)

    work = op_work("MoEDispatch", shape)

    assert work is not None and (work.family, work.flops, work.bytes) == ("MoE comm", 0, 4096 * 7168 * 2)
    # On a device with a peak table the traffic still gets no fraction of it.
    judged = versus_peak(work, 0.0, 1.0, None, device_peaks(["NVIDIA H100 80GB HBM3"]), 1e-3)
    assert judged["bound"] == "communication" and math.isnan(judged["% of roofline"])


def test_rope_and_cross_entropy_are_vector_work_on_their_elements() -> None:
    rope = op_work("FusedRoPEFunc", OpShape(([4096, 4, 32, 128], [4096, 1, 1, 128]), (BF16, "float"), ("", "")))
    loss = op_work("CrossEntropyFunction", OpShape(([8, 1, 32000], [8, 1]), (BF16, "long int"), ("", "")))

    elements = 4096 * 4 * 32 * 128
    assert rope is not None and (rope.family, rope.flops, rope.bytes) == ("RoPE", 3 * elements, 2 * 2 * elements)
    assert loss is not None and loss.family == "cross-entropy"
    assert (loss.flops, loss.bytes) == (5 * 8 * 32000, 2 * 8 * 32000 + 8 * 8 + 8 * 4)  # logits, targets, fp32 loss
