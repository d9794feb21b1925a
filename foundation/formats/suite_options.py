"""The builtin suite's options, defined once and free of torch: what the host checks flags against and what
``stages.suite`` offers on its command line.

The host (``prbench.stages.suite``, ``tasks.py``) validates ``invoke suite``/``invoke compare`` flags before
any stage runs, so it needs the names here without paying for a torch import; ``stages.support.hf_models`` keeps the
model *construction* (config classes, inputs) and takes the model names from this module.
"""

from __future__ import annotations

from foundation.formats.hf_entries import ALIASES, BUILDABLE, GROUPS, unbuildable
from foundation.formats.hf_entries import TINY_DEFAULT as TINY_DEFAULT  # re-exported: the host's name for it

# tiny: hidden 64 (the quick start); small: hidden 256, for the CPU, a real hidden size's shapes at CPU cost;
# full: the list's published sizes. stages.support.hf_models holds what each size builds. Why small stays hidden 256
# though its kernels are no large share (docs/models.md, measured 2026-11-29, inference, one thread): the compare's
# kernel share was 8.5 % at small against 5 % at tiny (T5Small 4.7 %, BertForMaskedLM 10.6 %, AlbertForMaskedLM
# 13.2 %), and no other CPU size measured took most models past 30 % (hidden 64 at 2048 tokens: 16-20 %; hidden 128:
# 11-23 %): on the CPU the GEMMs and attention are library calls, so past a modest hidden size a larger one
# lowers the share.
SIZES = ("tiny", "small", "full")
MODES = ("inference", "training")
DTYPES = ("float32", "bfloat16", "float16", "amp")
DEVICES = ("cpu", "cuda")
CPU_BACKENDS = ("cpp", "triton")

MIN_WARMUP = 3  # the seeds' rule: never time a cold call
MIN_ITERATIONS = 10

# The builtin HF models: every buildable entry of PyTorch's huggingface_models_list.txt (foundation.formats.hf_entries
# holds the entries); stages.support.hf_models builds each.
MODEL_NAMES: tuple[str, ...] = BUILDABLE


class SuiteInputError(Exception):
    """A bad suite setting; the stage prints it as one ``error:`` line, the host raises it as a UserError."""


class UnknownModelError(ValueError):
    """A model name that is not in MODEL_NAMES; the message lists the known names."""


def check_model(name: str) -> str:
    """A model name (or a hub-only entry's Hub id) into the suite's name; an unknown or unbuildable one is an
    UnknownModelError that says why."""
    name = ALIASES.get(name, name)
    if name in MODEL_NAMES:
        return name
    why = unbuildable().get(name)
    if why:
        raise UnknownModelError(f"model '{name}' cannot be built here: {why}")
    raise UnknownModelError(f"unknown model '{name}' (known: {', '.join(MODEL_NAMES)}; groups: {', '.join(GROUPS)})")


def resolve_models(selection: str) -> list[str]:
    """A group name (``all``, ``tiny-default``, ...) or a comma list of names into model names."""
    selection = selection.strip()
    if selection in GROUPS:
        return list(GROUPS[selection])
    names = [n.strip() for n in selection.split(",") if n.strip()]
    if not names:
        raise UnknownModelError(f"no model named (expected a group: {', '.join(GROUPS)}, or a comma-separated list)")
    return list(dict.fromkeys(check_model(name) for name in names))  # keep order, drop repeats


def check_numbers(warmup: int, iterations: int, cpu_backend: str, device: str) -> None:
    """The measurement rules; the host calls this too, so a bad flag fails before anything is written."""
    if warmup < MIN_WARMUP:
        raise SuiteInputError(f"--warmup {warmup}: at least {MIN_WARMUP} warm-up calls are required")
    if iterations < MIN_ITERATIONS:
        raise SuiteInputError(f"--iterations {iterations}: at least {MIN_ITERATIONS} timed calls are required")
    if cpu_backend == "triton" and device != "cpu":
        raise SuiteInputError("--cpu-backend triton: only meaningful with --device cpu")
