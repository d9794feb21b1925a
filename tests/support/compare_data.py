"""Synthetic base/PR data for the comparison tests: kernels.csv rows + kernel_samples.json, and suite tables.

Kernels follow the kernels.csv contract. Each kernel has a "true" median time; samples come in rounds (the
paired timing stage's unit): each round of each kernel gets a process-level log-normal offset (``round_cv``),
every kernel of a round can share a further offset (``round_shift``, a busy minute), and the samples within a
round scatter with ``cv``. The tests know the truth the comparison should recover.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.kernels.results import KERNEL_COLUMNS
from foundation.formats.dynamo_csv import SUITE_COLUMNS

_PREFIX = {"pointwise": "poi", "reduction": "red", "persistent_reduction": "per", "template": "tem"}


@dataclass(frozen=True)
class KernelSpec:
    category: str
    stem: str  # e.g. fused_add_mul_3 without the index
    index: int
    xnumel: int
    r0_numel: int
    true_ms: float
    calls: int
    model: str

    @property
    def name(self) -> str:
        return f"triton_{_PREFIX[self.category]}_{self.stem}_{self.index}"

    @property
    def body_hash(self) -> str:
        return hashlib.sha256(f"{self.category}/{self.stem}".encode()).hexdigest()[:16]


def kernel_specs(n: int, seed: int, models: tuple[str, ...] = ("BertForMaskedLM",)) -> list[KernelSpec]:
    rng = np.random.default_rng(seed)
    cats = list(_PREFIX)
    return [
        KernelSpec(category=cats[i % len(cats)], stem=f"fused_op{i}", index=i, xnumel=int(2 ** rng.integers(8, 20)),
                   r0_numel=int(2 ** rng.integers(0, 10)), true_ms=float(np.exp(rng.uniform(np.log(0.01), np.log(2)))),
                   calls=int(rng.integers(1, 5)), model=models[i % len(models)])
        for i in range(n)
    ]


def round_draws(rng: np.random.Generator, true_ms: float, rounds: int, n_samples: int, cv: float, round_cv: float,
                round_shift: list[float] | None) -> np.ndarray:
    """rounds × n_samples draws: a per-round offset (process-level, plus the shift shared by the round)."""
    shift = np.asarray(round_shift if round_shift is not None else [1.0] * rounds, dtype=float)
    offsets = rng.lognormal(0.0, round_cv, rounds) * shift
    return true_ms * offsets[:, None] * rng.lognormal(0.0, cv, (rounds, n_samples))


def kernels_frame(specs: list[KernelSpec], seed: int, *, factor: dict[int, float] | None = None,
                  cv: float = 0.02, n_samples: int = 20, index_shift: int = 0, rounds: int = 5,
                  round_cv: float = 0.01, round_shift: list[float] | None = None, changed: frozenset[int] = frozenset()
                  ) -> tuple[pd.DataFrame, dict[str, list[list[float]]]]:
    """One variant's kernels.csv frame and per-round samples. ``factor[i]`` multiplies kernel i's time (PR
    effects); ``changed`` gives kernels a new body without changing their time; ``index_shift`` renumbers every
    kernel (what a PR adding one kernel early in a graph does to names)."""
    rng = np.random.default_rng(seed)
    factor = factor or {}
    rows, samples = [], {}
    for i, s in enumerate(specs):
        name = f"triton_{_PREFIX[s.category]}_{s.stem}_{s.index + index_shift}"
        path = f"{s.category}/{name}.py"
        grid = round_draws(rng, s.true_ms * factor.get(i, 1.0), rounds, n_samples, cv, round_cv, round_shift)
        samples[path] = grid.tolist()
        draws = grid.ravel()
        # A kernel whose time the PR changes has a different body (that is how a PR changes it).
        body = s.body_hash if factor.get(i, 1.0) == 1.0 and i not in changed else f"{s.body_hash[:12]}chgd"
        rows.append({
            "category": s.category, "kernel_name": name, "body_hash": body,
            "shape_key": f"x{s.xnumel}_r{s.r0_numel}", "legacy_key": f"triton_{_PREFIX[s.category]}_{s.stem}"
            f"_x{s.xnumel}_r{s.r0_numel}", "path": path, "calls": s.calls, "graphs": f"{s.model}/graph_0",
            "backend": "triton", "source": f"cache/{name}.py", "n": draws.size,
            "median_ms": float(np.median(np.median(grid, axis=1))),
            "mean_ms": float(draws.mean()), "std_ms": float(draws.std(ddof=1)), "min_ms": float(draws.min()),
            "gb": 0.1, "gb_per_s": 100.0, "status": "ok", "error": "",
        })
    return pd.DataFrame(rows, columns=list(KERNEL_COLUMNS)), samples


def suite_frame(models: dict[str, float], seed: int, *, factor: dict[str, float] | None = None,
                n: int = 30, cv: float = 0.01) -> tuple[pd.DataFrame, dict[str, dict[str, list[float]]]]:
    """A suite.csv frame: ``models`` maps name → true compiled ms; eager is 1.5× slower than compiled."""
    rng = np.random.default_rng(seed)
    factor = factor or {}
    rows, samples = [], {}
    for name, ms in models.items():
        compiled = ms * factor.get(name, 1.0) * rng.lognormal(0.0, cv, n)
        eager = ms * 1.5 * rng.lognormal(0.0, cv, n)
        samples[name] = {"eager": eager.tolist(), "compiled": compiled.tolist()}
        med_c, med_e = float(np.median(compiled)), float(np.median(eager))
        rows.append({
            "dev": "cuda", "name": name, "batch_size": 8, "speedup": med_e / med_c, "abs_latency": med_c,
            "compilation_latency": 30.0 * factor.get(name, 1.0), "compression_ratio": 1.1, "eager_peak_mem": 2.2,
            "dynamo_peak_mem": 2.0, "calls_captured": 100, "unique_graphs": 1, "graph_breaks": 0,
            "unique_graph_breaks": 0, "mode": "inference", "dtype": "float32", "size": "tiny",
            "eager_median_ms": med_e, "eager_mean_ms": float(eager.mean()), "eager_std_ms": float(eager.std(ddof=1)),
            "compiled_median_ms": med_c, "compiled_mean_ms": float(compiled.mean()),
            "compiled_std_ms": float(compiled.std(ddof=1)), "first_run_s": 5.0, "n": n, "warmup": 10, "flags": "",
            "status": "ok", "error": "",
        })
    return pd.DataFrame(rows, columns=list(SUITE_COLUMNS)), samples


def model_rounds(models: dict[str, float], seed: int, *, factor: dict[str, float] | None = None, rounds: int = 5,
                 n: int = 10, cv: float = 0.01, round_cv: float = 0.01, round_shift: list[float] | None = None
                 ) -> dict[str, list[list[float]]]:
    """suite/paired_samples.json of one side: compiled ms per round and model."""
    rng = np.random.default_rng(seed)
    factor = factor or {}
    return {name: round_draws(rng, ms * factor.get(name, 1.0), rounds, n, cv, round_cv, round_shift).tolist()
            for name, ms in models.items()}


def write_variant(root: Path, kernels: pd.DataFrame | None, ksamples: dict | None, suite: pd.DataFrame | None,
                  ssamples: dict | None, env: dict | None = None, model_samples: dict | None = None) -> Path:
    """Lay one variant out as in docs/architecture.md (kernels.csv, kernel_samples.json, suite/, env.json)."""
    import json

    root.mkdir(parents=True, exist_ok=True)
    if kernels is not None:
        kernels.to_csv(root / "kernels.csv", index=False)
    if ksamples is not None:
        (root / "kernel_samples.json").write_text(json.dumps(ksamples))
    if suite is not None:
        (root / "suite").mkdir(exist_ok=True)
        suite.to_csv(root / "suite" / "suite.csv", index=False)
    if ssamples is not None:
        (root / "suite").mkdir(exist_ok=True)
        (root / "suite" / "samples.json").write_text(json.dumps(ssamples))
    if model_samples is not None:
        (root / "suite").mkdir(exist_ok=True)
        (root / "suite" / "paired_samples.json").write_text(json.dumps(model_samples))
    if env is not None:
        (root / "env.json").write_text(json.dumps(env))
    return root
