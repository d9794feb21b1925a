"""A kernel keeps its identity when Inductor renumbers it or when torch's file format drifts (2.4 → 2.13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.kernels.identity import (
    KernelIdentity,
    KernelParseError,
    identify_cpp,
    identify_triton,
    kernel_num_gb,
    legacy_key,
    seed_key,
    triton_numels,
)
from foundation.formats.kernel_index import embedded_kernels

FIXTURES = Path(__file__).parent / "fixtures" / "kernels"


def read(relative: str) -> str:
    return (FIXTURES / relative).read_text()


def test_real_213_kernels_get_category_name_and_shape() -> None:
    cases = {
        "triton213/triton_poi_fused_add_relu_sin_0.py": ("pointwise", "x512"),
        "triton213/triton_poi_fused_add_t_0.py": ("pointwise", "x48_y64"),
        "triton213/triton_per_fused__softmax_0.py": ("persistent_reduction", "x8_r0_64"),
        "triton213/triton_red_fused_sum_0.py": ("reduction", "x4_r0_4096"),
    }
    for relative, (category, shape) in cases.items():
        identity = identify_triton(read(relative))
        assert isinstance(identity, KernelIdentity)
        assert identity.kernel_name == Path(relative).stem
        assert (identity.category, identity.shape_key) == (category, shape), relative
        assert len(identity.body_hash) == 16


def test_renumbered_kernel_keeps_body_hash_but_not_its_name() -> None:
    source = read("triton213/triton_per_fused__softmax_0.py")
    renumbered = source.replace("triton_per_fused__softmax_0", "triton_per_fused__softmax_17")
    renumbered = renumbered.replace("'backend_hash': '", "'backend_hash': 'OTHERGPU")
    renumbered = "# KERNEL CALLS: 3\n" + renumbered.replace("tmp0 = ", "# a comment\n    tmp0 = ", 1)
    a, b = identify_triton(source), identify_triton(renumbered)
    assert a.kernel_name != b.kernel_name
    assert a.match_key == b.match_key
    assert a.legacy_key == b.legacy_key == "triton_per_fused__softmax_x8_r64"


def test_a_changed_body_changes_the_hash() -> None:
    source = read("triton213/triton_poi_fused_add_relu_sin_0.py")
    changed = source.replace("tl_math.sin(", "tl_math.cos(")
    assert changed != source
    assert identify_triton(source).body_hash != identify_triton(changed).body_hash


def test_argument_types_are_part_of_the_identity() -> None:
    source = read("triton213/triton_poi_fused_add_relu_sin_0.py")
    half = source.replace("'in_ptr0': '*fp32'", "'in_ptr0': '*fp16'")
    assert identify_triton(source).body_hash != identify_triton(half).body_hash


def test_torch24_and_torch25_forms_of_one_kernel_pair() -> None:
    old = identify_triton(read("handwritten/torch24_red_def_triton.py"))
    new = identify_triton(read("handwritten/torch25_red_named.py"))
    assert old.kernel_name == "triton_red_fused_sum_3"  # from inductor_meta, the def is `triton_`
    assert new.kernel_name == "triton_red_fused_sum_7"
    assert old.category == new.category == "reduction"
    assert old.shape_key == new.shape_key == "x512_r0_1024"  # rnumel read as r0
    assert old.body_hash == new.body_hash
    assert old.legacy_key == new.legacy_key == "triton_red_fused_sum_x512_r1024"


def test_dynamic_shapes_come_from_get_args() -> None:
    source = read("handwritten/torch213_poi_dynamic.py")
    assert identify_triton(source).shape_key == "x6144"
    assert triton_numels(source, args=[None, None, 96, 1024]) == {"x": 1024}
    stripped = source.replace("return arg_0, arg_1, 96, 6144,", "return arg_0, arg_1")
    assert identify_triton(stripped).shape_key == "x?"


def test_legacy_and_seed_keys_use_zero_for_a_missing_r0_numel() -> None:
    numels = {"x": 512}
    assert seed_key("triton_poi_fused_add_3", numels) == "triton_poi_fused_add_3_x512_r0"
    assert legacy_key("triton_poi_fused_add_3", numels) == "triton_poi_fused_add_x512_r0"
    assert seed_key("triton_per_fused_mul_8_c2pedc7abc", {"x": 4, "r0_": 8}) == "triton_per_fused_mul_8_x4_r8"
    assert legacy_key("triton_poi_fused__to_copy_0.9d1bf481", numels) == "triton_poi_fused__to_copy_x512_r0"


def test_embedded_kernel_is_the_same_kernel_as_its_file() -> None:
    (embedded,) = embedded_kernels(read("triton213/graph_softmax_wrapper.py"))
    assert embedded.variable == "triton_per_fused__softmax_0"
    assert identify_triton(embedded.source) == identify_triton(read("triton213/triton_per_fused__softmax_0.py"))


def test_cpp_kernel_identity_ignores_the_profiler_line_and_graph_ordinal() -> None:
    (kernel,) = embedded_kernels(read("cpp213/graph_cpp_wrapper.py"))
    assert kernel.backend == "cpp"
    plain = "\n".join(line for line in kernel.source.splitlines() if "RAIIAtenRecordFunctionHandle" not in line)
    a = identify_cpp(kernel.variable, kernel.source, kernel.arg_types)
    b = identify_cpp(kernel.variable.replace("_0", "_4"), plain, kernel.arg_types)
    assert a.category == "cpp" and a.shape_key == "x0_32_x1_128"
    assert a.body_hash == b.body_hash
    assert a.kernel_name != b.kernel_name


def test_num_gb_is_read_from_the_harness() -> None:
    assert kernel_num_gb(read("handwritten/torch24_red_def_triton.py")) == pytest.approx(0.002101248)


def test_text_without_a_kernel_is_refused() -> None:
    with pytest.raises(KernelParseError, match="kernel name"):
        identify_triton("@triton_heuristics.pointwise(\n)\nx = 1\n")
