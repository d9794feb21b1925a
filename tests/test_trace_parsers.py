"""The fast path (orjson or msgspec decoding runs of events, isal or zlib-ng for gzip) reads every trace exactly as
the standard library does, including the layouts where a run of events cannot be cut at ``},``."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_readers import DELETE, dumps, mutated, odd_numbers  # the fuzzers' mutations and odd values

from analysis.traces import read_trace
from analysis.traces.model import EventColumns, TraceData
from analysis.traces.readers import fast_io, kineto
from foundation.errors import UserError

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
KINETO = [FIXTURES / "h100_bert-small-uncased.json.gz", FIXTURES / "mi300_bert-small-uncased.json.gz",
          FIXTURES / "mi250_minitoy_train_rocm6.2.json.gz", FIXTURES / "cpu_tiny_bert_inductor.json.gz",
          FIXTURES / "multirank" / "sampled_rank-0.json.gz"]


@pytest.fixture(autouse=True)
def fast_libraries() -> None:
    if fast_io.json_decoder()[1] is None or fast_io.gzip_opener()[0] == "gzip":
        pytest.skip("the fast libraries are not installed (pip install prbench[fast])")


def _read(path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> TraceData:
    with monkeypatch.context() as m:
        if mode == "stdlib":
            m.setenv(fast_io.STDLIB_ENV, "stdlib")
        else:
            m.delenv(fast_io.STDLIB_ENV, raising=False)
        return read_trace(path)


def _errors_both_ways(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The one-line errors of reading ``path`` with the fast libraries, then with the standard library."""
    errors = []
    for mode in ("fast", "stdlib"):
        with pytest.raises(UserError) as err:
            _read(path, monkeypatch, mode)
        errors.append(str(err.value))
    return errors


def _same(a: TraceData, b: TraceData) -> None:
    for column in ("start_ns", "dur_ns", "kind", "device", "stream", "correlation", "rt_start_ns", "rt_dur_ns",
                   "rt_correlation", "event_op", "event_graph"):
        assert np.array_equal(getattr(a, column), getattr(b, column)), column
    assert a.event_names().tolist() == b.event_names().tolist()
    assert a.steps == b.steps and a.metadata == b.metadata and a.device_names == b.device_names
    assert [a.names[i] for i in a.ops.name_id] == [b.names[i] for i in b.ops.name_id]
    assert a.ops.shapes == b.ops.shapes and np.array_equal(a.ops.shape_id, b.ops.shape_id)


def test_the_machine_reports_which_libraries_it_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    assert fast_io.describe() in {"orjson + isal", "orjson + zlib-ng", "msgspec + isal", "msgspec + zlib-ng"}
    monkeypatch.setenv(fast_io.STDLIB_ENV, "stdlib")
    assert fast_io.describe() == "json + gzip"


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name.split(".")[0])
def test_every_real_trace_reads_the_same_with_both_parsers(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _same(_read(path, monkeypatch, "fast"), _read(path, monkeypatch, "stdlib"))


def test_pretty_minified_and_nested_object_lists_read_the_same(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Kineto's own indented layout, a minified file, and args holding lists of objects (where ``},`` also
    occurs inside an event, so a run cut there fails to decode and is read one event at a time)."""
    doc = json.loads(gzip.decompress((FIXTURES / "h100_bert-small-uncased.json.gz").read_bytes()))
    for i, ev in enumerate(doc["traceEvents"]):
        if i % 7 == 0:
            ev.setdefault("args", {})["nested"] = [{"a": 1}, {"b": [{"c": 2}, {"d": 3}]}]
    layouts = {"pretty.json": json.dumps(doc, indent=2), "minified.json": json.dumps(doc, separators=(",", ":"))}
    reference = read_trace(FIXTURES / "h100_bert-small-uncased.json.gz")
    for name, text in layouts.items():
        (tmp_path / name).write_text(text)
        for chunk in (997, 64 * 1024):  # runs cut short by the buffer, and long runs
            monkeypatch.setattr(kineto, "_CHUNK_CHARS", chunk)
            _same(_read(tmp_path / name, monkeypatch, "fast"), reference)


def test_values_only_the_standard_library_decodes_fall_back_to_it(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An integer beyond 64 bits (orjson refuses it) in an unused field, then a NaN duration: the run falls back
    to one event at a time, the big integer is read as before and the NaN is named as before."""
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "ts": 100.0, "dur": 5.0, "args": {"big": 2**70}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [kernel, dict(kernel, ts=200.0)]}))
    assert _read(path, monkeypatch, "fast").dur_ns.tolist() == [5000, 5000]
    path.write_text(json.dumps({"traceEvents": [kernel, kernel, dict(kernel, dur=float("nan")), kernel]}))

    messages = _errors_both_ways(path, monkeypatch)

    assert messages[0] == messages[1] == (f"{path}: traceEvents[2] 'dur': expected a finite duration ≥ 0 in µs, "
                                          "found nan")


