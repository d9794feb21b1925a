"""Reading real Kineto traces: the GPU timeline agrees with TraceLens' interval-union definitions, ROCm
specifics are handled, and broken files give one-line errors."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from analysis.traces import read_trace
from analysis.traces.analyses.breakdown import category_table, kernels_per_step, top_kernels
from analysis.traces.analyses.kernel_totals import kernel_categories
from analysis.traces.analyses.launch import analyze_launches, launch_delays, sync_table
from analysis.traces.analyses.timeline import gpu_timeline
from analysis.traces.readers import fast_io, kineto
from foundation.errors import UserError
from tests.support import interval_support as intervals

FIXTURES = Path(__file__).parent / "fixtures" / "traces"


@pytest.fixture(autouse=True, params=["fast", "stdlib"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs with the fast decoder and gzip reader (when installed) and with the standard library."""
    if request.param == "stdlib":
        monkeypatch.setenv(fast_io.STDLIB_ENV, "stdlib")
    else:
        monkeypatch.delenv(fast_io.STDLIB_ENV, raising=False)
        if fast_io.json_decoder()[1] is None:
            pytest.skip("no fast JSON decoder installed (pip install prbench[fast])")
    return str(request.param)
H100 = FIXTURES / "h100_bert-small-uncased.json.gz"
MI300 = FIXTURES / "mi300_bert-small-uncased.json.gz"
CPU = FIXTURES / "cpu_tiny_bert_inductor.json.gz"
MULTIRANK = FIXTURES / "multirank" / "sampled_rank-0.json.gz"


