"""The fast path (orjson or msgspec decoding runs of events, isal or zlib-ng for gzip) reads every trace exactly as
the standard library does, including the layouts where a run of events cannot be cut at ``},``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from analysis.errors import UserError
from analysis.traces import fast_io, kineto, read_trace
from analysis.traces.model import TraceData

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
