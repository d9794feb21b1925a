"""The builtin HF suite: HuggingFace models built from ``transformers`` config classes with random weights.

Never touches the Hub. The entries (names, classes, batch sizes, sequence lengths, the published sizes of the
entries huggingface.py loads from the Hub) are ``foundation.formats.hf_entries``'s, one per line of PyTorch's
``benchmarks/dynamo/huggingface_models_list.txt``; the inputs follow ``benchmarks/dynamo/huggingface.py``:

* ``size="full"``: the config class's defaults plus the entry's published numbers (``T5Small`` = ``T5Config()``,
  the t5-small config; ``DistillGPT2`` = GPT-2 with 6 layers; ``Llama-3.2-1B`` its published architecture), the
  entry's batch size and sequence length;
* ``size="small"``: the same classes at hidden size 256 (2 layers, 4 heads, vocabulary 8192, sequence 128,
  batch 2): a CPU size with a real hidden size's shapes (docs/models.md has Inductor's kernels' share there);
* ``size="tiny"``: hidden 64, 2 layers, 2 heads, vocabulary 1000, sequence 32, batch 2 (the quick start's size);
* inputs are random token ids (log-mel frames for Whisper) plus the labels the model's own loss needs (the
  suite passes labels in inference too, so both modes run the same forward).

A size shrinks every dimension the family's config names (``_SHRINK``: one rule per config ``model_type``);
everything is seeded, so a model and its inputs are identical from run to run.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from foundation.formats.hf_entries import BY_NAME, SEQ2SEQ_IDS, SPEECH, Entry

# The names and options are the torch-free contract the host checks flags against; re-exported for stages.
from foundation.formats.suite_options import (  # noqa: F401
    MODEL_NAMES,
    MODES,
    SIZES,
    TINY_DEFAULT,
    UnknownModelError,
    check_model,
    resolve_models,
)

DEFAULT_SEED = 1337


@dataclass(frozen=True)
class Scale:
    """One shrunken size: the dimensions every family's rule maps onto its own config keywords."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    positions: int
    seq: int
    batch: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


SCALES = {
    "tiny": Scale(hidden=64, layers=2, heads=2, ffn=128, vocab=1000, positions=128, seq=32, batch=2),
    "small": Scale(hidden=256, layers=2, heads=4, ffn=1024, vocab=8192, positions=512, seq=128, batch=2),
}
TINY_BATCH = SCALES["tiny"].batch
TINY_SEQ = SCALES["tiny"].seq


def _bert(s: Scale) -> dict[str, Any]:
    return {"hidden_size": s.hidden, "num_hidden_layers": s.layers, "num_attention_heads": s.heads,
            "intermediate_size": s.ffn, "vocab_size": s.vocab, "max_position_embeddings": s.positions}


def _bart(s: Scale) -> dict[str, Any]:
    return {"d_model": s.hidden, "encoder_layers": s.layers, "decoder_layers": s.layers,
            "encoder_attention_heads": s.heads, "decoder_attention_heads": s.heads, "encoder_ffn_dim": s.ffn,
            "decoder_ffn_dim": s.ffn, "vocab_size": s.vocab, "max_position_embeddings": s.positions}


def _last_token_ids(s: Scale) -> dict[str, Any]:
    # Default BOS/EOS/start ids (GPT-2's 50256, Whisper's 50257) lie outside a shrunken vocabulary.
    return {"bos_token_id": s.vocab - 1, "eos_token_id": s.vocab - 1}


def _gpt2(s: Scale) -> dict[str, Any]:
    return {"n_embd": s.hidden, "n_layer": s.layers, "n_head": s.heads, "n_inner": s.ffn, "n_positions": s.positions,
            "vocab_size": s.vocab, **_last_token_ids(s)}


def _t5(s: Scale) -> dict[str, Any]:
    return {"d_model": s.hidden, "d_kv": s.head_dim, "d_ff": s.ffn, "num_layers": s.layers,
            "num_decoder_layers": s.layers, "num_heads": s.heads, "vocab_size": s.vocab}


