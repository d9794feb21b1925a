"""Kernel categories from kernel names: which kind of work a GPU (or Inductor C++) kernel does.

Rules are checked in order; the first match wins. The order matters where names overlap: communication and
copies first (an NCCL kernel name can contain "copy"), then Inductor's generated kernels (their names carry
the fused ops, e.g. ``triton_per_fused_native_layer_norm_0`` must stay a Triton kernel, not normalization),
then vendor library families.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

from analysis.traces.model import CPU_KERNEL, MEMCPY, MEMSET

COMMUNICATION = "communication"
COPY = "copy"
CATEGORIES = (
    "GEMM", "conv", "attention", "triton_pointwise", "triton_reduction", "triton_persistent", "triton_template",
    "triton_other", "cpp", "elementwise", "reduction", "normalization", COPY, COMMUNICATION, "other",
)

# ROCm 7.1 reports copies as kernels; TraceLens reroutes them to memcpy, and so do the readers.
ROCM_LEGACY_COPY = re.compile(r"^(MEMORY_COPY_(HOST_TO_DEVICE|DEVICE_TO_HOST|DEVICE_TO_DEVICE)"
                              r"|__amd_rocclr_copyBuffer(Rect)?(Aligned)?)")
# Names of compiled regions on the host: Inductor's wrapper call (a user_annotation), the autograd function and
# Dynamo's region (cpu_ops). The innermost one around an op names its graph.
COMPILED_REGION = re.compile(r"^## Call CompiledFxGraph (\w+) ##$|^CompiledFunction$|^Torch-Compiled Region")


def _ignoring_case(pattern: str) -> Callable[[str], bool]:
    """A case-insensitive search. An ASCII name (every kernel name seen so far) is searched in lowercase by the
    pattern in lowercase, compiled without IGNORECASE: for ASCII text the same test, and several times faster (re
    scans a 300-character C++ kernel name slowly under IGNORECASE: 20 ms against 4 ms for the rules below on one
    trace's 199 kernel names). Any other name meets the pattern as written."""
    if re.search(r"\\[A-Z]", pattern):  # an escape such as \W would change its meaning in lowercase
        raise ValueError(f"{pattern!r}: a case-insensitive rule cannot hold an upper-case escape")
    lowered = re.compile(pattern.lower()).search

    def search(name: str) -> bool:  # (the pattern as written is compiled on first use, and kept by re's cache)
        return (lowered(name.lower()) if name.isascii() else re.search(pattern, name, re.IGNORECASE)) is not None
    return search


# TraceLens' communication test (case-insensitive rccl|nccl plus its custom all-reduce kernel pattern).
_COMM = _ignoring_case(r"rccl|nccl|cross_device_reduce")
_RULES: tuple[tuple[str, Callable[[str], object]], ...] = (
    (COPY, re.compile(r"^(Memcpy|Memset|MEMORY_COPY_|\[CUDA mem(cpy|set))|__amd_rocclr_(copy|fill)Buffer").search),
    ("triton_pointwise", re.compile(r"^triton_poi_").search),
    ("triton_reduction", re.compile(r"^triton_red_").search),
    ("triton_persistent", re.compile(r"^triton_per_").search),
    ("triton_template", re.compile(r"^triton_tem_|^triton_(mm|bmm|addmm)(_|$)").search),
    ("triton_other", re.compile(r"^triton_").search),
    ("cpp", re.compile(r"(^|_)cpp_fused_").search),
    ("conv", _ignoring_case(r"conv(?!ert)|_fprop|_dgrad|_wgrad|miopen|implicit_gemm|igemm")),
    ("attention", _ignoring_case(r"flash|fmha|sdpa|attn|attention|scaled_dot_product")),
    ("GEMM", _ignoring_case(r"^Cijk_|cutlass|hipblaslt|nvjet|cublas|(?<!fb)gemm|matmul|wvSplitK|xmma"
                            r"|^aten::(mm|addmm|bmm|baddbmm)$|^void (at::native::)?\w*bmm")),
    ("normalization", _ignoring_case(r"(layer|batch|group|instance|rms)_?norm|norm_kernel|RowwiseMoments"
                                     r"|ComputeFusedParams|welford")),
    (COPY, _ignoring_case(r"copy|CatArrayBatched")),
    ("reduction", _ignoring_case(r"reduce_kernel|ReduceOp|reduction|DeviceScan|DeviceReduce|softmax")),
    ("elementwise", _ignoring_case(r"elementwise|pointwise|unrolled|vectorized|Functor|index|gather|scatter"
                                   r"|fill")),
)


@lru_cache(maxsize=65536)
def kernel_category(name: str, kind: int = 0) -> str:
    """Category of one kernel; ``kind`` is the activity kind from :mod:`analysis.traces.model`."""
    if _COMM(name):
        return COMMUNICATION
    if kind in (MEMCPY, MEMSET):
        return COPY
    for category, matches in _RULES:
        if matches(name):
            return category
    if kind == CPU_KERNEL:
        return "cpp"
    return "other"


def is_communication(name: str) -> bool:
    return _COMM(name)


# --- op categories ------------------------------------------------------------------------------------------
# The categories of the ops tables (what a PyTorch op does), after TraceLens' ops_summary_by_category. An op is
# classified by its name; a kernel with no launching op, or one launched by an op these rules do not know
# (``other``), or a Triton/C++ kernel of an Inductor graph, is classified by its kernel category instead.
GEMM, CONV, SDPA, NORM = "GEMM", "CONV", "SDPA", "NORM"
ELEMENTWISE, REDUCTION, MEMORY, OTHER = "elementwise", "reduction", "copy/memory", "other"
OP_CATEGORIES = (GEMM, CONV, SDPA, NORM, ELEMENTWISE, REDUCTION, MEMORY, COMMUNICATION, OTHER)

_OP_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (COMMUNICATION, re.compile(r"^(record_param_comms|c10d::|nccl:)|all_?reduce|all_?gather|reduce_scatter"
                               r"|all_to_all|alltoall")),
    (SDPA, re.compile(r"scaled_dot_product|flash_attention|flash_attn|efficient_attention|_cudnn_attention"
                      r"|fmha|mha_(fwd|bwd)|attention", re.IGNORECASE)),
    (CONV, re.compile(r"conv(olution)?(\d|_|$|\w*backward)|^aten::(cudnn|miopen|mkldnn)_convolution")),
    (GEMM, re.compile(r"^aten::(mm|addmm|_addmm_activation|bmm|baddbmm|addbmm|_scaled_mm|matmul|linear|mv|addmv"
                      r"|dot|_int_mm|_grouped_mm|_scaled_grouped_mm)$|(?<!fb)gemm", re.IGNORECASE)),
    (NORM, re.compile(r"(layer|batch|group|instance|rms)_norm")),
    (REDUCTION, re.compile(r"^aten::(sum|mean|max|min|amax|amin|argmax|argmin|norm|linalg_vector_norm|std|var"
                           r"|std_mean|var_mean|logsumexp|cumsum|cumprod|prod|all|any|topk|sort|_?softmax"
                           r"|_?log_softmax|_softmax_backward_data|_log_softmax_backward_data)$")),
    (MEMORY, re.compile(r"^aten::(copy_|_to_copy|to|clone|contiguous|cat|stack|index_select|gather|scatter_?"
                        r"|scatter_add_?|index|index_put_|_index_put_impl_|embedding|embedding_dense_backward"
                        r"|fill_|zero_|zeros|zeros_like|ones|ones_like|full|new_zeros|empty\w*|resize_"
                        r"|_local_scalar_dense|item|repeat|narrow_copy|masked_select|nonzero|flip|roll)$")),
)
# Pointwise ATen ops (one output element per input element, after broadcasting): the elementwise roofline.
ELEMENTWISE_OPS = frozenset(f"aten::{n}{suffix}" for n in (
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "exp", "exp2", "log", "log2", "log1p", "sqrt", "rsqrt",
    "pow", "reciprocal", "sin", "cos", "tanh", "sigmoid", "relu", "gelu", "silu", "mish", "hardtanh",
    "leaky_relu", "elu", "softplus", "clamp", "clamp_min", "clamp_max", "where", "maximum", "minimum", "eq",
    "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "bitwise_and", "bitwise_or",
    "masked_fill", "threshold", "threshold_backward", "gelu_backward", "silu_backward", "sigmoid_backward",
    "tanh_backward", "nan_to_num", "sign", "floor", "ceil", "round", "trunc", "erf", "addcmul", "addcdiv",
    "lerp", "logit", "logit_backward", "dropout", "native_dropout", "hardswish", "hardsigmoid",
) for suffix in ("", "_"))
_KERNEL_TO_OP = {
    "GEMM": GEMM, "triton_template": GEMM, "conv": CONV, "attention": SDPA, "normalization": NORM,
    "elementwise": ELEMENTWISE, "triton_pointwise": ELEMENTWISE, "reduction": REDUCTION,
    "triton_reduction": REDUCTION, "triton_persistent": REDUCTION, COPY: MEMORY, COMMUNICATION: COMMUNICATION,
}


