"""A side's kernel table from its timing rounds: the round is the replicate, and a failed round keeps its place."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from analysis.kernels.results import results_from_rounds, summarize_rounds
from foundation.errors import UserError
from foundation.formats.kernel_index import IndexRow, write_index
from foundation.formats.paired_rounds import RoundRecord, Visit


def _row(path: str, name: str) -> IndexRow:
    return IndexRow(category="cpp", kernel_name=name, body_hash="h" + name, shape_key="", legacy_key=f"{name}_x0_r0",
                    path=path, calls=2, graphs="M/g", backend="cpp", source="graphs/g.py")


def _record(number: int, visits: list[tuple[str, str, list[float], str]]) -> RoundRecord:
    return RoundRecord("kernels", number, ["base", "pr"], "2025-01-01T00:00:00", 1.0,
                       visits=[Visit(s, item, 0, 0, 0.0, samples, error) for s, item, samples, error in visits])


def _table(path: Path, key: str = "path") -> dict[str, dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return {row[key]: row for row in csv.DictReader(handle)}


def test_the_median_is_over_round_medians_and_the_rest_over_all_samples() -> None:
    result = summarize_rounds(_row("cpp/a.cpp", "a"), [[1.0, 1.0, 1.0, 1.0, 100.0], [], [3.0]], gb=0.002)
    assert (result.n, result.median_ms, result.min_ms, result.status) == (6, 2.0, 1.0, "ok")
    assert result.mean_ms == pytest.approx(107 / 6) and result.gb_per_s == pytest.approx(1.0)
    failed = summarize_rounds(_row("cpp/a.cpp", "a"), [[], []], gb=None, error="worker crashed (SIGSEGV)")
    assert (failed.status, failed.n, failed.median_ms, failed.error) == ("fail", 0, None, "worker crashed (SIGSEGV)")


def test_a_sides_kernel_files_keep_one_list_per_round_and_failures_name_their_rounds(tmp_path: Path) -> None:
    organized = tmp_path / "organized"
    write_index(organized / "index.csv", [_row("cpp/a.cpp", "cpp_fused_a_0"), _row("cpp/b.cpp", "cpp_fused_b_1")])
    crashed = "worker crashed (SIGSEGV)"
    rounds = [_record(1, [("base", "cpp/a.cpp", [1.0, 1.0, 5.0], ""), ("base", "cpp/b.cpp", [], crashed),
                          ("pr", "cpp/a.cpp", [9.0], "")]),
              _record(2, [("base", "cpp/a.cpp", [], "timeout"), ("base", "cpp/b.cpp", [], crashed)]),
              _record(3, [("base", "cpp/a.cpp", [3.0, 3.0, 3.0], ""), ("base", "cpp/b.cpp", [], crashed)])]

    rows = results_from_rounds(rounds, "base", organized, tmp_path / "out")

    table = _table(tmp_path / "out" / "kernels.csv")
    assert table["cpp/a.cpp"]["status"] == "ok" and table["cpp/a.cpp"]["n"] == "6"
    assert float(table["cpp/a.cpp"]["median_ms"]) == 2.0  # the median of the round medians 1 and 3
    assert table["cpp/b.cpp"]["status"] == "fail"
    assert table["cpp/b.cpp"]["error"] == f"round 1: {crashed}; round 2: {crashed}; round 3: {crashed}"
    samples = json.loads((tmp_path / "out" / "kernel_samples.json").read_text())
    assert samples == {"cpp/a.cpp": [[1.0, 1.0, 5.0], [], [3.0, 3.0, 3.0]]}  # round 2 failed: in place, empty
    assert [r.status for r in rows] == ["ok", "fail"]
    seed = _table(tmp_path / "out" / "kernels_seed.csv", key="kernel_name")
    assert seed["cpp_fused_a_0_x0_r0"]["ms_per_call"] == "2"


def test_a_kernel_no_round_timed_is_a_failure_row(tmp_path: Path) -> None:
    write_index(tmp_path / "index.csv", [_row("cpp/a.cpp", "cpp_fused_a_0")])
    results_from_rounds([_record(1, [])], "base", tmp_path, tmp_path)
    assert _table(tmp_path / "kernels.csv")["cpp/a.cpp"]["error"] == "not timed in any round"


def test_a_missing_index_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"index.csv: not an organized index"):
        results_from_rounds([], "base", tmp_path / "nothing", tmp_path / "out")


# --- files a resumed comparison reads back: truncated or of the wrong shape ---


def test_a_truncated_round_file_is_one_line_naming_it(tmp_path: Path) -> None:
    from foundation.formats.paired_rounds import read_rounds, round_file, write_round

    path = round_file(tmp_path, 1)
    write_round(path, _record(1, [("base", "cpp/a.cpp", [1.0, 2.0], "")]))
    path.write_text(path.read_text()[:-40])

    with pytest.raises(UserError) as err:
        read_rounds([path])

    assert str(err.value) == (f"{path}: truncated JSON (the file ends in the middle of a value); expected a round "
                              "record")


@pytest.mark.parametrize(("change", "detail"), [
    (lambda r: r.update(round="1"), "round record, round: expected a whole number ≥ 1, found '1'"),
    (lambda r: r["visits"][0].update(samples=["1.0"]),
     "round record, visits[0].samples[0]: expected milliseconds ≥ 0, found '1.0'"),
    (lambda r: r["visits"][0].update(samples=[-1.0]),
     "round record, visits[0].samples[0]: expected milliseconds ≥ 0, found -1.0"),
    (lambda r: r["visits"][0].update(side="left"), "round record, visits[0].side: expected base or pr, found 'left'"),
    (lambda r: r.update(visits={}), "round record, visits: expected a list, found an object"),
], ids=["round-text", "sample-text", "sample-negative", "side-unknown", "visits-object"])
def test_a_round_file_of_the_wrong_shape_names_the_field(tmp_path: Path, change: object, detail: str) -> None:
    from foundation.formats.paired_rounds import read_round

    record = {"kind": "kernels", "round": 1, "sides": ["base"], "started_at": "", "wall_s": 1.0, "workers": {},
              "visits": [{"side": "base", "item": "cpp/a.cpp", "block": 0, "position": 0, "started_s": 0.0,
                          "samples": [1.0], "error": ""}]}
    change(record)  # type: ignore[operator]
    path = tmp_path / "round-001.json"
    path.write_text(json.dumps(record))

    with pytest.raises(UserError) as err:
        read_round(path)

    assert str(err.value) == f"{path}: {detail}"


@pytest.mark.parametrize(("content", "detail"), [
    ('{"cpp/a.cpp": [[1.0, 2.0], [1.', "truncated JSON (the file ends in the middle of a value); expected per-round "
                                       "samples {item: [[ms of round 1], ...]}"),
    ('{"cpp/a.cpp": [[1.0, 2.0], [NaN]]}', "'cpp/a.cpp' round 2[0]: expected milliseconds ≥ 0, found nan"),
    ('{"cpp/a.cpp": [[1.0, 2.0], [Infinity]]}', "'cpp/a.cpp' round 2[0]: expected milliseconds ≥ 0, found inf"),
    ('{"cpp/a.cpp": "fast"}', "'cpp/a.cpp': expected a list, found 'fast'"),
    ("[]", "expected an object mapping items to lists of rounds of milliseconds"),
], ids=["truncated", "nan", "inf", "text", "list"])
def test_kernel_samples_json_that_is_truncated_or_malformed_is_one_line(tmp_path: Path, content: str,
                                                                        detail: str) -> None:
    from foundation.formats.paired_rounds import read_round_samples

    path = tmp_path / "kernel_samples.json"
    path.write_text(content)

    with pytest.raises(UserError) as err:
        read_round_samples(path)

    assert str(err.value) == f"{path}: {detail}"
