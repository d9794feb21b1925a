"""benchmarks/identical_bias.py's bookkeeping: the same code found in another graph, and a pair's ratio per round."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from foundation.formats.paired_rounds import RoundRecord, Visit, round_file, write_round

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import identical_bias  # noqa: E402

WRAPPER = (Path(__file__).parent / "fixtures" / "kernels" / "cpp213" / "graph_cpp_wrapper.py").read_text()
KERNEL = "cpp_fused__softmax_gelu_mul_native_layer_norm_sin_sum_0"


def test_a_kernel_is_found_in_another_models_graph_under_its_name_and_profiler_label_there() -> None:
    """GPT2's graph names the kernel ``…_4``, labelled ``graph_1_…``; Albert's names the same code ``…_2``,
    labelled ``graph_5_…``."""
    gpt2 = WRAPPER.replace(f"graph_0_{KERNEL}", f"graph_1_{KERNEL[:-2]}_4").replace(KERNEL, f"{KERNEL[:-2]}_4")
    albert = WRAPPER.replace(f"graph_0_{KERNEL}", f"graph_5_{KERNEL[:-2]}_2").replace(KERNEL, f"{KERNEL[:-2]}_2")
    code = next(k.source for k in identical_bias.embedded_kernels(gpt2) if k.variable.endswith("_4"))

    assert identical_bias.kernel_with_code(albert, code) == f"{KERNEL[:-2]}_2"
    assert identical_bias.kernel_with_code(albert, code.replace("0.5", "0.25")) is None


def test_a_pairs_ratio_per_round_is_base_over_pr_of_the_median_visit(tmp_path: Path) -> None:
    files = []
    for number, (base_ms, pr_ms) in enumerate([(2.0, 1.0), (3.0, 2.0)], start=1):
        visits = [Visit("base", "cpp/k.cpp", 0, 0, 0.0, [base_ms, base_ms, 9.0]),
                  Visit("pr", "cpp/k_2.cpp", 0, 1, 0.1, [pr_ms]), Visit("pr", "cpp/k_2.cpp", 0, 2, 0.2, [pr_ms]),
                  Visit("base", "cpp/k.cpp", 0, 3, 0.3, [base_ms])]
        record = RoundRecord("kernels", number, ["base", "pr"], "2026-01-01T00:00:00", 1.0, visits=visits)
        files.append(round_file(tmp_path, number))
        write_round(files[-1], record)

    ratios = identical_bias.round_ratios(files, "cpp/k.cpp", "cpp/k_2.cpp")

    assert ratios == [2.0, 1.5]
    ratio, low, high = identical_bias.block_ratio([math.log(r) for r in ratios])
    assert math.isclose(ratio, math.sqrt(3.0)) and low < ratio < high
