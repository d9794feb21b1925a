"""A model worker keeps every compiled model alive and compiles each one as the suite, a fresh process, does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from stages import model_worker
from stages.model_worker import RECOMPILE_LIMIT, ModelWorker

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("torch-in-process")]  # torch in the test process

PROBE_BACKEND = "prbench_test_shape_probe"
MODELS = ("BertForMaskedLM", "GPT2ForSequenceClassification", "T5Small")  # the tiny default's order


class Probe:
    """A dynamo backend that runs each graph eagerly and records, per model prepared, whether any graph it was
    given has a symbolic (dynamic) size."""

    def __init__(self) -> None:
        self.dynamic: dict[str, bool] = {}
        self.model = ""
        self.registry_at_compile: dict[str, int] = {}  # model → size of the registry its guards check

    def __call__(self, gm: Any, example_inputs: list[Any]) -> Any:
        from torch.fx.experimental.symbolic_shapes import free_symbols

        symbolic = any(free_symbols(node.meta.get("example_value")) for node in gm.graph.nodes
                       if node.op == "placeholder")
        self.dynamic[self.model] = self.dynamic.get(self.model, False) or symbolic
        self.registry_at_compile.setdefault(self.model, registry_size())
        return gm.forward

    def prepare_all(self, worker: ModelWorker, name_later: bool = True) -> dict[str, bool]:
        """Prepare the models in one worker, as a round does (each prepare naming the models after it unless
        ``name_later`` is false); {model: compiled with a dynamic size?}."""
        for index, model in enumerate(MODELS):
            self.model = model
            later = list(MODELS[index + 1:]) if name_later else []
            worker.prepare({"kind": "prepare", "model": model, "size": "tiny", "mode": "inference",
                            "dtype": "float32", "device": "cpu", "backend": PROBE_BACKEND, "warmup": 2,
                            "timeout_s": 600, "later": later})
        return self.dynamic


def registry_size() -> int:
    """transformers' registry of model classes, which grows as models of new classes are built; a compiled
    forward guards on its size (``len(_CAN_RECORD_REGISTRY)``), so a model compiled at another size than the
    registry has at its visit is compiled again there, with the other models' input sizes marked dynamic."""
    from transformers.utils import output_capturing

    return len(output_capturing._CAN_RECORD_REGISTRY)


_CURRENT: list[Probe] = []  # the registered backend name calls the current test's probe


@pytest.fixture
def probe() -> Iterator[Probe]:
    import torch._dynamo
    from torch._dynamo.backends.registry import list_backends, register_backend

    if PROBE_BACKEND not in list_backends(exclude_tags=()):
        register_backend(name=PROBE_BACKEND)(lambda gm, inputs: _CURRENT[-1](gm, inputs))
    from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY

    _CURRENT[:] = [Probe()]
    torch._dynamo.reset()
    kept = dict(_CAN_RECORD_REGISTRY)
    dict.clear(_CAN_RECORD_REGISTRY)  # as in a fresh worker: no model class built yet
    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):  # as the worker sets it
        yield _CURRENT[-1]
    dict.update(_CAN_RECORD_REGISTRY, kept)
    torch._dynamo.reset()


def test_a_model_prepared_after_others_is_compiled_with_the_static_shapes_a_fresh_process_gives_it(
        probe: Probe) -> None:
    """transformers wraps every forward in one decorator, so the three models share a code object: T5Small is a
    recompile of it with other input sizes. The worker compiles it without that history, static like the suite's
    graph (whose cache entry it then loads), not with ``labels`` dynamic."""
    dynamic = probe.prepare_all(ModelWorker())

    assert dynamic == dict.fromkeys(MODELS, False)


def test_with_the_shape_history_kept_the_same_worker_would_compile_t5small_dynamic(
        probe: Probe, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: what the worker did before it forgot the history between models."""
    monkeypatch.setattr(model_worker, "forget_automatic_dynamic", lambda torch: None)

    dynamic = probe.prepare_all(ModelWorker())

    assert dynamic == {"BertForMaskedLM": False, "GPT2ForSequenceClassification": False, "T5Small": True}


def test_every_model_is_compiled_with_the_registry_its_visits_will_see(probe: Probe) -> None:
    """The worker builds every model it will prepare before it compiles the first, so the registry's size that
    each compiled graph checks is the one every later visit sees. In README command 1 (8 models), before this,
    the first pass of round 1 took 149 s against 2-3 s for the others: three models per side compiled again, cold."""
    probe.prepare_all(ModelWorker())

    assert set(probe.registry_at_compile.values()) == {registry_size()}


def test_without_the_later_models_built_first_the_earlier_ones_are_compiled_with_a_smaller_registry(
        probe: Probe) -> None:
    """The control: each model built just before its compile, as the worker did before."""
    probe.prepare_all(ModelWorker(), name_later=False)

    sizes = [probe.registry_at_compile[m] for m in MODELS]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1] <= registry_size()
