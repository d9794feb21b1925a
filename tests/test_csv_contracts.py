"""Each CSV contract round-trips: what its one writer writes, its reader reads back, under its one column list."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from analysis.kernels.compare import read_kernels_csv
from analysis.kernels.results import KERNEL_COLUMNS, NUMERIC_KERNEL_COLUMNS, summarize_rounds, write_results
from analysis.models.compare import read_suite_frame
from analysis.stats.noise_rules import iterations_are_noisy, rounds_are_noisy
from foundation.formats.dynamo_csv import SUITE_COLUMNS, TEXT_COLUMNS, read_suite_csv, write_suite_csv
from foundation.formats.kernel_index import INDEX_COLUMNS, IndexRow, read_index, write_index


def _header(path: Path) -> tuple[str, ...]:
    with path.open(newline="", encoding="utf-8") as fh:
        return tuple(next(csv.reader(fh)))


def _index_rows() -> list[IndexRow]:
    return [IndexRow("triton_poi", "triton_poi_fused_add_0", "1e10", "s8", "triton_poi_fused_add_0_x8_r0",
                     "triton_poi/triton_poi_fused_add_0.py", 3, "BertForMaskedLM/graph_0", "triton", "ab/c.py"),
            IndexRow("cpp", "cpp_fused_mul_1", "beef", "s4", "cpp_fused_mul_1_x4_r0", "cpp/cpp_fused_mul_1.py", 1,
                     "T5Small/graph_1;BertForMaskedLM/graph_0", "cpp", "graphs/w.py")]


def test_suite_csv_round_trips(tmp_path: Path) -> None:
    row = dict.fromkeys(SUITE_COLUMNS, "")
    row.update(dev="cpu", name="T5Small", batch_size="2", speedup="1.250000", abs_latency="4.000000",
               compilation_latency="12.500000", mode="inference", dtype="float32", size="tiny",
               flags="noisy_eager", status="ok", n="30", warmup="10")
    failed = dict(row, name="BertForMaskedLM", speedup="", status="fail", error="RuntimeError: boom")
    path = tmp_path / "suite.csv"
    write_suite_csv(path, [row, failed])
    assert _header(path) == SUITE_COLUMNS
    assert read_suite_csv(path) == [row, failed]
    frame = read_suite_frame(path)
    assert list(frame.columns) == list(SUITE_COLUMNS)
    assert frame["name"].tolist() == ["T5Small", "BertForMaskedLM"]
    assert frame.loc[0, "speedup"] == 1.25 and math.isnan(frame.loc[1, "speedup"])
    assert all(isinstance(cell, str) for c in TEXT_COLUMNS for cell in frame[c])


def test_index_csv_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "index.csv"
    write_index(path, _index_rows())
    assert _header(path) == INDEX_COLUMNS
    assert read_index(path) == _index_rows()


def test_kernels_csv_round_trips(tmp_path: Path) -> None:
    first, second = _index_rows()
    rows = [summarize_rounds(first, [[1.0, 1.2], [1.1, 1.3]], gb=0.5),
            summarize_rounds(second, [[], []], gb=None, error="round 1: crashed; round 2: crashed")]
    write_results(tmp_path, rows, {first.path: [[1.0, 1.2], [1.1, 1.3]]})
    assert _header(tmp_path / "kernels.csv") == KERNEL_COLUMNS
    frame = read_kernels_csv(tmp_path / "kernels.csv")
    assert frame["body_hash"].tolist() == ["1e10", "beef"]  # identity stays text
    assert frame["status"].tolist() == ["ok", "fail"] and frame.loc[1, "error"].startswith("round 1: crashed")
    ok = rows[0]
    assert frame.loc[0, "n"] == ok.n == 4 and frame.loc[0, "calls"] == 3
    assert math.isclose(frame.loc[0, "median_ms"], ok.median_ms or 0, rel_tol=1e-5)
    assert all(frame[c].dtype.kind == "f" or frame[c].dtype.kind == "i" for c in NUMERIC_KERNEL_COLUMNS)


def test_the_two_noise_rules_are_what_their_names_say() -> None:
    assert iterations_are_noisy(mean_ms=10.0, std_ms=1.01) and not iterations_are_noisy(10.0, 1.0)
    assert not iterations_are_noisy(0.0, 1.0)
    assert rounds_are_noisy(0.10) and not rounds_are_noisy(0.099) and not rounds_are_noisy(math.nan)
