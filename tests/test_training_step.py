"""Training as PyTorch's runner times it: zero grad, forward, loss, backward (through the grad scaler under float16
AMP), optimizer step; and the numerics check compares that whole step, so a PR that breaks only the backward is
caught in training and not in inference."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytestmark = pytest.mark.xdist_group("torch-in-process")


def _toy() -> Any:
    import torch

    class Toy(torch.nn.Module):
        """A model whose output carries its own loss, as an HF model given labels."""

        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.linear = torch.nn.Linear(8, 4)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> Any:
            return SimpleNamespace(loss=torch.nn.functional.cross_entropy(self.linear(x), labels))

    return Toy()


def _inputs() -> dict[str, Any]:
    import torch

    torch.manual_seed(1)
    return {"x": torch.randn(16, 8), "labels": torch.randint(0, 4, (16,))}


def test_a_training_step_zeroes_the_gradients_and_takes_the_optimizer_step() -> None:
    import torch

    from stages.suite import step_factory

    model, inputs = _toy(), _inputs()
    step = step_factory("training", "float32", "cpu")(model)
    first = model.linear.weight.detach().clone()
    loss = step(model, inputs)
    grad_once = model.linear.weight.grad.clone()
    # The runner's optimizer: Adam at lr 0.01, whose first step moves each weight by ~lr against its gradient.
    moved = model.linear.weight.detach() - first
    assert torch.allclose(moved, -0.01 * torch.sign(grad_once), atol=1e-4)
    assert loss.item() > 0
    stepped = {k: v.clone() for k, v in model.state_dict().items()}
    step(model, inputs)  # the next step's gradient is its own, not added to the first one's
    fresh = _toy()
    fresh.load_state_dict(stepped)
    reference = torch.autograd.grad(fresh(**inputs).loss, fresh.linear.weight)[0]
    assert torch.allclose(model.linear.weight.grad, reference, atol=1e-6)


def test_float16_amp_steps_through_the_grad_scaler_and_bfloat16_amp_does_not() -> None:
    import torch

    from stages.support.training import GRAD_SCALER_INIT, new_trainer, train_step

    model = _toy()
    assert new_trainer(model, "cpu", float16_amp=False).scaler is None
    trainer = new_trainer(model, "cpu", float16_amp=True)

    train_step(model, _inputs(), trainer, lambda: torch.autocast("cpu", dtype=torch.float16))
    assert trainer.scaler.get_scale() == GRAD_SCALER_INIT  # the loss went through scale() and update()
    assert trainer.optimizer.state  # and the optimizer stepped through the scaler


def test_inference_needs_no_trainer_and_training_refuses_to_run_without_one() -> None:
    import contextlib

    from stages.suite import make_step

    make_step("inference", contextlib.nullcontext)
    with pytest.raises(ValueError, match="a training step needs a trainer"):
        make_step("training", contextlib.nullcontext)


class _Recorder:
    """A torch.compile backend that keeps every graph Dynamo hands it and runs it as traced."""

    def __init__(self) -> None:
        self.graphs: list[Any] = []

    def __call__(self, graph: Any, example_inputs: Any) -> Any:
        self.graphs.append(graph)
        return graph.forward

    def foreach_ops(self) -> set[str]:
        """The ``torch._foreach_*`` calls in the graphs: what the foreach Adam's update is made of."""
        return {node.target.__name__ for graph in self.graphs for node in graph.graph.nodes
                if node.op == "call_function" and getattr(node.target, "__name__", "").startswith("_foreach_")}


@pytest.mark.integration
def test_the_compiled_training_step_holds_the_optimizer_update_and_the_numerics_record_reuses_it(
        tmp_path: Path) -> None:
    import torch
    import torch._dynamo

    from analysis.models.numerics import outputs_path, read_model_outputs
    from stages.suite import step_factory, timed_step
    from stages.support.numerics import record_outputs, snapshot

    torch._dynamo.reset()
    model, inputs = _toy(), _inputs()
    built = SimpleNamespace(model=model, inputs=inputs)
    initial = snapshot(model)
    recorder = _Recorder()
    step = timed_step(model, "training", "float32", "cpu", recorder)
    step.eager(model, inputs)
    step.compiled(model, inputs)
    step.compiled(model, inputs)
    # The runner compiles its whole model_iter_fn: Adam's update is traced into the compiled function (a graph of
    # its own after the backward's graph break), not left to run eagerly beside a compiled model.
    assert {"_foreach_addcdiv_", "_foreach_lerp_"} & recorder.foreach_ops()
    compiled_graphs = len(recorder.graphs)

    record_outputs(tmp_path, "Toy", built, step, "training", "float32", step_factory("training", "float32", "cpu"),
                   initial)
    # The compiled role is the very function that was timed: restarted in place, nothing compiled again ...
    assert len(recorder.graphs) == compiled_graphs
    recorded = read_model_outputs(outputs_path(tmp_path, "Toy"))
    assert recorded.meta["error"] is None
    eager, compiled, fp64 = (recorded.role(role) for role in ("eager", "compiled", "fp64"))
    # ... and each role took one step of a fresh optimizer from the weights as built (fp64 with an optimizer of
    # its own): an optimizer restarted wrongly would take a step of another size.
    for name in ("param.linear.weight", "grad.linear.weight", "loss"):
        assert torch.allclose(torch.from_numpy(compiled[name]), torch.from_numpy(eager[name]), atol=1e-6)
        assert torch.allclose(torch.from_numpy(eager[name]).double(), torch.from_numpy(fp64[name]), atol=1e-5)

    torch._dynamo.reset()
    inference = _Recorder()
    timed_step(_toy(), "inference", "float32", "cpu", inference).compiled(_toy(), inputs)
    assert inference.graphs and not inference.foreach_ops()  # no optimizer in inference


