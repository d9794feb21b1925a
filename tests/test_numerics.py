"""The numerical A/B a reviewer reads first: a PR whose compiled model computes other outputs fails the report's
Numerics section, leads the one-line verdict, and fails ``--fail-on numerics`` (and ``regression``) with one line;
outputs that agree pass (bit-identical where they are), bfloat16 rounding passes on the float64 reference, and
NaN never passes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from analysis.models.numerics import compare_arrays, outputs_path, read_model_outputs, write_model_outputs
from analysis.report.render import load_report_inputs, render_report
from analysis.report.summary import fail_reasons
from analysis.stats.numeric_tolerance import DEFAULT_TOLERANCES, Tolerance, parse_tolerances
from foundation.errors import UserError
from tests.support.cli_support import invoke_in_process
from tests.support.compare_data import kernel_specs, kernels_frame, model_rounds, suite_frame, write_variant

MODELS = {"BertForMaskedLM": 40.0, "T5Small": 60.0}


def _bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (to nearest even), kept as float32 as the suite stores them."""
    bits = values.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def _outputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    exact = rng.normal(0, 3, size=(2, 8, 50))
    return {"fp64/logits": exact, "eager/logits": exact.astype(np.float32),
            "compiled/logits": (exact + rng.normal(0, 1e-6, exact.shape)).astype(np.float32),
            "fp64/loss": np.array(2.5), "eager/loss": np.array(2.5, np.float32),
            "compiled/loss": np.array(2.5, np.float32)}


def _training_outputs(seed: int) -> dict[str, np.ndarray]:
    """A training step as the suite records it: the loss, a parameter's gradient and that parameter after the
    optimizer step, per role."""
    rng = np.random.default_rng(seed)
    exact = {"loss": np.array(2.5), "grad.encoder.weight": rng.normal(0, 1, (8, 8)),
             "param.encoder.weight": rng.normal(0, 1, (8, 8))}
    return {f"{role}/{name}": value if role == "fp64" else value.astype(np.float32)
            for role in ("fp64", "eager", "compiled") for name, value in exact.items()}


def _run(root: Path, pr_compiled: dict[str, dict[str, np.ndarray]] | None = None, mode: str = "inference") -> Path:
    """A finished comparison whose suites recorded every model's outputs in ``mode``; ``pr_compiled`` replaces the
    PR's compiled outputs of a model."""
    specs = kernel_specs(6, seed=3, models=tuple(MODELS))
    run = root / "runs" / "r1"
    for side, seed in (("base", 4), ("pr", 5)):
        kernels, ksamples = kernels_frame(specs, seed=seed)
        suite, ssamples = suite_frame(MODELS, seed=seed + 10)
        write_variant(run / side, kernels, ksamples, suite, ssamples, env={},
                      model_samples=model_rounds(MODELS, seed=seed + 20))
        for index, model in enumerate(MODELS):
            arrays = _outputs(index) if mode == "inference" else _training_outputs(index)
            if side == "pr":
                arrays |= {f"compiled/{k}": v for k, v in (pr_compiled or {}).get(model, {}).items()}
            write_model_outputs(outputs_path(run / side / "suite", model), arrays,
                                {"dtype": "float32", "mode": mode, "vs_eager": None, "fp64": True,
                                 "seconds": 0.2, "error": None})
    (run / "manifest.json").write_text(json.dumps({"run_id": "r1", "created": "now", "stages": {},
                                                   "settings": {"rounds": 5}}))
    return run


def test_a_pr_that_computes_other_logits_fails_numerics_first(tmp_path: Path) -> None:
    good = _outputs(0)["compiled/logits"]
    wrong = good.copy()
    wrong[:, :, :10] *= 0.5  # a term dropped from a fifth of the vocabulary
    run = _run(tmp_path, {"BertForMaskedLM": {"logits": wrong}})

    paths = render_report(load_report_inputs(run), tmp_path / "report")

    text = paths.report_md.read_text(encoding="utf-8")
    assert text.index("## Numerics") < text.index("## Control and caveats")
    assert "Models: **1 of 2 passed**, **1 failed**" in text
    bert = next(line for line in text.splitlines() if line.startswith("| `BertForMaskedLM`"))
    assert "**fail** `logits`: max abs" in bert and "**FAIL**" in bert
    assert "/800 outside" in bert  # 160 of the 800 logits moved
    assert next(line for line in text.splitlines() if line.startswith("| `T5Small`")).endswith("| pass |")
    assert paths.verdict.startswith("**Verdict:** numerics **FAILED**: 1 of 2 model(s) compute other results "
                                    "(`BertForMaskedLM`; `BertForMaskedLM` PR vs base")
    summary = json.loads(paths.summary_json.read_text())
    assert summary["format_version"] == 7
    models = summary["numerics"]["models"]
    assert (models["compared"], models["passed"], models["failed"]) == (2, 1, 1)
    assert models["worst"]["name"] == "BertForMaskedLM" and models["worst"]["output"] == "logits"
    assert models["worst"]["max_abs"] == pytest.approx(float(np.abs(wrong - good).max()))
    assert summary["numerics"]["tolerances"]["bfloat16"] == {"rtol": 0.02, "atol": 0.02}
    assert "rtol 0.001, atol 0.001" in text  # the method states the tolerances used
    assert "Recording the models' outputs took 0.8 s of the two suites." in text  # 2 models × 2 sides × 0.2 s
    (reason,) = fail_reasons(summary, "numerics")
    # the PR's logits are as far from its eager ones as from base's: either check may hold the largest error
    assert re.match(r"numerics: models 1 of 2 failed \(worst: BertForMaskedLM, PR vs (base|eager), logits max abs",
                    reason)
    assert reason in fail_reasons(summary, "regression") and reason in fail_reasons(summary, "inconclusive")

    result = invoke_in_process("report", "r1", "--runs-dir", str(tmp_path / "runs"), "--fail-on", "numerics")

    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"--fail-on numerics: {reason}"]