def _expected_timeline(path: Path) -> dict[str, float]:
    """Straight from the raw JSON, in µs: the TraceLens definitions, each set difference cut out interval by
    interval (tests/support/interval_support), not as the timeline's differences of unions."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X"]

    def spans(keep: Callable[[dict[str, Any]], bool]) -> list[tuple[float, float]]:
        return [(e["ts"], e["ts"] + e["dur"]) for e in gpu if keep(e)]

    def is_comm(e: dict[str, Any]) -> bool:
        return e["cat"] != "gpu_memcpy" and ("nccl" in e["name"].lower() or "rccl" in e["name"].lower())

    every = spans(lambda e: True)
    comp = spans(lambda e: e["cat"] != "gpu_memcpy" and not is_comm(e))
    comm = spans(is_comm)
    memcpy = spans(lambda e: e["cat"] == "gpu_memcpy")
    total = max(e for _, e in every) - min(s for s, _ in every)
    busy = intervals.union(every)
    return {"busy": 100 * busy / total, "idle": 100 * (total - busy) / total,
            "computation": 100 * intervals.union(comp) / total, "total_ms": total / 1e3,
            "exposed_comm_ms": intervals.minus(comm, comp) / 1e3,
            "exposed_memcpy_ms": intervals.minus(memcpy, comp + comm) / 1e3}


@pytest.mark.parametrize("path", [H100, MI300, MULTIRANK], ids=["h100", "mi300x", "nccl-rank0"])
def test_busy_idle_and_computation_agree_with_the_tracelens_definitions(path: Path) -> None:
    expected = _expected_timeline(path)

    timeline = gpu_timeline(read_trace(path))

    assert timeline.percent("busy_time") == pytest.approx(expected["busy"], abs=1e-4)
    assert timeline.percent("idle_time") == pytest.approx(expected["idle"], abs=1e-4)
    assert timeline.percent("computation_time") == pytest.approx(expected["computation"], abs=1e-4)
    assert timeline.total_time / 1e6 == pytest.approx(expected["total_ms"], abs=1e-6)
    # The exposed parts, each against its own subtraction (their sum with idle equals total by construction, so
    # the TraceLens identity alone would not catch a wrong one).
    assert timeline.exposed_comm_time / 1e6 == pytest.approx(expected["exposed_comm_ms"], abs=1e-6)
    assert timeline.exposed_memcpy_time / 1e6 == pytest.approx(expected["exposed_memcpy_ms"], abs=1e-6)


def test_the_nccl_trace_has_overlapping_communication_and_copies_to_expose() -> None:
    """The multi-rank fixture is what makes the exposed-time checks above bite: communication that overlaps
    computation only partly, and copies under both."""
    expected = _expected_timeline(MULTIRANK)

    assert 0 < expected["exposed_comm_ms"] < gpu_timeline(read_trace(MULTIRANK)).total_comm_time / 1e6
    assert 0 < expected["exposed_memcpy_ms"] < gpu_timeline(read_trace(MULTIRANK)).total_memcpy_time / 1e6


def test_the_mi300x_trace_is_read_as_rocm_with_stream_0_kernels_linked_to_their_launches() -> None:
    trace = read_trace(MI300)

    assert trace.platform == "rocm"
    assert trace.device_names == ["AMD Instinct MI300X VF"]
    assert set(trace.stream.tolist()) == {0}
    assert set(trace.device.tolist()) == {2}  # the GPU pid, not deviceProperties.id (0)
    # hipLaunchKernel and hipExtModuleLaunchKernel both link by correlation: every activity has a launch.
    assert launch_delays(trace).size == trace.n_events == 61
    steps = kernels_per_step(trace)
    assert steps["step"].tolist() == ["ProfilerStep#6"]
    assert steps["kernels"].tolist() == [60]
    assert sync_table(trace)["name"].tolist() == ["hipDeviceSynchronize"]


def test_gemm_and_attention_categories_cover_both_vendors_naming() -> None:
    h100 = category_table(read_trace(H100)).set_index("category")
    mi300 = category_table(read_trace(MI300)).set_index("category")

    # cutlass / sm90_xmma / Cijk_ GEMMs: 26 launches on both; flash_fwd_kernel and Triton attn_fwd: 4.
    assert h100.loc["GEMM", "count"] == mi300.loc["GEMM", "count"] == 26
    assert h100.loc["attention", "count"] == mi300.loc["attention", "count"] == 4
    assert h100.loc["normalization", "count"] == 10
    assert h100["percent"].sum() == pytest.approx(100.0)


def test_top_kernels_have_a_monotone_cumulative_percent_ending_at_100() -> None:
    table = top_kernels(read_trace(H100), n=None)

    cumulative = table["cumulative percent"].tolist()
    assert cumulative == sorted(cumulative)
    assert cumulative[-1] == pytest.approx(100.0)
    assert table["total ms"].is_monotonic_decreasing


def test_small_read_buffers_give_the_same_trace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.decompress(MI300.read_bytes()))
    reference = read_trace(plain)

    monkeypatch.setattr(kineto, "_CHUNK_CHARS", 997)  # every event and number straddles a refill
    again = read_trace(plain)

    assert again.start_ns.tolist() == reference.start_ns.tolist()
    assert again.dur_ns.tolist() == reference.dur_ns.tolist()
    assert again.rt_correlation.tolist() == reference.rt_correlation.tolist()
    assert again.steps == reference.steps


@pytest.mark.parametrize("runs", ["regular", "irregular"])
def test_a_trace_repeating_long_kernel_names_is_read_without_a_copy_of_each_name_per_event(
        runs: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Templated kernel names run to hundreds of characters and every step repeats them: holding the copy decoded
    # with each event would cost the names' share of the file again.
    kernels = [f"void gemm_kernel_{i}<{'float, ' * 500}>" for i in range(4)]
    cpp_kernels = [f"cpp_fused_{i}_{'add_' * 1000}" for i in range(4)]
    n = 2000
    events = [{"ph": "X", "cat": "kernel", "name": kernels[i % 4], "ts": 10 * i, "dur": 5,
               "args": {"device": 0, "stream": 7, "correlation": i}} for i in range(n)]
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 10 * i, "dur": 1, "tid": 1,
                "args": {"correlation": i}} for i in range(n)]
    events += [{"ph": "X", "cat": "cpu_op", "name": cpp_kernels[i % 4], "ts": 10 * i, "dur": 2, "tid": 2}
               for i in range(n)]
    if runs == "irregular":  # an event with a list for its category sends its run to the one-by-one reading
        odd = {"cat": ["other"]}
        events = [x for i, e in enumerate(events) for x in ((e, odd) if i % 16 == 0 else (e,))]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    names_bytes = sum(len(e.get("name", "")) for e in events)
    assert names_bytes > 15e6
    monkeypatch.setattr(kineto, "_CHUNK_CHARS", 64 * 1024)  # the read buffer then holds little of the file

    tracemalloc.start()
    try:
        trace = read_trace(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert trace.n_events == n and sorted(trace.names[i] for i in set(trace.name_id.tolist())) == sorted(kernels)
    assert peak < names_bytes / 3


def test_a_cpu_profile_of_a_compiled_model_gives_a_per_kernel_table_of_cpp_kernels() -> None:
    trace = read_trace(CPU)

    kernels = top_kernels(trace, n=None)
    cpp = kernels[kernels["category"] == "cpp"]
    assert trace.platform == "cpu"
    assert len(cpp) >= 3 and all("cpp_fused_" in name for name in cpp["name"])
    assert "GEMM" in set(kernels["category"])  # the extern aten::addmm calls of the compiled graph
    assert analyze_launches(trace).verdict.label == "CPU profile"
    assert kernels_per_step(trace)["kernels"].tolist() == [25, 25, 25]


def test_a_corrupt_gzip_is_a_one_line_error_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json.gz"
    data = H100.read_bytes()
    bad.write_bytes(data[:20] + bytes(b ^ 0x5A for b in data[20:400]) + data[400:])

    with pytest.raises(UserError) as err:
        read_trace(bad)

    assert str(bad) in str(err.value) and "\n" not in str(err.value)


def test_a_truncated_json_is_a_one_line_error(tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_bytes(gzip.decompress(H100.read_bytes())[:300_000])

    with pytest.raises(UserError, match="truncated JSON") as err:
        read_trace(cut)

    assert str(cut) in str(err.value)


def test_a_truncated_gzip_is_a_one_line_error(tmp_path: Path) -> None:
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(H100.read_bytes()[:30_000])

    with pytest.raises(UserError, match="truncated"):
        read_trace(cut)


def test_non_utf8_bytes_are_a_one_line_error(tmp_path: Path) -> None:
    latin = tmp_path / "latin1.json"
    latin.write_bytes(b'{"traceEvents": [{"name": "caf\xe9", "cat": "kernel"}]}')

    with pytest.raises(UserError, match="not UTF-8") as err:
        read_trace(latin)

    assert str(latin) in str(err.value)


def test_a_json_without_trace_events_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"schemaVersion": 1}')

    with pytest.raises(UserError, match="traceEvents"):
        read_trace(other)


def test_a_json_gz_name_on_plain_text_is_read_by_content(tmp_path: Path) -> None:
    misnamed = tmp_path / "trace.json.gz"
    misnamed.write_bytes(gzip.decompress(H100.read_bytes()))

    assert read_trace(misnamed).n_events == read_trace(H100).n_events == 61


# --- malformed events: the reader names the event and what it expected, never a traceback or a wrong timeline ---


def _kernel(**fields: object) -> dict[str, object]:
    return {"ph": "X", "cat": "kernel", "name": "triton_poi_fused_add_0", "ts": 100.0, "dur": 5.0, **fields}


def _write_events(path: Path, events: list[object]) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("ts", "100", "traceEvents[1] 'ts': expected a finite time in µs, found '100'"),
    ("dur", "5", "traceEvents[1] 'dur': expected a finite duration ≥ 0 in µs, found '5'"),
    ("dur", -5.0, "traceEvents[1] 'dur': expected a finite duration ≥ 0 in µs, found -5.0"),
    ("ts", True, "traceEvents[1] 'ts': expected a finite time in µs, found boolean true"),
    ("name", 7, "traceEvents[1] 'name': expected text, found 7"),
    ("args", [1], "traceEvents[1] 'args': expected an object, found a list"),
], ids=["text-ts", "text-dur", "negative-dur", "bool-ts", "int-name", "list-args"])
def test_a_kernel_event_with_a_bad_field_is_one_line_naming_the_event(tmp_path: Path, field: str, value: object,
                                                                       expected: str) -> None:
    trace = _write_events(tmp_path / "t.json", [_kernel(), _kernel(**{field: value})])

    with pytest.raises(UserError) as err:
        read_trace(trace)

    assert str(err.value) == f"{trace}: {expected}"


def test_nan_and_infinite_durations_are_refused_not_read_as_a_busy_gpu(tmp_path: Path) -> None:
    for literal in ("NaN", "Infinity"):
        trace = tmp_path / f"{literal}.json"
        # json.dumps writes float("nan") as the NaN literal the json module (and Kineto's consumers) accept.
        trace.write_text(json.dumps({"traceEvents": [_kernel(dur=float(literal.replace("inity", "")))]}))

        with pytest.raises(UserError, match=r"traceEvents\[0\] 'dur': expected a finite duration") as err:
            read_trace(trace)

        assert str(trace) in str(err.value) and "\n" not in str(err.value)


def test_an_empty_trace_is_refused_instead_of_a_gpu_bound_report(tmp_path: Path) -> None:
    trace = _write_events(tmp_path / "empty.json", [])

    with pytest.raises(UserError, match="contains no GPU kernel events") as err:
        read_trace(trace)

    assert str(err.value).startswith(f"{trace}: ")


def test_a_trace_whose_kernels_all_take_no_time_is_refused(tmp_path: Path) -> None:
    trace = _write_events(tmp_path / "zero.json", [_kernel(dur=0), _kernel(ts=200.0, dur=0)])

    with pytest.raises(UserError, match=r"no GPU kernel events with a duration \(2 device events"):
        read_trace(trace)


def test_an_entry_of_trace_events_that_is_not_an_object_is_named(tmp_path: Path) -> None:
    trace = _write_events(tmp_path / "t.json", [_kernel(), 42])

    with pytest.raises(UserError, match=r"traceEvents\[1\]: expected an event object, found 42"):
        read_trace(trace)


def test_events_the_analyses_do_not_use_are_not_judged(tmp_path: Path) -> None:
    # A list as category, a text timestamp on a python_function event: neither is a device activity.
    trace = _write_events(tmp_path / "t.json", [_kernel(), {"ph": "X", "cat": ["odd"], "ts": "x"},
                                                {"ph": "X", "cat": "python_function", "name": "f", "ts": "x"}])

    assert read_trace(trace).n_events == 1


def test_a_timeline_that_spans_no_time_is_not_called_gpu_bound() -> None:
    from analysis.traces.model import TraceBuilder

    builder = TraceBuilder(Path("synthetic.json"), "kineto")
    builder.add_event("k", 100, 0)
    trace = builder.build()

    verdict = analyze_launches(trace).verdict
    assert verdict.label == "no timeline"


@pytest.mark.integration  # a fresh interpreter: this one has imported numpy and pandas long ago
def test_reading_a_trace_its_timeline_and_kernel_totals_load_neither_numpy_nor_pandas() -> None:
    # The parse-limit benchmark's path: near 10 MB, the imports of numpy and pandas alone took twice the time of
    # decompressing and parsing the whole file.
    code = ("import sys\n"
            "from analysis.traces import read_trace\n"
            "from analysis.traces.analyses.kernel_totals import kernel_categories\n"
            "from analysis.traces.analyses.timeline import gpu_timeline\n"
            f"trace = read_trace({str(MULTIRANK)!r})\n"
            "gpu_timeline(trace), kernel_categories(trace)\n"
            "print(sorted({'numpy', 'pandas'} & sys.modules.keys()))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[1])

    assert proc.stdout.strip() == "[]"


def test_the_category_table_tabulates_the_lean_kernel_totals() -> None:
    trace = read_trace(MULTIRANK)

    table = category_table(trace)
    totals = {c.category: (c.count, c.time / 1e6) for c in kernel_categories(trace)}

    assert len(table) == len(totals) > 3
    for row in table.itertuples():
        assert totals[row.category] == (row.count, pytest.approx(row._3))  # "time ms"
