"""The numerical A/B of paired kernels: base and PR kernels on identical inputs, every output buffer compared.

Files (written by the kernel workers, ``stages.support.kernel_numerics``; read here), under
``<variant>/kernel_outputs/``:

* ``numerics.json`` (written by the host with the kernel plan, ``prbench.stages.paired``): ``{"format": 1,
  "organized": DIR, "reference": null | {"outputs": base's kernel_outputs DIR, "organized": base's organized DIR},
  "partners": {organized path: the partner's organized path}}``. The PR side names base as its reference.
* ``<organized path with / as __>.<sha256[:12] of the kernel file>.<kind>.npz`` per kernel, kind ``self`` (the
  kernel's first launch in its own graph: ``in/<position>`` every tensor argument before the launch, ``out/<position>``
  every argument it may write after it) and, on the PR side, ``cross`` (the PR kernel run on base's recorded
  inputs of its partner: ``out/<position>``). ``meta``: JSON ``{"format": 1, "kernel", "path", "dtypes":
  {position: dtype}, "error": null | why not}``. bfloat16/float16 buffers are stored as float32 (exactly); the
  hash in the name ties a file to the code it ran, so a re-organized kernel is never judged by an old file.

Each pair is judged on ``cross`` (identical inputs by construction) when the PR side ran it on *this* pair's base
kernel (``partners`` in the PR's numerics.json: a report that pairs otherwise than the plan did must not judge a
kernel by another kernel's inputs); where there is none (the arguments differ in
number, shape or dtype, or base's record was not there yet), on ``self`` when both sides' recorded inputs are
bit-identical; otherwise it is not compared (the model-level comparison covers it). Byte-identical kernels on
identical inputs must give bit-identical outputs: anything else is a failure of the harness, reported as such.
Per output buffer: max abs and rel error, the largest distance in units in the last place of the buffer's dtype,
and the elements that differ at all.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from analysis.stats.numeric_tolerance import Tolerance, tolerance_for
from foundation import atomic_io
from foundation.formats.array_files import read_arrays, write_arrays
from foundation.records import read_json

CONFIG_FILE = "numerics.json"
CONFIG_VAR = "PRBENCH_KERNEL_NUMERICS"  # the worker's path to its side's numerics.json
FORMAT = 1
KINDS = ("self", "cross")
_MANTISSA_BITS = {"float32": 23, "float64": 52, "bfloat16": 7, "float16": 10}


def write_config(directory: Path, organized: Path, reference: tuple[Path, Path] | None,
                 partners: dict[str, str]) -> Path:
    """The side's numerics.json; ``reference``: (outputs, organized) directories of the side it is run against."""
    path = Path(directory) / CONFIG_FILE
    Path(directory).mkdir(parents=True, exist_ok=True)
    ref = {"outputs": str(reference[0]), "organized": str(reference[1])} if reference else None
    atomic_io.write_json(path, {"format": FORMAT, "organized": str(organized), "reference": ref,
                                "partners": partners})
    return path


def source_hash(kernel_file: Path) -> str:
    return hashlib.sha256(Path(kernel_file).read_bytes()).hexdigest()[:12]


def dump_path(directory: Path, organized: Path, rel_path: str, kind: str) -> Path:
    """Where a kernel's ``kind`` record lives; named by the code it ran (see the module docstring)."""
    digest = source_hash(Path(organized) / rel_path)
    return Path(directory) / f"{rel_path.replace('/', '__')}.{digest}.{kind}.npz"


def write_dump(path: Path, inputs: dict[int, np.ndarray], outputs: dict[int, np.ndarray],
               meta: dict[str, Any]) -> None:
    write_arrays(path, meta, {**{f"in/{i}": a for i, a in inputs.items()},
                              **{f"out/{i}": a for i, a in outputs.items()}})


@dataclass(frozen=True)
class Dump:
    meta: dict[str, Any]
    inputs: dict[int, np.ndarray]
    outputs: dict[int, np.ndarray]


def read_dump(path: Path) -> Dump:
    meta, stored = read_arrays(path, "a kernel's recorded buffers (.npz)")
    parts: dict[str, dict[int, np.ndarray]] = {"in": {}, "out": {}}
    for key, values in stored.items():
        part, _, position = key.partition("/")
        if part in parts and position.isdigit():
            parts[part][int(position)] = values
    return Dump(meta, parts["in"], parts["out"])


# --- comparing buffers ---------------------------------------------------------------------------------------------