def test_outputs_that_agree_pass_and_identical_ones_say_so(tmp_path: Path) -> None:
    paths = render_report(load_report_inputs(_run(tmp_path)), tmp_path / "report")

    text = paths.report_md.read_text(encoding="utf-8")
    assert "Models: **2 of 2 passed**. 2 of 2 model(s) gave bit-identical compiled outputs" in text
    assert "| bit-identical | ok, max abs" in text  # PR vs base identical; compiled vs eager within tolerance
    assert paths.summary["numerics"]["models"]["failed"] == 0 and paths.summary["numerics"]["models"]["worst"] is None
    assert not paths.verdict.startswith("**Verdict:** numerics")
    assert fail_reasons(paths.summary, "numerics") == []


def test_a_training_report_says_its_numerics_compared_the_parameters_after_the_optimizer_step(
        tmp_path: Path) -> None:
    paths = render_report(load_report_inputs(_run(tmp_path, mode="training")), tmp_path / "report")

    text = paths.report_md.read_text(encoding="utf-8")
    assert "Models: **2 of 2 passed**" in text
    method = next(line for line in text.splitlines() if line.startswith("**Numerics.**"))
    assert "the gradients of four fixed parameters and those parameters after the optimizer step" in method


def test_bfloat16_rounding_passes_on_the_float64_reference_and_nan_never_passes() -> None:
    exact = np.random.default_rng(1).normal(0, 4, 4096)
    eager = _bf16(exact)
    compiled = _bf16(exact * (1 + 2e-3))  # rounded elsewhere: outside a tight tolerance, as close to the truth
    tight = Tolerance(1e-4, 1e-4)

    assert not compare_arrays("x", compiled, eager, tight).passed
    rounded = compare_arrays("x", compiled, eager, tight, exact)
    assert rounded.passed and rounded.how == "float64 reference" and rounded.mismatches > 0
    dropped = compare_arrays("x", _bf16(exact * 0.9), eager, DEFAULT_TOLERANCES["bfloat16"], exact)
    assert not dropped.passed and dropped.max_rel == pytest.approx(0.1, abs=0.01)

    broken = compiled.copy()
    broken[7] = np.nan
    nan = compare_arrays("x", broken, eager, Tolerance(1.0, 1.0), exact)
    assert not nan.passed and nan.nonfinite == 1
    assert compare_arrays("x", broken, broken, tight).identical  # the same NaN in the same place is no change


def test_the_tolerance_flag_is_checked_at_the_door(tmp_path: Path) -> None:
    assert parse_tolerances("bfloat16=0.05,float32=1e-4:1e-5")["float32"] == Tolerance(1e-4, 1e-5)
    assert parse_tolerances("bfloat16=0.05")["bfloat16"] == Tolerance(0.05, 0.05)
    for bad in ("bf16=0.1", "float32", "float32=-1", "float32=x:1"):
        with pytest.raises(UserError, match="--tolerance"):
            parse_tolerances(bad)

    result = invoke_in_process("compare", "--pr", "installed", "--tolerance", "bf16=0.1",
                               "--runs-dir", str(tmp_path / "runs"))

    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "--tolerance 'bf16=0.1': expected DTYPE=RTOL[:ATOL]" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_a_damaged_outputs_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "m.npz"
    path.write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(UserError, match=r"m\.npz: not a model's outputs"):
        read_model_outputs(path)
    write_model_outputs(path, {"eager/logits": np.array(["a", "b"])}, {"dtype": "float32"})
    with pytest.raises(UserError, match=r"m\.npz: expected numeric arrays only"):
        read_model_outputs(path)
