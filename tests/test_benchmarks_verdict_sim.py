"""benchmarks/verdict_sim.py: simulated rounds with a known truth go through the report's own functions, and the
numbers it prints are the ones those functions produce."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import verdict_sim  # noqa: E402


def test_the_simulation_reports_each_scenario_against_its_truth(tmp_path: Path, capsys) -> None:
    out = tmp_path / "sim.json"

    code = verdict_sim.main(["--replicates", "3", "--rounds", "10", "--scenarios", "aa,hidden,side_offset",
                             "--out", str(out)])

    assert code == 0
    results = json.loads(out.read_text())["results"]
    # Nothing changed: every run says so, and no identical kernel is called a change.
    assert results["aa"]["family_verdicts"] == {"identical": 3}
    assert results["aa"]["control_false_positive"] == 0.0 and results["aa"]["coverage"] is None
    # Ten kernels 15 % slower among ninety identical ones: found, and --fail-on regression fires every time.
    assert results["hidden"]["power"] > 0.9 and results["hidden"]["fail_on_regression"] == 1.0
    # The PR's processes 5 % faster: the identical kernels' interval holds that offset, not 1.0.
    assert results["side_offset"]["control_coverage"] > 0.6 and results["side_offset"]["power"] > 0.9
    printed = capsys.readouterr().out
    assert "hidden        90 identical + 10 changed 15 % slower" in printed


def test_the_true_step_effect_counts_identical_kernels_unchanged() -> None:
    sc = verdict_sim.SCENARIOS["heavy_few"]
    # Five kernels holding ~95 % of the time, 5.3 % slower: the step is ~5 % slower, not 5.3 %.
    assert 1 / verdict_sim.true_step(sc) - 1 == pytest.approx(0.95 * 0.053, rel=0.02)
