"""Fuzzing the readers: whatever a user (or an interrupted run) hands prbench, a reader either returns something
usable or refuses it with one line that names the file — never a traceback, never a silently wrong report.

Every property test feeds generated files to a public reader and accepts exactly two outcomes: a valid result
(checked for the invariants the analyses rely on) or a `UserError` whose message is one line containing the
file's path. The generated cases per test are the ``max_examples`` below; `GENERATED_CASES` is their sum.
The CLI cases at the end run the real commands (invoke's tasks in this process, the stages in a subprocess): exit
status non-zero, one line on stderr, no traceback, and no partial output left behind.
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import json
import math
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.kernels.compare import read_kernels_csv
from analysis.kernels.results import KERNEL_COLUMNS
from analysis.traces import read_trace
from analysis.traces.reports.perf_report import analyze_rank
from foundation.errors import UserError
from foundation.formats.dynamo_csv import read_graph_models, read_suite_csv, read_suite_samples
from foundation.formats.kernel_index import INDEX_COLUMNS, read_index
from foundation.formats.paired_rounds import read_round, read_round_samples
from foundation.formats.run_layout import MANIFEST
from foundation.formats.suite_shard_records import read_shard_record
from prbench.runs.run_store import RunStore
from tests.support.cli_support import invoke_in_process

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(__file__).parent / "fixtures" / "traces"
T = TypeVar("T")

# Generated cases per property test (the sum is what one run of this file tries).
EXAMPLES = {
    "kineto": 150, "kineto_cut": 40, "rocprof_csv": 100, "rocprofv3_json": 60, "nsys": 100, "compiled_module": 40,
    "kernels_csv": 100, "manifest": 100, "round": 100, "round_samples": 80, "suite_files": 60, "index_csv": 60,
    "suite_shard": 60,
}
GENERATED_CASES = sum(EXAMPLES.values())


def fuzz(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The shared settings: a fixed number of cases, no per-case deadline (the box is shared and slow)."""
    return settings(max_examples=EXAMPLES[name], deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


_files = itertools.count()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def new_dir(scratch: Path) -> Path:
    directory = scratch / f"case{next(_files)}"
    directory.mkdir()
    return directory


def read_or_refuse(read: Callable[[Path], T], path: Path) -> T | None:
    """The contract: a result, or a UserError of one line naming ``path``; any other exception fails the test."""
    try:
        return read(path)
    except UserError as exc:
        message = str(exc)
        assert "\n" not in message and "\r" not in message, message
        assert str(path) in message, message
        return None


# --- values of every JSON type, odd numbers first ---------------------------------------------------------------

# An integer of more digits than Python converts (4300): json.dumps cannot write it, so a document carries this
# marker in its place, which `dumps` writes as the 5,001 digits.
TOO_LONG = "\x00an integer of 5001 digits\x00"
odd_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, -0.0, 1e308, -1e-300, 2**63, 2**64, 4e15, 4e18, TOO_LONG]))
scalars = st.one_of(st.none(), st.booleans(), odd_numbers, st.text(max_size=6))
junk = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
times = st.floats(min_value=0, max_value=1e7, allow_nan=False)
durations = st.floats(min_value=0, max_value=1e4, allow_nan=False)
ids = st.integers(min_value=0, max_value=1000)
DELETE = object()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    copy = dict(value) if isinstance(value, dict) else list(value)
    if new is DELETE and not rest:
        del copy[head]
    else:
        copy[head] = _replace(value[head], rest, new)
    return copy