def _gelu_toy() -> Any:
    import torch

    class GeluToy(torch.nn.Module):
        """A feed-forward block as BERT's (linear, GELU, linear) under a classifier's loss: the output is (loss,
        logits), as an HF model's with ``return_dict=False``."""

        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.up = torch.nn.Linear(8, 32)
            self.down = torch.nn.Linear(32, 4)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> Any:
            logits = self.down(torch.nn.functional.gelu(self.up(x)))
            return torch.nn.functional.cross_entropy(logits, labels), logits

    return GeluToy()


def _record(out: Path, mode: str) -> None:
    """One side's recorded outputs of the GELU block, compiled by Inductor now, as the suite records a model's."""
    import torch._dynamo

    from stages.suite import step_factory, timed_step
    from stages.support.numerics import record_outputs, snapshot

    torch._dynamo.reset()
    model = _gelu_toy()
    model.train(mode == "training")
    built = SimpleNamespace(model=model, inputs=_inputs())
    initial = snapshot(model) if mode == "training" else None
    step = timed_step(model, mode, "float32", "cpu", "inductor")
    step.compiled(model, built.inputs)  # compiled and run, as the suite times it before recording
    record_outputs(out, "GeluToy", built, step, mode, "float32", step_factory(mode, "float32", "cpu"), initial)


@pytest.mark.integration
def test_a_pr_that_breaks_the_backward_fails_training_numerics_and_passes_inference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from torch._inductor import config as inductor_config
    from torch._inductor import decomposition

    from analysis.models.numerics import compare_model_outputs, outputs_path, read_model_outputs
    from analysis.stats.numeric_tolerance import DEFAULT_TOLERANCES

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    monkeypatch.setattr(inductor_config, "fx_graph_cache", False)  # the PR must compile its own kernels
    monkeypatch.setattr(torch._functorch.config, "enable_autograd_cache", False)
    for mode in ("inference", "training"):
        _record(tmp_path / "base" / mode, mode)

    # The "PR": Inductor's GELU backward computes a gradient 10 % too large; GELU's forward is untouched.
    gelu_backward = torch.ops.aten.gelu_backward.default
    table = decomposition.select_decomp_table()  # the table Inductor traces with (a cached copy)
    right = table[gelu_backward]

    def wrong(*args: Any, **kwargs: Any) -> Any:
        return right(*args, **kwargs) * 1.1

    monkeypatch.setitem(table, gelu_backward, wrong)
    for mode in ("inference", "training"):
        _record(tmp_path / "pr" / mode, mode)

    verdicts = {}
    for mode in ("inference", "training"):
        compared = compare_model_outputs(tmp_path / "base" / mode, tmp_path / "pr" / mode, DEFAULT_TOLERANCES)
        assert compared is not None and not compared.not_compared
        verdicts[mode] = compared.models[0]
    assert verdicts["inference"].passed
    training = verdicts["training"]
    assert not training.passed
    failed = {difference.output for check, difference in training.failures() if check.name == "PR vs base"}
    assert any(name.startswith("grad.") for name in failed)  # the gradients, and so the optimizer's step
    assert "loss" not in failed  # the forward is the same
    recorded = read_model_outputs(outputs_path(tmp_path / "base" / "training", "GeluToy"))
    assert any(name.startswith("param.") for name in recorded.role("compiled"))  # weights after the optimizer step


@pytest.mark.integration
def test_a_model_that_cannot_run_in_float64_keeps_its_outputs_and_says_why(tmp_path: Path) -> None:
    """XGLMForCausalLM, one of the HF list's models, fails in float64 (its attention mask's fill value overflows
    a float): the suite still records its eager and compiled outputs for the base-vs-PR check, without the
    float64 reference, and says why."""
    import torch._dynamo

    from analysis.models.numerics import outputs_path, read_model_outputs
    from stages.suite import step_factory, timed_step
    from stages.support import hf_models
    from stages.support.numerics import record_outputs

    torch._dynamo.reset()
    built = hf_models.build("XGLMForCausalLM", mode="inference")
    step = timed_step(built.model, "inference", "float32", "cpu", "eager")
    record_outputs(tmp_path, "XGLMForCausalLM", built, step, "inference", "float32",
                   step_factory("inference", "float32", "cpu"), None)

    recorded = read_model_outputs(outputs_path(tmp_path, "XGLMForCausalLM"))
    assert recorded.meta["error"] is None
    assert recorded.meta["fp64"] is False and "overflow" in recorded.meta["fp64_error"]
    assert recorded.role("eager") and recorded.role("compiled") and not recorded.role("fp64")
