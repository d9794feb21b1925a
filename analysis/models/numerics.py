"""The numerical A/B of a comparison: the models' outputs, base vs PR and each side's compiled vs eager.

A PR that is faster because it computes something else is a regression, so the report checks the numbers
before it speaks of time. The suite (``stages.support.numerics``, called by ``stages.suite``) leaves, per model and
side, one ``<variant>/suite/outputs/<model>.npz`` (numpy's own format: no torch needed to read it):

* arrays ``<role>/<output>`` with role ``eager``, ``compiled`` (the same seeded inputs and weights, the RNG
  reseeded before each call) and ``fp64`` (the eager model in float64, where affordable); outputs are the
  model output's tensors in inference (``logits``, ...); in training, the step the suite times (optimizer step
  included): the loss, the gradients of a fixed subset of parameters (``grad.<parameter>``) and those
  parameters after the optimizer step (``param.<parameter>``); bfloat16/float16 values are stored as float32
  (exactly);
* ``meta``: a JSON text ``{"format": 1, "dtype", "mode", "vs_eager": null | why not compared, "fp64": bool,
  "fp64_error": null | why the float64 reference could not run (absent in older files), "seconds": what
  recording cost, "error": null | why nothing was recorded}``.

Per model the checks are: PR vs base (compiled), base compiled vs eager, PR compiled vs eager, and eager PR vs
base (the harness's own check that both sides ran the same inputs: with an Inductor-only PR it is bit-identical).
Each output is compared element by element (``analysis.stats.numeric_tolerance``), with NaN/inf detected (a
non-finite value where the reference has a finite one, or a different one, fails whatever the tolerance).
As the dynamo runner's ``same()`` with its float64 reference, an output outside the tolerance still passes when
its root-mean-square error against the float64 result is at most twice the reference side's plus atol/10: a
low-precision model whose compiled result is as close to the exact one as eager's is not wrong, only rounded
differently.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analysis.stats.numeric_tolerance import Tolerance, tolerance_for
from foundation.formats.array_files import read_arrays, write_arrays
from foundation.formats.run_layout import MODEL_OUTPUTS_DIR

ROLES = ("eager", "compiled", "fp64")
FP64_MULTIPLIER = 2.0  # the dynamo runner's multiplier on the reference side's float64 error
CHECKS = ("PR vs base", "base vs eager", "PR vs eager", "eager PR vs base")


def outputs_path(suite_dir: Path, model: str) -> Path:
    return Path(suite_dir) / MODEL_OUTPUTS_DIR / f"{model}.npz"


def write_model_outputs(path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """One model's outputs (``<role>/<output>`` arrays) and its ``meta``, atomically."""
    for key in arrays:
        if key.partition("/")[0] not in ROLES:
            raise ValueError(f"{key}: an output key is <role>/<output> with role one of {ROLES}")
    write_arrays(path, meta, arrays)


@dataclass(frozen=True)
class ModelOutputs:
    meta: dict[str, Any]
    arrays: dict[str, dict[str, np.ndarray]]  # role → output → values

    def role(self, role: str) -> dict[str, np.ndarray]:
        return self.arrays.get(role, {})


def read_model_outputs(path: Path) -> ModelOutputs:
    """Read what ``write_model_outputs`` wrote; a damaged file is one UserError naming it."""
    meta, stored = read_arrays(path, "a model's outputs (.npz)")
    arrays: dict[str, dict[str, np.ndarray]] = {}
    for key, values in stored.items():
        role, _, output = key.partition("/")
        if role in ROLES and output:
            arrays.setdefault(role, {})[output] = values
    return ModelOutputs(meta, arrays)


# --- comparing arrays -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """One output of one check: how far the result is from the reference."""

    output: str
    elements: int
    max_abs: float
    max_rel: float  # over elements whose reference magnitude exceeds atol
    mismatches: int  # elements outside the tolerance, non-finite ones included
    nonfinite: int  # NaN/inf in the result where the reference differs
    cosine: float
    identical: bool  # bit for bit
    passed: bool
    how: str  # "" | "float64 reference" (passed on it) | a problem (shapes differ, output missing)

    def as_dict(self) -> dict[str, Any]:
        return {"output": self.output, "elements": self.elements, "max_abs": _finite(self.max_abs),
                "max_rel": _finite(self.max_rel), "mismatches": self.mismatches, "nonfinite": self.nonfinite,
                "cosine": _finite(self.cosine), "identical": self.identical}


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2))) if a.size else 0.0


def _problem(output: str, text: str) -> Difference:
    return Difference(output, 0, math.nan, math.nan, 0, 0, math.nan, False, False, text)


def compare_arrays(output: str, result: np.ndarray, reference: np.ndarray, tol: Tolerance,
                   fp64: np.ndarray | None = None) -> Difference:
    """``result`` against ``reference`` (and, outside the tolerance, both against ``fp64``)."""
    if result.shape != reference.shape:
        return _problem(output, f"shape {list(result.shape)} vs {list(reference.shape)}")
    identical = result.dtype == reference.dtype and bool(np.array_equal(result, reference, equal_nan=True))
    r, e = result.astype(np.float64), reference.astype(np.float64)
    finite = np.isfinite(r) & np.isfinite(e)
    same_special = (r == e) | (np.isnan(r) & np.isnan(e))
    nonfinite = int(np.count_nonzero(~finite & ~same_special))
    diff = np.abs(r[finite] - e[finite])
    ref_mag = np.abs(e[finite])
    big = ref_mag > tol.atol
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = float((diff[big] / ref_mag[big]).max()) if np.any(big) else 0.0
    mismatches = int(np.count_nonzero(diff > tol.atol + tol.rtol * ref_mag)) + nonfinite
    norms = float(np.linalg.norm(r[finite]) * np.linalg.norm(e[finite]))
    cosine = float(np.dot(r[finite], e[finite]) / norms) if norms > 0 else math.nan
    passed, how = nonfinite == 0 and mismatches == 0, ""
    if not passed and nonfinite == 0 and fp64 is not None and fp64.shape == result.shape:
        exact = fp64.astype(np.float64)
        if _rmse(r, exact) <= FP64_MULTIPLIER * _rmse(e, exact) + tol.atol / 10:
            passed, how = True, "float64 reference"
    return Difference(output, int(result.size), max_abs, max_rel, mismatches, nonfinite, cosine, identical,
                      passed, how)