def test_a_corrupt_gzip_read_by_isal_or_zlib_ng_is_one_line(tmp_path: Path) -> None:
    data = (FIXTURES / "h100_bert-small-uncased.json.gz").read_bytes()
    bad = tmp_path / "broken.json.gz"
    bad.write_bytes(data[:20] + bytes(b ^ 0x5A for b in data[20:400]) + data[400:])

    with pytest.raises(UserError) as err:
        read_trace(bad)

    assert str(err.value).startswith(f"{bad}: ") and "\n" not in str(err.value)


@pytest.mark.parametrize("value", ["18446744073709551616", "NaN"], ids=["beyond-64-bits", "nan"])
def test_a_rocprofv3_json_value_the_fast_decoder_refuses_is_named_as_the_standard_library_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    trace = tmp_path / "results.json"
    trace.write_text('{"rocprofiler-sdk-tool": [{"buffer_records": {"kernel_dispatch": ['
                     f'{{"start_timestamp": 10, "end_timestamp": 20}}, {{"start_timestamp": {value}, '
                     '"end_timestamp": 30}]}}]}')
    errors = _errors_both_ways(trace, monkeypatch)

    # orjson reads an integer beyond 64 bits as the nearest float, json keeps it whole: the value shown differs
    where = f"{trace}: rocprofiler-sdk-tool[0].buffer_records.kernel_dispatch[1].start_timestamp: expected a time"
    assert errors[0].startswith(where) and errors[1].startswith(where)


def test_a_broken_rocprofv3_json_gets_the_standard_librarys_words_from_the_fast_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "results.json"
    trace.write_text('{"rocprofiler-sdk-tool": [{"agents": [}]}')
    errors = _errors_both_ways(trace, monkeypatch)

    assert errors[0] == errors[1] == f"{trace}: invalid JSON (Expecting value)"


def test_msgspec_decodes_runs_when_orjson_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("msgspec")
    real = fast_io._module
    monkeypatch.setattr(fast_io, "_module", lambda name: None if name == "orjson" else real(name))
    assert fast_io.json_decoder()[0] == "msgspec"

    _same(read_trace(KINETO[1]), _read(KINETO[1], monkeypatch, "stdlib"))


# --- column-wise runs against one event at a time -------------------------------------------------------------
# The reader hands events to the collector in runs and reads a regular run column by column; a run with anything
# irregular is read one event at a time (which words every error). Both must keep exactly the same trace.

def _snapshot(trace: TraceData) -> dict[str, Any]:
    """Every field of a trace and its op attribution, as plain values (columns with their type)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(trace):
        value = getattr(trace, f.name)
        if isinstance(value, EventColumns):
            out.update({c.name: (getattr(value, c.name).typecode, getattr(value, c.name).tolist())
                        for c in dataclasses.fields(value)})
        elif f.name != "link_ops":  # how the attribution is made (a function): what it makes is compared below
            out[f.name] = value
    ops = trace.ops
    out["ops"] = (ops.name_id.tolist(), ops.shape_id.tolist(), ops.shapes, ops.dur_ns.tolist())
    out.update({name: (column.dtype.str, column.tolist())
                for name, column in (("event_op", trace.event_op), ("event_graph", trace.event_graph))})
    return out


def _outcome(path: Path, one_at_a_time: bool) -> dict[str, Any] | str:
    """The trace read from ``path``, or the one-line error it gives."""
    with pytest.MonkeyPatch.context() as m:
        if one_at_a_time:
            m.setattr(kineto._Collector, "_run_columns", lambda self, events, first, nan_free: None)
        try:
            return _snapshot(read_trace(path))
        except UserError as exc:
            return str(exc)


@pytest.mark.parametrize("mode", ["fast", "stdlib"])
@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name.split(".")[0])
def test_every_real_trace_reads_the_same_column_wise_as_one_event_at_a_time(path: Path, mode: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    if mode == "stdlib":
        monkeypatch.setenv(fast_io.STDLIB_ENV, "stdlib")
    column_wise = _outcome(path, one_at_a_time=False)

    assert isinstance(column_wise, dict) and column_wise["start_ns"][1]
    assert column_wise == _outcome(path, one_at_a_time=True)


@pytest.mark.parametrize("mode", ["fast", "stdlib"])
def test_real_traces_take_the_column_wise_path_for_every_event(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The speed of the reader rests on this: no kernel, runtime call or op of a real trace is read one at a time,
    and (fast path) no run is cut inside an event, where decoding it fails (a ``},`` inside a kernel name,
    ``{lambda(long)#1}, at::…``, must not end a run)."""
    failed_runs: list[int] = []
    if mode == "stdlib":
        monkeypatch.setenv(fast_io.STDLIB_ENV, "stdlib")
    else:
        name, decode = fast_io.json_decoder()
        assert decode is not None

        def counting(text: str) -> Any:
            try:
                return decode(text)
            except ValueError:
                failed_runs.append(len(text))
                raise
        monkeypatch.setattr(fast_io, "json_decoder", lambda: (name, counting))
    one_at_a_time: list[str] = []

    def spy(handler: str) -> Any:
        real = getattr(kineto._Collector, handler)

        def counted(self: Any, *args: Any) -> Any:
            one_at_a_time.append(handler)
            return real(self, *args)
        return counted
    for handler in ("_device", "_runtime", "_cpu_op"):
        monkeypatch.setattr(kineto._Collector, handler, spy(handler))
    lambda_names = [p for p in KINETO if b"}, " in gzip.decompress(p.read_bytes())]
    monkeypatch.setattr(kineto, "_RUN_CHARS", 16 * 1024)  # many runs per fixture, so many cuts

    for path in KINETO:
        read_trace(path)

    assert lambda_names and one_at_a_time == [] and failed_runs == []


