"""Modes: named presets of what a comparison measures, defined once and free of torch.

A preset is a set of settings in three groups: the builtin suite's (``mode``: inference or training, ``dtype``),
``torch._inductor.config`` entries (``triton.cudagraphs``, ``max_autotune``, ...) and the stages' environment
(``dynamic``: `DYNAMIC_SHAPES_ENV`, which ``stages.support.environment.prepare_inductor`` turns into
``torch._dynamo.config.assume_static_by_default = False``, what PyTorch's harness does for ``--dynamic-shapes``).
Presets compose with ``+`` (``training+amp+no-cudagraphs``): the union of their settings, where two presets that
set one setting to different values conflict (``inference+training``, ``amp+bfloat16``,
``cudagraphs+no-cudagraphs``; ``freezing`` is an inference setting, so ``training+freezing`` conflicts too).

``invoke modes`` prints `PRESETS`; ``invoke compare --modes A,B`` runs each mode as a sub-run of its own under
``<run>/modes/<Mode.dir_name>/`` (`foundation.formats.run_layout.RunLayout.mode`). A setting a mode does not name
keeps the compare's default (flags, the recipe's ``[suite]`` and ``[inductor_config]``, invoke.yaml).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from typing import Any

from foundation.errors import UserError
from foundation.formats.suite_request import SuiteRequest

# The environment variable that asks a stage to compile with dynamic shapes (read by stages.support.environment).
DYNAMIC_SHAPES_ENV = "PRBENCH_DYNAMIC_SHAPES"
JOIN = "+"  # training+amp
DIR_JOIN = "."  # its sub-run's directory name: training.amp (a run id holds letters, digits, '.', '_', '-')


@dataclass(frozen=True)
class Preset:
    """One named preset: its settings per group and what it is for."""

    name: str
    about: str
    suite: dict[str, str] = field(default_factory=dict)
    inductor_config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    gpu_only: bool = False  # CUDA graphs: nothing to capture on the CPU


PRESETS: tuple[Preset, ...] = (
    Preset("inference", "forward only, under torch.no_grad", suite={"mode": "inference"}),
    Preset("training", "zero grad, forward, loss, backward and optimizer step (the runner's training step)",
           suite={"mode": "training"}),
    Preset("float32", "weights and inputs in float32", suite={"dtype": "float32"}),
    Preset("amp", "float32 weights under autocast (the HUD's amp)", suite={"dtype": "amp"}),
    Preset("bfloat16", "weights and inputs in bfloat16", suite={"dtype": "bfloat16"}),
    Preset("cudagraphs", "Inductor records CUDA graphs of the compiled code",
           inductor_config={"triton.cudagraphs": True}, gpu_only=True),
    Preset("no-cudagraphs", "no CUDA graphs (the seed's inductor_no_cudagraphs)",
           inductor_config={"triton.cudagraphs": False}),
    Preset("dynamic", "dynamic shapes: every input size symbolic (the harness's --dynamic-shapes)",
           env={DYNAMIC_SHAPES_ENV: "1"}),
    Preset("max-autotune", "Inductor benchmarks GEMM/conv templates and pointwise configs while compiling",
           inductor_config={"max_autotune": True}),
    Preset("max-autotune-pointwise", "Inductor tries several block sizes per pointwise kernel while compiling",
           inductor_config={"max_autotune_pointwise": True}),
    Preset("cpp-wrapper", "the compiled graph's wrapper in C++ instead of Python",
           inductor_config={"cpp_wrapper": True}),
    Preset("freezing", "weights folded into the graph as constants (inference only; the HUD's CPU freezing)",
           suite={"mode": "inference"}, inductor_config={"freezing": True}),
)
_BY_NAME = {p.name: p for p in PRESETS}


@dataclass(frozen=True)
class Mode:
    """A composed mode (one preset or several joined by ``+``): its name as given and the union of its settings."""

    name: str
    parts: tuple[str, ...]
    suite: dict[str, str] = field(default_factory=dict)
    inductor_config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    gpu_only: bool = False

    @property
    def dir_name(self) -> str:
        """The sub-run's id, ``<run>/modes/<dir_name>/``: the parts joined by '.' (a run id has no '+')."""
        return DIR_JOIN.join(self.parts)

    def suite_request(self, given: SuiteRequest) -> SuiteRequest:
        """The suite this mode asks for: its mode and dtype over ``given`` (every other setting kept)."""
        return replace(given, mode=self.suite.get("mode", given.mode), dtype=self.suite.get("dtype", given.dtype))

    def describe(self) -> dict[str, Any]:
        """What the run's manifest and summary.json record of the mode."""
        return {"name": self.name, "parts": list(self.parts), "suite": dict(self.suite),
                "inductor_config": dict(self.inductor_config), "env": dict(self.env)}


