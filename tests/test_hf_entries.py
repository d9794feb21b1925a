"""The builtin suite's list: PyTorch's huggingface_models_list.txt line by line, what huggingface.py derives from
each line, the groups a user names with ``--models``, and the entries that cannot be built (torch-free)."""

from __future__ import annotations

import pytest

from foundation.formats.hf_entries import BY_NAME, ENTRIES, GROUPS, LLM_PROMPT, TINY_DEFAULT, unbuildable
from foundation.formats.suite_options import MODEL_NAMES, SIZES, UnknownModelError, resolve_models

# The list's lines as PyTorch ships them (name, batch size): the stand-in for the file the table follows.
LIST_LINES = [
    "AlbertForMaskedLM,8", "AlbertForQuestionAnswering,8", "AllenaiLongformerBase,8", "BartForCausalLM,8",
    "BartForConditionalGeneration,4", "BertForMaskedLM,32", "BertForQuestionAnswering,32",
    "BlenderbotForCausalLM,32", "BlenderbotForConditionalGeneration,16", "BlenderbotSmallForCausalLM,256",
    "BlenderbotSmallForConditionalGeneration,128", "CamemBert,32", "DebertaV2ForMaskedLM,8",
    "DebertaV2ForQuestionAnswering,8", "DistilBertForMaskedLM,256", "DistilBertForQuestionAnswering,512",
    "DistillGPT2,32", "ElectraForCausalLM,64", "ElectraForQuestionAnswering,128", "GPT2ForSequenceClassification,8",
    "GPTJForCausalLM,1", "GPTJForQuestionAnswering,1", "GPTNeoForCausalLM,32", "GPTNeoForSequenceClassification,32",
    "GoogleFnet,32", "LayoutLMForMaskedLM,32", "LayoutLMForSequenceClassification,32",
    "M2M100ForConditionalGeneration,64", "MBartForCausalLM,8", "MBartForConditionalGeneration,4",
    "MT5ForConditionalGeneration,32", "MegatronBertForCausalLM,16", "MegatronBertForQuestionAnswering,16",
    "MobileBertForMaskedLM,256", "MobileBertForQuestionAnswering,256", "OPTForCausalLM,4", "PLBartForCausalLM,16",
    "PLBartForConditionalGeneration,8", "PegasusForCausalLM,128", "PegasusForConditionalGeneration,64",
    "RobertaForCausalLM,32", "RobertaForQuestionAnswering,32", "T5ForConditionalGeneration,8", "T5Small,8",
    "TrOCRForCausalLM,64", "XGLMForCausalLM,32", "XLNetLMHeadModel,16", "YituTechConvBert,32",
    "meta-llama/Llama-3.2-1B,8", "google/gemma-2-2b,8", "google/gemma-3-4b-it,8", "openai/whisper-tiny,8",
    "Qwen/Qwen3-0.6B,8", "mistralai/Mistral-7B-Instruct-v0.3,8", "openai/gpt-oss-20b,8"
]


def test_every_line_of_the_list_is_an_entry_in_the_lists_order() -> None:
    assert len(LIST_LINES) == len(ENTRIES) == 55
    assert [f"{e.listed_as},{e.list_batch}" for e in ENTRIES] == LIST_LINES


@pytest.mark.parametrize(("name", "batch", "seq"), [
    ("BertForMaskedLM", 16, 512),  # 32 / divisor 2
    ("BertForQuestionAnswering", 32, 512),  # no divisor
    ("DebertaV2ForMaskedLM", 2, 512),  # 8 / 4
    ("T5Small", 4, 1024),
    ("OPTForCausalLM", 2, 2048),
    ("TrOCRForCausalLM", 32, 256),
    ("MobileBertForMaskedLM", 128, 128),
    ("GPTJForCausalLM", 1, 128),  # the harness's fallback length
    ("MT5ForConditionalGeneration", 16, 128),  # "MT5" does not start with "T5"
    ("Llama-3.2-1B", 1, LLM_PROMPT),  # 8 / 8, the generation benchmark's prompt
    ("Mistral-7B-Instruct-v0.3", 1, LLM_PROMPT),
])
def test_batch_sizes_and_sequence_lengths_follow_the_harness(name: str, batch: int, seq: int) -> None:
    assert (BY_NAME[name].batch_size, BY_NAME[name].seq_len) == (batch, seq)


def test_hub_only_entries_are_named_after_their_model_and_accept_the_hub_id() -> None:
    hub = [e for e in ENTRIES if e.hub_id]
    assert [e.name for e in hub] == ["Llama-3.2-1B", "gemma-2-2b", "gemma-3-4b-it", "whisper-tiny", "Qwen3-0.6B",
                                     "Mistral-7B-Instruct-v0.3", "gpt-oss-20b"]
    assert resolve_models("meta-llama/Llama-3.2-1B,Qwen3-0.6B") == ["Llama-3.2-1B", "Qwen3-0.6B"]
    assert BY_NAME["Llama-3.2-1B"].published["hidden_size"] == 2048  # the published size, for --size full


def test_the_one_entry_that_cannot_be_built_says_why() -> None:
    assert list(unbuildable()) == ["CamemBert"]
    assert "no transformers class" in unbuildable()["CamemBert"]
    assert len(MODEL_NAMES) == 54 and "CamemBert" not in MODEL_NAMES
    with pytest.raises(UnknownModelError, match="model 'CamemBert' cannot be built here: the list names"):
        resolve_models("BertForMaskedLM,CamemBert")


def test_groups_all_the_quick_starts_set_and_what_the_harness_runs_per_device() -> None:
    assert resolve_models("all") == list(MODEL_NAMES)
    # the quick start's default set is the one it always was
    assert resolve_models("tiny-default") == list(TINY_DEFAULT) == [
        "BertForMaskedLM", "GPT2ForSequenceClassification", "T5Small", "DistilBertForMaskedLM",
        "RobertaForCausalLM", "AlbertForMaskedLM", "BartForCausalLM", "ElectraForCausalLM"]
    gpu, cpu = GROUPS["harness-gpu"], GROUPS["harness-cpu"]
    assert "GPTJForCausalLM" not in gpu and "gpt-oss-20b" not in gpu and "Llama-3.2-1B" in gpu
    assert not {e.name for e in ENTRIES if e.hub_id} & set(cpu)
    assert set(cpu) < set(gpu) < set(MODEL_NAMES)
    assert (len(gpu), len(cpu)) == (46, 42)


def test_an_unknown_name_lists_the_known_names_and_the_groups() -> None:
    with pytest.raises(UnknownModelError, match=r"unknown model 'Bert' .*BertForMaskedLM.*groups: all, tiny-default"):
        resolve_models("Bert")
    with pytest.raises(UnknownModelError, match="no model named"):
        resolve_models(" , ")


def test_the_sizes_run_from_tiny_through_small_to_full() -> None:
    assert SIZES == ("tiny", "small", "full")
