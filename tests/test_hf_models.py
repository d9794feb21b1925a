"""The builtin HF suite: every model builds from its config class (no Hub) and runs in eager, seeded."""

from __future__ import annotations

import math
from types import ModuleType

import pytest

from foundation.formats.suite_options import MODEL_NAMES, TINY_DEFAULT, UnknownModelError, resolve_models

# stages.support.hf_models imports torch, so the tests import it (not collection), on the worker of the tests that run
# torch in their own process: one xdist worker pays for the import, not both.
pytestmark = pytest.mark.xdist_group("torch-in-process")


@pytest.fixture
def hf_models() -> ModuleType:
    from stages.support import hf_models

    return hf_models


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # A test that reached for the Hub would fail here instead of hanging on the network.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.mark.integration
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_model_runs_a_forward_and_a_training_step_in_eager(name: str, hf_models: ModuleType) -> None:
    import torch

    from stages.suite import step_factory

    built = hf_models.build(name, size="tiny", mode="training")
    assert built.batch_size == 2 and built.seq_len == 32
    assert next(iter(built.inputs.values())).shape[0] == 2
    assert built.model.training
    before = [p.detach().clone() for p in built.model.parameters()]

    loss = step_factory("training", "float32", "cpu")(built.model)(built.model, built.inputs)
    assert loss.ndim == 0 and math.isfinite(loss.item())
    grads = [p.grad for p in built.model.parameters() if p.requires_grad]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
    # the optimizer stepped: the weights moved
    assert any(not torch.equal(a, b) for a, b in zip(before, built.model.parameters(), strict=True))

    inference = hf_models.build(name, size="tiny", mode="inference")
    assert not inference.model.training
    with torch.no_grad():
        out = inference.model(**inference.inputs)
    assert math.isfinite(hf_models.loss_of(out).item())


def test_the_default_tiny_suite_covers_eight_families(hf_models: ModuleType) -> None:
    classes = {hf_models.spec(n).family for n in TINY_DEFAULT}
    assert {"bert", "gpt2", "t5", "distilbert", "roberta", "albert", "bart", "electra"} <= classes
    assert resolve_models("tiny-default") == list(TINY_DEFAULT)
    assert resolve_models("T5Small, BertForMaskedLM,T5Small") == ["T5Small", "BertForMaskedLM"]


@pytest.mark.integration
def test_building_twice_gives_the_same_weights_and_inputs(hf_models: ModuleType) -> None:
    import torch

    first = hf_models.build("BertForMaskedLM")
    second = hf_models.build("BertForMaskedLM")
    for a, b in zip(first.model.state_dict().values(), second.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    for key in first.inputs:
        assert torch.equal(first.inputs[key], second.inputs[key])


def test_an_unknown_model_is_a_clear_error_listing_the_known_ones(hf_models: ModuleType) -> None:
    with pytest.raises(UnknownModelError, match=r"unknown model 'Bert' .*BertForMaskedLM"):
        hf_models.build("Bert")
    with pytest.raises(UnknownModelError, match="NoSuchModel"):
        resolve_models("BertForMaskedLM,NoSuchModel")


def test_full_size_uses_the_default_configs_and_the_suites_shapes(hf_models: ModuleType) -> None:
    import transformers

    t5 = hf_models.config_for("T5Small", "full")
    assert (t5.d_model, t5.num_layers, t5.num_heads, t5.vocab_size) == (512, 6, 8, 32128)  # = t5-small
    bert = hf_models.config_for("BertForMaskedLM", "full")
    assert bert.hidden_size == transformers.BertConfig().hidden_size == 768
    assert hf_models.config_for("DistillGPT2", "full").n_layer == 6  # distilgpt2
    # Batch sizes are the suite list divided by its divisors; sequence lengths from get_sequence_length.
    assert (hf_models.spec("BertForMaskedLM").batch_size, hf_models.spec("BertForMaskedLM").seq_len) == (16, 512)
    assert (hf_models.spec("T5Small").batch_size, hf_models.spec("T5Small").seq_len) == (4, 1024)
    tiny = hf_models.config_for("GPT2ForSequenceClassification", "tiny")
    assert (tiny.n_embd, tiny.n_layer, tiny.n_head, tiny.vocab_size, tiny.pad_token_id) == (64, 2, 2, 1000, 0)


def test_hub_only_models_are_built_from_their_config_class_at_the_published_size(hf_models: ModuleType) -> None:
    llama = hf_models.config_for("Llama-3.2-1B", "full")
    assert (llama.hidden_size, llama.num_hidden_layers, llama.num_key_value_heads, llama.vocab_size) == \
        (2048, 16, 8, 128256)
    qwen = hf_models.config_for("Qwen/Qwen3-0.6B", "full")
    assert (qwen.hidden_size, qwen.num_hidden_layers, qwen.head_dim) == (1024, 28, 128)
    oss = hf_models.config_for("gpt-oss-20b", "full")
    assert (oss.num_hidden_layers, oss.num_local_experts, oss.num_experts_per_tok) == (24, 32, 4)
    gemma = hf_models.config_for("gemma-2-2b", "full")
    assert (gemma.hidden_size, gemma.num_hidden_layers, gemma.head_dim) == (2304, 26, 256)
    tiny = hf_models.config_for("Llama-3.2-1B", "tiny")  # the same class, shrunk for the CPU
    assert (tiny.hidden_size, tiny.num_hidden_layers, tiny.num_key_value_heads, tiny.vocab_size) == (64, 2, 1, 1000)


@pytest.mark.parametrize("name", ["BertForMaskedLM", "T5Small", "Llama-3.2-1B", "MobileBertForMaskedLM"])
def test_the_small_size_sits_between_tiny_and_full(name: str, hf_models: ModuleType) -> None:
    def hidden(config) -> int:
        return int(config.hidden_size)  # every config answers hidden_size (attribute_map for d_model, n_embd)

    tiny, small, full = (hf_models.config_for(name, size) for size in ("tiny", "small", "full"))
    assert hidden(tiny) < hidden(small) == 256 <= hidden(full)
    assert small.vocab_size == 8192


def test_dtype_and_batch_size_are_honoured(hf_models: ModuleType) -> None:
    import torch

    built = hf_models.build("DistilBertForMaskedLM", dtype=torch.bfloat16, batch_size=3)
    assert {p.dtype for p in built.model.parameters()} == {torch.bfloat16}
    assert built.inputs["input_ids"].shape == (3, 32)
    assert built.inputs["input_ids"].dtype == torch.int64


@pytest.mark.integration
def test_whisper_takes_log_mel_frames_for_its_encoder(hf_models: ModuleType) -> None:
    import torch

    built = hf_models.build("whisper-tiny", size="small")
    assert built.inputs["input_features"].shape == (2, 80, 256)  # twice the encoder's positions
    assert built.inputs["labels"].shape == (2, 128)
    with torch.no_grad():
        assert math.isfinite(hf_models.loss_of(built.model(**built.inputs)).item())