_shape_args = st.fixed_dictionaries(
    {"Input Dims": st.sampled_from([[[4, 8], [8, 2]], [[16, 16], [16, 16]], [[2048], []]]),
     "Input type": st.sampled_from([["float", "float"], ["c10::BFloat16", "c10::BFloat16"], ["float", "Scalar"]])},
    optional={"Concrete Inputs": st.sampled_from([["", ""], []]),
              "Input Strides": st.sampled_from([[[8, 1], [2, 1]], [[1], []]])})


def _events(cat: str, names: list[str], args: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({
        "ph": st.just("X"), "cat": st.just(cat), "name": st.sampled_from(names), "pid": st.integers(0, 3),
        "tid": st.integers(0, 2), "ts": st.one_of(st.integers(0, 5000), st.floats(0, 5000, allow_nan=False)),
        "dur": st.one_of(st.integers(0, 500), st.floats(0, 500, allow_nan=False)), "args": args})


_trace_docs = st.fixed_dictionaries({"traceEvents": st.lists(st.one_of(
    _events("kernel", ["triton_poi_fused_add_0", "Cijk_gemm", "MEMORY_COPY_DEVICE_TO_HOST", "{lambda()#1}, k"],
            st.fixed_dictionaries({"device": st.integers(0, 1), "stream": st.integers(0, 3),
                                   "correlation": st.integers(0, 40)})),
    _events("gpu_memcpy", ["Memcpy HtoD"], st.fixed_dictionaries({"device": st.just(0), "stream": st.just(7),
                                                                 "correlation": st.integers(0, 40)})),
    _events("cuda_runtime", ["cudaLaunchKernel", "cudaGetDevice", "cudaMemcpyAsync"],
            st.fixed_dictionaries({"correlation": st.integers(0, 40)})),
    _events("cpu_op", ["aten::mm", "aten::addmm", "aten::add", "CompiledFunction", "cpp_fused_add_0", "aten::view"],
            _shape_args),
    _events("user_annotation", ["ProfilerStep#1", "## Call CompiledFxGraph abc123 ##"], st.just({})),
    _events("gpu_user_annotation", ["ProfilerStep#1"], st.just({})),
    _events("python_function", ["f"], st.just({}))), min_size=1, max_size=40)})


# Values a field may hold in a foreign or damaged trace: some are refused (a NaN time), some read as a default
# (a device beyond int32, a boolean id), some parsed (an id written as text).
_odd_values = st.one_of(odd_numbers, st.booleans(), st.none(), st.sampled_from(["0x1f", "12", "", "X", "kernel"]),
                        st.lists(st.integers(0, 3), max_size=2), st.just({"correlation": 1}))


@st.composite
def _odd_traces(draw: st.DrawFn) -> Any:
    """A regular trace with up to four fields of its events (top-level or in args) replaced by an odd value or
    deleted, or a whole event replaced (a bare number, a list)."""
    doc = draw(_trace_docs)
    events = doc["traceEvents"]
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(events) - 1))
        if draw(st.integers(0, 9)) == 0:
            events[i] = draw(st.one_of(odd_numbers, st.lists(st.integers(), max_size=2)))
            continue
        if not isinstance(events[i], dict):
            continue
        event = dict(events[i])
        target = event
        if isinstance(event.get("args"), dict) and event["args"] and draw(st.booleans()):
            target = event["args"] = dict(event["args"])
        key = draw(st.sampled_from(sorted(target)))
        if draw(st.integers(0, 4)) == 0:
            del target[key]
        else:
            target[key] = draw(_odd_values)
        events[i] = event
    return doc


