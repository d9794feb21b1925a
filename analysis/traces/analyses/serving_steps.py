"""A serving engine's step annotations: the per-step sums that price attention over a KV cache.

An inference attention op (vLLM's unified attention, AITER's varlen and paged kernels, SGLang's ragged paged
attention, gated-delta linear attention) records its packed tensors but not how many tokens each request attends:
that is in the ``user_annotation`` the engine wraps around the whole step. Three engines write it, each in a plain
form and a detailed form (learnt from TraceLens's ``TraceUtils/annotation_utils.py``, read 2026-11; the parsers
here are this project's own). Only the detailed forms carry the sums; per request i of a step, qᵢ is the number of
new (query) tokens and kᵢ the tokens it attends, its context including the new ones (kᵢ ≥ qᵢ), and each form gives
Σq, Σk, Σq², Σq·k separately for the context (prefill / extend / chunked-prefill) requests and the generation
(decode) requests:

- vLLM: ``execute_<tokens>_context_<n>(sq<Σq>sk<Σk>sqsq<Σq²>sqsk<Σq·k>)_generation_<n>(sq…sk…sqsq…sqsk…)``;
  plain ``execute_context_<n>(<tokens>)_generation_<n>(<tokens>)``;
- SGLang: ``step[EXTEND|DECODE|MIXED bs=<n> … c_sq=… c_sk=… c_sqsq=… c_sqsk=… g_sq=… g_sk=… g_sqsq=… g_sqsk=…]``
  (the ``c_`` keys context, ``g_`` generation; a key left out is 0); plain ``step[DECODE bs=64]``;
- ATOM: ``prefill[bs=… tok=<Σq> … sqsq=… sqsk=… sk=…]`` (context) and ``decode[bs=… tok=<Σq> … sqsq=… sqsk=… sk=…]``
  (generation); plain without ``sqsq``/``sqsk``.

Each parser returns the sums, or one line saying why the name gives none (the op then stays unpriced with it).
An op call's step is the step annotation whose interval holds the call's, on any thread (TraceLens matches them
by time alone too). Looking it up needs the op attribution and runs only when a report
prices such an op: the trace reader merely keeps the few annotations whose names start as a step's does.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from analysis.traces.model import StepWindow, TraceData

SERVING_STEP_PREFIXES = ("execute_", "step[", "prefill[", "decode[")
NO_STEP = "no serving step annotation (vLLM execute_…, SGLang step[…], ATOM prefill[…]/decode[…]) encloses the call"
NO_SUMS = "its step annotation is the engine's plain form, without the per-step sums Σq, Σk, Σq², Σq·k (turn on " \
    "the engine's detailed step annotations)"


@dataclass(frozen=True)
class PhaseSums:
    """Σq, Σk, Σq², Σq·k over one step's requests of one phase (context or generation)."""

    q: int = 0
    k: int = 0
    qq: int = 0
    qk: int = 0


@dataclass(frozen=True)
class StepSums:
    context: PhaseSums
    generation: PhaseSums

    def text(self) -> str:
        """The sums as the unified summary's ``serving step`` cell."""
        c, g = self.context, self.generation
        return (f"context Σq={c.q} Σk={c.k} Σq²={c.qq} Σq·k={c.qk}; "
                f"generation Σq={g.q} Σk={g.k} Σq²={g.qq} Σq·k={g.qk}")


_VLLM_PHASE = r"\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)"
_VLLM_DETAILED = re.compile(rf"execute_\d+_context_\d+{_VLLM_PHASE}_generation_\d+{_VLLM_PHASE}")
_VLLM_PLAIN = re.compile(r"execute_context_\d+\(\d+\)_generation_\d+\(\d+\)")
_SGLANG = re.compile(r"step\[(EXTEND|DECODE|MIXED)\b([^\]]*)\]")
_ATOM = re.compile(r"(prefill|decode)\[(.*)\]")
_KEY_VALUE = re.compile(r"(\w+)=(\d+)")


