"""The interval arithmetic under every busy/idle number, and the window it is measured over: the union of the
GPU-side ProfilerStep windows when the trace has them (TraceLens parity), else the span of all GPU events."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from analysis.traces import read_trace
from analysis.traces.analyses.timeline import gpu_timeline, measured_window, merge_intervals, union_length
from analysis.traces.reports.perf_report import generate_perf_reports


def _covered(intervals: list[tuple[int, int]]) -> int:
    """Brute force: the number of unit cells [t, t+1) some interval covers."""
    return len({t for s, e in intervals for t in range(s, e)})


def test_nested_and_overlapping_intervals_merge_into_their_union() -> None:
    # [1, 2) and [3, 4) sit inside [0, 10): a merge that compares with the previous interval's end instead of
    # the running maximum would split [3, 4) off and lose [2, 3) and [4, 9) of the union.
    intervals = [(0, 10), (1, 2), (3, 4), (9, 12), (12, 13), (20, 21), (20, 20)]
    starts = np.array([s for s, _ in intervals], dtype=np.int64)
    ends = np.array([e for _, e in intervals], dtype=np.int64)

    merged_s, merged_e = merge_intervals(starts, ends)

    assert list(zip(merged_s, merged_e, strict=True)) == [(0, 13), (20, 21)]
    assert union_length(starts, ends) == 14 == _covered(intervals)


def test_random_interval_sets_agree_with_a_brute_force_count() -> None:
    rng = random.Random(13)
    for _ in range(200):
        intervals = [(s, s + rng.randint(0, 30)) for s in (rng.randint(0, 200) for _ in range(rng.randint(1, 25)))]
        starts = np.array([s for s, _ in intervals], dtype=np.int64)
        ends = np.array([e for _, e in intervals], dtype=np.int64)
        assert union_length(starts, ends) == _covered(intervals)


def _trace_with_kernels_outside_the_step(tmp_path: Path) -> Path:
    """One GPU step [100, 200) µs; kernels [50, 80) before it, [120, 150) inside, [190, 230) across its end."""
    def kernel(name: str, ts: float, dur: float) -> dict[str, object]:
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                "args": {"device": 0, "stream": 7}}

    events = [
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7, "ts": 100,
         "dur": 100},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 90, "dur": 95},
        kernel("warmup_kernel", 50, 30), kernel("gemm_kernel", 120, 30), kernel("late_kernel", 190, 40),
    ]
    path = tmp_path / "job" / "rank_0.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def test_the_step_rule_measures_inside_the_gpu_step_and_the_span_rule_over_all_gpu_events(tmp_path: Path) -> None:
    trace = read_trace(_trace_with_kernels_outside_the_step(tmp_path))

    steps = measured_window(trace, "steps")
    span = measured_window(trace, "span")
    in_steps = gpu_timeline(trace, steps)
    over_span = gpu_timeline(trace, span)

    assert (steps.rule, steps.steps, steps.outside) == ("steps", 1, 2)
    assert span.rule == "span"
    # steps: window [100, 200): busy = [120, 150) + [190, 200) = 40 µs of 100.
    assert (in_steps.total_time, in_steps.busy_time, in_steps.idle_time) == (100_000, 40_000, 60_000)
    # span: [50, 230): busy = 30 + 30 + 40 = 100 µs of 180.
    assert (over_span.total_time, over_span.busy_time, over_span.idle_time) == (180_000, 100_000, 80_000)
    assert in_steps.percent("busy_time") == pytest.approx(40.0)
    assert over_span.percent("busy_time") == pytest.approx(100 / 1.8)
    assert gpu_timeline(trace) == over_span  # without a window: the span, as before


def test_a_trace_without_gpu_steps_falls_back_to_the_span(tmp_path: Path) -> None:
    path = _trace_with_kernels_outside_the_step(tmp_path)
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e["cat"] != "gpu_user_annotation"]
    path.write_text(json.dumps({"traceEvents": events}))

    window = measured_window(read_trace(path), "steps")

    assert window.rule == "span" and window.starts is None


def test_the_report_says_which_window_rule_it_used(tmp_path: Path) -> None:
    base = _trace_with_kernels_outside_the_step(tmp_path).parent.parent

    generate_perf_reports(base, formats=["md", "csv"])
    default = (base / "job" / "job_perf_report.md").read_text()
    timeline = (base / "job" / "job_perf_report_csvs" / "gpu_timeline.csv").read_text()
    generate_perf_reports(base, formats=["md"], window_rule="span")
    span = (base / "job" / "job_perf_report.md").read_text()

    assert "Timeline window: union of 1 GPU-side ProfilerStep window(s)" in default
    assert "2 device activities lie partly or wholly outside" in default
    assert "busy_time,0.04," in timeline
    assert "Timeline window: span of all GPU events" in span
    assert "no host ops" in default  # this trace has no cpu_op events: every kernel is listed as unlinked
