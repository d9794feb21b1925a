"""benchmarks/verdict_sim.py: simulated rounds with a known truth go through the report's own functions, and the
numbers it prints are the ones those functions produce."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
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


def _components(path: Path, **levels: float) -> Path:
    """A components file as benchmarks/variance_components.py --json writes it (the part the simulation reads)."""
    noise = {"round_sd": 0.02, "process_sd": 0.01, "item_sd": 0.03, "visit_sd": 0.04, "passes": 4, **levels}
    path.write_text(json.dumps({"format_version": 1, "families": {"kernels": {"sim_noise": noise}}}))
    return path


def test_measured_components_drive_the_simulation(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"

    code = verdict_sim.main(["--replicates", "2", "--rounds", "3", "--scenarios", "one_3pct", "--components",
                             str(_components(tmp_path / "c.json")), "--reuse-workers", "3", "--out", str(out)])

    assert code == 0
    noise = json.loads(out.read_text())["noise"]
    # The measured levels replace the built-in ones; their spread holds the step and drift the built-in model adds.
    assert (noise["item_sd"], noise["visit_sd"], noise["passes"], noise["reuse"]) == (0.03, 0.04, 4, 3)
    assert noise["step_p"] == 0 and noise["drift"] == 0

    # The same levels, timed as a round of another design: 2 passes instead of the measured run's 4.
    verdict_sim.main(["--replicates", "1", "--rounds", "3", "--scenarios", "one_3pct", "--components",
                      str(_components(tmp_path / "c.json")), "--passes", "2", "--out", str(out)])
    assert json.loads(out.read_text())["noise"]["passes"] == 2


def test_components_of_several_runs_drive_the_simulation_by_each_levels_median(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    runs = [_components(tmp_path / f"c{n}.json", item_sd=item, round_sd=rnd)
            for n, (item, rnd) in enumerate([(0.012, 0.016), (0.008, 0.011), (0.010, 0.009)])]

    verdict_sim.main(["--replicates", "1", "--rounds", "3", "--scenarios", "one_3pct", "--components",
                      *map(str, runs), "--out", str(out)])

    noise = json.loads(out.read_text())["noise"]
    assert (noise["item_sd"], noise["round_sd"], noise["visit_sd"]) == (0.010, 0.011, 0.04)


def test_a_components_file_without_the_family_is_one_line(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        verdict_sim.main(["--components", str(_components(tmp_path / "c.json")), "--family", "models"])
    assert exit_.value.code == 2
    assert "no models rounds measured (families: kernels)" in capsys.readouterr().err


def test_workers_kept_across_rounds_keep_their_offsets() -> None:
    sc = verdict_sim.SCENARIOS["aa"]
    quiet = {"round_sd": 0.0, "process_sd": 0.02, "item_sd": 0.05, "visit_sd": 0.0, "outlier_p": 0.0, "step_p": 0.0,
             "order_effect": 0.0, "drift": 0.0, "passes": 2}

    def rounds_of(reuse: int) -> list[list[float]]:
        _, _, base, _, _ = verdict_sim.simulate(sc, verdict_sim.Noise(**quiet, reuse=reuse), 4,
                                                np.random.default_rng(1))
        return base["k/0.py"]

    kept, fresh = rounds_of(4), rounds_of(1)
    assert all(r == pytest.approx(kept[0]) for r in kept)  # one pair of workers: the same offsets every round
    assert fresh[1] != pytest.approx(fresh[0])  # fresh workers each round: offsets drawn anew


def test_adaptive_rounds_stop_with_invoke_compares_own_policy_and_its_cpu_defaults(tmp_path: Path,
                                                                                  monkeypatch, capsys) -> None:
    from analysis.report.sequential import RoundsPolicy

    looked: list[int] = []
    real = RoundsPolicy.after_look

    def counted(self, look, rounds, spent_s):  # type: ignore[no-untyped-def]
        looked.append(rounds)
        return real(self, look, rounds, spent_s)

    monkeypatch.setattr(RoundsPolicy, "after_look", counted)
    out = tmp_path / "sim.json"

    assert verdict_sim.main(["--replicates", "1", "--rounds", "auto", "--scenarios", "aa", "--out", str(out)]) == 0

    written = json.loads(out.read_text())
    # The CPU's default for kernels: at most 24 rounds, settled and resolved to 2 %; nothing changed stops at 3.
    assert (written["max_rounds"], written["resolution_pct"]) == (24, 2.0)
    assert written["results"]["aa"]["mean_rounds"] == 3.0 and looked == [3]
    assert "adaptive rounds up to 24, resolution target 2 %" in capsys.readouterr().out

    verdict_sim.main(["--replicates", "1", "--rounds", "auto", "--max-rounds", "5", "--resolution", "none",
                      "--scenarios", "aa", "--out", str(out)])
    assert (json.loads(out.read_text())["max_rounds"], json.loads(out.read_text())["resolution_pct"]) == (5, None)
    with pytest.raises(SystemExit):
        verdict_sim.main(["--rounds", "7", "--resolution", "2%"])
    assert "--resolution go with adaptive rounds" in capsys.readouterr().err
