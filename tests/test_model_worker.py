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

    def __call__(self, gm: Any, example_inputs: list[Any]) -> Any:
        from torch.fx.experimental.symbolic_shapes import free_symbols

        symbolic = any(free_symbols(node.meta.get("example_value")) for node in gm.graph.nodes
                       if node.op == "placeholder")
        self.dynamic[self.model] = self.dynamic.get(self.model, False) or symbolic
        return gm.forward

    def prepare_all(self, worker: ModelWorker) -> dict[str, bool]:
        """Prepare the models in one worker, as a round does; {model: compiled with a dynamic size?}."""
        for model in MODELS:
            self.model = model
            worker.prepare({"kind": "prepare", "model": model, "size": "tiny", "mode": "inference",
                            "dtype": "float32", "device": "cpu", "backend": PROBE_BACKEND, "warmup": 1,
                            "timeout_s": 600})
        return self.dynamic


_CURRENT: list[Probe] = []  # the registered backend name calls the current test's probe


@pytest.fixture
def probe() -> Iterator[Probe]:
    import torch._dynamo
    from torch._dynamo.backends.registry import list_backends, register_backend

    if PROBE_BACKEND not in list_backends(exclude_tags=()):
        register_backend(name=PROBE_BACKEND)(lambda gm, inputs: _CURRENT[-1](gm, inputs))
    _CURRENT[:] = [Probe()]
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):  # as the worker sets it
        yield _CURRENT[-1]
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
