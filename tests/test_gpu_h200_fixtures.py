"""Real GPU output of an NVIDIA H200 read back on the CPU: a float16 compare, two A/As, the GPU's utilization and
a node replay go through the readers a user's next command runs.

The fixtures in ``tests/fixtures/gpu_h200/`` come from ``benchmarks/gpu_check.sh`` on a lent H200 (torch
2.11.0+cu130, Triton 3.6.0; the folder's README says what each file is and how it was made). Nothing here needs
a GPU: every test checks the project's answer against a computation done in the test from the raw files.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from analysis.kernels.compare import pair_kernels, read_kernels_csv
from analysis.kernels.identity import identify_triton
from analysis.traces.analyses.replay import read_replay_set
from analysis.traces.reports.perf_report import generate_perf_reports
from analysis.traces.reports.replay_report import replay_paths
from foundation.formats.paired_rounds import PairedBlocks, read_rounds
from tests.support.trace_support import addmm_calls_by_shape

ROOT = Path(__file__).resolve().parents[1]
H200 = Path(__file__).parent / "fixtures" / "gpu_h200"
FP16 = H200 / "fp16"
SIDES = ("base", "pr")
REPLAYED_TRACE = Path(__file__).parent / "fixtures" / "traces" / "h100_bert-small-uncased.json.gz"
LOOP = re.compile(r"^\s+for r0_offset in (?:tl\.)?range\(", re.M)

sys.path.insert(0, str(ROOT / "benchmarks"))

import aa_noise  # noqa: E402
import gpu_busy_by_stage  # noqa: E402


def _index(side: str) -> list[dict[str, str]]:
    with open(FP16 / side / "organized" / "index.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


# --- the float16 compare ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
def test_every_float16_kernel_of_the_h200_identifies_as_its_index_says(side: str) -> None:
    """Given GPT-2's float16 kernels from the H200, each file's identity recomputed here is its index row, and the
    kernels really are half precision (their inputs are drawn as float16)."""
    organized = FP16 / side / "organized"
    rows = _index(side)
    assert len(rows) == 11
    for row in rows:
        text = (organized / row["path"]).read_text(encoding="utf-8")
        identity = identify_triton(text)

        assert (identity.category, identity.kernel_name, identity.body_hash, identity.shape_key) == (
            row["category"], row["kernel_name"], row["body_hash"], row["shape_key"]), row["path"]
    texts = [(organized / row["path"]).read_text(encoding="utf-8") for row in rows]
    assert sum("dtype=torch.float16" in text for text in texts) >= 9


def test_the_looped_reductions_pr_pairs_all_eleven_float16_kernels() -> None:
    """Given both sides of the GPT-2 float16 compare, the seven reductions the PR rewrote as loops pair with their
    persistent versions by fused ops and shape, the four untouched pointwise kernels by identical code, and no
    kernel is left on one side: the verdict covers the kernels the PR changed."""
    base = {row["kernel_name"]: row for row in _index("base")}
    pr = {row["kernel_name"]: row for row in _index("pr")}
    persistent = sorted(name for name, row in base.items() if row["category"] == "persistent_reduction")
    looped = sorted(name for name, row in pr.items() if row["category"] == "reduction")
    assert len(persistent) == len(looped) == 7
    assert [n.replace("triton_per_", "triton_red_") for n in persistent] == looped
    for name in looped:
        assert LOOP.search((FP16 / "pr" / "organized" / pr[name]["path"]).read_text(encoding="utf-8"))

    pairing = pair_kernels(read_kernels_csv(FP16 / "base" / "kernels.csv"),
                           read_kernels_csv(FP16 / "pr" / "kernels.csv"))

    assert pairing.only_base == [] and pairing.only_pr == []
    assert pairing.pairs["matched_by"].value_counts().to_dict() == {"ops+shape_key": 7, "body_hash+shape_key": 4}
    summary = json.loads((FP16 / "report" / "summary.json").read_text())["kernels"]
    assert summary["n"] == 11 and summary["ci_low"] < 1.0 < summary["ci_high"]


# --- the A/As: models timed pinned together -------------------------------------------------------------------


@pytest.mark.parametrize("run", ["run-1", "run-2"])
def test_the_h200_aa_models_were_timed_on_one_cpu_and_their_verdict_is_the_median_block_ratio(run: str) -> None:
    """Given an A/A's five model rounds on the H200, both sides' workers shared one CPU in every round (unpinned on
    the H100 they ran at different speeds: CI 0.42-1.48), and the summary's geomean and interval are, computed here
    from the raw visits, the mean over rounds of each round's median ABBA-block log ratio with a t interval."""
    rounds = sorted((H200 / "aa" / run / "pair" / "models").glob("round-*.json"))
    raw = [json.loads(path.read_text()) for path in rounds]
    assert len(raw) == 5
    for record in raw:
        cpus = {side: record["workers"][side]["cpus"] for side in SIDES}
        assert len(cpus["base"]) == 1 and cpus["base"] == cpus["pr"]
    per_round = []
    for record in raw:
        blocks: dict[tuple[int, int], dict[str, list[float]]] = {}
        for visit in record["visits"]:
            blocks.setdefault((visit["pass_index"], visit["block"]), {}).setdefault(visit["side"], []).extend(
                visit["samples"])
        per_round.append(statistics.median(
            math.log(statistics.median(b["base"]) / statistics.median(b["pr"])) for b in blocks.values()))
    t_975_4 = 2.7764451051977987  # Student t, 97.5th percentile, 4 degrees of freedom (5 rounds, 95 % two-sided)
    mean, half = statistics.mean(per_round), t_975_4 * statistics.stdev(per_round) / math.sqrt(5)
    summary = json.loads((H200 / "aa" / run / "summary.json").read_text())["models"]

    assert PairedBlocks.from_records(read_rounds(rounds)).round_log_ratios(
        "BertForMaskedLM", "BertForMaskedLM") == pytest.approx(per_round)
    assert summary["geomean"] == pytest.approx(math.exp(mean))
    assert (summary["ci_low"], summary["ci_high"]) == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    assert summary["ci_low"] < 1.0 < summary["ci_high"] and summary["improved"] + summary["regressed"] == 0


