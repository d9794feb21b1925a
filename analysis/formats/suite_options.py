"""The builtin suite's options, defined once and free of torch: what the host checks flags against and what
``stages.suite`` offers on its command line.

The host (``prbench.compare.suite_stage``, ``tasks.py``) validates ``invoke suite``/``invoke compare`` flags before
any stage runs, so it needs the names here without paying for a torch import; ``stages.hf_models`` keeps the
model *construction* (config classes, inputs) and takes the model names from this module.
"""

from __future__ import annotations

SIZES = ("tiny", "full")
MODES = ("inference", "training")
DTYPES = ("float32", "bfloat16", "float16", "amp")
DEVICES = ("cpu", "cuda")
CPU_BACKENDS = ("cpp", "triton")

MIN_WARMUP = 3  # the seeds' rule: never time a cold call
MIN_ITERATIONS = 10

# The builtin HF models (PyTorch's benchmarks/dynamo/huggingface.py names); stages.hf_models has one spec each.
MODEL_NAMES: tuple[str, ...] = (
    "AlbertForMaskedLM", "BartForCausalLM", "BertForMaskedLM", "BertForQuestionAnswering",
    "BlenderbotSmallForCausalLM", "DebertaV2ForMaskedLM", "DistilBertForMaskedLM", "DistillGPT2",
    "ElectraForCausalLM", "GPT2ForSequenceClassification", "LayoutLMForMaskedLM", "MBartForCausalLM",
    "MegatronBertForCausalLM", "OPTForCausalLM", "PegasusForCausalLM", "RobertaForCausalLM", "T5Small",
    "XGLMForCausalLM",
)

# One model per family the brief names: what ``--models tiny-default`` runs on a 2-core CPU.
TINY_DEFAULT: tuple[str, ...] = (
    "BertForMaskedLM", "GPT2ForSequenceClassification", "T5Small", "DistilBertForMaskedLM",
    "RobertaForCausalLM", "AlbertForMaskedLM", "BartForCausalLM", "ElectraForCausalLM",
)


class SuiteInputError(Exception):
    """A bad suite setting; the stage prints it as one ``error:`` line, the host raises it as a UserError."""


class UnknownModelError(ValueError):
    """A model name that is not in MODEL_NAMES; the message lists the known names."""


def check_model(name: str) -> str:
    if name not in MODEL_NAMES:
        raise UnknownModelError(f"unknown model '{name}' (known: {', '.join(MODEL_NAMES)})")
    return name


def resolve_models(selection: str) -> list[str]:
    """``all``, ``tiny-default`` or a comma list of names into model names (unknown names → UnknownModelError)."""
    selection = selection.strip()
    if selection == "all":
        return list(MODEL_NAMES)
    if selection == "tiny-default":
        return list(TINY_DEFAULT)
    names = [n.strip() for n in selection.split(",") if n.strip()]
    if not names:
        raise UnknownModelError("no model named (expected all, tiny-default or a comma-separated list)")
    for name in names:
        check_model(name)
    return list(dict.fromkeys(names))  # keep order, drop repeats


def check_numbers(warmup: int, iterations: int, cpu_backend: str, device: str) -> None:
    """The measurement rules; the host calls this too, so a bad flag fails before anything is written."""
    if warmup < MIN_WARMUP:
        raise SuiteInputError(f"--warmup {warmup}: at least {MIN_WARMUP} warm-up calls are required")
    if iterations < MIN_ITERATIONS:
        raise SuiteInputError(f"--iterations {iterations}: at least {MIN_ITERATIONS} timed calls are required")
    if cpu_backend == "triton" and device != "cpu":
        raise SuiteInputError("--cpu-backend triton: only meaningful with --device cpu")
