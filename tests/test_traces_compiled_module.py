"""``python <compiled graph>.py -p`` output: per-kernel tables from its stdout."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.traces import read_trace
from analysis.traces.analyses.breakdown import top_kernels
from analysis.traces.readers.compiled_module_profile import parse_compiled_module_profile, read_compiled_module_profile
from foundation.errors import UserError

CPU_OUTPUT = Path(__file__).parent / "fixtures" / "traces" / "cpu_graph_module_p_output.txt"


def test_cpu_output_gives_the_cpp_kernels_from_the_profiler_table() -> None:
    profile = read_compiled_module_profile(CPU_OUTPUT)

    table = top_kernels(read_trace(CPU_OUTPUT), n=None).set_index("name")
    assert profile.wall_ms == pytest.approx(0.5)
    assert profile.busy_percent is None  # CPU: "No device detected", no busy line
    assert profile.category_kernels.empty
    assert table.loc["aten::addmm", "count"] == 90
    assert table.loc["aten::addmm", "total ms"] == pytest.approx(0.86519)
    assert any(name.startswith("graph_0_cpp_fused_") for name in table.index)


def test_gpu_output_category_tables_are_parsed() -> None:
    # Written in the layout of torch 2.13's parse_profile_event_list (tabulate "simple"); no GPU run was at hand.
    text = "\n".join([
        "0.001234", "0.001300",
        "Profiling result for a compiled module of benchmark BertForMaskedLM:",
        "Chrome trace for the profile is written to /tmp/compiled_module_profile.json",
        "", "  == triton_pointwise category kernels == ",
        "Kernel                                Self CUDA TIME (ms)    Count  Percent",
        "----------------------------------  ---------------------  -------  ---------",
        "triton_poi_fused_add_gelu_0                        0.0120        1  9.23%",
        "triton_poi_fused_embedding_1                       0.0040        2  3.08%",
        "Total                                              0.0160           12.31%",
        "", "  == unknown category kernels == ",
        "Kernel                                Self CUDA TIME (ms)    Count  Percent",
        "----------------------------------  ---------------------  -------  ---------",
        "nvjet_tst_128x64_64x4_1x2_h_bz_TNT                  0.0800        4  61.54%",
        "Total                                              0.0800           61.54%",
        "",
        "Percent of time when CUDA is busy: 73.85%",
        "Total wall time 0.130 ms",
        "Output for tabulate: BertForMaskedLM, 12.31%, 0.00%, 0.00%, 0.00%, 61.54%, 73.85%, 0.130ms",
    ])

    profile = parse_compiled_module_profile(text)

    assert profile.benchmark == "BertForMaskedLM"
    assert profile.busy_percent == pytest.approx(73.85)
    assert profile.tabulate["busy"] == "73.85"
    assert profile.category_kernels["kernel"].tolist() == [
        "triton_poi_fused_add_gelu_0", "triton_poi_fused_embedding_1", "nvjet_tst_128x64_64x4_1x2_h_bz_TNT"]
    table = top_kernels(profile.to_trace_data(), n=None).set_index("name")
    assert table.loc["nvjet_tst_128x64_64x4_1x2_h_bz_TNT", "category"] == "GEMM"
    assert table.loc["triton_poi_fused_embedding_1", "mean us"] == pytest.approx(2.0)


def test_text_that_is_not_p_output_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not the output of a compiled module"):
        parse_compiled_module_profile("0.000500\n", tmp_path / "x.txt")
