"""The suite request: what ``invoke suite``/``invoke compare`` ask the suite stage to run, checked once.

The host validates it before anything starts (every bad flag is one UserError naming it), hashes its
`SuiteRequest.inputs` into the stage's input hash, and turns it into the stage's command line
(``prbench.stages.command_lines``). Two sources share it: ``builtin`` (``stages.suite``, our HF models) and ``upstream``
(``stages.upstream_suite``: PyTorch's own ``benchmarks/dynamo`` harness, from a PyTorch source tree).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from foundation.errors import UserError
from foundation.formats.suite_options import (
    CPU_BACKENDS,
    DTYPES,
    MODES,
    SIZES,
    SuiteInputError,
    UnknownModelError,
    check_numbers,
    resolve_models,
)

SOURCES = ("builtin", "upstream")
HF_SCRIPT = Path("benchmarks/dynamo/huggingface.py")  # the upstream harness, relative to a PyTorch source tree


def split_models(selection: str) -> list[str]:
    """``A,B,...`` into names (order kept, repeats dropped); ``all`` and ``tiny-default`` are kept as words."""
    names = [n.strip() for n in selection.split(",") if n.strip()]
    if not names:
        raise UserError("--models: no model named (expected all, tiny-default or a comma-separated list)")
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class SuiteRequest:
    models: str = "tiny-default"
    size: str = "tiny"
    mode: str = "inference"
    dtype: str = "float32"
    warmup: int = 10
    iterations: int = 30
    device: str = "cpu"
    cpu_backend: str = "cpp"
    source: str = "builtin"  # "builtin" (stages.suite) or "upstream" (stages.upstream_suite)
    use_runner: bool = False  # upstream only: the whole suite through runner.py, as the seed's run_hf.sh runs it

    def validate(self) -> list[str]:
        """Check every flag (one-line UserError naming it); return the resolved model names.

        For the upstream source the names are checked by the stage, against the tree's own model list.
        """
        if self.source not in SOURCES:
            raise UserError(f"--suite-source {self.source!r}: expected one of {', '.join(SOURCES)}")
        if self.use_runner and self.source != "upstream":
            raise UserError("--use-runner: runs PyTorch's runner.py; only with --suite-source upstream")
        for flag, value, options in (("--size", self.size, SIZES), ("--mode", self.mode, MODES),
                                     ("--dtype", self.dtype, DTYPES), ("--cpu-backend", self.cpu_backend,
                                                                       CPU_BACKENDS)):
            if value not in options:
                raise UserError(f"{flag} {value!r}: expected one of {', '.join(options)}")
        try:
            check_numbers(self.warmup, self.iterations, self.cpu_backend, self.device)
        except SuiteInputError as exc:
            raise UserError(str(exc)) from None
        if self.source == "upstream":
            names = split_models(self.models)
            if self.use_runner and names != ["all"]:
                raise UserError(f"--use-runner: runner.py runs the whole HF suite; give --models all, not "
                                f"{self.models!r} (or drop --use-runner to run named models)")
            return names
        try:
            return resolve_models(self.models)
        except UnknownModelError as exc:
            raise UserError(f"--models: {exc}") from None

    def inputs(self) -> dict[str, Any]:
        inputs = asdict(self)
        if self.source == "builtin":
            del inputs["source"]  # runs recorded before there was a choice keep their input hashes
        if not self.use_runner:
            del inputs["use_runner"]  # likewise: only a runner.py suite says so
        return inputs