# --- one model --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One of ``CHECKS`` for one model: every output compared, or why it was not."""

    name: str
    differences: tuple[Difference, ...] = ()
    skipped: str = ""

    @property
    def passed(self) -> bool:
        return self.skipped != "" or all(d.passed for d in self.differences)

    @property
    def identical(self) -> bool:
        return not self.skipped and bool(self.differences) and all(d.identical for d in self.differences)

    @property
    def worst(self) -> Difference | None:
        """The failing output with the largest error (else the largest error of all)."""
        if not self.differences:
            return None
        return max(self.differences, key=lambda d: (not d.passed, d.nonfinite, _order(d.max_abs)))


def _order(x: float) -> float:
    return x if math.isfinite(x) else math.inf


def compare_outputs(name: str, result: dict[str, np.ndarray], reference: dict[str, np.ndarray], tol: Tolerance,
                    fp64: dict[str, np.ndarray]) -> Check:
    if not reference:
        return Check(name, skipped="nothing recorded")
    diffs = [compare_arrays(out, result[out], ref, tol, fp64.get(out)) if out in result
             else _problem(out, "missing in the result") for out, ref in sorted(reference.items())]
    return Check(name, tuple(diffs))


@dataclass(frozen=True)
class ModelNumerics:
    model: str
    dtype: str
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def failures(self) -> list[tuple[Check, Difference]]:
        return [(c, d) for c in self.checks for d in c.differences if not d.passed]


def model_numerics(model: str, base: ModelOutputs, pr: ModelOutputs, tolerances: dict[str, Tolerance]) -> ModelNumerics:
    dtype = str(base.meta.get("dtype", ""))
    tol = tolerance_for(tolerances, dtype)
    fp64 = base.role("fp64") or pr.role("fp64")
    checks = [compare_outputs(CHECKS[0], pr.role("compiled"), base.role("compiled"), tol, fp64)]
    for label, side in ((CHECKS[1], base), (CHECKS[2], pr)):
        why = side.meta.get("vs_eager")
        checks.append(Check(label, skipped=str(why)) if why
                      else compare_outputs(label, side.role("compiled"), side.role("eager"), tol, side.role("fp64")))
    checks.append(compare_outputs(CHECKS[3], pr.role("eager"), base.role("eager"), tol, fp64))
    return ModelNumerics(model, dtype, tuple(checks))


# --- the family ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelsNumerics:
    """Every model whose outputs both sides recorded, and what could not be compared."""

    models: tuple[ModelNumerics, ...]
    not_compared: tuple[tuple[str, str], ...]  # (model, why)
    tolerances: dict[str, Tolerance]

    @property
    def failed(self) -> list[ModelNumerics]:
        return [m for m in self.models if not m.passed]

    def block(self) -> dict[str, Any]:
        """The family's entry in summary.json's ``numerics``."""
        failures = [(m, c, d) for m in self.models for c, d in m.failures()]
        worst = max(failures, key=lambda f: (f[2].nonfinite, _order(f[2].max_abs)), default=None)
        return {"compared": len(self.models), "passed": len(self.models) - len(self.failed),
                "failed": len(self.failed), "not_compared": [m for m, _ in self.not_compared],
                "worst": ({"name": worst[0].model, "check": worst[1].name, **worst[2].as_dict()}
                          if worst else None),
                "failed_items": [{"name": m.model, "check": c.name, **d.as_dict()} for m, c, d in failures]}


def compare_model_outputs(base_suite: Path, pr_suite: Path, tolerances: dict[str, Tolerance]
                          ) -> ModelsNumerics | None:
    """Both sides' ``suite/outputs`` compared model by model; None when neither side recorded any."""
    base_files = _files(base_suite)
    pr_files = _files(pr_suite)
    if not base_files and not pr_files:
        return None
    models, skipped = [], []
    for model in sorted(set(base_files) | set(pr_files)):
        if model not in base_files or model not in pr_files:
            skipped.append((model, f"recorded by {'base' if model in base_files else 'PR'} only"))
            continue
        base, pr = read_model_outputs(base_files[model]), read_model_outputs(pr_files[model])
        error = base.meta.get("error") or pr.meta.get("error")
        if error:
            skipped.append((model, str(error)))
            continue
        models.append(model_numerics(model, base, pr, tolerances))
    return ModelsNumerics(tuple(models), tuple(skipped), tolerances)


def _files(suite_dir: Path) -> dict[str, Path]:
    directory = Path(suite_dir) / MODEL_OUTPUTS_DIR
    return {p.stem: p for p in sorted(directory.glob("*.npz"))} if directory.is_dir() else {}


def recording_seconds(suite_dirs: Iterable[Path]) -> float:
    """What recording the outputs cost the suites, in s (the cost the report's method states)."""
    total = 0.0
    for directory in suite_dirs:
        for path in _files(directory).values():
            seconds = read_model_outputs(path).meta.get("seconds")
            total += float(seconds) if isinstance(seconds, (int, float)) and math.isfinite(seconds) else 0.0
    return total