def preset(name: str, flag: str = "--modes") -> Preset:
    """The preset called ``name``; an unknown name is one line listing the known ones (and the closest)."""
    found = _BY_NAME.get(name)
    if found is not None:
        return found
    close = difflib.get_close_matches(name, list(_BY_NAME), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise UserError(f"{flag}: unknown mode '{name}' ({hint}known: {', '.join(_BY_NAME)}; see invoke modes)")


def parse_mode(text: str, flag: str = "--modes") -> Mode:
    """``training+amp+no-cudagraphs`` into one Mode; unknown parts and conflicting settings are one line each."""
    parts = tuple(p.strip() for p in text.split(JOIN))
    if not text.strip() or any(not p for p in parts):
        raise UserError(f"{flag} {text!r}: expected preset names joined by '+', like training+amp")
    if len(set(parts)) != len(parts):
        raise UserError(f"{flag} {text!r}: a preset named twice")
    groups: dict[str, dict[str, Any]] = {"suite": {}, "inductor_config": {}, "env": {}}
    setters: dict[tuple[str, str], str] = {}
    for part in parts:
        found = preset(part, flag)
        for group, values in (("suite", found.suite), ("inductor_config", found.inductor_config),
                              ("env", found.env)):
            for key, value in values.items():
                earlier = setters.get((group, key))
                if earlier is not None and groups[group][key] != value:
                    raise UserError(f"{flag} {text!r}: {earlier} and {part} conflict ({_where(group, key)} "
                                    f"{groups[group][key]!r} vs {value!r}); give them as two modes: "
                                    f"{earlier},{part}")
                setters[(group, key)] = part
                groups[group][key] = value
    return Mode(name=JOIN.join(parts), parts=parts, suite=groups["suite"], inductor_config=groups["inductor_config"],
                env=groups["env"], gpu_only=any(_BY_NAME[p].gpu_only for p in parts))


def _where(group: str, key: str) -> str:
    return {"suite": f"the suite's {key}", "inductor_config": f"Inductor's {key}",
            "env": f"the stages' {key}"}[group]


def parse_modes(text: str, flag: str = "--modes") -> list[Mode]:
    """``A,B,...`` (each a composed mode) into Modes, in the order given; the same mode twice is one line."""
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise UserError(f"{flag} {text!r}: expected modes separated by commas, like inference,training+amp "
                        "(see invoke modes)")
    modes = [parse_mode(item, flag) for item in items]
    seen: dict[frozenset[str], str] = {}
    for mode in modes:
        key = frozenset(mode.parts)
        if key in seen:
            raise UserError(f"{flag}: {seen[key]} and {mode.name} are the same mode")
        seen[key] = mode.name
    return modes


def check_platform(modes: list[Mode], platform: str, flag: str = "--modes") -> None:
    """A mode that needs a GPU on a CPU recipe is one line (CUDA graphs have nothing to capture there)."""
    for mode in modes:
        if mode.gpu_only and platform == "cpu":
            gpu = [p for p in mode.parts if _BY_NAME[p].gpu_only]
            raise UserError(f"{flag} {mode.name}: {', '.join(gpu)} needs a GPU recipe (this recipe runs on the cpu)")


def _settings_text(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_value_text(v)}" for k, v in values.items()) or "-"


def _value_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def presets_table() -> list[str]:
    """`PRESETS` as aligned text lines (``invoke modes``): name, suite, Inductor, environment, what it is for."""
    rows = [("mode", "suite", "inductor config", "environment", "what")]
    rows += [(p.name + (" (GPU)" if p.gpu_only else ""), _settings_text(p.suite), _settings_text(p.inductor_config),
              _settings_text(p.env), p.about) for p in PRESETS]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return ["  ".join(cell.ljust(widths[i]) if i < 4 else cell for i, cell in enumerate(row)).rstrip()
            for row in rows]
