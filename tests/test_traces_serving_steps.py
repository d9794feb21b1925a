"""Attention over a KV cache, priced from the serving engine's step annotation around it: the three engines'
annotation forms parsed into the per-step sums, each op's FLOPs and bytes checked against a hand computation on
real model shapes (Llama-3-8B decode of 32 requests at context 2,048; a two-prompt prefill; Qwen3-Next's gated-delta
attention), and the unified summary of a real vLLM trace excerpt: unpriced (with the reason) until a step annotation
encloses the call, then priced, one row per step context."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from analysis.traces import read_trace
from analysis.traces.analyses.op_shapes import unified_perf_summary
from analysis.traces.analyses.ops import attribute
from analysis.traces.analyses.roofline import device_peaks, op_work, unpriced_reason
from analysis.traces.analyses.serving_steps import (
    NO_STEP,
    NO_SUMS,
    PhaseSums,
    StepSums,
    atom_step,
    sglang_step,
    step_sums,
    vllm_step,
)
from analysis.traces.model import OpShape

VLLM = Path(__file__).parent / "fixtures" / "traces" / "b200_vllm_ops_excerpt.json.gz"  # vLLM on a B200
BF16, FP8 = "c10::BFloat16", "c10::Float8_e4m3fn"
# Llama-3-8B: 32 query heads sharing 8 K/V heads of 128; 32 decode requests, each attending 2,048 tokens.
H_Q, H_KV, D, REQUESTS, CONTEXT = 32, 8, 128, 32, 2048
DECODE = StepSums(PhaseSums(), PhaseSums(REQUESTS, REQUESTS * CONTEXT, REQUESTS, REQUESTS * CONTEXT))
DECODE_FLOPS = 4 * H_Q * D * REQUESTS * CONTEXT  # Q·Kᵀ and P·V: 2 · 2 · H_q · d per attended pair
# Q read and O written per new token (BF16), K and V read once over each request's context.
DECODE_BYTES = REQUESTS * H_Q * 2 * D * 2 + REQUESTS * CONTEXT * H_KV * 2 * D * 2


def test_each_engines_detailed_step_annotation_gives_the_same_decode_sums() -> None:
    assert vllm_step("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk65536sqsq32sqsk65536)") == DECODE
    assert sglang_step("step[DECODE bs=32 g_sq=32 g_sqsq=32 g_sqsk=65536 g_sk=65536]") == DECODE
    assert atom_step("decode[bs=32/64 tok=32 d=32 sqsq=32 sqsk=65536 sk=65536]") == DECODE
    assert step_sums("decode[bs=32 tok=32 d=32 sqsq=32 sqsk=65536 sk=65536]") == DECODE


def test_a_mixed_step_keeps_its_context_and_generation_sums_apart() -> None:
    mixed = StepSums(PhaseSums(5, 8, 25, 40), PhaseSums(1, 12, 1, 12))

    assert sglang_step("step[MIXED bs=2 c=1 g=1 c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 "
                       "g_sqsk=12]") == mixed
    assert vllm_step("execute_6_context_1(sq5sk8sqsq25sqsk40)_generation_1(sq1sk12sqsq1sqsk12)") == mixed
    # ATOM's ctx list holds per-request numbers, not sums: it is not read as one.
    assert atom_step("prefill[bs=2 tok=14721 ctx=[7803, 6918] sqsq=108745533 sqsk=108745533 sk=14721]") == \
        StepSums(PhaseSums(14721, 14721, 108745533, 108745533), PhaseSums())


@pytest.mark.parametrize("name", ["execute_context_2(14721)_generation_0(0)", "step[DECODE bs=64]",
                                  "step[EXTEND bs=2 toks=14721]", "decode[bs=64 tok=64 d=64]",
                                  "prefill[bs=2 tok=14721 ctx=[7803, 6918]]"])
def test_a_plain_step_annotation_says_it_has_no_sums(name: str) -> None:
    assert step_sums(name) == NO_SUMS


def test_a_name_that_only_starts_like_a_step_says_which_form_it_is_not() -> None:
    assert "not vLLM's execute_ form" in str(step_sums("execute_model"))
    assert step_sums("ProfilerStep#3") == NO_STEP


def test_llama_decode_is_priced_the_same_from_vllm_sglang_and_atom_ops() -> None:
    q, kv_cache = [REQUESTS, H_Q, D], [8192, 16, H_KV, D]  # paged cache: 8192 pages of 16 slots
    unified = OpShape((q, [REQUESTS, H_KV, D], [REQUESTS, H_KV, D], q, []), (BF16,) * 4 + ("",), ("",) * 5)
    ragged = OpShape((q, [1048576], q, kv_cache, kv_cache), (BF16, "float", BF16, BF16, BF16), ("",) * 5)
    gluon_dims: tuple[list[int], ...] = (q, q, [8192, H_KV, 16, D], [8192, H_KV, D, 16]) + ([],) * 16
    gluon = OpShape(gluon_dims, (BF16, BF16, BF16, BF16) + ("",) * 16, ("",) * 19 + ("-1",))

    for op, shape in (("vllm::unified_attention_with_output", unified),
                      ("sglang_profiler::attention_paged_attention_ragged", ragged), ("aiter::pa_decode_gluon", gluon)):
        work = op_work(op, shape, DECODE)
        assert work is not None, op
        assert (work.family, work.flops, work.bytes) == ("SDPA", DECODE_FLOPS, DECODE_BYTES), op


def test_a_decode_kernel_over_an_fp8_cache_with_a_sliding_window_reads_the_window_at_one_byte() -> None:
    q = [REQUESTS, H_Q, D]
    shape = OpShape((q, q, [8192, H_KV, 16, D], [8192, H_KV, D, 16]) + ([],) * 16,
                    (BF16, BF16, FP8, FP8) + ("",) * 16, ("",) * 19 + ("1024",))

    work = op_work("aiter::pa_decode_gluon", shape, DECODE)

    assert work is not None and "window=1024" in work.shape
    assert work.flops == 4 * H_Q * D * REQUESTS * 1024  # each token attends its last 1,024 of 2,048
    assert work.bytes == REQUESTS * H_Q * 2 * D * 2 + REQUESTS * 1024 * H_KV * 2 * D * 1


def test_a_causal_prefill_of_two_prompts_scores_each_tokens_predecessors() -> None:
    # Two prompts of 7,803 and 6,918 tokens, no cache yet (TraceLens's SGLang example step), on AITER's varlen FMHA.
    prompts = (7803, 6918)
    step = sglang_step("step[EXTEND bs=2 toks=14721 c_sq=14721 c_sqsq=108745533 c_sqsk=108745533 c_sk=14721]")
    assert isinstance(step, StepSums)
    t = sum(prompts)
    shape = OpShape(([t, H_Q, D], [t, H_KV, D], [t, H_KV, D]), (BF16,) * 3, ("",) * 3)

    work = op_work("aiter::fmha_v3_varlen_fwd", shape, step)

    pairs = sum(n * (n + 1) // 2 for n in prompts)  # token j scores keys 0..j
    assert work is not None and f"pairs={pairs}" in work.shape
    assert work.flops == 2 * H_Q * (D + D) * pairs
    assert work.bytes == t * H_Q * 2 * D * 2 + t * H_KV * 2 * D * 2


def test_gated_delta_attention_costs_seven_flops_per_state_entry_per_token() -> None:
    # Qwen3-Next: 32 value heads of 128 sharing 16 query/key heads of 128; a step of 2 prompts and 30 decodes.
    h_v, h_k, d = 32, 16, 128
    width = 2 * h_k * d + h_v * d
    step = StepSums(PhaseSums(4000, 4000, 8_000_000, 8_000_000), PhaseSums(30, 60000, 30, 60000))
    tokens = 4030
    shape = OpShape(([tokens, width], [tokens, h_v], [tokens, h_v], [tokens, h_v, d], []), (BF16,) * 4 + ("",),
                    ("",) * 5)

    for op in ("vllm::gdn_attention_core", "aiter::linear_attention_with_output_base"):
        work = op_work(op, shape, step)
        assert work is not None and work.family == "SSM", op
        assert work.flops == 7 * tokens * h_v * d * d, op  # the context does not matter: no KV cache
        assert work.bytes == tokens * (width + 2 * h_v + h_v * d) * 2, op


def test_the_sparse_prefill_over_picked_slots_needs_no_step() -> None:
    # DeepSeek-V4 sparse prefill: 512 tokens, 16 heads of 512 over one latent head; 262,144 history picks and
    # 65,536 in-chunk picks.
    shape = OpShape(([512, 16, 512], [100000, 1, 512], [262144], [513], [513], [65536], [513]),
                    (BF16, BF16, "int", "int", "int", "int", "int"), ("",) * 7)

    work = op_work("aiter::pa_sparse_prefill_opus_fwd", shape)

    pairs = 262144 + 65536
    assert work is not None
    assert (work.flops, work.bytes) == (2 * 16 * pairs * 2 * 512, 2 * 512 * 16 * 512 * 2 + pairs * 512 * 2)


def test_an_attention_op_without_its_step_stays_unpriced_with_the_reason() -> None:
    shape = OpShape(([REQUESTS, H_Q, D], [REQUESTS, H_KV, D]), (BF16, BF16), ("", ""))

    assert op_work("vllm::unified_attention_with_output", shape) is None
    assert unpriced_reason("vllm::unified_attention_with_output", shape) == f"attention over a KV cache: {NO_STEP}"
    assert op_work("vllm::unified_attention_with_output", shape, NO_SUMS) is None
    assert unpriced_reason("aiter::mha_varlen_fwd", shape, NO_SUMS).endswith(NO_SUMS)


def _with_steps(tmp_path: Path, steps: list[str]) -> Path:
    """The vLLM excerpt with its events repeated once per step (each copy later, ids shifted so the copies do not
    link to each other), and each copy enclosed by a user_annotation of that step's name, as vLLM writes it."""
    with gzip.open(VLLM) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    first = min(e["ts"] for e in events if "ts" in e)
    last = max(e["ts"] + e.get("dur", 0) for e in events if "ts" in e)
    out = []
    for n, name in enumerate(steps):
        shift = n * (last - first + 1000)
        for e in copy.deepcopy(events):
            if "ts" in e:
                e["ts"] += shift
            for key in ("correlation", "External id"):
                if key in e.get("args", {}):
                    e["args"][key] += n * 1_000_000
            out.append(e)
        out.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 6583, "tid": 6583,
                    "ts": first + shift - 10, "dur": last - first + 20, "args": {}})
    trace["traceEvents"] = out
    path = tmp_path / "vllm_steps.json"
    path.write_text(json.dumps(trace))
    return path


