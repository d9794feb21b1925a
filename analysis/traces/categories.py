"""Kernel categories from kernel names: which kind of work a GPU (or Inductor C++) kernel does.

Rules are checked in order; the first match wins. The order matters where names overlap: communication and
copies first (an NCCL kernel name can contain "copy"), then Inductor's generated kernels (their names carry
the fused ops, e.g. ``triton_per_fused_native_layer_norm_0`` must stay a Triton kernel, not normalization),
then vendor library families.
"""

from __future__ import annotations

import re
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
# TraceLens' communication test (case-insensitive rccl|nccl plus its custom all-reduce kernel pattern).
_COMM = re.compile(r"rccl|nccl|cross_device_reduce", re.IGNORECASE)
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (COPY, re.compile(r"^(Memcpy|Memset|MEMORY_COPY_|\[CUDA mem(cpy|set))|__amd_rocclr_(copy|fill)Buffer")),
    ("triton_pointwise", re.compile(r"^triton_poi_")),
    ("triton_reduction", re.compile(r"^triton_red_")),
    ("triton_persistent", re.compile(r"^triton_per_")),
    ("triton_template", re.compile(r"^triton_tem_|^triton_(mm|bmm|addmm)(_|$)")),
    ("triton_other", re.compile(r"^triton_")),
    ("cpp", re.compile(r"(^|_)cpp_fused_")),
    ("conv", re.compile(r"conv(?!ert)|_fprop|_dgrad|_wgrad|miopen|implicit_gemm|igemm", re.IGNORECASE)),
    ("attention", re.compile(r"flash|fmha|sdpa|attn|attention|scaled_dot_product", re.IGNORECASE)),
    ("GEMM", re.compile(r"^Cijk_|cutlass|hipblaslt|nvjet|cublas|(?<!fb)gemm|matmul|wvSplitK|xmma"
                        r"|^aten::(mm|addmm|bmm|baddbmm)$|^void (at::native::)?\w*bmm", re.IGNORECASE)),
    ("normalization", re.compile(r"(layer|batch|group|instance|rms)_?norm|norm_kernel|RowwiseMoments"
                                 r"|ComputeFusedParams|welford", re.IGNORECASE)),
    (COPY, re.compile(r"copy|CatArrayBatched", re.IGNORECASE)),
    ("reduction", re.compile(r"reduce_kernel|ReduceOp|reduction|DeviceScan|DeviceReduce|softmax", re.IGNORECASE)),
    ("elementwise", re.compile(r"elementwise|pointwise|unrolled|vectorized|Functor|index|gather|scatter"
                               r"|fill", re.IGNORECASE)),
)


@lru_cache(maxsize=65536)
def kernel_category(name: str, kind: int = 0) -> str:
    """Category of one kernel; ``kind`` is the activity kind from :mod:`analysis.traces.model`."""
    if _COMM.search(name):
        return COMMUNICATION
    if kind in (MEMCPY, MEMSET):
        return COPY
    for category, pattern in _RULES:
        if pattern.search(name):
            return category
    if kind == CPU_KERNEL:
        return "cpp"
    return "other"


def is_communication(name: str) -> bool:
    return bool(_COMM.search(name))