def mutated(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A valid document with 0, 1 or 2 of its values (anywhere, the whole document included) replaced by a value
    of another type or shape, or deleted: about a third stay valid, the rest are wrong in one or two places."""
    @st.composite
    def build(draw: st.DrawFn) -> Any:
        doc = draw(valid)
        for _ in range(draw(st.integers(min_value=0, max_value=2))):
            target = draw(st.sampled_from(list(_paths(doc))))
            doc = _replace(doc, target, draw(st.one_of(st.just(DELETE), junk)) if target else draw(junk))
        return doc
    return build()


def dumps(value: Any) -> str:
    # NaN and ±inf become the NaN/Infinity literals Python's json module reads back.
    return json.dumps(value).replace(json.dumps(TOO_LONG), "9" * 5001)


# --- Kineto traces --------------------------------------------------------------------------------------------

KERNEL_NAMES = ["triton_poi_fused_add_0", "triton_red_fused_sum_1", "nccl_AllReduce", "Memcpy DtoD", "Cijk_gemm"]


def kineto_event(cats: list[str], names: list[str], args: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({"ph": st.just("X"), "cat": st.sampled_from(cats), "name": st.sampled_from(names),
                                  "ts": times, "dur": durations, "args": args, "tid": ids})


kineto_valid = st.fixed_dictionaries(
    {"traceEvents": st.lists(st.one_of(
        kineto_event(["kernel", "gpu_memcpy", "gpu_memset"], KERNEL_NAMES, st.fixed_dictionaries(
            {"device": st.integers(0, 7), "stream": st.integers(0, 20), "correlation": ids})),
        kineto_event(["cuda_runtime"], ["cudaLaunchKernel", "cudaDeviceSynchronize", "cudaMemcpyAsync"],
                     st.fixed_dictionaries({"correlation": ids})),
        kineto_event(["cpu_op"], ["cpp_fused_add_0", "aten::mm", "aten::add"], st.just({})),
        kineto_event(["user_annotation", "gpu_user_annotation"], ["ProfilerStep#1", "ProfilerStep#2"], st.just({})),
        kineto_event(["python_function"], ["f"], st.just({}))), max_size=10)},
    optional={"deviceProperties": st.lists(st.fixed_dictionaries({"name": st.text(max_size=5)}), max_size=2),
              "distributedInfo": st.fixed_dictionaries({"rank": st.integers(0, 3), "world_size": st.just(4)})})


def check_trace(path: Path) -> None:
    trace = read_or_refuse(read_trace, path)
    if trace is None:
        return
    # What the analyses rely on: finite, non-negative durations; some device time; a verdict about something.
    assert (trace.dur_ns >= 0).all() and (trace.rt_dur_ns >= 0).all()
    assert trace.dur_ns.any() or any(a.total_ns > 0 for a in trace.aggregates)
    result = analyze_rank(trace, 0)
    if result.launch.verdict.label == "GPU-bound":
        assert result.timeline.busy_time > 0
    for table in (result.kernels, result.categories):
        numeric = table.select_dtypes("number")
        assert np.isfinite(numeric.to_numpy(dtype=float, na_value=0.0)).all()


@fuzz("kineto")
@given(doc=mutated(kineto_valid), compress=st.booleans())
def test_given_a_kineto_trace_with_fields_of_any_type_perf_report_reads_it_or_says_what_is_wrong_in_one_line(
        scratch: Path, doc: Any, compress: bool) -> None:
    path = new_dir(scratch) / ("rank_0.json.gz" if compress else "rank_0.json")
    data = dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    check_trace(path)


@fuzz("kineto_cut")
@given(fixture=st.sampled_from(["h100_bert-small-uncased.json.gz", "cpu_tiny_bert_inductor.json.gz"]),
       cut=st.one_of(st.floats(min_value=0.0, max_value=1.0), st.just(1.0)), gzipped=st.booleans())
def test_given_a_real_trace_cut_anywhere_the_reader_reports_truncation_or_reads_what_is_whole(
        scratch: Path, fixture: str, cut: float, gzipped: bool) -> None:
    raw = (TRACES / fixture).read_bytes()
    data = raw if gzipped else gzip.decompress(raw)
    path = new_dir(scratch) / ("t.json.gz" if gzipped else "t.json")
    path.write_bytes(data[: int(len(data) * cut)])
    check_trace(path)


# --- rocprof and nsys files -----------------------------------------------------------------------------------

junk_cells = st.one_of(st.sampled_from(["", "nan", "NaN", "inf", "-inf", "-5", "1e30", "1e400", "1.5", "abc",
                                        "9" * 30, "1,000", "0x10"]), st.text(max_size=6))


def mutated_rows(valid_rows: st.SearchStrategy[list[list[str]]]) -> st.SearchStrategy[list[list[str]]]:
    """Valid rows with 0–2 cells replaced by junk and, now and then, a row a cell short or long."""
    @st.composite
    def build(draw: st.DrawFn) -> list[list[str]]:
        rows = [list(r) for r in draw(valid_rows)]
        for _ in range(draw(st.integers(min_value=0, max_value=2)) if rows else 0):
            row = rows[draw(st.integers(0, len(rows) - 1))]
            row[draw(st.integers(0, len(row) - 1))] = draw(junk_cells)
        if rows and draw(st.integers(0, 9)) == 0:
            row = rows[draw(st.integers(0, len(rows) - 1))]
            row.pop() if draw(st.booleans()) else row.append(draw(junk_cells))
        return rows
    return build()


def csv_text(header: list[str], rows: list[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


@st.composite
def span(draw: st.DrawFn) -> tuple[int, int]:
    start = draw(st.integers(min_value=0, max_value=10**12))
    return start, start + draw(st.integers(min_value=0, max_value=10**6))


names = st.sampled_from([*KERNEL_NAMES, "triton_poi_fused_add_0 [clone .kd]"])
ROCPROF = {
    "908_kernel_trace.csv": (["Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Kernel_Name", "Correlation_Id",
                              "Start_Timestamp", "End_Timestamp"],
                             st.builds(lambda n, c, s: ["KERNEL_DISPATCH", "Agent 4", "1", "0", n, str(c), str(s[0]),
                                                        str(s[1])], names, ids, span())),
    "results.csv": (["Index", "KernelName", "gpu-id", "queue-id", "BeginNs", "EndNs", "DurationNs"],
                    st.builds(lambda n, s: ["0", n, "2", "0", str(s[0]), str(s[1]), str(s[1] - s[0])], names, span())),
    "results.stats.csv": (["Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage", "MinNs", "MaxNs"],
                          st.builds(lambda n, c, t: [n, str(c), str(t), "1", "100.0", "1", str(t)], names,
                                    st.integers(1, 100), st.integers(1, 10**9))),
}
NSYS = {
    "report_cuda_gpu_trace.csv": (["Start ({u})", "Duration ({u})", "CorrId", "Device", "Strm", "Name"],
                                  st.builds(lambda s, c, n: [str(s[0]), str(s[1] - s[0]), str(c), "0", "7", n],
                                            span(), ids, names)),
    "report_cuda_gpu_kern_sum.csv": (["Time (%)", "Total Time ({u})", "Instances", "Min ({u})", "Max ({u})", "Name"],
                                     st.builds(lambda t, c, n: ["100.0", str(t), str(c), "1", str(t), n],
                                               st.integers(1, 10**9), st.integers(1, 100), names)),
}


@fuzz("rocprof_csv")
@given(name=st.sampled_from(sorted(ROCPROF)), data=st.data())
def test_given_a_rocprof_csv_with_any_cells_the_reader_reads_it_or_names_the_line(
        scratch: Path, name: str, data: st.DataObject) -> None:
    header, row = ROCPROF[name]
    path = new_dir(scratch) / name
    path.write_text(csv_text(header, data.draw(mutated_rows(st.lists(row, max_size=5)))))
    check_trace(path)


@fuzz("nsys")
@given(name=st.sampled_from(sorted(NSYS)), unit=st.sampled_from(["ns", "us", "ms", "s"]), preamble=st.booleans(),
       data=st.data())
def test_given_an_nsys_stats_csv_with_any_cells_the_reader_reads_it_or_names_the_line(
        scratch: Path, name: str, unit: str, preamble: bool, data: st.DataObject) -> None:
    header, row = NSYS[name]
    path = new_dir(scratch) / name
    text = csv_text([h.format(u=unit) for h in header], data.draw(mutated_rows(st.lists(row, max_size=5))))
    path.write_text(("Processing [report.sqlite] with [cuda_gpu_trace.py]...\n" if preamble else "") + text)
    check_trace(path)


@st.composite
def rocprofv3_valid(draw: st.DrawFn) -> dict[str, Any]:
    kernels = draw(st.lists(st.tuples(ids, names), min_size=1, max_size=3, unique_by=lambda k: k[0]))
    dispatches = []
    for _ in range(draw(st.integers(0, 4))):
        start, end = draw(span())
        kid = draw(st.sampled_from(kernels))[0]
        dispatches.append({"start_timestamp": start, "end_timestamp": end, "correlation_id": {"internal": kid},
                           "dispatch_info": {"kernel_id": kid, "agent_id": {"handle": 7}}})
    return {"rocprofiler-sdk-tool": [{
        "kernel_symbols": [{"kernel_id": k, "formatted_kernel_name": n} for k, n in kernels],
        "agents": [{"type": 2, "id": {"handle": 7}, "name": "gfx90a"}],
        "metadata": {"init_time": 0, "fini_time": 10**13},
        "buffer_records": {"kernel_dispatch": dispatches, "memory_copy": [], "hip_api": []}}]}


@fuzz("rocprofv3_json")
@given(doc=mutated(rocprofv3_valid()))
def test_given_rocprofv3_json_of_any_shape_the_reader_reads_it_or_names_the_record(scratch: Path, doc: Any) -> None:
    path = new_dir(scratch) / "908_results.json"
    path.write_text(dumps(doc))  # without its "rocprofiler-sdk-tool" key it is read as (and refused as) Kineto
    check_trace(path)


@fuzz("compiled_module")
@given(line=st.integers(min_value=0, max_value=60), replacement=st.one_of(st.text(max_size=40), st.sampled_from([
    "triton_poi_fused_0   abc   1  9.2%", "Total wall time 1.2.3 ms", "cpp_fused_add_0   -1.0us  2.0us  3  x"])),
       cut=st.integers(min_value=0, max_value=20_000))
def test_given_damaged_p_output_of_a_graph_module_the_reader_reads_it_or_names_the_line(
        scratch: Path, line: int, replacement: str, cut: int) -> None:
    lines = (TRACES / "cpu_graph_module_p_output.txt").read_text().splitlines()
    lines[line % len(lines)] = replacement
    path = new_dir(scratch) / "graph.profile.txt"
    path.write_text("\n".join(lines)[: cut if cut > 200 else None])
    check_trace(path)


# --- kernels.csv and index.csv --------------------------------------------------------------------------------

NUMERIC = ("calls", "n", "median_ms", "mean_ms", "std_ms", "min_ms", "gb", "gb_per_s")
ms_cells = st.floats(min_value=0, max_value=1e3, allow_nan=False).map(lambda x: f"{x:.6g}")


@st.composite
def kernels_row(draw: st.DrawFn) -> list[str]:
    ok = draw(st.booleans())
    cells = {c: draw(st.text(alphabet="abcdef0123_/", max_size=8)) for c in KERNEL_COLUMNS}
    cells.update(calls=str(draw(st.integers(0, 50))), n=str(draw(st.integers(1, 30))) if ok else "0",
                 status="ok" if ok else "fail", error="" if ok else "round 1: boom")
    for col in ("median_ms", "mean_ms", "std_ms", "min_ms", "gb", "gb_per_s"):
        cells[col] = draw(ms_cells) if ok else ""
    return [cells[c] for c in KERNEL_COLUMNS]


@fuzz("kernels_csv")
@given(data=st.data(), drop=st.one_of(st.none(), st.none(), st.sampled_from(KERNEL_COLUMNS)))
def test_given_a_kernels_csv_with_any_timing_cells_it_is_read_as_finite_times_or_refused_naming_the_line(
        scratch: Path, data: st.DataObject, drop: str | None) -> None:
    rows = data.draw(mutated_rows(st.lists(kernels_row(), max_size=5)))
    keep = [i for i, c in enumerate(KERNEL_COLUMNS) if c != drop]
    path = new_dir(scratch) / "kernels.csv"
    path.write_text(csv_text([KERNEL_COLUMNS[i] for i in keep], [[r[i] for i in keep if i < len(r)] for r in rows]))
    frame = read_or_refuse(read_kernels_csv, path)
    if frame is not None:
        values = frame[list(NUMERIC)].to_numpy(dtype=float)
        assert (np.isnan(values) | (np.isfinite(values) & (values >= 0))).all()


index_row = st.builds(lambda n, c, p: ["pointwise", n, "h", "", f"{n}_x0_r0", p, str(c), "M/g", "triton", p],
                      names, st.integers(0, 9), st.sampled_from(["pointwise/a.py", "cpp/b.cpp"]))


@fuzz("index_csv")
@given(data=st.data())
def test_given_an_index_csv_with_any_cells_the_kernel_runner_reads_it_or_names_the_line(
        scratch: Path, data: st.DataObject) -> None:
    path = new_dir(scratch) / "index.csv"
    path.write_text(csv_text(list(INDEX_COLUMNS), data.draw(mutated_rows(st.lists(index_row, max_size=5)))))
    rows = read_or_refuse(read_index, path)
    if rows is not None:
        assert all(r.calls >= 0 and r.path.strip() for r in rows)


# --- run manifests --------------------------------------------------------------------------------------------

stage_record = st.fixed_dictionaries({
    "status": st.sampled_from(["done", "failed", "running", "interrupted"]), "input_hash": st.text(max_size=8),
    "outputs": st.lists(st.text(max_size=8), max_size=2), "started": st.just("2025-01-01T00:00:00+00:00"),
    "finished": st.just(""), "duration_s": durations, "error": st.text(max_size=8),
    "summary": st.dictionaries(st.text(max_size=4), st.integers(), max_size=2)})
manifest_valid = st.fixed_dictionaries({
    "run_id": st.just("r"), "created": st.just("2025-01-01T00:00:00+00:00"), "prbench_version": st.just("0.1.0"),
    "settings": st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    "stages": st.dictionaries(st.sampled_from(["base/suite", "pr/kernels", "pair/kernels-round-1", "report"]),
                              stage_record, max_size=3)})


@fuzz("manifest")
@given(manifest=mutated(manifest_valid), cut=st.integers(min_value=0, max_value=400))
def test_given_a_manifest_of_any_shape_status_opens_the_run_or_says_what_is_wrong(scratch: Path, manifest: Any,
                                                                                  cut: int) -> None:
    runs = new_dir(scratch)
    path = runs / "r" / MANIFEST
    path.parent.mkdir()
    text = dumps(manifest)
    path.write_text(text[:cut] if cut < len(text) and cut % 5 == 0 else text)  # about one in five truncated
    run = read_or_refuse(lambda _: RunStore(runs).open("r"), path)
    if run is not None:
        for record in run.manifest.stages.values():
            assert isinstance(record.status, str) and all(isinstance(o, str) for o in record.outputs)
            assert math.isfinite(record.duration_s) and record.duration_s >= 0


# --- round records and sample files ---------------------------------------------------------------------------

ms_lists = st.lists(st.floats(min_value=0, max_value=1e3, allow_nan=False), max_size=3)
visit = st.fixed_dictionaries({"side": st.sampled_from(["base", "pr"]), "item": st.sampled_from(["a.py", "b.py"]),
                               "block": st.integers(0, 5), "position": st.integers(0, 3), "started_s": durations,
                               "samples": ms_lists, "error": st.sampled_from(["", "timeout"])})
round_valid = st.fixed_dictionaries({
    "kind": st.sampled_from(["kernels", "models"]), "round": st.integers(1, 5), "sides": st.just(["base", "pr"]),
    "started_at": st.just("2025-01-01T00:00:00"), "wall_s": durations, "workers": st.just({}),
    "visits": st.lists(visit, max_size=4)})


def assert_samples_are_times(samples: list[float]) -> None:
    assert all(isinstance(x, float) and math.isfinite(x) and x >= 0 for x in samples)


@fuzz("round")
@given(record=mutated(round_valid))
def test_given_a_round_file_of_any_shape_resuming_reads_it_or_names_the_field(scratch: Path, record: Any) -> None:
    path = new_dir(scratch) / "round-001.json"
    path.write_text(dumps(record))
    result = read_or_refuse(read_round, path)
    if result is not None:
        assert result.round >= 1 and all(v.side in ("base", "pr") for v in result.visits)
        for visit_ in result.visits:
            assert_samples_are_times(visit_.samples)


shard_record_valid = st.fixed_dictionaries({
    "models": st.lists(st.sampled_from(["BertForMaskedLM", "T5Small"]), max_size=2), "node": st.just("n1"),
    "device": st.sampled_from(["cpu", "0"]), "cpus": st.lists(st.integers(0, 7), max_size=2),
    "started_at": st.just("2025-01-01T00:00:00"), "wall_s": durations})


@fuzz("suite_shard")
@given(record=mutated(shard_record_valid))
def test_given_a_suite_shard_record_of_any_shape_resuming_reads_it_or_names_the_field(scratch: Path,
                                                                                      record: Any) -> None:
    path = new_dir(scratch) / "shard.json"
    path.write_text(dumps(record))
    result = read_or_refuse(read_shard_record, path)
    if result is not None:
        assert all(isinstance(m, str) for m in result.models) and result.wall_s >= 0
        assert all(isinstance(c, int) and c >= 0 for c in result.cpus)


round_samples_valid = st.dictionaries(st.sampled_from(["pointwise/a.py", "cpp/b.cpp", "M"]),
                                      st.one_of(st.lists(ms_lists, max_size=3), ms_lists), max_size=3)


@fuzz("round_samples")
@given(samples=mutated(round_samples_valid), cut=st.integers(min_value=0, max_value=200))
def test_given_kernel_samples_json_of_any_shape_the_report_reads_it_or_names_the_item(
        scratch: Path, samples: Any, cut: int) -> None:
    path = new_dir(scratch) / "kernel_samples.json"
    text = dumps(samples)
    path.write_text(text[:cut] if cut < len(text) and cut % 5 == 0 else text)
    result = read_or_refuse(read_round_samples, path)
    if result is not None:
        for per_round in result.values():
            for samples_of_round in per_round:
                assert_samples_are_times(samples_of_round)


suite_samples_valid = st.dictionaries(st.sampled_from(["BertForMaskedLM", "T5Small"]), st.one_of(
    st.fixed_dictionaries({"eager": ms_lists, "compiled": ms_lists}), st.just({})), max_size=2)
graph_models_valid = st.dictionaries(st.text(alphabet="abc0123", max_size=6),
                                     st.lists(st.sampled_from(["BertForMaskedLM", "T5Small"]), max_size=2), max_size=2)


@fuzz("suite_files")
@given(samples=mutated(suite_samples_valid), graphs=mutated(graph_models_valid),
       suite=mutated_rows(st.lists(st.builds(lambda n, s: [n, s, "1.5"], st.sampled_from(["M", "N"]),
                                             st.sampled_from(["ok", "fail"])), max_size=3)))
def test_given_the_suites_files_in_any_shape_a_resumed_run_reads_them_or_names_them(
        scratch: Path, samples: Any, graphs: Any, suite: list[list[str]]) -> None:
    directory = new_dir(scratch)
    (directory / "samples.json").write_text(dumps(samples))
    (directory / "graph_models.json").write_text(dumps(graphs))
    (directory / "suite.csv").write_text(csv_text(["name", "status", "speedup"], suite))

    read = read_or_refuse(read_suite_samples, directory / "samples.json")
    if read is not None:
        for per_kind in read.values():
            for values in per_kind.values():
                assert_samples_are_times(values)
    models = read_or_refuse(read_graph_models, directory / "graph_models.json")
    if models is not None:
        assert all(isinstance(m, str) for ms in models.values() for m in ms)
    rows = read_or_refuse(read_suite_csv, directory / "suite.csv")
    if rows is not None:
        assert all(isinstance(v, str) for row in rows for v in row.values())


# --- the commands a user runs ---------------------------------------------------------------------------------


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return invoke_in_process("--search-root", str(ROOT), *args)


def stage(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def assert_one_line_refusal(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def files_under(directory: Path) -> set[Path]:
    return {p.relative_to(directory) for p in directory.rglob("*")}


def kineto_events(*events: dict[str, Any]) -> str:
    return dumps({"traceEvents": list(events)})


KERNEL = {"ph": "X", "cat": "kernel", "name": "triton_poi_fused_add_0", "ts": 100.0, "dur": 5.0}


@pytest.mark.parametrize(("trace", "expected"), [
    (kineto_events(KERNEL, {**KERNEL, "ts": "100.0"}), "traceEvents[1] 'ts': expected a finite time in µs"),
    (kineto_events(), "contains no GPU kernel events"),
    (kineto_events({**KERNEL, "dur": 0}), "contains no GPU kernel events with a duration"),
    (kineto_events(KERNEL, {**KERNEL, "dur": -3}), "traceEvents[1] 'dur': expected a finite duration ≥ 0"),
], ids=["text-timestamp", "empty", "zero-durations", "negative-duration"])
def test_given_a_bad_trace_perf_report_says_so_in_one_line_and_writes_no_report(tmp_path: Path, trace: str,
                                                                                expected: str) -> None:
    base = tmp_path / "traces"
    (base / "cfg").mkdir(parents=True)
    (base / "cfg" / "rank_0.json").write_text(trace)
    (base / "a_good").mkdir()  # read first: its report must not be written when a later trace is refused
    (base / "a_good" / "rank_0.json.gz").write_bytes((TRACES / "h100_bert-small-uncased.json.gz").read_bytes())
    before = files_under(base)

    line = assert_one_line_refusal(invoke("perf-report", "-b", str(base), "--format", "xlsx,md,csv"), expected)

    assert str(base / "cfg" / "rank_0.json") in line
    assert files_under(base) == before


def test_given_a_pr_trace_with_nan_durations_trace_diff_says_so_in_one_line(tmp_path: Path) -> None:
    pr = tmp_path / "pr.json"
    pr.write_text(kineto_events(KERNEL, {**KERNEL, "dur": float("nan")}))

    assert_one_line_refusal(invoke("trace-diff", str(TRACES / "h100_bert-small-uncased.json.gz"), str(pr),
                                   "--output", str(tmp_path / "diff")),
                            f"{pr}: traceEvents[1] 'dur'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pr.json"]


@pytest.mark.parametrize(("name", "read", "document"), [
    ("rank_0.json", read_trace, {"traceEvents": [KERNEL, {**KERNEL, "ts": TOO_LONG}]}),
    ("908_results.json", read_trace, {"rocprofiler-sdk-tool": [{"metadata": {"init_time": TOO_LONG}}]}),
    (MANIFEST, lambda path: RunStore(path.parent.parent).open("r"), {"run_id": "r", "created": TOO_LONG}),
    ("round-001.json", read_round, {"kind": "kernels", "round": TOO_LONG}),
    ("shard.json", read_shard_record, {"models": [], "wall_s": TOO_LONG}),
    ("kernel_samples.json", read_round_samples, {"pointwise/a.py": [[TOO_LONG]]}),
    ("samples.json", read_suite_samples, {"M": {"eager": [TOO_LONG]}}),
    ("graph_models.json", read_graph_models, {"g": TOO_LONG}),
], ids=["kineto", "rocprofv3", "manifest", "round", "suite-shard", "kernel-samples", "suite-samples", "graph-models"])
def test_given_a_number_of_5001_digits_every_json_reader_refuses_it_in_one_line(
        tmp_path: Path, name: str, read: Callable[[Path], Any], document: Any) -> None:
    path = tmp_path / "r" / name
    path.parent.mkdir()
    path.write_text(dumps(document))

    assert read_or_refuse(read, path) is None  # refused, in one line naming the file


def test_given_a_kernels_csv_with_inf_compare_kernels_says_so_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    row = dict.fromkeys(KERNEL_COLUMNS, "")
    row.update(kernel_name="k", path="pointwise/k.py", calls="1", n="3", median_ms="0.5", status="ok")
    good, bad = tmp_path / "base.csv", tmp_path / "pr.csv"
    pd.DataFrame([row]).to_csv(good, index=False)
    pd.DataFrame([{**row, "median_ms": "inf"}]).to_csv(bad, index=False)

    assert_one_line_refusal(invoke("compare-kernels", str(good), str(bad), "--out", str(tmp_path / "out")),
                            f"{bad}: line 2, column median_ms")
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_given_a_bad_filter_the_kernels_stage_names_the_flag(tmp_path: Path) -> None:
    organized = tmp_path / "organized"
    organized.mkdir()
    (organized / "index.csv").write_text(csv_text(list(INDEX_COLUMNS), [
        ["pointwise", "k", "h", "", "k_x0_r0", "pointwise/k.py", "1", "g", "triton", "pointwise/k.py"]]))

    assert_one_line_refusal(stage("stages.kernels", "--dir", str(organized), "--filter", "("),
                            "error: --filter '(': not a valid regular expression")
    assert files_under(tmp_path) == {Path("organized"), Path("organized/index.csv")}


@pytest.mark.integration
def test_given_an_archive_without_kernels_organize_names_it_and_leaves_no_out(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.py").write_text("x = 1\n")
    archive = tmp_path / "cache.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "c", arcname="c")

    line = assert_one_line_refusal(invoke("organize", "--cache", str(archive), "--out", str(tmp_path / "out")),
                                   f"--cache {archive}: no Inductor kernels")
    assert "prbench-cache-" not in line
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


@pytest.mark.parametrize(("content", "expected"), [
    ("model,speedup\nBert,1.5\n", "not a suite.csv (no 'name' column)"),
    (b"name,status\nBert,ok\xff\n", "not a suite.csv (not UTF-8 text"),
    ("name,status\nBert,fail\n", "--models: Bert not ok in"),
], ids=["no-name-column", "not-utf8", "model-not-ok"])
@pytest.mark.integration
def test_given_a_bad_suite_csv_the_profile_stage_says_so_and_creates_no_out(tmp_path: Path, content: str | bytes,
                                                                            expected: str) -> None:
    suite = tmp_path / "suite.csv"
    suite.write_bytes(content if isinstance(content, bytes) else content.encode())

    assert_one_line_refusal(stage("stages.profile", "--suite-csv", str(suite), "--out", str(tmp_path / "out"),
                                  "--models", "Bert"), "error: ", expected)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("manifest", ["[]", '{"run_id": "r", "created": "now", "stages": {"x": {"status": 1}}}',
                                      '{"run_id": "r", "crea'], ids=["list", "status-int", "truncated"])
def test_given_a_damaged_manifest_status_says_so_in_one_line(tmp_path: Path, manifest: str) -> None:
    path = tmp_path / "runs" / "r" / MANIFEST
    path.parent.mkdir(parents=True)
    path.write_text(manifest)

    assert_one_line_refusal(invoke("status", "--runs-dir", str(tmp_path / "runs"), "--run", "r"),
                            f"error: {path}: not a valid run manifest")
