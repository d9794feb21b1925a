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
from analysis.traces.model import OpShape
from analysis.traces.ops import attribute
from analysis.traces.roofline import device_peaks, device_sentence, op_work, roofline_table

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