@pytest.mark.parametrize("run", ["run-1", "run-2"])
def test_the_h200_aa_read_back_from_its_run_passes_the_gate(run: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Given an A/A run's report/summary.json, ``aa_noise.py --run`` finds 1.0 inside both intervals, nothing
    flagged, and writes the JSON the H200 wrote when it measured."""
    measured = json.loads((H200 / "aa" / run / "aa_noise.json").read_text())
    run_id = measured["repeats"][0]["aa"]["run_id"]
    (tmp_path / "runs" / run_id / "report").mkdir(parents=True)
    shutil.copy(H200 / "aa" / run / "summary.json", tmp_path / "runs" / run_id / "report" / "summary.json")

    code = aa_noise.main(["--run", run_id, "--runs-dir", str(tmp_path / "runs"), "--json",
                          str(tmp_path / "aa.json"), "--max-flagged-share", "0"])

    out = capsys.readouterr().out
    assert code == 0, out
    assert "A/A gate passed" in out and "verdict lines saying faster/slower: 0/1" in out
    written = json.loads((tmp_path / "aa.json").read_text())
    for family in ("kernels", "models"):  # newer: the offset between the sides (none in these older summaries)
        measured["repeats"][0]["aa"][family]["offset"] = None
        # and the rounds each kind ran, read from the summary (5 fixed rounds on the H200)
        measured["repeats"][0]["aa"][family]["rounds"] = 5
    assert written["repeats"] == measured["repeats"] and written["totals"] == measured["totals"]


# --- how busy the GPU was ---------------------------------------------------------------------------------------


def test_gpu_busy_by_stage_matches_the_h200_samples_to_the_compares_stages(capsys: pytest.CaptureFixture[str]) -> None:
    """Given nvidia-smi's 200 ms samples of the H200 and the float16 compare's manifest, the kernel stage's share
    is the mean utilization of the samples inside its three rounds, counted here: a few percent (a tiny model's
    round is its workers' start-up; see docs/gpu-validation.md)."""
    manifest = json.loads((FP16 / "manifest.json").read_text())
    spans = []
    for name, stage in manifest["stages"].items():
        if name.startswith("pair/kernels-round-"):
            start = datetime.fromisoformat(stage["started"]).timestamp()
            spans.append((start, start + stage["duration_s"]))
    inside = []
    with open(FP16 / "gpu-utilization.csv", newline="") as handle:
        for stamp, utilization, _memory in csv.reader(handle):
            at = datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC).timestamp()
            if any(start <= at <= end for start, end in spans):
                inside.append(float(utilization.strip().rstrip(" %")))
    assert len(spans) == 3 and len(inside) > 100

    assert gpu_busy_by_stage.main(["--utilization", str(FP16 / "gpu-utilization.csv"), str(FP16)]) == 0

    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "kernel stage (all kernel rounds)" in x)
    busy = statistics.fmean(inside)
    assert f"{busy:5.1f} % busy ({len(inside)} samples)" in line and busy < 10
    assert re.search(r"base/suite\s+28\.4 s", out)


