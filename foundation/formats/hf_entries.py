"""The builtin HF suite's entries: every line of PyTorch's ``benchmarks/dynamo/huggingface_models_list.txt``,
defined once and free of torch.

Each entry is one list line (55 in the list this table follows) with what ``benchmarks/dynamo/huggingface.py``
derives from it: the batch size (the line's number divided by ``huggingface.yaml``'s divisor, at least 1), the
sequence length (``get_sequence_length``'s rules by name; the hub-only text models take the prompt length of
1000 tokens their generation benchmark feeds), the ``transformers`` class and its config family (the family is
the config's ``model_type``), and for the entries huggingface.py loads from the Hub (its ``EXTRA_MODELS`` and
the hub-only LLMs) the architecture numbers of the published config that differ from the config class's
defaults, so ``--size full`` builds the published architecture from the config class, offline.

The suite's model names are the list's names; a hub-only entry is named by the part after its owner
(``Llama-3.2-1B`` for ``meta-llama/Llama-3.2-1B``; the Hub id is accepted as an alias), so a name is also a
file name. An entry that cannot be built carries the reason (the docs list them); ``--models all`` is every
buildable entry, and the named groups are the common subsets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Input kinds: what ``stages.support.hf_models`` feeds the model besides the labels.
TEXT = "text"  # input_ids
SEQ2SEQ_IDS = "seq2seq"  # input_ids and decoder_input_ids = input_ids (huggingface.py: T5*, M2M100*, MT5*)
SPEECH = "speech"  # log-mel input_features (Whisper)

LLM_PROMPT = 1000  # huggingface_llm_models.py's TextGenerationBenchmark input length


@dataclass(frozen=True)
class Entry:
    """One line of the list and what the suite builds for it."""

    listed_as: str  # the name on the list's line
    list_batch: int  # the number on the list's line
    model_class: str  # the transformers class that is built ("" when the entry cannot be built)
    family: str  # the config's model_type: the key of stages.support.hf_models' shrinking rules
    seq_len: int  # full size
    divisor: int = 1  # huggingface.yaml batch_size.divisors
    inputs: str = TEXT
    published: dict[str, Any] = field(default_factory=dict)  # full size: config numbers that differ from defaults
    unbuildable: str = ""  # why the entry cannot be built (empty: it can)

    @property
    def name(self) -> str:
        return self.listed_as.rsplit("/", 1)[-1]

    @property
    def hub_id(self) -> str:
        return self.listed_as if "/" in self.listed_as else ""

    @property
    def batch_size(self) -> int:
        return max(int(self.list_batch / self.divisor), 1)


def harness_seq_len(name: str) -> int:
    """The sequence length huggingface.py's ``get_sequence_length`` gives a list name (our own rendering)."""
    if name.startswith("Blenderbot"):
        return 128
    if name.startswith(("GPT2", "Bart", "T5", "PLBart", "MBart")) or name == "AllenaiLongformerBase":
        return 1024
    if name.startswith("OPT"):
        return 2048
    if name.startswith(("Albert", "Deberta", "Layout", "Electra", "XLNet", "MegatronBert", "Bert", "Roberta")) \
            or name in ("DistillGPT2", "GoogleFnet", "YituTechConvBert"):
        return 512
    if name == "TrOCRForCausalLM":
        return 256
    return 128  # MobileBert* by rule, everything else by the harness's fallback


def _e(listed_as: str, list_batch: int, model_class: str, family: str, divisor: int = 1, **kw: Any) -> Entry:
    return Entry(listed_as, list_batch, model_class, family, kw.pop("seq_len", harness_seq_len(listed_as)),
                 divisor, **kw)


def _llm(listed_as: str, model_class: str, family: str, published: dict[str, Any]) -> Entry:
    return Entry(listed_as, 8, model_class, family, LLM_PROMPT, 8, published=published)


# The published configs' architecture numbers (config.json of each checkpoint) where they differ from the config
# class's defaults in the transformers this was written against; shape numbers only (rope scaling variants,
# token ids and generation settings do not change which kernels run).
_LLAMA_3_2_1B = {"vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
                 "max_position_embeddings": 131072, "tie_word_embeddings": True}
