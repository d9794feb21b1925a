"""What a comparison measured, in one line: "Experiment: 18 models (all) at full size, training, amp, ...".

`describe_experiment` is the one place that words it: the report states it under its verdict (and keeps
`Experiment.as_dict` as ``experiment`` in summary.json), and ``invoke doctor`` can say the same of a compare it
would run. It takes only settings as they are recorded, so it never re-derives what ran:

- ``suite``: the suite request as ``SuiteRequest.inputs`` writes it (the manifest's ``settings.suite``);
- ``inductor_config``: the Inductor config the stages apply, the recipe's under ``--inductor-config``
  (env.json's ``inductor_config``);
- ``env``: the environment the stages ran with (env.json's ``stage_env``), where the knobs are read;
- ``extra_env``: what the experiment itself set on top of the recipe, ``[suite.env]`` under ``--env``
  (env.json's ``env``), listed as given.

Torch-free and free of pandas: a host command may call it before anything runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from foundation.formats.suite_options import UnknownModelError, resolve_models

CUDAGRAPHS_KEY = "triton.cudagraphs"
POINTWISE_KEY = "max_autotune_pointwise"
POINTWISE_ENV = "TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE"
BUFFER_OPS_ENV = "AMDGCN_USE_BUFFER_OPS"
# stages.support.hf_models' shrunken sizes, as the report names them
SIZE_WORDS = {"tiny": "tiny size (hidden size 64)", "small": "small size (hidden size 256)"}


@dataclass(frozen=True)
class Experiment:
    """The experiment's settings, each as the stages saw it (None: does not apply, or not set)."""

    models: str  # as asked: all, tiny-default or A,B,...
    model_count: int | None  # None: the upstream tree's model list decides
    size: str | None  # None: the upstream harness's own sizes
    mode: str
    dtype: str
    device: str
    source: str  # builtin | upstream
    use_runner: bool
    cpu_backend: str | None  # the CPU's Inductor codegen (cpp | triton); None on a GPU
    cudagraphs: bool | None  # None on the CPU
    max_autotune_pointwise: bool
    buffer_ops: bool | None  # None where AMDGCN_USE_BUFFER_OPS is not set (Triton's default)
    recipe: str | None = None
    also: dict[str, str] = field(default_factory=dict)  # the other Inductor config and env the experiment set

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def text(self) -> str:
        """The line without its "Experiment:" label."""
        parts = [f"{self._models()}, {self.mode}, {self.dtype}, on {self.device}"
                 + (f" (recipe {self.recipe})" if self.recipe else ""),
                 "Inductor: " + ", ".join(self._inductor())]
        if self.also:
            parts.append("also " + ", ".join(f"{key}={value}" for key, value in self.also.items()))
        return "; ".join(parts)

    def line(self) -> str:
        return f"Experiment: {self.text}"

    def _models(self) -> str:
        if self.source == "upstream":
            how = "runner.py" if self.use_runner else "huggingface.py --performance per model"
            count = (f"{_models_word(self.model_count)} ({self.models})" if self.model_count is not None
                     else "every model of the tree's huggingface_models_list.txt")
            return f"{count} through PyTorch's harness ({how}) at its own sizes"
        size = SIZE_WORDS.get(self.size or "", f"{self.size} size")
        count = _models_word(self.model_count) if self.model_count is not None else "models"
        return f"{count} ({self.models}) at {size}"

    def _inductor(self) -> list[str]:
        words = [] if self.cpu_backend is None else [f"{'C++' if self.cpu_backend == 'cpp' else 'Triton'} kernels"]
        if self.cudagraphs is not None:
            words.append(f"cudagraphs {_on(self.cudagraphs)}")
        words.append(f"max-autotune-pointwise {_on(self.max_autotune_pointwise)}")
        if self.buffer_ops is not None:
            words.append(f"buffer ops {_on(self.buffer_ops)}")
        return words