def _decoder_llm(s: Scale) -> dict[str, Any]:
    # Grouped-query attention kept (half as many key/value heads), as in every published config here.
    return {"hidden_size": s.hidden, "num_hidden_layers": s.layers, "num_attention_heads": s.heads,
            "num_key_value_heads": s.heads // 2, "head_dim": s.head_dim, "intermediate_size": s.ffn,
            "vocab_size": s.vocab, "max_position_embeddings": s.positions}


def _windowed_llm(s: Scale) -> dict[str, Any]:
    # A window shorter than the sequence, so the sliding-window layers mask as they do at full size.
    return {**_decoder_llm(s), "sliding_window": s.seq // 2}


_SHRINK: dict[str, Callable[[Scale], dict[str, Any]]] = {
    "bert": _bert,
    "roberta": _bert,
    "megatron-bert": _bert,
    "layoutlm": _bert,
    "deberta-v2": _bert,
    "fnet": lambda s: {k: v for k, v in _bert(s).items() if k != "num_attention_heads"},
    "electra": lambda s: {**_bert(s), "embedding_size": s.hidden},
    "convbert": lambda s: {**_bert(s), "embedding_size": s.hidden},
    "albert": lambda s: {**_bert(s), "embedding_size": s.hidden // 2},
    "longformer": lambda s: {**_bert(s), "attention_window": s.seq // 2},
    "mobilebert": lambda s: {**_bert(s), "embedding_size": s.hidden // 2, "intra_bottleneck_size": s.hidden // 2,
                             "true_hidden_size": s.hidden // 2, "intermediate_size": s.hidden,
                             "num_feedforward_networks": 2},
    "distilbert": lambda s: {"dim": s.hidden, "hidden_dim": s.ffn, "n_layers": s.layers, "n_heads": s.heads,
                             "vocab_size": s.vocab, "max_position_embeddings": s.positions},
    "gpt2": _gpt2,
    "gptj": lambda s: {**_gpt2(s), "rotary_dim": s.head_dim // 2},
    "gpt_neo": lambda s: {"hidden_size": s.hidden, "num_layers": s.layers, "num_heads": s.heads,
                          "intermediate_size": s.ffn, "max_position_embeddings": s.positions, "vocab_size": s.vocab,
                          "attention_types": [[["global", "local"], s.layers // 2]], "window_size": s.seq // 2,
                          **_last_token_ids(s)},
    "t5": _t5,
    "mt5": _t5,
    "bart": _bart,
    "mbart": _bart,
    "plbart": _bart,
    "pegasus": _bart,
    "blenderbot": _bart,
    "blenderbot-small": _bart,
    "m2m_100": _bart,
    "trocr": lambda s: {"d_model": s.hidden, "decoder_layers": s.layers, "decoder_attention_heads": s.heads,
                        "decoder_ffn_dim": s.ffn, "vocab_size": s.vocab, "max_position_embeddings": s.positions},
    "whisper": lambda s: {**_bart(s), "max_source_positions": s.seq, "max_target_positions": s.positions,
                          "decoder_start_token_id": s.vocab - 2, "pad_token_id": s.vocab - 1,
                          **_last_token_ids(s)},
    "opt": lambda s: {"hidden_size": s.hidden, "num_hidden_layers": s.layers, "num_attention_heads": s.heads,
                      "ffn_dim": s.ffn, "word_embed_proj_dim": s.hidden, "vocab_size": s.vocab,
                      "max_position_embeddings": s.positions},
    "xglm": lambda s: {"d_model": s.hidden, "num_layers": s.layers, "attention_heads": s.heads, "ffn_dim": s.ffn,
                       "vocab_size": s.vocab, "max_position_embeddings": s.positions},
    "xlnet": lambda s: {"d_model": s.hidden, "n_layer": s.layers, "n_head": s.heads, "d_inner": s.ffn,
                        "d_head": s.head_dim, "vocab_size": s.vocab},
    "llama": _decoder_llm,
    "qwen3": _decoder_llm,
    "mistral": _decoder_llm,
    "gemma2": lambda s: {**_windowed_llm(s), "query_pre_attn_scalar": s.head_dim},
    "gemma3_text": lambda s: {**_windowed_llm(s), "query_pre_attn_scalar": s.head_dim},
    # YaRN's scaling is set against the default context length; a shorter one only draws a warning.
    "gpt_oss": lambda s: {**{k: v for k, v in _windowed_llm(s).items() if k != "max_position_embeddings"},
                          "num_local_experts": 4, "num_experts_per_tok": 2},
}


@dataclass
class BuiltModel:
    model: torch.nn.Module
    inputs: dict[str, torch.Tensor]
    batch_size: int
    name: str = ""
    seq_len: int = 0


def spec(name: str) -> Entry:
    return BY_NAME[check_model(name)]


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
    scale = SCALES.get(size)
    bs = batch_size or (scale.batch if scale else entry.batch_size)
    seq = scale.seq if scale else entry.seq_len
    inputs = _make_inputs(entry, config, bs, seq, device, dtype)
    return BuiltModel(model=model, inputs=inputs, batch_size=bs, name=entry.name, seq_len=seq)


def config_for(name: str, size: str = "tiny") -> Any:
    """The config ``build`` uses for ``name`` at ``size`` (no model is constructed)."""
    entry = spec(name)
    return _make_config(_model_class(entry), entry, size)


def _model_class(entry: Entry) -> Any:
    import transformers

    return getattr(transformers, entry.model_class)


def _make_config(model_cls: Any, entry: Entry, size: str) -> Any:
    scale = SCALES.get(size)
    # The published numbers (layer counts, ...) belong to full size; a shrunken size replaces every dimension.
    kwargs: dict[str, Any] = _SHRINK[entry.family](scale) if scale else dict(entry.published)
    config = model_cls.config_class(**kwargs)
    if entry.name.startswith(("GPT2ForSequenceClassification", "GPTNeoForSequenceClassification",
                              "GPTJForSequenceClassification", "Roberta")):
        config.pad_token_id = 0  # as the suite: sequence classification needs a pad id for batch > 1
    # The suite turns the KV cache off: a benchmark forward should not build and return past key/values.
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return config


def _randint(high: int, shape: tuple[int, ...], device: str) -> torch.Tensor:
    return torch.randint(0, max(high, 1), shape, device=device, dtype=torch.int64)


def _make_inputs(entry: Entry, config: Any, bs: int, seq: int, device: str,
                 dtype: torch.dtype) -> dict[str, torch.Tensor]:
    vocab = config.vocab_size
    if entry.inputs == SPEECH:
        # The encoder takes twice its positions in log-mel frames (30 s of audio at full size).
        frames = 2 * config.max_source_positions
        features = torch.randn((bs, config.num_mel_bins, frames), device=device).to(dtype)
        return {"input_features": features, "labels": _randint(vocab, (bs, seq), device)}
    # As the suite: RoBERTa gets all-zero ids, BART-style models end each sequence with EOS.
    ids = _randint(1 if entry.name.startswith("Roberta") else vocab, (bs, seq), device)
    if "Bart" in entry.name:
        ids[:, -1] = config.eos_token_id
    inputs = {"input_ids": ids}
    if entry.inputs == SEQ2SEQ_IDS:
        inputs["decoder_input_ids"] = ids
    inputs.update(_labels(entry, config, bs, seq, device))
    return inputs


def _labels(entry: Entry, config: Any, bs: int, seq: int, device: str) -> dict[str, torch.Tensor]:
    """The labels each head's own loss takes (the suite's ``include_loss_args``)."""
    name = entry.name
    if name.endswith("QuestionAnswering"):
        return {"start_positions": _randint(seq, (bs,), device), "end_positions": _randint(seq, (bs,), device)}
    if name.endswith("SequenceClassification"):
        return {"labels": _randint(config.num_labels - 1, (bs,), device)}
    if name.endswith("ForConditionalGeneration") and name != "T5Small":
        return {"labels": _randint(config.vocab_size - 1, (bs, seq), device)}
    # MaskedLM / CausalLM / LMHead models and the harness's extra models: token labels over the vocabulary.
    return {"labels": _randint(config.vocab_size, (bs, seq), device)}


def loss_of(outputs: Any) -> torch.Tensor:
    """The model's own loss (first output when labels are given), as the suite's ``compute_loss``."""
    loss = getattr(outputs, "loss", None)
    return loss if loss is not None else outputs[0]
