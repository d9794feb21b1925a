"""An event the report uses with no ``dur`` (or no ``ts``) is never read as 0: on the real H100 trace with one
kernel's duration removed, perf-report and trace-diff fail with one line naming the event and the count; with
``--lenient`` they leave it out and say so in the report."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from analysis.traces import read_trace
from foundation.errors import UserError
from tests.support.cli_support import invoke_in_process

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
H100 = FIXTURES / "h100_bert-small-uncased.json.gz"
ROOT = Path(__file__).resolve().parents[1]


def _without(path: Path, out: Path, key: str, cat: str = "kernel") -> tuple[Path, int]:
    """The trace with ``key`` removed from its first event of category ``cat``; that event's index."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    index = next(i for i, ev in enumerate(doc["traceEvents"]) if ev.get("cat") == cat)
    del doc["traceEvents"][index][key]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out, index


def test_a_kernel_without_dur_fails_the_report_with_one_line_naming_it(tmp_path: Path) -> None:
    trace, index = _without(H100, tmp_path / "run" / "h100.json.gz", "dur")

    done = invoke_in_process("-r", str(ROOT), "perf-report", "-b", str(trace.parent), "--format", "md")

    assert done.returncode != 0
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith(f"error: {trace}: traceEvents[{index}] (kernel ")
    assert "has no 'dur'; 1 event(s) the report uses lack 'ts' or 'dur'" in line and "--lenient" in line
    assert not (trace.parent / "run_perf_report.md").exists()


def test_with_lenient_the_kernel_is_left_out_and_the_report_says_so(tmp_path: Path) -> None:
    trace, index = _without(H100, tmp_path / "run" / "h100.json.gz", "dur")

    done = invoke_in_process("-r", str(ROOT), "perf-report", "-b", str(trace.parent), "--format", "md",
                             "--lenient")

    assert done.returncode == 0, done.stderr
    markdown = (trace.parent / "run_perf_report.md").read_text()
    # The note reaches the report as text: its brackets escaped, so a trace's names cannot make a link.
    assert f"1 event(s) left out for a missing or malformed 'ts'/'dur' (read with --lenient; first: " \
           f"traceEvents\\[{index}\\] (kernel " in markdown
    assert read_trace(trace, lenient=True).n_events == read_trace(H100).n_events - 1


@pytest.mark.parametrize(("key", "cat"), [("ts", "kernel"), ("dur", "cpu_op"), ("dur", "cuda_runtime")])
def test_every_event_kind_the_tables_use_is_checked(tmp_path: Path, key: str, cat: str) -> None:
    trace, index = _without(H100, tmp_path / f"{cat}.json.gz", key, cat)

    with pytest.raises(UserError, match=rf"traceEvents\[{index}\] \({cat} .*has no '{key}'"):
        read_trace(trace)


def test_a_malformed_dur_is_left_out_with_lenient_instead_of_failing(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(H100.read_bytes()))
    index = next(i for i, ev in enumerate(doc["traceEvents"]) if ev.get("cat") == "kernel")
    doc["traceEvents"][index]["dur"] = "5"
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(doc))

    with pytest.raises(UserError, match=rf"traceEvents\[{index}\] 'dur': expected a finite duration"):
        read_trace(trace)
    lenient = read_trace(trace, lenient=True)
    assert lenient.skipped.count == 1 and "malformed 'dur'" in lenient.skipped.first



def test_trace_diff_refuses_a_trace_with_a_kernel_without_dur_unless_lenient(tmp_path: Path) -> None:
    trace, _ = _without(H100, tmp_path / "pr.json.gz", "dur")

    strict = invoke_in_process("-r", str(ROOT), "trace-diff", str(H100), str(trace))
    lenient = invoke_in_process("-r", str(ROOT), "trace-diff", str(H100), str(trace), "--lenient")

    assert strict.returncode != 0 and "has no 'dur'" in strict.stderr
    assert lenient.returncode == 0, lenient.stderr
    assert "left out for a missing or malformed 'ts'/'dur'" in lenient.stdout
