"""The wrong-on-purpose example, ``examples/wrong-numerics.patch`` (the C++ backend's log without its ln 2, its exp
cut to three terms), on one tiny model. End to end in float32: ``invoke compare`` of the example, whose report's
Numerics section fails the model and the loss kernel, whose verdict says so first, and whose ``--fail-on numerics``
exits 1 with one line. In bfloat16 through the stage that records the models' outputs: ``invoke suite`` on the
installed torch and with the example as its overlay, the two suites' outputs compared as the report compares them:
the loss is as far off as in float32, beyond bfloat16's rounding (the rest of a compare does not depend on the
dtype, and a second whole compare would cost as much as the first)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.models.numerics import compare_model_outputs
from analysis.stats.numeric_tolerance import DEFAULT_TOLERANCES
from foundation.formats.run_layout import VariantLayout
from tests.support.electra_compare import BASE_STAGES, ROOT, SUITE_FLAGS, invoke, seed_base, skipped_base_stages

EXAMPLE = ROOT / "examples" / "wrong-numerics.patch"
MODEL = "ElectraForCausalLM"


@pytest.mark.integration
@pytest.mark.xdist_group("electra-compare")  # the session's compare is made once, on the worker of its group
def test_the_wrong_on_purpose_example_fails_the_numerics(electra_compare, tmp_path: Path) -> None:
    dtype = "float32"
    electra, _ = electra_compare
    seed_base(electra, tmp_path, "wrong")
    proc = invoke("compare", "--base=installed", f"--pr={EXAMPLE}", *SUITE_FLAGS, "--dtype", dtype,
                  "--runs-dir", str(tmp_path), "--run", "wrong", "--fail-on", "numerics")

    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert skipped_base_stages(tmp_path / "wrong", electra, proc.stdout) == list(BASE_STAGES), proc.stdout[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"--fail-on numerics: numerics: models 1 of 1 failed (worst: {MODEL}, PR vs ")
    assert "kernels 1 of" in line  # the loss kernel, run on base's recorded inputs
    report = (tmp_path / "wrong" / "report" / "report.md").read_text(encoding="utf-8")
    # A numerical failure is named first and its section comes before any time (the control and caveats included).
    assert report.index("## Numerics") < report.index("## Models") < report.index("## Control and caveats")
    assert report.split("\n\n")[1].startswith("**Verdict:** numerics **FAILED**: 1 of 1 model(s) compute other results")
    row = next(r for r in report.splitlines() if r.startswith(f"| `{MODEL}` | {dtype} |"))
    assert "**fail** `loss`" in row and row.endswith("| **FAIL** |") and "| bit-identical | **FAIL** |" in row
    kernel = next(r for r in report.splitlines() if "log_softmax" in r and "identical (base's recorded inputs)" in r)
    assert "**FAIL**" in kernel
    numerics = json.loads((tmp_path / "wrong" / "report" / "summary.json").read_text())["numerics"]
    assert numerics["models"]["worst"]["output"] == "loss" and numerics["models"]["worst"]["max_rel"] > 0.2
    kernels = numerics["kernels"]
    assert kernels["failed"] == 1 and "log_softmax" in kernels["worst"]["pr"] and kernels["worst"]["max_ulp"] > 1000
    # the kernels whose code did not change ran on identical inputs and gave identical outputs
    assert kernels["identical_code_compared"] > 0
    assert kernels["identical_code_bit_identical"] == kernels["identical_code_compared"]


@pytest.mark.integration
def test_in_bfloat16_the_example_puts_the_models_loss_beyond_rounding(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    flags = ("--models", MODEL, "--dtype", "bfloat16", "--warmup", "3", "--iterations", "10", "--runs-dir", str(runs))
    for run, overlay in (("installed", ()), ("example", ("--overlay", str(EXAMPLE)))):
        proc = invoke("suite", *flags, *overlay, "--run", run)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    compared = compare_model_outputs(VariantLayout(runs / "installed" / "base").suite,
                                     VariantLayout(runs / "example" / "base").suite, DEFAULT_TOLERANCES)

    assert compared is not None and not compared.not_compared
    (model,) = compared.models
    assert model.dtype == "bfloat16" and not model.passed
    # summary.json's numerics.models, as a compare of the two sides writes it
    block = compared.block()
    assert block["failed"] == 1 and block["worst"]["name"] == MODEL
    assert block["worst"]["output"] == "loss" and block["worst"]["max_rel"] > 0.2
    # the base side's own compiled outputs agree with its eager ones within bfloat16's tolerance
    assert next(c for c in model.checks if c.name == "base vs eager").passed
