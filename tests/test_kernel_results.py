"""Pooling kernel timing rounds: what `invoke compare` does with the rounds it alternates between base and PR."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from analysis.errors import UserError
from analysis.kernel_index import IndexRow
from analysis.kernel_results import merge_rounds, summarize_samples, write_results


def _row(path: str, name: str) -> IndexRow:
    return IndexRow(category="cpp", kernel_name=name, body_hash="h" + name, shape_key="", legacy_key=f"{name}_x0_r0",
                    path=path, calls=2, graphs="M/g", backend="cpp", source="graphs/g.py")


def _round(directory: Path, samples: dict[str, list[float]], errors: dict[str, str]) -> Path:
    rows = [_row("cpp/a.cpp", "cpp_fused_a_0"), _row("cpp/b.cpp", "cpp_fused_b_1")]
    results = [summarize_samples(r, samples.get(r.path, []), errors.get(r.path, ""), 0.001) for r in rows]
    write_results(directory, results, {r.path: samples[r.path] for r in rows if r.path in samples})
    return directory


def _table(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return {row["path"]: row for row in csv.DictReader(handle)}


def test_rounds_are_pooled_into_one_table_with_statistics_over_all_samples(tmp_path):
    first = _round(tmp_path / "1", {"cpp/a.cpp": [1.0, 1.0, 1.0], "cpp/b.cpp": [2.0]}, {})
    second = _round(tmp_path / "2", {"cpp/a.cpp": [3.0, 3.0, 3.0]}, {"cpp/b.cpp": "worker crashed (SIGSEGV)"})

    rows = merge_rounds([first, second], tmp_path / "out")

    table = _table(tmp_path / "out" / "kernels.csv")
    assert table["cpp/a.cpp"]["n"] == "6" and float(table["cpp/a.cpp"]["median_ms"]) == 2.0
    assert float(table["cpp/a.cpp"]["min_ms"]) == 1.0
    # A kernel that failed in one round still counts with the samples of the rounds where it ran.
    assert table["cpp/b.cpp"]["status"] == "ok" and table["cpp/b.cpp"]["n"] == "1"
    samples = json.loads((tmp_path / "out" / "kernel_samples.json").read_text())
    assert samples["cpp/a.cpp"] == [1.0, 1.0, 1.0, 3.0, 3.0, 3.0]
    assert [r.status for r in rows] == ["ok", "ok"]
    seed = _table_by_name(tmp_path / "out" / "kernels_seed.csv")
    assert seed["cpp_fused_a_0_x0_r0"]["ms_per_call"] == "2"


def test_a_kernel_that_failed_in_every_round_is_a_failure_row_naming_why(tmp_path):
    first = _round(tmp_path / "1", {"cpp/a.cpp": [1.0]}, {"cpp/b.cpp": "timed out after 300s"})
    second = _round(tmp_path / "2", {"cpp/a.cpp": [1.0]}, {"cpp/b.cpp": "worker crashed (SIGSEGV)"})

    merge_rounds([first, second], tmp_path / "out")

    failed = _table(tmp_path / "out" / "kernels.csv")["cpp/b.cpp"]
    assert failed["status"] == "fail"
    assert failed["error"] == "timed out after 300s; worker crashed (SIGSEGV)"


def test_a_missing_round_is_a_one_line_error(tmp_path):
    with pytest.raises(UserError, match="not a kernel-runner output"):
        merge_rounds([tmp_path / "nothing"], tmp_path / "out")


def _table_by_name(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return {row["kernel_name"]: row for row in csv.DictReader(handle)}