# --- the node replay, now with the L2 flushed --------------------------------------------------------------------


def test_with_the_l2_flushed_the_h200_replays_every_gemm_within_a_quarter_of_its_trace_time(tmp_path: Path) -> None:
    """Given the H100 BERT trace's four bf16 GEMMs replayed on the H200 after an L2 flush, each replayed median is
    within 25 % above the trace's mean per call, counted here from the raw trace (without the flush, three of them
    replayed at 4-6x on the H100: the launch latency was in the time)."""
    (tmp_path / "h100").mkdir()
    shutil.copy(REPLAYED_TRACE, tmp_path / "h100")
    [(group, _)] = generate_perf_reports(tmp_path, formats=["md"], replay=True)
    replay_set = read_replay_set(replay_paths(group.output_base)["set"])
    shapes = {entry["id"]: entry["problem"] for entry in replay_set["shapes"]}
    results = json.loads((H200 / "replay" / "h100_bert-small-uncased_replay_results.json").read_text())
    in_trace = addmm_calls_by_shape(REPLAYED_TRACE)

    assert results["l2_flush"] is True and results["device"] == "NVIDIA H200" and len(results["results"]) == 4
    for result in results["results"]:
        problem = shapes[result["id"]]
        calls, us = in_trace[(problem["m"], problem["n"], problem["k"])]
        assert result["error"] is None and result["samples"] == 100
        assert 1.0 <= result["replay_median_us"] / (us / calls) <= 1.25, (result["id"], us / calls)


def test_gpu_busy_by_stage_says_in_one_line_what_is_not_a_run_or_not_samples(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.csv").write_text("not, nvidia-smi\n")

    with pytest.raises(SystemExit) as no_run:
        gpu_busy_by_stage.main(["--utilization", str(FP16 / "gpu-utilization.csv"), str(tmp_path)])
    with pytest.raises(SystemExit) as no_samples:
        gpu_busy_by_stage.main(["--utilization", str(tmp_path / "empty.csv"), str(FP16)])

    errors = capsys.readouterr().err.strip().splitlines()
    assert no_run.value.code == no_samples.value.code == 2
    assert errors[-2].endswith(f"{tmp_path}: no manifest.json (not a run directory)")
    assert errors[-1].endswith(f"--utilization {tmp_path / 'empty.csv'}: no samples (expected nvidia-smi csv,noheader "
                               "lines)")
