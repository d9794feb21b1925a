"""The seed's experiment at full size on an NVIDIA H200, read back on the CPU: a user who ran the GPU check sees
where the lease went (two suites of full-size training compiles) and how little of it kept the GPU busy.

The fixtures in ``tests/fixtures/gpu_h200_full/`` come from ``benchmarks/gpu_check.sh`` on a lent H200 on
2026-11-30 (torch 2.11.0+cu130, Triton 3.6.0; the folder's README has the commands): BertForMaskedLM and
DistilBertForMaskedLM trained in AMP, cudagraphs off, pointwise autotuning, cut at its limit in the PR side's suite.
Every test checks the project's answer against a computation done in the test from the raw files.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from foundation.formats.dynamo_csv import read_graph_models, read_suite_csv, read_suite_samples

ROOT = Path(__file__).resolve().parents[1]
RUN = Path(__file__).parent / "fixtures" / "gpu_h200_full" / "gpu-compare"

sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_busy_by_stage  # noqa: E402
import gpu_check_summary  # noqa: E402


def _stages() -> dict[str, dict]:
    return json.loads((RUN / "manifest.json").read_text())["stages"]


def test_the_compare_line_of_the_cut_run_gives_both_suites_wall_and_names_what_did_not_finish(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The compare reached no round: its line still carries each suite's wall time, the number the next lease is
    planned from, and names the stage that was stopped."""
    stages = _stages()
    assert gpu_check_summary.main(["compare", str(RUN)]) == 0

    line = capsys.readouterr().out.strip()
    base, pr = (round(stages[f"{side}/suite"]["duration_s"]) for side in ("base", "pr"))
    assert (base, pr) == (293, 213)
    assert line == ("compare gpu-compare: BertForMaskedLM,DistilBertForMaskedLM (full, training, amp); kernels base -, "
                    f"pr -; wall suite {base}/{pr} s, run 752 s; no report; not done: pr/suite")


def test_a_full_size_training_suite_keeps_the_h200_busy_a_few_percent_of_its_time(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each suite compiles two full-size training graphs with pointwise autotuning: the CPU works, the GPU mostly
    waits. The stage table's share is the mean of the 200 ms samples inside the stage, counted here."""
    samples = []
    with open(RUN / "gpu-utilization.csv", newline="") as handle:
        for stamp, utilization, _memory in csv.reader(handle):
            at = datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC).timestamp()
            samples.append((at, float(utilization.strip().rstrip(" %"))))
    expected = {}
    for name, stage in _stages().items():
        start = datetime.fromisoformat(stage["started"]).timestamp()
        inside = [u for at, u in samples if start <= at <= start + stage["duration_s"]]
        expected[name] = (statistics.fmean(inside), len(inside))

    assert gpu_busy_by_stage.main(["--utilization", str(RUN / "gpu-utilization.csv"), str(RUN)]) == 0

    out = capsys.readouterr().out
    for name, (busy, count) in expected.items():
        assert re.search(rf"{re.escape(name)}\s+[\d.]+ s\s+{busy:5.1f} % busy \({count} samples\)", out), (name, out)
        assert busy < 10 and count > 1000


def test_the_suite_tables_of_both_sides_read_back_with_full_size_compile_times() -> None:
    """The base side finished both models, the PR side the first: every row is ok, each compile of a full-size
    training step took over a minute on the H200 (the suite is where a full-size lease goes), and each compiled
    graph module (three per model) is named for the model that ran it."""
    rows = {side: read_suite_csv(RUN / side / "suite" / "suite.csv") for side in ("base", "pr")}
    assert [r["name"] for r in rows["base"]] == ["BertForMaskedLM", "DistilBertForMaskedLM"]
    assert [r["name"] for r in rows["pr"]] == ["BertForMaskedLM"]
    for side, table in rows.items():
        samples = read_suite_samples(RUN / side / "suite" / "samples.json")
        graphs = read_graph_models(RUN / side / "suite" / "graph_models.json")
        for row in table:
            assert (row["status"], row["dev"], row["mode"], row["dtype"], row["size"]) == (
                "ok", "cuda", "training", "amp", "full")
            assert float(row["compilation_latency"]) > 60
            assert {k: len(v) for k, v in samples[row["name"]].items()} == {"eager": 30, "compiled": 30}
            assert sum(row["name"] in models for models in graphs.values()) == 3
