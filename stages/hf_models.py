"""The builtin HF suite: HuggingFace models built from ``transformers`` config classes with random weights.

Never touches the Hub. The model list, batch sizes, sequence lengths and inputs follow PyTorch's
``benchmarks/dynamo/huggingface.py`` (class-style names such as ``BertForMaskedLM``, ``T5Small``):

* ``size="full"``: ``config_class()`` defaults (``T5Small`` = ``T5Config()``, which is the t5-small config;
  ``DistillGPT2`` = GPT-2 with 6 layers, as distilgpt2), the suite's batch size (list value divided by the
  suite's divisor) and sequence length;
* ``size="tiny"``: the same classes shrunk for CPU and CI (hidden 64, 2 layers, 2 heads, vocab 1000,
  sequence 32, batch 2);
* inputs are random token ids plus the labels the model's own loss needs (the suite passes labels in
  inference too, so both modes run the same forward); training is forward + ``loss.backward()``.

Everything is seeded, so a model and its inputs are identical from run to run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import torch

# The names and options are the torch-free contract the host checks flags against; re-exported for stages.
from analysis.formats.suite_options import (  # noqa: F401
    MODEL_NAMES,
    MODES,
    SIZES,
    TINY_DEFAULT,
    UnknownModelError,
    check_model,
    resolve_models,
)

DEFAULT_SEED = 1337

# Shapes of the tiny size (the brief's CPU/CI scale).
TINY_BATCH = 2
TINY_SEQ = 32
_TINY_VOCAB = 1000
_TINY_POSITIONS = 128

# Config keyword names differ per family; each dict shrinks one family to the tiny scale.
_BERT_LIKE = {
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128,
    "vocab_size": _TINY_VOCAB, "max_position_embeddings": _TINY_POSITIONS,
}
_BART_LIKE = {
    "d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
    "decoder_attention_heads": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
    "vocab_size": _TINY_VOCAB, "max_position_embeddings": _TINY_POSITIONS,
}
# GPT-2's default BOS/EOS id (50256) lies outside the tiny vocabulary.
_GPT2 = {"n_embd": 64, "n_layer": 2, "n_head": 2, "n_inner": 128, "n_positions": _TINY_POSITIONS,
         "vocab_size": _TINY_VOCAB, "bos_token_id": _TINY_VOCAB - 1, "eos_token_id": _TINY_VOCAB - 1}
_TINY = {
    "bert": _BERT_LIKE,
    "roberta": _BERT_LIKE,
    "electra": {**_BERT_LIKE, "embedding_size": 64},
    "megatron-bert": _BERT_LIKE,
    "layoutlm": _BERT_LIKE,
    "deberta-v2": _BERT_LIKE,
    "albert": {**_BERT_LIKE, "embedding_size": 32},
    "distilbert": {"dim": 64, "hidden_dim": 128, "n_layers": 2, "n_heads": 2, "vocab_size": _TINY_VOCAB,
                   "max_position_embeddings": _TINY_POSITIONS},
    "gpt2": _GPT2,
    "t5": {"d_model": 64, "d_kv": 32, "d_ff": 128, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 2,
           "vocab_size": _TINY_VOCAB},
    "bart": _BART_LIKE,
    "mbart": _BART_LIKE,
    "pegasus": _BART_LIKE,
    "blenderbot-small": _BART_LIKE,
    "opt": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "ffn_dim": 128,
            "word_embed_proj_dim": 64, "vocab_size": _TINY_VOCAB, "max_position_embeddings": _TINY_POSITIONS},
    "xglm": {"d_model": 64, "num_layers": 2, "attention_heads": 2, "ffn_dim": 128, "vocab_size": _TINY_VOCAB,
             "max_position_embeddings": _TINY_POSITIONS},
}


@dataclass(frozen=True)
class ModelSpec:
    """One suite entry: which class, which config family, and the suite's full-size batch and sequence."""

    name: str
    model_class: str  # a class exported by ``transformers``
    family: str  # key into the tiny config table
    batch_size: int  # full size, after the suite's batch-size divisor
    seq_len: int  # full size
    config_overrides: dict[str, Any] = field(default_factory=dict)  # applied at both sizes

    @property
    def pads_with_zero(self) -> bool:
        # The suite sets pad_token_id=0 for these so batch > 1 works (sequence classification needs a pad id).
        return self.name.startswith(("GPT2ForSequenceClassification", "Roberta"))


