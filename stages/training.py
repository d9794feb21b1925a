"""The builtin suite's training step, as PyTorch's dynamo runner times one (``forward_and_backward_pass``).

One step is: zero the gradients, forward under the step's autocast, the model's own loss, backward (through the
AMP grad scaler when the autocast computes in float16), and the optimizer step. The runner's optimizer is Adam
(lr 0.01, ``foreach``; ``capturable`` on a GPU); its SGD is for a few TorchBench models only, and on the CPU the
runner takes no optimizer step at all: here every device takes it, so a CPU run times what a GPU run times.
The optimizer runs outside ``torch.compile`` (the model is what is compiled), so both sides step alike.

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


def new_trainer(module: torch.nn.Module, device: str, float16_amp: bool) -> Trainer:
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=LEARNING_RATE, foreach=True, capturable=device != "cpu")
    scaler = torch.amp.GradScaler(device, init_scale=GRAD_SCALER_INIT) if float16_amp else None
    return Trainer(optimizer, scaler)


def train_step(module: Any, inputs: dict[str, Any], trainer: Trainer, autocast: Callable[[], Any]) -> torch.Tensor:
    """One timed training step; returns the loss."""
    from stages.hf_models import loss_of

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
