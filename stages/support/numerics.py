"""Record a suite model's outputs for the numerical A/B (``analysis.models.numerics`` holds the file contract).

Called by ``stages.suite`` once a model is timed, with the model, its inputs and its timed step
(``stages.suite.TimedStep``) as the suite built them (both sides build them from the same seed, so base and PR
see the same weights and inputs): one eager call and one compiled call of that step (the compiled one is the very
function the suite just compiled and timed, so nothing is compiled again) and, where affordable, one float64
eager call, the RNG reseeded before each. What it costs (one more call of each, plus the float64 copy)
is recorded in the file: measured at a few tenths of a second per tiny model against the suite's 40+ timed calls
of each side.

A training step is the whole step the suite times (``stages.support.training``: zero grad, forward, loss, backward,
optimizer step, the update compiled with the rest on the compiled side), recorded as its loss, the gradients of
a fixed subset of parameters and those parameters after the optimizer step (``param.<name>``), each role from the
weights as built and the optimizer as fresh (the timed one restarted in place; a new one for float64).

Training steps with dropout are compared base vs PR only: Inductor draws its random numbers differently from
eager (so compiled vs eager would differ by the dropout masks), but both sides' compiled code draws the same
ones from the same seed. ``torch.use_deterministic_algorithms`` is left off: Inductor reads it when it generates
code, so it would change the kernels being compared.
"""

from __future__ import annotations

import copy
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.models.numerics import outputs_path, write_model_outputs

NUMERICS_SEED = 20240611  # reseeded before every recorded call
GRAD_PARAMETERS = 4  # training: gradients of this many parameters, spread over the model's parameter list
FP64_LIMIT_BYTES = 2 << 30  # a float64 copy of a bigger model is not made (full-size models on a small GPU)


def record_outputs(suite_dir: Path, name: str, built: Any, timed: Any, mode: str, dtype: str,
                   new_step: Callable[..., Callable[[Any, dict[str, Any]], Any]],
                   initial: dict[str, Any] | None) -> None:
    """Write ``<suite_dir>/outputs/<name>.npz``; a failure to record is written into it, never raised.

    ``timed`` is the suite's ``TimedStep`` (eager and compiled); ``new_step(module, reference=True)`` makes the
    float64 reference's step (training: with its own optimizer); ``initial`` (training) is the model's state as
    built, restored before each recorded step, so every role takes its one optimizer step from the same weights
    whatever the timed steps did to them.
    """
    started = time.monotonic()
    meta: dict[str, Any] = {"dtype": dtype, "mode": mode, "vs_eager": None, "fp64": False, "fp64_error": None,
                            "error": None}
    arrays: dict[str, Any] = {}
    try:
        picked = _grad_subset(built.model) if mode == "training" else []
        for role, step in (("eager", timed.eager), ("compiled", timed.compiled)):
            _restore(built.model, initial)
            timed.restart()
            arrays.update(_role(role, _call(step, built.model, built.inputs, mode, picked)))
        if mode == "training" and _has_dropout(built.model):
            meta["vs_eager"] = "dropout: Inductor draws other random numbers than eager"
        elif _parameter_bytes(built.model, 8) <= FP64_LIMIT_BYTES:
            _restore(built.model, initial)
            meta["fp64"], meta["fp64_error"] = _record_fp64(built, mode, new_step, picked, arrays)
    except Exception as exc:  # recording must never cost the model its timing
        traceback.print_exc()
        arrays, meta["error"] = {}, f"recording the outputs failed: {type(exc).__name__}: {exc}"[:300]
    meta["seconds"] = round(time.monotonic() - started, 3)
    write_model_outputs(outputs_path(suite_dir, name), arrays, meta)


def _record_fp64(built: Any, mode: str, new_step: Callable[..., Callable[[Any, dict[str, Any]], Any]],
                 picked: list[str], arrays: dict[str, Any]) -> tuple[bool, str | None]:
    """The float64 eager reference into ``arrays``: (recorded, why not). Some models cannot run in float64
    (XGLMForCausalLM fills its attention mask with a value no float32 holds once converted; gpt-oss-20b's grouped
    matmul has no double kernel): their eager and compiled outputs are still compared, only without the float64
    arbiter for outputs outside the tolerance."""
    import torch

    try:
        reference = copy.deepcopy(built.model).to(torch.float64)
        inputs = {k: v.to(torch.float64) if v.is_floating_point() else v for k, v in built.inputs.items()}
        arrays.update(_role("fp64", _call(new_step(reference, reference=True), reference, inputs, mode, picked)))
    except Exception as exc:  # the reference is optional: the model's own outputs are kept
        return False, f"{type(exc).__name__}: {exc}"[:300]
    return True, None


def snapshot(model: Any) -> dict[str, Any]:
    """The model's parameters and buffers as they are now, copied to host memory."""
    return {key: value.detach().to("cpu", copy=True) for key, value in model.state_dict().items()}


def _restore(model: Any, state: dict[str, Any] | None) -> None:
    if state is not None:
        model.load_state_dict(state)


def _role(role: str, outputs: dict[str, Any]) -> dict[str, Any]:
    return {f"{role}/{name}": value for name, value in outputs.items()}


def _call(step: Callable[[Any, dict[str, Any]], Any], module: Any, inputs: dict[str, Any], mode: str,
          grads: list[str]) -> dict[str, Any]:
    import torch

    torch.manual_seed(NUMERICS_SEED)
    result = step(module, inputs)
    if mode == "training":
        params = dict(module.named_parameters())
        found = {"loss": result, **{f"grad.{n}": params[n].grad for n in grads if params[n].grad is not None},
                 **{f"param.{n}": params[n] for n in grads}}  # after the optimizer step
    elif isinstance(result, torch.Tensor):
        found = {"output": result}
    elif hasattr(result, "items"):
        found = dict(result.items())
    else:
        found = {f"output{i}": v for i, v in enumerate(result)} if isinstance(result, (tuple, list)) else {}
    return {k: _numpy(v) for k, v in found.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}


def _numpy(tensor: Any) -> Any:
    import torch

    keep = torch.float64 if tensor.dtype == torch.float64 else torch.float32  # bf16/fp16 → fp32 is exact
    return tensor.detach().to("cpu", keep).numpy().copy()


def _grad_subset(model: Any) -> list[str]:
    """A fixed subset of parameters: first, last and evenly between (the same names on both sides)."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    if len(names) <= GRAD_PARAMETERS:
        return names
    step = (len(names) - 1) / (GRAD_PARAMETERS - 1)
    return [names[round(i * step)] for i in range(GRAD_PARAMETERS)]


def _has_dropout(model: Any) -> bool:
    import torch

    config = getattr(model, "config", None)
    configured = any(isinstance(v, float) and v > 0 for k, v in vars(config).items() if "dropout" in k) \
        if config is not None else False
    return configured or any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def _parameter_bytes(model: Any, itemsize: int) -> int:
    return sum(p.numel() for p in model.parameters()) * itemsize