@lru_cache(maxsize=65536)
def op_category(op_name: str) -> str:
    """Category of a PyTorch op by its name; ``other`` when no rule knows it."""
    if op_name in ELEMENTWISE_OPS:
        return ELEMENTWISE
    for category, pattern in _OP_RULES:
        if pattern.search(op_name):
            return category
    return OTHER


def op_category_of_kernel(kernel_name: str, kind: int = 0) -> str:
    """The op category a kernel's own name points to (for kernels without a known launching op)."""
    return _KERNEL_TO_OP.get(kernel_category(kernel_name, kind), OTHER)


def launch_category(op_name: str | None, kernel_name: str, kind: int = 0) -> str:
    """Category of one kernel launch: its op's category, else (no op, or an op no rule knows) its kernel's."""
    category = op_category(op_name) if op_name else OTHER
    return category if category != OTHER else op_category_of_kernel(kernel_name, kind)


# --- TraceLens's op categories (``--categories tracelens``) --------------------------------------------------
# The labels TraceLens's ops_summary_by_category gives (AMD-AGI/TraceLens, PerfModel/torch_op_mapping.py, read
# 2026-08): an op name it models or lists maps to its family's label (GEMM, CONV_fwd/bwd, SDPA_fwd/bwd, NORM_fwd/
# bwd, elementwise, reduce, ...); else a name starting ``triton`` is ``triton`` and one starting
# ``record_param_comms`` is ``record_param_comms``; else, when the op's first kernel (by start) is an ATen native
# kernel (``void at::native...``), the first of ``elementwise``, ``reduce``, ``multi_tensor_apply`` its name
# contains; else ``other``. Written here from those rules; unlike this project's own categories, softmax is
# ``other``, ``aten::copy_`` is ``elementwise``, ``aten::_flash_attention_forward`` is ``other``.
TL_GEMM, TL_OTHER = "GEMM", "other"
_TL_NAMED: dict[str, str] = {
    **dict.fromkeys((
        "aten::mm", "aten::addmm", "aten::_scaled_mm", "trtllm::cublas_scaled_mm", "bitsandbytes::int8_linear_matmul",
        "aten::bmm", "tex_ts::te_gemm_ts", "aten::baddbmm", "vllm::gemm_with_dynamic_quant", "_Linear_yfwd_mm",
        "_LinearBackward_xgrad_mm", "_LinearBackward_wgrad_mm", "_LayerNormLinear_yfwd_mm",
        "_LayerNormLinearBackward_xgrad_mm", "_LayerNormLinearBackward_wgrad_mm",
        "primus_turbo_cpp_extension::hipblaslt_gemm_fp8", "primus_turbo::hipblaslt_gemm_fp8",
        "primus_turbo_cpp_extension::hipblaslt_gemm_fp4", "primus_turbo::hipblaslt_gemm_fp4", "aiter::gemm_a4w4",
        "aiter::_gemm_a4w4_asm"), TL_GEMM),
    **dict.fromkeys(("aten::convolution", "ConvBias_", "ConvBiasReLU_", "aten::miopen_convolution",
                     "aten::cudnn_convolution"), "CONV_fwd"),
    **dict.fromkeys(("aten::convolution_backward", "ConvBias_Backward", "ConvBiasReLU_Backward"), "CONV_bwd"),
    **dict.fromkeys((
        "FlashAttnFunc", "flash_attn::_flash_attn_forward", "flash_attn::_flash_attn_varlen_forward",
        "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_flash_attention", "aiter::_flash_attn_forward", "aiter::wrapper_fmha_v3_fwd",
        "aiter::mha_fwd", "aiter::fmha_v3_fwd", "flash_attn_3::fwd", "vllm::unified_attention_with_output",
        "EvoformerAttention", "aten::_efficient_attention_forward"), "SDPA_fwd"),
    **dict.fromkeys((
        "flash_attn::_flash_attn_backward", "flash_attn::_flash_attn_varlen_backward", "aiter::_flash_attn_backward",
        "aiter::wrapper_fmha_v3_bwd", "aiter::mha_bwd", "FlashAttnFuncBackward", "FusedAttnFuncBackward",
        "aten::_scaled_dot_product_cudnn_attention_backward", "aten::_scaled_dot_product_efficient_attention_backward",
        "aten::_scaled_dot_product_flash_attention_backward", "aten::_efficient_attention_backward"), "SDPA_bwd"),
    **dict.fromkeys((
        *(f"aten::{p}{kind}_norm" for p in ("", "native_", "miopen_", "cudnn_")
          for kind in ("batch", "layer", "group", "instance")),
        "aten::_fused_rms_norm", "primus::fused_ln_modulate"), "NORM_fwd"),
    **dict.fromkeys((
        *(f"aten::{p}{kind}_norm_backward" for p in ("", "native_", "miopen_", "cudnn_")
          for kind in ("batch", "layer", "group", "instance", "rms")),
        "aten::_fused_rms_norm_backward", "primus::fused_ln_modulate_backward"), "NORM_bwd"),
    **dict.fromkeys((
        *(f"aten::{n}" for n in ("copy", "copy_", "clamp_min", "clamp_min_", "clamp_max", "clamp_max_", "sigmoid",
                                 "rsqrt", "silu", "neg", "pow", "div", "div_", "mul", "mul_", "add", "add_",
                                 "sigmoid_backward", "threshold_backward")),
        *(f"aten::replication_pad{d}d" for d in (1, 2, 3)), *(f"aten::upsample_nearest{d}d" for d in (1, 2, 3)),
        "LigerSiLUMulFunction", "primus_turbo_cpp_extension::quantize_fp8_tensorwise",
        "primus_turbo::quantize_fp8_tensorwise", "primus_turbo_cpp_extension::quantize_mxfp4_dual",
        "primus_turbo::quantize_mxfp4_dual", "primus::quantize_mxfp4_dual"), "elementwise"),
    **dict.fromkeys(tuple(f"aten::{n}" for n in ("sum", "mean", "max", "min", "norm", "linalg_norm", "std", "var",
                                                 "logsumexp", "cumsum", "cumprod", "amin", "amax")), "reduce"),
    **dict.fromkeys((
        "primus_turbo::grouped_gemm", "primus_turbo::grouped_gemm_impl", "primus_turbo_cpp_extension::grouped_gemm",
        "primus_turbo::grouped_gemm_variable_k", "primus_turbo::grouped_gemm_variable_k_impl",
        "primus_turbo_cpp_extension::grouped_gemm_variable_k", "primus_turbo_cpp_extension::ck_grouped_gemm",
        "primus_turbo_cpp_extension::ck_grouped_gemm_variable_k"), "GroupedGEMM_fwd"),
    "MoEDispatch": "MoE_comm_fwd", "MoECombine": "MoE_comm_fwd", "TokenPermuteMaskMap": "MoE_comm_fwd",
    "_OperationFuserAutogradFunction": "MoE_comm_fwd", "MoEDispatchBackward": "MoE_comm_bwd",
    "MoECombineBackward": "MoE_comm_bwd", "TokenPermuteMaskMapBackward": "MoE_comm_bwd",
    "_OperationFuserAutogradFunctionBackward": "MoE_comm_bwd",
    "DaoAILab::_causal_conv1d_fwd_cpp": "SSM_fwd", "MambaSplitConv1dScanCombinedFn": "SSM_fwd",
    "MambaSplitConv1dScanCombinedFnBackward": "SSM_bwd", "DaoAILab::_causal_conv1d_bwd_cpp": "SSM_bwd",
    "FusedRoPEFunc": "RoPE_fwd", "FusedRoPEFuncBackward": "RoPE_bwd",
    "CrossEntropyFunction": "CrossEntropy_fwd", "CrossEntropyFunctionBackward": "CrossEntropy_bwd",
    **dict.fromkeys(("aiter::moe_sorting_opus_fwd", "aiter::moe_align_block_size", "_moe_C::moe_align_block_size",
                     "aiter::moe_sum", "aiter::topk_softmax", "aiter::topk_softmax_asm", "aiter::topk_sigmoid",
                     "aiter::grouped_topk", "aiter::moe_fused_gate"), "MoE_aux"),
    "_C_cache_ops::reshape_and_cache_flash": "InferenceAttention",
    "_C_cache_ops::concat_and_cache_mla": "InferenceAttention",
}
_TL_PREFIXES = (("triton", "triton"), ("record_param_comms", "record_param_comms"))
_TL_ATEN_KERNEL = "void at::native"
_TL_KERNEL_WORDS = ("elementwise", "reduce", "multi_tensor_apply")


@lru_cache(maxsize=65536)
def tracelens_op_category(launcher: str, first_kernel: str) -> str:
    """TraceLens's category of one launcher (an op, or the runtime call of a kernel no op encloses) from its name
    and the name of the first kernel it launched."""
    named = _TL_NAMED.get(launcher)
    if named is not None:
        return named
    for prefix, category in _TL_PREFIXES:
        if launcher.startswith(prefix):
            return category
    if first_kernel.startswith(_TL_ATEN_KERNEL):
        for word in _TL_KERNEL_WORDS:
            if word in first_kernel:
                return word
    return TL_OTHER


def tracelens_launcher_category(runtime_name: str) -> str:
    """TraceLens's kernel_summary label for a kernel whose launch no op encloses: ``graph`` for a graph launch,
    else ``runtime``."""
    lowered = runtime_name.lower()
    return "graph" if "cudagraph" in lowered or "graphlaunch" in lowered else "runtime"
