"""``invoke trace-diff`` says first what makes two traces unlike (devices, platforms, ranks, steps), compares the
host ops that launched kernels, and keeps the kernels without a launching op in a row of their own."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.traces import read_trace
from analysis.traces.analyses.ops import UNLINKED_SHARE
from analysis.traces.reports.trace_diff import trace_diff
from tests.support.cli_support import invoke_in_process

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
H100 = FIXTURES / "h100_bert-small-uncased.json.gz"
MI300 = FIXTURES / "mi300_bert-small-uncased.json.gz"
RANK0 = FIXTURES / "multirank" / "sampled_rank-0.json.gz"
RANK1 = FIXTURES / "multirank" / "sampled_rank-1.json.gz"
ROOT = Path(__file__).resolve().parents[1]


def test_an_h100_trace_against_an_mi300x_trace_says_so_before_any_number(tmp_path: Path) -> None:
    done = invoke_in_process("-r", str(ROOT), "trace-diff", str(H100), str(MI300))

    assert done.returncode == 0, done.stderr
    head = done.stdout.split("Kernel time (sum of kernel durations)")[0]
    assert "- Devices differ: base NVIDIA H100 80GB HBM3, PR AMD Instinct MI300X VF;" in head
    assert "- Platforms differ: base cuda, PR rocm;" in head
    assert "Ranks differ" not in head


def test_two_ranks_of_a_job_are_named_as_different_ranks_and_their_unlinked_kernels_kept_apart() -> None:
    base, pr = read_trace(RANK0), read_trace(RANK1)

    diff = trace_diff(base, pr)

    assert diff.notes[0] == ("Ranks differ: base rank 0 of 128, PR rank 1 of 128; the two traces may not do the "
                             "same share of the work.")
    row = diff.categories.set_index("category").loc[UNLINKED_SHARE]
    assert (row["base count"], row["pr count"]) == (16, 16)
    assert round(row["base ms"], 3) == 0.619 and round(row["pr ms"], 3) == 0.652
    # The row is outside the totals: the totals are every kernel once.
    assert diff.total_kernel_ms[0] * 1e6 == base.dur_ns.sum()


def test_host_ops_are_diffed_with_their_calls_cpu_time_and_kernel_time(tmp_path: Path) -> None:
    out = tmp_path / "diff"
    done = invoke_in_process("-r", str(ROOT), "trace-diff", str(H100), str(MI300), "-o", str(out),
                             "--format", "csv,md")

    assert done.returncode == 0, done.stderr
    ops = pd.read_csv(tmp_path / "diff_csvs" / "ops.csv").set_index("op")
    addmm = ops.loc["aten::addmm"]
    assert (addmm["base calls"], addmm["pr calls"], addmm["status"]) == (26, 26, "both")
    assert round(addmm["base ms"], 6) == 0.197598 and round(addmm["pr ms"], 6) == 0.174130
    assert addmm["base cpu ms"] > addmm["base ms"]  # the host spends longer launching than the GEMMs run
    notes = pd.read_csv(tmp_path / "diff_csvs" / "notes.csv")
    assert notes["note"].str.startswith("Devices differ").any()
    assert "## Host ops that launched kernels" in (tmp_path / "diff.md").read_text()


def test_traces_with_different_profiled_steps_say_so() -> None:
    # The bert trace profiled one step; HTA's MI250 training trace two (each with its GPU-side copy on one).
    base, pr = read_trace(H100), read_trace(FIXTURES / "mi250_minitoy_train_rocm6.2.json.gz")

    notes = trace_diff(base, pr).notes

    assert "Step windows differ: base 1 ProfilerStep(s) (1 GPU-side), PR 2 ProfilerStep(s) (1 GPU-side); the " \
           "totals may cover different amounts of work." in notes
    assert trace_diff(base, read_trace(H100)).notes == []  # a trace against itself: nothing to say