def vllm_step(name: str) -> StepSums | str:
    """vLLM's ``execute_…`` step annotation."""
    m = _VLLM_DETAILED.match(name)
    if m is None:
        return NO_SUMS if _VLLM_PLAIN.match(name) else f"step annotation {name[:80]!r} is not vLLM's execute_ form"
    n = [int(v) for v in m.groups()]
    return StepSums(PhaseSums(*n[:4]), PhaseSums(*n[4:]))


def sglang_step(name: str) -> StepSums | str:
    """SGLang's ``step[…]`` step annotation (``bs=117/128``-style values are not sums and are not read)."""
    m = _SGLANG.match(name)
    if m is None:
        return f"step annotation {name[:80]!r} is not SGLang's step[EXTEND|DECODE|MIXED …] form"
    kv = {k: int(v) for k, v in _KEY_VALUE.findall(m.group(2))}
    if "c_sqsq" not in kv and "g_sqsq" not in kv:
        return NO_SUMS
    return StepSums(*(PhaseSums(kv.get(f"{p}_sq", 0), kv.get(f"{p}_sk", 0), kv.get(f"{p}_sqsq", 0),
                                kv.get(f"{p}_sqsk", 0)) for p in ("c", "g")))


def atom_step(name: str) -> StepSums | str:
    """ATOM's ``prefill[…]`` (context) or ``decode[…]`` (generation) step annotation; ``tok`` is Σq."""
    m = _ATOM.match(name)
    if m is None:
        return f"step annotation {name[:80]!r} is not ATOM's prefill[…]/decode[…] form"
    kv = {k: int(v) for k, v in _KEY_VALUE.findall(re.sub(r"ctx=\[[^\]]*\]", "", m.group(2)))}
    if not {"tok", "sk", "sqsq", "sqsk"} <= kv.keys():
        return NO_SUMS
    phase = PhaseSums(kv["tok"], kv["sk"], kv["sqsq"], kv["sqsk"])
    return StepSums(phase, PhaseSums()) if m.group(1) == "prefill" else StepSums(PhaseSums(), phase)


_PARSERS: tuple[tuple[str, Callable[[str], StepSums | str]], ...] = (
    ("execute_", vllm_step), ("step[", sglang_step), ("prefill[", atom_step), ("decode[", atom_step))


def step_sums(name: str) -> StepSums | str:
    """The sums of a step annotation of any of the three engines, or why it has none."""
    return next((parse(name) for prefix, parse in _PARSERS if name.startswith(prefix)), NO_STEP)


def enclosing_steps(steps: Sequence[StepWindow], starts: Sequence[int], ends: Sequence[int]) -> list[str | None]:
    """For each call [start, end] (ns), the name of the step annotation that holds it, else None. ``steps`` are
    sorted by start (as :class:`TraceData` keeps them); an engine's steps follow one another without nesting, so
    the only candidate is the latest step that starts at or before the call."""
    step_starts = [s.start_ns for s in steps]
    found: list[str | None] = []
    for start, end in zip(starts, ends, strict=True):
        at = bisect.bisect_right(step_starts, start) - 1
        found.append(steps[at].name if at >= 0 and steps[at].end_ns >= end else None)
    return found


def call_steps(trace: TraceData, calls: Sequence[int]) -> dict[int, StepSums | str]:
    """The step sums (or why none) of the given op calls (indices into ``trace.ops``)."""
    ops = trace.ops
    if ops.start_ns is None or ops.end_ns is None or not trace.serving_steps:
        return dict.fromkeys(calls, NO_STEP)
    names = enclosing_steps(trace.serving_steps, [int(ops.start_ns[i]) for i in calls],
                            [int(ops.end_ns[i]) for i in calls])
    parsed: dict[str, StepSums | str] = {}
    return {call: NO_STEP if name is None else parsed.setdefault(name, step_sums(name))
            for call, name in zip(calls, names, strict=True)}