@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(doc=st.one_of(_odd_traces(), mutated(_trace_docs)), stdlib=st.booleans())
def test_given_any_odd_trace_column_wise_and_one_at_a_time_give_the_same_trace_or_error(
        tmp_path_factory: pytest.TempPathFactory, doc: Any, stdlib: bool) -> None:
    path = tmp_path_factory.mktemp("doc") / "rank_0.json"
    path.write_text(dumps(doc))
    with pytest.MonkeyPatch.context() as m:
        if stdlib:
            m.setenv(fast_io.STDLIB_ENV, "stdlib")
        else:
            m.delenv(fast_io.STDLIB_ENV, raising=False)

        assert _outcome(path, one_at_a_time=False) == _outcome(path, one_at_a_time=True)


_ODD_VALUES: dict[str, list[Any]] = {
    "ts": [float("inf"), float("nan"), -1e300, 1e308, "5", True, None, DELETE, 2**70],
    "dur": [-1, float("nan"), float("inf"), None, "3", False, DELETE],
    "name": [5, None, ["k"], DELETE],
    "ph": ["i", [], None, DELETE],
    "tid": [2**64, -(2**63) - 1, "7", "0x10", 1.5, True, None, DELETE],
    "pid": [2**40, "3", None],
    "cat": [["kernel"], {"a": 1}, 5, None],
    "args": [None, [], "x", DELETE],
    "args.device": [2**31, -(2**31) - 1, 2**40, "1", 2.0, True, None, DELETE],
    "args.stream": [2**63, "0x10", 7.5, False, None, DELETE],
    "args.correlation": [2**64, "12", "abc", 3.0, None, [1], DELETE],
    "args.Input Dims": [None, "x", [["a"]], DELETE],
    "args.Input type": [[1], None, DELETE],
    "args.Concrete Inputs": [[1], None, "x"],
    "args.Input Strides": [[[1]], None, "x"],
}
_ODD_FIELDS = [(key, value) for key, values in _ODD_VALUES.items() for value in values]


def _small_trace() -> list[dict[str, Any]]:
    """One event of each kind the reader keeps, all regular."""
    kernel_args = {"device": 0, "stream": 7, "correlation": 1}
    return [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 50.0,
         "args": {"Input Dims": [[4, 8], [8, 2]], "Input type": ["float", "float"], "Concrete Inputs": ["", ""],
                  "Input Strides": [[8, 1], [2, 1]]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 12.5, "dur": 4,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "Cijk_gemm", "pid": 0, "tid": 7, "ts": 20, "dur": 9.5,
         "args": kernel_args},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "pid": 0, "tid": 7, "ts": 40, "dur": 2,
         "args": kernel_args},
        {"ph": "X", "cat": "user_annotation", "name": "## Call CompiledFxGraph abc ##", "pid": 1, "tid": 1,
         "ts": 5, "dur": 80, "args": {}},
    ]


_ODD_IDS = [f"{k}=deleted" if v is DELETE else f"{k}={v!r}" for k, v in _ODD_FIELDS]  # the same in every xdist worker


@pytest.mark.parametrize("mode", ["fast", "stdlib"])
@pytest.mark.parametrize(("key", "value"), _ODD_FIELDS, ids=_ODD_IDS)
def test_an_odd_field_in_any_kept_event_reads_the_same_column_wise_as_one_at_a_time(
        key: str, value: Any, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each odd value in turn in the cpu_op, the runtime call, the kernel and the memcpy of a small trace: the
    column-wise check must refuse the run whenever one event at a time reads that event differently."""
    if mode == "stdlib":
        monkeypatch.setenv(fast_io.STDLIB_ENV, "stdlib")
    for target in range(4):
        events = copy.deepcopy(_small_trace())
        holder, field = (events[target].setdefault("args", {}), key[5:]) if key.startswith("args.") \
            else (events[target], key)
        if not isinstance(holder, dict):
            continue
        if value is DELETE:
            holder.pop(field, None)
        else:
            holder[field] = value
        path = tmp_path / f"{target}.json"
        path.write_text(dumps({"traceEvents": events * 3}))

        assert _outcome(path, one_at_a_time=False) == _outcome(path, one_at_a_time=True), target
