"""The organized kernel's timing line runs on today's benchmarker whatever torch version wrote it."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.kernels.benchmark_line import (
    active_benchmarker,
    find_benchmark_line,
    normalize_device_indices,
    prepare_kernel_source,
    rewrite_benchmark_line,
)

FIXTURES = Path(__file__).parent / "fixtures" / "kernels"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("    ms = do_bench(lambda: call(args), rep=40, fast_flush=True)",
         "    ms = do_bench(lambda: call(args), rep=100, warmup=10)"),
        ("    ms = benchmarker.benchmark_gpu(lambda: call(args), rep=40, fast_flush=True)",
         "    ms = benchmarker.benchmark_gpu(lambda: call(args), rep=100, warmup=10)"),
        ('    ms = benchmarker.benchmark_gpu(lambda: call(args), rep=1000, warmup=100, return_mode="median")',
         "    ms = benchmarker.benchmark_gpu(lambda: call(args), rep=100, warmup=10)"),
        ("    ms = benchmarker.benchmark(lambda: call(args), device='cuda:3', rep=40)",
         "    ms = benchmarker.benchmark(lambda: call(args), device='cuda:0', rep=100, warmup=10)"),
    ],
)
def test_every_form_gets_rep_and_warmup_and_loses_fast_flush(line: str, expected: str) -> None:
    source = f"if __name__ == '__main__':\n{line}\n    print(ms)\n"
    expected_source = f"if __name__ == '__main__':\n{expected}\n    print(ms)\n"
    assert rewrite_benchmark_line(source, rep=100, warmup=10) == expected_source


def test_median_is_only_written_where_the_benchmarker_accepts_it() -> None:
    source = "    ms = benchmarker.benchmark(lambda: call(args), device='cuda', rep=40)\n"
    assert "return_mode" not in rewrite_benchmark_line(source, return_mode="median", env={})
    kept = rewrite_benchmark_line(source, return_mode="median", env={"TORCHINDUCTOR_USE_EXPERIMENTAL_BENCHMARKER": "0"})
    assert "return_mode='median'" in kept
    assert "return_mode='min'" in rewrite_benchmark_line(source, return_mode="min", env={})
    triton_line = "    ms = do_bench(lambda: call(args), rep=40)\n"
    assert "return_mode='median'" in rewrite_benchmark_line(triton_line, return_mode="median", env={})


def test_active_benchmarker_follows_the_environment() -> None:
    assert active_benchmarker({}) == "inductor"
    assert active_benchmarker({"TORCHINDUCTOR_USE_TORCH_PROFILER_BENCHMARKER": "1"}) == "profiler"
    assert active_benchmarker({"TORCHINDUCTOR_USE_EXPERIMENTAL_BENCHMARKER": "0"}) == "triton"
    assert active_benchmarker({}, "do_bench") == "triton"


def test_device_indices_become_zero() -> None:
    source = (FIXTURES / "handwritten" / "torch24_red_def_triton.py").read_text()
    fixed = prepare_kernel_source(source)
    for old in ("cuda:3", "_DeviceGuard(3)", "set_device(3)", "get_raw_stream(3)", "index=3"):
        assert old in source and old not in fixed
    assert "stream=stream3" in fixed  # variable names are left alone
    assert "ms = do_bench(lambda: call(args), rep=100, warmup=10)" in fixed


def test_a_file_without_a_harness_is_unchanged() -> None:
    source = "import triton\n\ndef f():\n    return 1\n"
    assert find_benchmark_line(source) is None
    assert rewrite_benchmark_line(source) == source
    assert normalize_device_indices(source) == source
