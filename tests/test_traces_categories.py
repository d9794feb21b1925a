"""Kernel names from both vendors and from Inductor land in the category a performance engineer expects."""

from __future__ import annotations

import pytest

from analysis.traces.analyses.categories import kernel_category, op_category
from analysis.traces.model import CPU_KERNEL, MEMCPY


@pytest.mark.parametrize(("name", "category"), [
    ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1_SN_LDSB0", "GEMM"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>()", "GEMM"),
    ("nvjet_tst_64x8_64x16_2x1_v_bz_TNT", "GEMM"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", "GEMM"),
    ("void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int)", "other"),
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128>>()", "attention"),
    ("attn_fwd", "attention"),
    ("fmha_fwd_d128_bf16", "attention"),
    ("triton_poi_fused_add_gelu_0", "triton_pointwise"),
    ("triton_red_fused_native_layer_norm_1", "triton_reduction"),
    ("triton_per_fused__softmax_2", "triton_persistent"),
    ("triton_tem_fused_mm_3", "triton_template"),
    ("graph_0_cpp_fused_gelu_view_2", "cpp"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>()", "normalization"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>()", "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<bool>>()", "reduction"),
    ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("rcclGenericKernel<1, false>", "communication"),
    ("__amd_rocclr_copyBuffer", "copy"),
    ("void at::native::miopen_convolution_fwd()", "conv"),
    ("some_custom_kernel", "other"),
])
def test_kernel_names_map_to_categories(name: str, category: str) -> None:
    assert kernel_category(name) == category


def test_activity_kind_decides_for_copies_and_cpu_kernels() -> None:
    assert kernel_category("Memcpy DtoD (Device -> Device)", MEMCPY) == "copy"
    assert kernel_category("aten::addmm", CPU_KERNEL) == "GEMM"
    assert kernel_category("my_extension::fused_op", CPU_KERNEL) == "cpp"


def test_grouped_matrix_products_are_gemm_ops() -> None:
    # The MoE layers of torchtitan-style models call these (torch 2.8 and later); Primus-Turbo's are named gemm.
    assert op_category("aten::_grouped_mm") == op_category("aten::_scaled_grouped_mm") == "GEMM"
    assert op_category("primus_turbo::grouped_gemm") == "GEMM"
