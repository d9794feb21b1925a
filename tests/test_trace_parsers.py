"""The fast path (orjson or msgspec decoding runs of events, isal or zlib-ng for gzip) reads every trace exactly as
the standard library does, including the layouts where a run of events cannot be cut at ``},``."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_readers import dumps, mutated  # the fuzzers' mutations of a valid document

from analysis.errors import UserError
from analysis.traces import fast_io, kineto, read_trace
from analysis.traces.model import OpTable, TraceData

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

    messages = []
    for mode in ("fast", "stdlib"):
        with pytest.raises(UserError) as err:
            _read(path, monkeypatch, mode)
        messages.append(str(err.value))

    assert messages[0] == messages[1] == (f"{path}: traceEvents[2] 'dur': expected a finite duration ≥ 0 in µs, "
                                          "found nan")


def test_a_corrupt_gzip_read_by_isal_or_zlib_ng_is_one_line(tmp_path: Path) -> None:
    data = (FIXTURES / "h100_bert-small-uncased.json.gz").read_bytes()
    bad = tmp_path / "broken.json.gz"
    bad.write_bytes(data[:20] + bytes(b ^ 0x5A for b in data[20:400]) + data[400:])

    with pytest.raises(UserError) as err:
        read_trace(bad)

    assert str(err.value).startswith(f"{bad}: ") and "\n" not in str(err.value)


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
    """Every field of a trace, as plain values (arrays with their dtype)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(trace):
        value = getattr(trace, f.name)
        if isinstance(value, np.ndarray):
            value = (value.dtype.str, value.tolist())
        elif isinstance(value, OpTable):
            value = (value.name_id.tolist(), value.shape_id.tolist(), value.shapes)
        out[f.name] = value
    return out


def _outcome(path: Path, one_at_a_time: bool) -> dict[str, Any] | str:
    """The trace read from ``path``, or the one-line error it gives."""
    with pytest.MonkeyPatch.context() as m:
        if one_at_a_time:
            m.setattr(kineto._Collector, "_run_columns", lambda self, events, first: None)
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

        def counting(text: str) -> Any:
            try:
                return decode(text)
            except ValueError:
                failed_runs.append(len(text))
                raise
        monkeypatch.setattr(fast_io, "json_decoder", lambda: (name, counting))
    one_at_a_time: list[str] = []
    for handler in ("_device", "_runtime", "_cpu_op"):
        real = getattr(kineto._Collector, handler)
        monkeypatch.setattr(kineto._Collector, handler,
                            lambda self, *a, _real=real, _name=handler: (one_at_a_time.append(_name), _real(self, *a)))
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


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(doc=mutated(_trace_docs), stdlib=st.booleans())
def test_given_any_mutated_trace_column_wise_and_one_at_a_time_give_the_same_trace_or_error(
        tmp_path_factory: pytest.TempPathFactory, doc: Any, stdlib: bool) -> None:
    path = tmp_path_factory.mktemp("doc") / "rank_0.json"
    path.write_text(dumps(doc))
    with pytest.MonkeyPatch.context() as m:
        if stdlib:
            m.setenv(fast_io.STDLIB_ENV, "stdlib")
        else:
            m.delenv(fast_io.STDLIB_ENV, raising=False)

        assert _outcome(path, one_at_a_time=False) == _outcome(path, one_at_a_time=True)