# Batch sizes: huggingface_models_list.txt divided by huggingface.yaml's batch_size divisors.
# Sequence lengths: huggingface.py get_sequence_length.
_SPECS = (
    ModelSpec("AlbertForMaskedLM", "AlbertForMaskedLM", "albert", 4, 512),
    ModelSpec("BartForCausalLM", "BartForCausalLM", "bart", 4, 1024),
    ModelSpec("BertForMaskedLM", "BertForMaskedLM", "bert", 16, 512),
    ModelSpec("BertForQuestionAnswering", "BertForQuestionAnswering", "bert", 32, 512),
    ModelSpec("BlenderbotSmallForCausalLM", "BlenderbotSmallForCausalLM", "blenderbot-small", 256, 128),
    ModelSpec("DebertaV2ForMaskedLM", "DebertaV2ForMaskedLM", "deberta-v2", 2, 512),
    ModelSpec("DistilBertForMaskedLM", "DistilBertForMaskedLM", "distilbert", 128, 128),
    ModelSpec("DistillGPT2", "GPT2LMHeadModel", "gpt2", 16, 512, {"n_layer": 6}),
    ModelSpec("ElectraForCausalLM", "ElectraForCausalLM", "electra", 32, 512),
    ModelSpec("GPT2ForSequenceClassification", "GPT2ForSequenceClassification", "gpt2", 4, 1024),
    ModelSpec("LayoutLMForMaskedLM", "LayoutLMForMaskedLM", "layoutlm", 16, 512),
    ModelSpec("MBartForCausalLM", "MBartForCausalLM", "mbart", 4, 1024),
    ModelSpec("MegatronBertForCausalLM", "MegatronBertForCausalLM", "megatron-bert", 4, 512),
    ModelSpec("OPTForCausalLM", "OPTForCausalLM", "opt", 2, 2048),
    ModelSpec("PegasusForCausalLM", "PegasusForCausalLM", "pegasus", 32, 128),
    ModelSpec("RobertaForCausalLM", "RobertaForCausalLM", "roberta", 16, 512),
    ModelSpec("T5Small", "T5ForConditionalGeneration", "t5", 4, 1024),
    ModelSpec("XGLMForCausalLM", "XGLMForCausalLM", "xglm", 8, 128),
)
_BY_NAME = {spec.name: spec for spec in _SPECS}

if tuple(_BY_NAME) != MODEL_NAMES:  # one spec per contract name, in the contract's order
    raise ImportError("stages.hf_models: the model specs and analysis.formats.suite_options.MODEL_NAMES disagree")


@dataclass
class BuiltModel:
    model: torch.nn.Module
    inputs: dict[str, torch.Tensor]
    batch_size: int
    name: str = ""
    seq_len: int = 0


def spec(name: str) -> ModelSpec:
    return _BY_NAME[check_model(name)]


def seed_everything(seed: int = DEFAULT_SEED) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def build(
    name: str,
    size: str = "tiny",
    mode: str = "inference",
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    batch_size: int | None = None,
    seed: int = DEFAULT_SEED,
) -> BuiltModel:
    """Build ``name`` with random weights and its example inputs (labels included), seeded."""
    entry = spec(name)
    if size not in SIZES:
        raise ValueError(f"size '{size}': expected one of {', '.join(SIZES)}")
    if mode not in MODES:
        raise ValueError(f"mode '{mode}': expected one of {', '.join(MODES)}")
    model_cls = _model_class(entry)
    config = _make_config(model_cls, entry, size)
    seed_everything(seed)
    model = model_cls(config)
    model.to(device=device, dtype=dtype)
    model.train(mode == "training")
    bs = batch_size or (TINY_BATCH if size == "tiny" else entry.batch_size)
    seq = TINY_SEQ if size == "tiny" else entry.seq_len
    inputs = _make_inputs(entry, config, bs, seq, device)
    return BuiltModel(model=model, inputs=inputs, batch_size=bs, name=name, seq_len=seq)


def config_for(name: str, size: str = "tiny") -> Any:
    """The config ``build`` uses for ``name`` at ``size`` (no model is constructed)."""
    entry = spec(name)
    return _make_config(_model_class(entry), entry, size)


def _model_class(entry: ModelSpec) -> Any:
    import transformers

    return getattr(transformers, entry.model_class)


def _make_config(model_cls: Any, entry: ModelSpec, size: str) -> Any:
    kwargs: dict[str, Any] = dict(_TINY[entry.family]) if size == "tiny" else {}
    kwargs.update(entry.config_overrides)
    config = model_cls.config_class(**kwargs)
    if entry.pads_with_zero:
        config.pad_token_id = 0
    # The suite turns the KV cache off: a benchmark forward should not build and return past key/values.
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return config


def _randint(high: int, shape: tuple[int, ...], device: str) -> torch.Tensor:
    return torch.randint(0, max(high, 1), shape, device=device, dtype=torch.int64)


def _make_inputs(entry: ModelSpec, config: Any, bs: int, seq: int, device: str) -> dict[str, torch.Tensor]:
    vocab = config.vocab_size
    # As the suite: RoBERTa gets all-zero ids, BART-style models end each sequence with EOS.
    ids = _randint(1 if entry.name.startswith("Roberta") else vocab, (bs, seq), device)
    if "Bart" in entry.name:
        ids[:, -1] = config.eos_token_id
    inputs = {"input_ids": ids}
    if entry.family == "t5":
        inputs["decoder_input_ids"] = ids
    inputs.update(_labels(entry, config, bs, seq, device))
    return inputs


def _labels(entry: ModelSpec, config: Any, bs: int, seq: int, device: str) -> dict[str, torch.Tensor]:
    """The labels each head's own loss takes (the suite's ``include_loss_args``)."""
    name = entry.name
    if name.endswith("QuestionAnswering"):
        return {"start_positions": _randint(seq, (bs,), device), "end_positions": _randint(seq, (bs,), device)}
    if name.endswith("SequenceClassification"):
        return {"labels": _randint(config.num_labels - 1, (bs,), device)}
    # MaskedLM / CausalLM / LMHead models and the seq2seq T5Small: token labels over the vocabulary.
    return {"labels": _randint(config.vocab_size, (bs, seq), device)}


def loss_of(outputs: Any) -> torch.Tensor:
    """The model's own loss (first output when labels are given), as the suite's ``compute_loss``."""
    loss = getattr(outputs, "loss", None)
    return loss if loss is not None else outputs[0]