def _attention_rows(path: Path) -> list[dict[str, Any]]:
    trace = read_trace(path)
    summary = unified_perf_summary(trace, attribute(trace), device_peaks(trace.device_names))
    return summary[summary["op"] == "vllm::unified_attention_with_output"].to_dict("records")


def test_the_vllm_excerpt_is_priced_per_step_in_the_unified_summary(tmp_path: Path) -> None:
    # The recorded call: q [888, 8, 64] in FP8, the new tokens' K and V [888, 1, 64] in BF16.
    mixed = "execute_888_context_2(sq856sk856sqsq425536sqsk425536)_generation_32(sq32sk65536sqsq32sqsk65536)"
    decode = "execute_888_context_0(sq0sk0sqsq0sqsk0)_generation_888(sq888sk909312sqsq888sqsk909312)"

    rows = {row["serving step"]: row for row in _attention_rows(_with_steps(tmp_path, [mixed, decode]))}

    # Prompts of 600 and 256 tokens (Σq² = 600² + 256²) scoring their predecessors and 32 decodes over 2,048 each;
    # then 888 decodes over 1,024 each. Q and O at FP8's byte, each request's K and V at BF16's two.
    expected = {mixed: (600 * 601 // 2 + 256 * 257 // 2 + 32 * 2048, 888 * 8 * 128 + (856 + 65536) * 128 * 2),
                decode: (888 * 1024, 888 * 8 * 128 + 909312 * 128 * 2)}
    assert set(rows) == {step.text() for step in map(vllm_step, expected) if isinstance(step, StepSums)}
    for name, (pairs, nbytes) in expected.items():
        row = rows[vllm_step(name).text()]  # type: ignore[union-attr]
        assert (row["family"], row["unpriced because"], row["calls"]) == ("SDPA", "", 1)
        assert row["GFLOP per call"] * 1e9 == pytest.approx(2 * 8 * (64 + 64) * pairs, rel=1e-12)
        assert row["MB per call"] * 1e6 == pytest.approx(nbytes, rel=1e-12)


def test_the_vllm_excerpt_without_a_step_annotation_says_why_its_attention_is_unpriced() -> None:
    (row,) = _attention_rows(VLLM)

    assert (row["has model"], row["family"], row["serving step"]) == (False, "", "")
    assert row["unpriced because"] == f"attention over a KV cache: {NO_STEP}"