def ulp_distance(a: np.ndarray, b: np.ndarray, dtype: str) -> int:
    """The largest distance between ``a`` and ``b`` in units in the last place of ``dtype`` (values held as
    float32, or float64 for float64; bfloat16 and float16 counted in their own coarser steps); 0 for other dtypes."""
    bits = _MANTISSA_BITS.get(dtype)
    finite = np.isfinite(a) & np.isfinite(b)
    if bits is None or not finite.any():
        return 0
    wide, raw_type, magnitude = ((np.float64, np.int64, 0x7FFFFFFFFFFFFFFF) if dtype == "float64"
                                 else (np.float32, np.int32, 0x7FFFFFFF))
    shift = 52 - bits if dtype == "float64" else 23 - bits

    def ordered(x: np.ndarray) -> np.ndarray:
        """The float's bits as an integer that counts up with the value (negative floats mirrored)."""
        raw = np.ascontiguousarray(x[finite], dtype=wide).view(raw_type).astype(np.int64)
        return np.where(raw < 0, -(raw & magnitude), raw) >> shift

    return int(np.abs(ordered(a) - ordered(b)).max())


@dataclass(frozen=True)
class KernelDifference:
    """One pair of kernels: how their outputs differ on identical inputs (or why they were not compared)."""

    base: str
    pr: str
    code_changed: bool
    inputs: str  # "identical (base's recorded inputs)" | "identical (both recorded the same)" | why not compared
    compared: bool
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: int = 0
    differing: int = 0  # elements not bit-equal
    elements: int = 0
    nonfinite: int = 0
    bit_identical: bool = False
    passed: bool = True
    problem: str = ""  # a harness failure or an output that is missing
    base_path: str = ""  # the pair's organized paths: what identifies it (two pairs may share both names)
    pr_path: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.base if self.base == self.pr else f"{self.base} → {self.pr}", "base": self.base,
                "pr": self.pr, "code_changed": self.code_changed, "inputs": self.inputs,
                "max_abs": _finite(self.max_abs), "max_rel": _finite(self.max_rel), "max_ulp": self.max_ulp,
                "differing": self.differing, "elements": self.elements, "nonfinite": self.nonfinite,
                "bit_identical": self.bit_identical, "problem": self.problem, "base_path": self.base_path,
                "pr_path": self.pr_path}


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def compare_buffers(base: Dump, pr_outputs: dict[int, np.ndarray], tolerances: dict[str, Tolerance]
                    ) -> dict[str, Any]:
    """Every output buffer of base against the PR's at the same position."""
    found: dict[str, Any] = {"max_abs": 0.0, "max_rel": 0.0, "max_ulp": 0, "differing": 0, "elements": 0,
                             "nonfinite": 0, "passed": True, "problem": ""}
    dtypes = base.meta.get("dtypes") or {}
    for position, ref in sorted(base.outputs.items()):
        result = pr_outputs.get(position)
        if result is None or result.shape != ref.shape:
            found.update(passed=False, problem=f"output {position}: missing or another shape in the PR")
            continue
        dtype = str(dtypes.get(str(position), str(ref.dtype)))
        tol = tolerance_for(tolerances, dtype)
        r, e = result.astype(np.float64), ref.astype(np.float64)
        finite = np.isfinite(r) & np.isfinite(e)
        special = ~finite & ~((r == e) | (np.isnan(r) & np.isnan(e)))
        diff = np.abs(r[finite] - e[finite])
        mag = np.abs(e[finite])
        big = mag > tol.atol
        found["max_abs"] = max(found["max_abs"], float(diff.max()) if diff.size else 0.0)
        found["max_rel"] = max(found["max_rel"], float((diff[big] / mag[big]).max()) if big.any() else 0.0)
        found["max_ulp"] = max(found["max_ulp"], ulp_distance(result, ref, dtype))
        found["differing"] += int(np.count_nonzero(~np.equal(result, ref) & ~(np.isnan(result) & np.isnan(ref))))
        found["elements"] += int(ref.size)
        found["nonfinite"] += int(np.count_nonzero(special))
        if special.any() or np.any(diff > tol.atol + tol.rtol * mag):
            found["passed"] = False
    return found


def _same_inputs(a: Dump, b: Dump) -> bool:
    return a.inputs.keys() == b.inputs.keys() and all(
        a.inputs[k].shape == b.inputs[k].shape and np.array_equal(a.inputs[k], b.inputs[k], equal_nan=True)
        for k in a.inputs)


