"""The builtin suite's training step, as PyTorch's dynamo runner times one (``forward_and_backward_pass``).

One step is: zero the gradients, forward under the step's autocast, the model's own loss, backward (through the
AMP grad scaler when the autocast computes in float16), and the optimizer step. The runner's optimizer is Adam
(lr 0.01, ``foreach``; ``capturable`` on a GPU); its SGD is for a few TorchBench models only, and on the CPU the
runner takes no optimizer step at all: here every device takes it, so a CPU run times what a GPU run times.
The suite compiles this whole step, as the runner compiles its ``model_iter_fn`` (``stages.suite.timed_step``):
Dynamo breaks the graph at ``zero_grad`` and at the backward, so the forward with its loss is one graph and the
optimizer's update another, both Inductor's; eager and compiled calls step one optimizer, as the runner's do.

The runner keeps its grad scaler switched off (its state would drift between the eager and compiled runs); here
each optimizer has its own scaler, started at scale 2.0 as the runner's disabled one would be: the default
65536 overflows float16 gradients in the first steps, and a step whose gradients overflow skips the optimizer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

LEARNING_RATE = 0.01
GRAD_SCALER_INIT = 2.0


@dataclass
class Trainer:
    """The optimizer (and grad scaler, AMP in float16 only) that steps one set of parameters."""

    optimizer: torch.optim.Optimizer
    scaler: Any  # torch.amp.GradScaler | None

    def restart(self) -> None:
        """Back to a fresh optimizer (and scaler), in place.

        A fresh Adam starts from zero moments and step 0; zeroing the state's tensors gives the same next step
        while keeping the tensors the compiled step was traced with (a new optimizer would be a recompile).
        """
        with torch.no_grad():
            for state in self.optimizer.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor):
                        value.zero_()
        if self.scaler is not None:  # its scale and growth tracker are filled in place too
            self.scaler.load_state_dict({**self.scaler.state_dict(), "scale": GRAD_SCALER_INIT, "_growth_tracker": 0})


def new_trainer(module: torch.nn.Module, device: str, float16_amp: bool) -> Trainer:
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=LEARNING_RATE, foreach=True, capturable=device != "cpu")
    scaler = torch.amp.GradScaler(device, init_scale=GRAD_SCALER_INIT) if float16_amp else None
    return Trainer(optimizer, scaler)


def train_step(module: Any, inputs: dict[str, Any], trainer: Trainer, autocast: Callable[[], Any]) -> torch.Tensor:
    """One timed training step; returns the loss."""
    from stages.support.hf_models import loss_of

    trainer.optimizer.zero_grad(set_to_none=True)
    with autocast():
        loss = loss_of(module(**inputs))
    if trainer.scaler is None:
        loss.backward()
        trainer.optimizer.step()
    else:
        trainer.scaler.scale(loss).backward()
        trainer.scaler.step(trainer.optimizer)
        trainer.scaler.update()
    return loss
