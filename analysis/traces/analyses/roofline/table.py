"""Which family model prices which op (each family module's ``MODELS``, an op in one table only; the attention
over a KV cache apart, as it needs the serving step), :func:`op_work` that dispatches by op name, and why an op
stays unpriced (:func:`unpriced_reason`, :data:`UNPRICED_REASONS`).
"""

from __future__ import annotations

from analysis.traces.analyses.roofline import (
    attention,
    conv,
    elementwise,
    gemm,
    inductor,
    mhc,
    moe,
    norm,
    quantize,
    reduction,
    rope,
)
from analysis.traces.analyses.roofline.attention import KV_ATTENTION_OPS
from analysis.traces.analyses.roofline.work import Model, ModelEntry, OpWork
from analysis.traces.analyses.serving_steps import NO_STEP, StepSums
from analysis.traces.model import OpShape


def op_work(name: str, shape: OpShape, step: StepSums | str | None = None) -> OpWork | None:
    """FLOPs and bytes of one op call, or None when the op has no model or its shapes are not usable. ``step``:
    the sums of the serving step around the call (:mod:`analysis.traces.analyses.serving_steps`), which attention over a
    KV cache (:data:`KV_ATTENTION_OPS`) needs; a text (why there are none) or None leaves such an op unpriced."""
    kv = KV_ATTENTION_OPS.get(name)
    try:
        if kv is not None:
            return kv(shape, step) if isinstance(step, StepSums) else None
        model = _model_of(name)
        return None if model is None else model(name, shape)
    except (IndexError, TypeError, ValueError, ZeroDivisionError):
        return None  # a shape list that does not fit the op's schema: the op stays in the tables, unpriced


def _model_of(name: str) -> Model | None:
    """The model that prices op ``name`` (:data:`_MODELS`), None when no family has one."""
    return next((model for ops, model in _MODELS if name in ops), None)


# Every family's models (an op is in one table only, so the order does not matter).
_MODELS: tuple[ModelEntry, ...] = tuple(
    entry for family in (gemm, conv, attention, elementwise, norm, reduction, moe, rope, quantize, mhc, inductor)
    for entry in family.MODELS)
_LABEL_ONLY = "TraceLens labels it but has no FLOP/byte model either"
# Ops TraceLens's performance model names (PerfModel/torch_op_mapping.py and its extensions, read 2026-11) that
# stay unpriced here, with the reason the unified summary gives.
UNPRICED_REASONS: dict[str, str] = {
    **dict.fromkeys(("MambaSplitConv1dScanCombinedFnBackward", "DaoAILab::_causal_conv1d_bwd_cpp",
                     "CrossEntropyFunctionBackward", "MoEDispatchBackward", "MoECombineBackward",
                     "TokenPermuteMaskMap", "TokenPermuteMaskMapBackward", "aiter::moe_sorting_opus_fwd",
                     "aiter::moe_align_block_size", "_moe_C::moe_align_block_size",
                     "_C_cache_ops::concat_and_cache_mla", "aiter::get_mla_metadata_v1",
                     "aiter::indexer_score_topk"), _LABEL_ONLY),
    **dict.fromkeys(("aten::copy_", "aten::copy"), "a copy may cross the host link (host to device), which the HBM "
                    "roofline does not judge"),
    **dict.fromkeys(("_C_custom_ar::all_reduce", "_C_custom_ar::qr_all_reduce", "aiter::all_gather_reg",
                     "aiter::reduce_scatter", "aiter::fused_allreduce_rmsnorm", "aiter::fused_allreduce_rmsnorm_",
                     "sgl_kernel::all_reduce_reg", "sgl_kernel::qr_all_reduce", "sglang::reg_all_gather_into_tensor"),
                    "a collective: its traffic crosses the links between GPUs, which the HBM roofline does not judge"),
    **dict.fromkeys(("ConvBias_Backward", "ConvBiasReLU_Backward"),
                    "its record holds only the incoming gradient: the conv's shapes are on its forward's record "
                    "(TraceLens pairs the two by sequence number, which this reader does not keep)"),
}


def unpriced_reason(name: str, shape: OpShape | None, step: StepSums | str | None = None) -> str:
    """Why :func:`op_work` gives an op call no FLOPs and bytes (call it only when it gave none)."""
    if shape is None:
        return "no arguments recorded (profile with record_shapes=True)"
    if name in KV_ATTENTION_OPS and not isinstance(step, StepSums):
        return f"attention over a KV cache: {step or NO_STEP}"
    if _model_of(name) is not None or name in KV_ATTENTION_OPS:
        return "its recorded arguments do not fit its family's model (shapes, dtypes or flags)"
    return UNPRICED_REASONS.get(name, "no FLOP/byte model for this op")
