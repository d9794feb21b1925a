"""benchmarks/variance_components.py: the variance of timing split into rounds, the processes of a round, visits
and the samples of a visit — recovered from rounds with known components, and measured on a real CPU run."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import variance_components as vc  # noqa: E402

from foundation.formats.paired_rounds import RoundRecord, Visit, round_file, write_round  # noqa: E402

README_RUN = ROOT / "tests" / "fixtures" / "readme_run" / "readme1-a.tar.gz"
# Standard deviations of log time, as a share of the time: per round, per process, per visit, per sample.
TRUE_SD = {"round": 0.05, "process": 0.02, "visit": 0.01, "within": 0.03}
SHARED_PROCESS_SD = 0.015  # of the process part: what every item of one worker shares


def _write_rounds(run: Path, rounds: int, items: int, passes: int, samples: int, seed: int) -> None:
    """A run's model rounds drawn from the nested model: each round both sides' fresh workers visit every item
    in ABBA blocks, ``passes`` times, each visit ``samples`` samples; the PR side 10 % slower on everything."""
    rng = np.random.default_rng(seed)
    own_sd = math.sqrt(TRUE_SD["process"] ** 2 - SHARED_PROCESS_SD ** 2)
    directory = run / "pair" / "models"
    directory.mkdir(parents=True)
    for number in range(1, rounds + 1):
        round_offset = rng.normal(0, TRUE_SD["round"], items)
        worker = {side: rng.normal(0, SHARED_PROCESS_SD) for side in vc.SIDES}
        visits = []
        for item in range(items):
            for side in vc.SIDES:
                process = worker[side] + rng.normal(0, own_sd) + round_offset[item] + (0.1 if side == "pr" else 0.0)
                for p in range(passes):
                    for position in ((0, 3) if (p + number) % 2 == (side == "pr") else (1, 2)):
                        visit = process + rng.normal(0, TRUE_SD["visit"])
                        times = np.exp(np.log(2.0 + item) + visit + rng.normal(0, TRUE_SD["within"], samples))
                        visits.append(Visit(side=side, item=f"Model{item}", block=item, position=position,
                                            started_s=1.0, samples=times.tolist(), pass_index=p))
        write_round(round_file(directory, number), RoundRecord(kind="models", round=number, sides=list(vc.SIDES),
                                                               started_at="", wall_s=1.0, visits=visits))


def test_known_components_are_recovered_level_by_level(tmp_path: Path) -> None:
    _write_rounds(tmp_path, rounds=60, items=6, passes=4, samples=30, seed=3)

    (fam,) = vc.families(tmp_path, ["models"])
    summary = fam.summary()

    assert summary["items"] == 6 and summary["rounds"] == 60 and summary["visits_per_process"] == 8
    for level, sd in TRUE_SD.items():
        assert summary["median_sd_pct"][level] / 100 == pytest.approx(sd, rel=0.15), level
    # The process part splits into what one worker's items share and each item's own.
    assert math.sqrt(summary["process_shared_variance"]) == pytest.approx(SHARED_PROCESS_SD, rel=0.3)
    assert summary["notes"] == []
    # What verdict_sim takes: a block's two visits pooled, one simulated visit per pass.
    noise = summary["sim_noise"]
    assert noise["passes"] == 4 and noise["process_sd"] == pytest.approx(SHARED_PROCESS_SD, rel=0.3)
    assert noise["visit_sd"] == pytest.approx(math.sqrt((TRUE_SD["visit"] ** 2 + 1.57 * TRUE_SD["within"] ** 2 / 30)
                                                        / 2), rel=0.2)


def test_one_sample_per_visit_leaves_the_within_level_unidentified(tmp_path: Path) -> None:
    _write_rounds(tmp_path, rounds=4, items=2, passes=4, samples=1, seed=5)

    (fam,) = vc.families(tmp_path, ["models"])

    assert fam.median("within") is None and fam.median_share("within") is None
    assert any(note.startswith("within a visit: not identifiable") for note in fam.notes())


def test_a_real_readme_run_gives_shares_that_sum_to_one(tmp_path: Path, capsys) -> None:
    out = tmp_path / "components.json"

    code = vc.main([str(README_RUN), "--json", str(out)])

    assert code == 0
    data = json.loads(out.read_text())
    assert data["format_version"] == vc.FORMAT_VERSION
    for kind in ("models", "kernels"):
        fam = data["families"][kind]
        shares = [s for s in fam["share"].values() if s is not None]
        assert all(s >= 0 for s in shares) and sum(shares) == pytest.approx(1.0)
        # The archive keeps one pooled sample per block: the within-visit level cannot be told apart.
        assert fam["share"]["within"] is None and fam["rounds"] == 10
    assert data["families"]["models"]["items"] == 8
    printed = capsys.readouterr().out
    assert "note: within a visit: not identifiable" in printed


def test_a_path_that_is_not_a_run_is_one_line(tmp_path: Path, capsys) -> None:
    assert vc.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path}: expected paired rounds")