def experiment(suite: Mapping[str, Any], *, inductor_config: Mapping[str, Any], env: Mapping[str, str],
               extra_env: Mapping[str, str] | None = None, recipe: str | None = None) -> Experiment:
    """The experiment of these recorded settings (see the module docstring for each argument)."""
    source = str(suite.get("source", "builtin"))
    upstream = source == "upstream"
    device = str(suite.get("device", "cpu"))
    models = str(suite.get("models", ""))
    # The harness reads no Inductor config of ours: only the environment reaches it.
    pointwise = env.get(POINTWISE_ENV, "0") == "1"
    if not upstream and POINTWISE_KEY in inductor_config:
        pointwise = bool(inductor_config[POINTWISE_KEY])
    cudagraphs = None if device == "cpu" else (False if upstream else bool(inductor_config.get(CUDAGRAPHS_KEY)))
    buffer_ops = env.get(BUFFER_OPS_ENV)
    stated = {CUDAGRAPHS_KEY, POINTWISE_KEY, POINTWISE_ENV, BUFFER_OPS_ENV}
    also = {key: _value(value) for key, value in inductor_config.items() if key not in stated}
    if upstream:
        also = {key: f"{value} (not read by the harness)" for key, value in also.items()}
    also.update({key: value for key, value in (extra_env or {}).items() if key not in stated})
    return Experiment(
        models=models, model_count=_count(models, upstream), size=None if upstream else str(suite.get("size")),
        mode=str(suite.get("mode")), dtype=str(suite.get("dtype")), device=device, source=source,
        use_runner=bool(suite.get("use_runner", False)),
        cpu_backend=str(suite.get("cpu_backend", "cpp")) if device == "cpu" else None,
        cudagraphs=cudagraphs, max_autotune_pointwise=pointwise,
        buffer_ops=None if buffer_ops is None else buffer_ops == "1", recipe=recipe, also=also)


def describe_experiment(suite: Mapping[str, Any], *, inductor_config: Mapping[str, Any], env: Mapping[str, str],
                        extra_env: Mapping[str, str] | None = None, recipe: str | None = None) -> str:
    """"Experiment: ..." in one line of plain text (see the module docstring for each argument)."""
    return experiment(suite, inductor_config=inductor_config, env=env, extra_env=extra_env, recipe=recipe).line()


def recorded_experiment(settings: Mapping[str, Any], side_env: Mapping[str, Any]) -> Experiment | None:
    """The experiment of a run: its manifest's ``settings`` and one side's env.json. None when the run recorded
    no suite request or no stage environment (a directory laid out by hand, a run from before they were kept)."""
    suite, stage_env = settings.get("suite"), side_env.get("stage_env")
    if not isinstance(suite, dict) or "mode" not in suite or not isinstance(stage_env, dict):
        return None
    config, extra = side_env.get("inductor_config"), side_env.get("env")
    recipe = settings.get("recipe")
    return experiment(suite, inductor_config=config if isinstance(config, dict) else {},
                      env={str(k): str(v) for k, v in stage_env.items()},
                      extra_env={str(k): str(v) for k, v in extra.items()} if isinstance(extra, dict) else {},
                      recipe=recipe if isinstance(recipe, str) else None)


def _count(models: str, upstream: bool) -> int | None:
    """How many models the selection names; None where the upstream tree's list decides (``all``) or the names
    are not the builtin suite's."""
    if upstream and models.strip() == "all":
        return None
    try:
        return len(resolve_models(models))
    except UnknownModelError:
        names = [n for n in models.split(",") if n.strip()]
        return len(dict.fromkeys(n.strip() for n in names)) if upstream and names else None


def _value(value: Any) -> str:
    """A config value as it is written on the command line (JSON: true, 256, "text")."""
    return value if isinstance(value, str) else json.dumps(value)


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def report_lines(base: Experiment, pr: Experiment) -> list[str]:
    """The report's experiment: one line when both sides ran the same, else one per side."""
    if base == pr:
        return [base.text]
    return [f"base: {base.text}", f"PR: {pr.text}"]


def summary_block(base: Experiment, pr: Experiment) -> dict[str, Any]:
    """summary.json's ``experiment``: the report's line(s) and each side's settings."""
    return {"lines": report_lines(base, pr), "base": base.as_dict(), "pr": pr.as_dict()}


def _models_word(models: int) -> str:
    return f"{models} model" + ("" if models == 1 else "s")
