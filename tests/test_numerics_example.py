"""The wrong-on-purpose example end to end: ``invoke compare`` of ``examples/wrong-numerics.patch`` (the C++
backend's log without its ln 2, its exp cut to three terms) on one tiny model, in float32 and in bfloat16: the
report's Numerics section fails the model and the loss kernel, the verdict says so first, and ``--fail-on
numerics`` exits 1 with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.electra_compare import ROOT, invoke

EXAMPLE = ROOT / "examples" / "wrong-numerics.patch"
MODEL = "ElectraForCausalLM"


@pytest.mark.integration
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_wrong_on_purpose_example_fails_the_numerics(tmp_path: Path, dtype: str) -> None:
    proc = invoke("compare", "--base=installed", f"--pr={EXAMPLE}", "--models", MODEL, "--dtype", dtype,
                  "--iterations", "10", "--warmup", "3", "--kernel-iterations", "10", "--rounds", "3", "--passes", "2",
                  "--runs-dir", str(tmp_path), "--run", "wrong", "--fail-on", "numerics")

    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
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