def pair_difference(base_name: str, pr_name: str, code_changed: bool, base: Dump | None, pr_self: Dump | None,
                    pr_cross: Dump | None, tolerances: dict[str, Tolerance]) -> KernelDifference:
    """One pair judged as the module docstring says."""
    head: dict[str, Any] = {"base": base_name, "pr": pr_name, "code_changed": code_changed}
    if base is None or base.meta.get("error"):
        why = base.meta.get("error") if base is not None else "base recorded nothing"
        return KernelDifference(**head, inputs=f"not compared: {why}", compared=False)
    if pr_cross is not None and not pr_cross.meta.get("error"):
        outputs, inputs = pr_cross.outputs, "identical (base's recorded inputs)"
    elif pr_self is not None and not pr_self.meta.get("error") and _same_inputs(base, pr_self):
        outputs, inputs = pr_self.outputs, "identical (both recorded the same)"
    else:
        why = (pr_cross.meta.get("error") if pr_cross is not None else None) or "the inputs differ"
        return KernelDifference(**head, inputs=f"not compared: {why}", compared=False)
    found = compare_buffers(base, outputs, tolerances)
    bit_identical = found["differing"] == 0 and not found["problem"]
    if not code_changed and not bit_identical:
        found.update(passed=False, problem="harness: byte-identical kernels gave different outputs on identical "
                                           "inputs")
    return KernelDifference(**head, inputs=inputs, compared=True, bit_identical=bit_identical, **found)


@dataclass(frozen=True)
class KernelsNumerics:
    pairs: tuple[KernelDifference, ...]  # changed code first

    @property
    def compared(self) -> list[KernelDifference]:
        return [p for p in self.pairs if p.compared]

    @property
    def failed(self) -> list[KernelDifference]:
        return [p for p in self.compared if not p.passed]

    def block(self) -> dict[str, Any]:
        """The family's entry in summary.json's ``numerics``."""
        worst = max(self.failed, key=lambda p: (p.nonfinite, p.max_abs), default=None)
        identical = [p for p in self.compared if not p.code_changed]
        return {"compared": len(self.compared), "passed": len(self.compared) - len(self.failed),
                "failed": len(self.failed), "not_compared": len(self.pairs) - len(self.compared),
                "identical_code_bit_identical": sum(p.bit_identical for p in identical),
                "identical_code_compared": len(identical),
                "worst": worst.as_dict() if worst else None,
                "failed_items": [p.as_dict() for p in self.failed]}


def _partners(directory: Path) -> dict[str, str] | None:
    """The base kernel each PR kernel's ``cross`` record ran on (numerics.json's ``partners``); None when the
    file does not say (a run from before it did)."""
    path = directory / CONFIG_FILE
    if not path.is_file():
        return None
    data = read_json(path, "a kernel_outputs/numerics.json")
    partners = data.get("partners") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in partners.items()} if isinstance(partners, dict) else None


def _dump_or_none(directory: Path, organized: Path, rel: str, kind: str) -> Dump | None:
    try:
        path = dump_path(directory, organized, rel, kind)
    except OSError:
        return None  # the organized kernel file is gone: nothing to tie a record to
    return read_dump(path) if path.is_file() else None


def compare_kernel_outputs(base_dir: Path, pr_dir: Path, base_organized: Path, pr_organized: Path,
                           pairs: list[tuple[str, str, str, str, bool]], tolerances: dict[str, Tolerance]
                           ) -> KernelsNumerics | None:
    """``pairs``: (base name, PR name, base organized path, PR organized path, code changed) of every pair.
    None when neither side recorded anything (a run from before, or kernels timed outside paired rounds)."""
    if not any(Path(d).glob("*.npz") for d in (base_dir, pr_dir) if Path(d).is_dir()):
        return None
    ran_on = _partners(Path(pr_dir))
    found = []
    for base_name, pr_name, base_rel, pr_rel, changed in pairs:
        found.append(replace(pair_difference(base_name, pr_name, changed,
                                             _dump_or_none(base_dir, base_organized, base_rel, "self"),
                                             _dump_or_none(pr_dir, pr_organized, pr_rel, "self"),
                                             _dump_or_none(pr_dir, pr_organized, pr_rel, "cross")
                                             if ran_on is None or ran_on.get(pr_rel) == base_rel else None,
                                             tolerances),
                             base_path=base_rel, pr_path=pr_rel))
    found.sort(key=lambda p: (not p.code_changed, p.passed))
    return KernelsNumerics(tuple(found))