_GEMMA_3_4B_TEXT = {"vocab_size": 262208, "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 1024}
_QWEN3_0_6B = {"vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
               "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
               "max_position_embeddings": 40960, "tie_word_embeddings": True}
_MISTRAL_7B_V03 = {"vocab_size": 32768, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                   "max_position_embeddings": 32768, "sliding_window": None}
_GPT_OSS_20B = {"vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 24,
                "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 32,
                "num_experts_per_tok": 4, "sliding_window": 128}
_WHISPER_TINY = {"vocab_size": 51865, "d_model": 384, "encoder_layers": 4, "decoder_layers": 4,
                 "encoder_attention_heads": 6, "decoder_attention_heads": 6, "encoder_ffn_dim": 1536,
                 "decoder_ffn_dim": 1536, "num_mel_bins": 80, "max_source_positions": 1500}

_NO_CAMEMBERT = ("the list names `CamemBert`, which is no transformers class (huggingface.py looks the name up as "
                 "one), and the name ends in no head whose loss the harness knows")

ENTRIES: tuple[Entry, ...] = (
    _e("AlbertForMaskedLM", 8, "AlbertForMaskedLM", "albert", 2),
    _e("AlbertForQuestionAnswering", 8, "AlbertForQuestionAnswering", "albert"),
    _e("AllenaiLongformerBase", 8, "LongformerForMaskedLM", "longformer", 2,
       published={"vocab_size": 50265, "max_position_embeddings": 4098, "type_vocab_size": 1}),
    _e("BartForCausalLM", 8, "BartForCausalLM", "bart", 2),
    _e("BartForConditionalGeneration", 4, "BartForConditionalGeneration", "bart"),
    _e("BertForMaskedLM", 32, "BertForMaskedLM", "bert", 2),
    _e("BertForQuestionAnswering", 32, "BertForQuestionAnswering", "bert"),
    _e("BlenderbotForCausalLM", 32, "BlenderbotForCausalLM", "blenderbot", 8),
    _e("BlenderbotForConditionalGeneration", 16, "BlenderbotForConditionalGeneration", "blenderbot"),
    _e("BlenderbotSmallForCausalLM", 256, "BlenderbotSmallForCausalLM", "blenderbot-small"),
    _e("BlenderbotSmallForConditionalGeneration", 128, "BlenderbotSmallForConditionalGeneration",
       "blenderbot-small"),
    _e("CamemBert", 32, "", "camembert", unbuildable=_NO_CAMEMBERT),
    _e("DebertaV2ForMaskedLM", 8, "DebertaV2ForMaskedLM", "deberta-v2", 4),
    _e("DebertaV2ForQuestionAnswering", 8, "DebertaV2ForQuestionAnswering", "deberta-v2"),
    _e("DistilBertForMaskedLM", 256, "DistilBertForMaskedLM", "distilbert", 2),
    _e("DistilBertForQuestionAnswering", 512, "DistilBertForQuestionAnswering", "distilbert"),
    _e("DistillGPT2", 32, "GPT2LMHeadModel", "gpt2", 2, published={"n_layer": 6}),
    _e("ElectraForCausalLM", 64, "ElectraForCausalLM", "electra", 2),
    _e("ElectraForQuestionAnswering", 128, "ElectraForQuestionAnswering", "electra"),
    _e("GPT2ForSequenceClassification", 8, "GPT2ForSequenceClassification", "gpt2", 2),
    _e("GPTJForCausalLM", 1, "GPTJForCausalLM", "gptj"),
    _e("GPTJForQuestionAnswering", 1, "GPTJForQuestionAnswering", "gptj"),
    _e("GPTNeoForCausalLM", 32, "GPTNeoForCausalLM", "gpt_neo"),
    _e("GPTNeoForSequenceClassification", 32, "GPTNeoForSequenceClassification", "gpt_neo"),
    _e("GoogleFnet", 32, "FNetForMaskedLM", "fnet", 2),
    _e("LayoutLMForMaskedLM", 32, "LayoutLMForMaskedLM", "layoutlm", 2),
    _e("LayoutLMForSequenceClassification", 32, "LayoutLMForSequenceClassification", "layoutlm"),
    _e("M2M100ForConditionalGeneration", 64, "M2M100ForConditionalGeneration", "m2m_100", 4, inputs=SEQ2SEQ_IDS),
    _e("MBartForCausalLM", 8, "MBartForCausalLM", "mbart", 2),
    _e("MBartForConditionalGeneration", 4, "MBartForConditionalGeneration", "mbart"),
    _e("MT5ForConditionalGeneration", 32, "MT5ForConditionalGeneration", "mt5", 2, inputs=SEQ2SEQ_IDS),
    _e("MegatronBertForCausalLM", 16, "MegatronBertForCausalLM", "megatron-bert", 4),
    _e("MegatronBertForQuestionAnswering", 16, "MegatronBertForQuestionAnswering", "megatron-bert"),
    _e("MobileBertForMaskedLM", 256, "MobileBertForMaskedLM", "mobilebert", 2),
    _e("MobileBertForQuestionAnswering", 256, "MobileBertForQuestionAnswering", "mobilebert"),
    _e("OPTForCausalLM", 4, "OPTForCausalLM", "opt", 2),
    _e("PLBartForCausalLM", 16, "PLBartForCausalLM", "plbart", 2),
    _e("PLBartForConditionalGeneration", 8, "PLBartForConditionalGeneration", "plbart"),
    _e("PegasusForCausalLM", 128, "PegasusForCausalLM", "pegasus", 4),
    _e("PegasusForConditionalGeneration", 64, "PegasusForConditionalGeneration", "pegasus"),
    _e("RobertaForCausalLM", 32, "RobertaForCausalLM", "roberta", 2),
    _e("RobertaForQuestionAnswering", 32, "RobertaForQuestionAnswering", "roberta"),
    _e("T5ForConditionalGeneration", 8, "T5ForConditionalGeneration", "t5", 2, inputs=SEQ2SEQ_IDS),
    _e("T5Small", 8, "T5ForConditionalGeneration", "t5", 2, inputs=SEQ2SEQ_IDS),
    _e("TrOCRForCausalLM", 64, "TrOCRForCausalLM", "trocr", 2),
    _e("XGLMForCausalLM", 32, "XGLMForCausalLM", "xglm", 4),
    _e("XLNetLMHeadModel", 16, "XLNetLMHeadModel", "xlnet", 2),
    _e("YituTechConvBert", 32, "ConvBertForMaskedLM", "convbert", 2),
    _llm("meta-llama/Llama-3.2-1B", "LlamaForCausalLM", "llama", _LLAMA_3_2_1B),
    _llm("google/gemma-2-2b", "Gemma2ForCausalLM", "gemma2", {}),  # the class defaults are gemma-2-2b's
    # The checkpoint is multimodal; its text model is what a text prompt runs (the vision tower sees no input).
    _llm("google/gemma-3-4b-it", "Gemma3ForCausalLM", "gemma3_text", _GEMMA_3_4B_TEXT),
    # 30 s of audio (3000 log-mel frames) into the encoder; the decoder takes the harness's fallback length.
    Entry("openai/whisper-tiny", 8, "WhisperForConditionalGeneration", "whisper", 128, 8, inputs=SPEECH,
          published=_WHISPER_TINY),
    _llm("Qwen/Qwen3-0.6B", "Qwen3ForCausalLM", "qwen3", _QWEN3_0_6B),
    _llm("mistralai/Mistral-7B-Instruct-v0.3", "MistralForCausalLM", "mistral", _MISTRAL_7B_V03),
    _llm("openai/gpt-oss-20b", "GptOssForCausalLM", "gpt_oss", _GPT_OSS_20B),
)
BY_NAME: dict[str, Entry] = {entry.name: entry for entry in ENTRIES}
ALIASES: dict[str, str] = {entry.hub_id: entry.name for entry in ENTRIES if entry.hub_id}

# The config ids huggingface.py itself loads with AutoConfig.from_pretrained (its EXTRA_MODELS), per entry:
# stages.harness_configs writes them from these entries' published numbers so the harness runs offline.
HARNESS_CONFIG_IDS: dict[str, str] = {
    "t5-small": "T5Small",
    "distilgpt2": "DistillGPT2",
    "allenai/longformer-base-4096": "AllenaiLongformerBase",
    "google/fnet-base": "GoogleFnet",
    "YituTech/conv-bert-base": "YituTechConvBert",
}

BUILDABLE: tuple[str, ...] = tuple(entry.name for entry in ENTRIES if not entry.unbuildable)

# huggingface.yaml's skip lists as the harness applies them on every run: ``skip.all`` (too big, fails deepcopy or
# fails at batch size 1) and ``skip.device.cpu`` (the hub-only LLMs). Which subset the HUD's own CI jobs pick is
# not in the upstream sources read; these groups are what the harness itself runs on each device.
HARNESS_SKIP_ALL: frozenset[str] = frozenset({
    "BlenderbotForConditionalGeneration", "GPTNeoForCausalLM", "GPTNeoForSequenceClassification",
    "GPTJForCausalLM", "GPTJForQuestionAnswering", "gemma-3-4b-it", "gpt-oss-20b", "Mistral-7B-Instruct-v0.3",
})
HARNESS_SKIP_CPU: frozenset[str] = frozenset(entry.name for entry in ENTRIES if entry.hub_id)

# One model per family the brief names: what the quick start (``--models tiny-default``) runs on a 2-core CPU.
TINY_DEFAULT: tuple[str, ...] = (
    "BertForMaskedLM", "GPT2ForSequenceClassification", "T5Small", "DistilBertForMaskedLM",
    "RobertaForCausalLM", "AlbertForMaskedLM", "BartForCausalLM", "ElectraForCausalLM",
)

GROUPS: dict[str, tuple[str, ...]] = {
    "all": BUILDABLE,
    "tiny-default": TINY_DEFAULT,
    "harness-gpu": tuple(n for n in BUILDABLE if n not in HARNESS_SKIP_ALL),
    "harness-cpu": tuple(n for n in BUILDABLE if n not in HARNESS_SKIP_ALL | HARNESS_SKIP_CPU),
}
GROUP_HELP: dict[str, str] = {
    "all": "every buildable entry of huggingface_models_list.txt",
    "tiny-default": "the quick start's eight models, one per family",
    "harness-gpu": "what PyTorch's harness runs on a GPU (the list less huggingface.yaml's skip.all)",
    "harness-cpu": "what PyTorch's harness runs on the CPU (less skip.device.cpu too: no hub-only LLM)",
}


def unbuildable() -> dict[str, str]:
    """The entries that cannot be built, with why."""
    return {entry.name: entry.unbuildable for entry in ENTRIES if entry.unbuildable}
