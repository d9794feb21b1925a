"""rocprof, rocpd and nsys outputs: kernel tables in the right units (these formats are ns, Kineto is µs)."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest

from analysis.traces import detect_format, read_trace
from analysis.traces.analyses.breakdown import category_table, top_kernels
from analysis.traces.analyses.timeline import gpu_timeline
from analysis.traces.model import MEMCPY
from foundation.errors import UserError
from tests.support import interval_support as intervals

ROCPROF = Path(__file__).parent / "fixtures" / "traces" / "rocprof" / "rocprofv3_908_results.json.gz"


def test_rocprofv3_json_gives_a_top_kernel_table_in_ms_and_us() -> None:
    tool = json.loads(gzip.decompress(ROCPROF.read_bytes()))["rocprofiler-sdk-tool"][0]
    names = {s["kernel_id"]: s["formatted_kernel_name"] for s in tool["kernel_symbols"]}
    totals: dict[str, list[int]] = defaultdict(list)
    for rec in tool["buffer_records"]["kernel_dispatch"]:
        totals[names[rec["dispatch_info"]["kernel_id"]]].append(rec["end_timestamp"] - rec["start_timestamp"])
    top_name, top_durs = max(totals.items(), key=lambda kv: sum(kv[1]))

    table = top_kernels(read_trace(ROCPROF), n=10)

    first = table.iloc[0]
    assert first["name"] == top_name.removesuffix(".kd")
    assert first["count"] == len(top_durs)
    assert first["total ms"] == pytest.approx(sum(top_durs) / 1e6)  # ns → ms
    assert first["mean us"] == pytest.approx(sum(top_durs) / len(top_durs) / 1e3)  # ns → µs
    copy_kernel = table[table["name"].str.contains("bfloat16_copy_kernel")].iloc[0]
    assert 1.0 < copy_kernel["mean us"] < 20.0  # a few-µs elementwise kernel, not thousands


def test_rocprofv3_json_communication_and_legacy_copies_shape_the_timeline() -> None:
    trace = read_trace(ROCPROF)

    timeline = gpu_timeline(trace)
    categories = category_table(trace).set_index("category")
    assert trace.platform == "rocm" and len(trace.device_names) == 8
    assert categories.loc["communication", "count"] == 1310  # ncclDevKernel_Generic_1
    assert timeline.total_comm_time > 0 and timeline.total_memcpy_time > 0  # __amd_rocclr_copyBuffer
    # Each exposed part against its own interval-by-interval subtraction (their sum with idle equals the total
    # by construction, so that identity would not catch a wrong part).
    names = trace.event_names()
    spans = list(zip(trace.start_ns.tolist(), trace.end_ns.tolist(), strict=True))
    memcpy = [s for s, kind in zip(spans, trace.kind.tolist(), strict=True) if kind == MEMCPY]
    comm = [s for s, name, kind in zip(spans, names, trace.kind.tolist(), strict=True)
            if kind != MEMCPY and "nccl" in name.lower()]
    comp = [s for s, name, kind in zip(spans, names, trace.kind.tolist(), strict=True)
            if kind != MEMCPY and "nccl" not in name.lower()]
    assert timeline.exposed_comm_time == intervals.minus(comm, comp) > 0
    assert timeline.exposed_memcpy_time == intervals.minus(memcpy, comp + comm) > 0
    assert timeline.busy_time == intervals.union(spans)


# The inputs below are written from the documented headers (no real output of these formats was at hand).


def test_rocprofv3_kernel_trace_csv_with_its_sibling_files(tmp_path: Path) -> None:
    (tmp_path / "908_kernel_trace.csv").write_text(
        '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name",'
        '"Correlation_Id","Start_Timestamp","End_Timestamp","Private_Segment_Size","Group_Segment_Size",'
        '"Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
        '"KERNEL_DISPATCH","Agent 4",1,0,908,1,8,"triton_poi_fused_add_0.kd",11,1000,3000,0,0,256,1,1,1024,1,1\n'
        '"KERNEL_DISPATCH","Agent 4",1,0,908,2,9,"Cijk_Alik_Bljk_HB_MT64x64x32",12,5000,9000,0,0,256,1,1,4096,1,1\n')
    (tmp_path / "908_hip_api_trace.csv").write_text(
        '"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"\n'
        '"HIP_RUNTIME_API","hipModuleLaunchKernel",908,908,11,200,700\n'
        '"HIP_RUNTIME_API","hipExtModuleLaunchKernel",908,908,12,800,1200\n')

    trace = read_trace(tmp_path / "908_kernel_trace.csv")

    table = top_kernels(trace, n=None).set_index("name")
    assert detect_format(tmp_path / "908_kernel_trace.csv") == "rocprofv3-csv"
    assert table.loc["Cijk_Alik_Bljk_HB_MT64x64x32", "mean us"] == pytest.approx(4.0)
    assert table.loc["triton_poi_fused_add_0", "category"] == "triton_pointwise"
    assert gpu_timeline(trace).busy_time == 6000
    assert trace.rt_start_ns.tolist() == [200, 800]


def test_rocprof_v1_results_and_stats(tmp_path: Path) -> None:
    results = tmp_path / "results.csv"
    results.write_text(
        '"Index","KernelName","gpu-id","queue-id","queue-index","pid","tid","grd","wgr","lds","scr",'
        '"arch_vgpr","accum_vgpr","sgpr","wave_size","sig","obj","DispatchNs","BeginNs","EndNs","CompleteNs",'
        '"DurationNs"\n'
        '0,"triton_red_fused_sum_0 [clone .kd]",2,0,0,1,1,1024,256,0,0,8,0,16,64,0,0,90,100,2100,2200,2000\n')
    stats = tmp_path / "results.stats.csv"
    stats.write_text('"Name","Calls","TotalDurationNs","AverageNs","Percentage"\n'
                     '"triton_red_fused_sum_0 [clone .kd]",4,8000,2000,100.0\n')

    from_trace = top_kernels(read_trace(results), n=None).iloc[0]
    from_stats = top_kernels(read_trace(stats), n=None).iloc[0]

    assert from_trace["name"] == from_stats["name"] == "triton_red_fused_sum_0"
    assert from_trace["mean us"] == from_stats["mean us"] == pytest.approx(2.0)
    assert from_stats["count"] == 4 and from_stats["total ms"] == pytest.approx(0.008)


def test_rocpd_sqlite_database(tmp_path: Path) -> None:
    db = tmp_path / "908_results.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE rocpd_info_kernel_symbol_0a1b (id INTEGER PRIMARY KEY, kernel_name TEXT, "
                 "display_name TEXT)")
    conn.execute('CREATE TABLE rocpd_kernel_dispatch_0a1b (id INTEGER PRIMARY KEY, agent_id INTEGER, '
                 'kernel_id INTEGER, queue_id INTEGER, stream_id INTEGER, start BIGINT, "end" BIGINT)')
    conn.execute("INSERT INTO rocpd_info_kernel_symbol_0a1b VALUES (1, 'attn_fwd.kd', 'attn_fwd')")
    conn.executemany("INSERT INTO rocpd_kernel_dispatch_0a1b VALUES (?, 1, 1, 1, 0, ?, ?)",
                     [(1, 0, 10_000), (2, 20_000, 50_000)])
    conn.commit()
    conn.close()

    table = top_kernels(read_trace(db), n=None)

    assert table["name"].tolist() == ["attn_fwd"]
    assert table["category"].tolist() == ["attention"]
    assert table["mean us"].tolist() == [pytest.approx(20.0)]


def test_nsys_stats_csvs_in_ns_and_with_a_preamble(tmp_path: Path) -> None:
    trace_csv = tmp_path / "report_cuda_gpu_trace.csv"
    trace_csv.write_text(
        "Generating SQLite file report.sqlite from report.nsys-rep\n"
        "Processing [report.sqlite] with [cuda_gpu_trace.py]...\n"
        "Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),"
        "Bytes (MB),Throughput (MB/s),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name\n"
        "1000,500,7,1,1,1,128,1,1,32,0,0,,,,,0,1,,7,nvjet_tst_64x8_64x16_2x1_v_bz_TNT\n"
        "2000,1500,9,,,,,,,,,,0.5,333,Pageable,Device,0,1,,7,[CUDA memcpy Host-to-Device]\n")
    sum_csv = tmp_path / "report_cuda_gpu_kern_sum.csv"
    sum_csv.write_text("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
                       "100.0,2500,5,500.0,500.0,400,600,50.0,nvjet_tst_64x8_64x16_2x1_v_bz_TNT\n")

    trace = read_trace(trace_csv)
    summary = top_kernels(read_trace(sum_csv), n=None).iloc[0]

    assert gpu_timeline(trace).total_memcpy_time == 1500
    assert category_table(trace).set_index("category").loc["GEMM", "time ms"] == pytest.approx(0.0005)
    assert summary["count"] == 5 and summary["mean us"] == pytest.approx(0.5)
    assert summary["min us"] == pytest.approx(0.4)


def test_an_unknown_csv_is_refused_with_its_name(tmp_path: Path) -> None:
    odd = tmp_path / "numbers.csv"
    odd.write_text("a,b\n1,2\n")

    with pytest.raises(UserError, match="unrecognized profile format") as err:
        read_trace(odd)

    assert str(odd) in str(err.value)


# --- malformed cells: one line naming the file, the line and the column ---

_V3_HEADER = '"Kind","Agent_Id","Queue_Id","Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp"\n'


@pytest.mark.parametrize(("start", "end", "expected"), [
    ("abc", "3000", "line 2, column Start_Timestamp: expected a time in ns ≥ 0, found 'abc'"),
    ("1000", "nan", "line 2, column End_Timestamp: expected a time in ns ≥ 0, found 'nan'"),
    ("1000", "inf", "line 2, column End_Timestamp: expected a time in ns ≥ 0, found 'inf'"),
    ("-5", "3000", "line 2, column Start_Timestamp: expected a time in ns ≥ 0"),
    ("3000", "1000", "line 2: End_Timestamp 1000 is before Start_Timestamp 3000"),
], ids=["text", "nan", "inf", "negative", "end-before-start"])
def test_a_rocprofv3_kernel_trace_with_a_bad_timestamp_names_the_line(tmp_path: Path, start: str, end: str,
                                                                       expected: str) -> None:
    trace = tmp_path / "908_kernel_trace.csv"
    trace.write_text(_V3_HEADER + f'"KERNEL_DISPATCH","Agent 4",1,"k",11,{start},{end}\n')

    with pytest.raises(UserError) as err:
        read_trace(trace)

    assert str(err.value).startswith(f"{trace}: {expected}")


def test_rocprofv3_json_with_a_text_timestamp_names_the_record(tmp_path: Path) -> None:
    doc = {"rocprofiler-sdk-tool": [{"buffer_records": {"kernel_dispatch": [
        {"start_timestamp": 10, "end_timestamp": 20}, {"start_timestamp": "x", "end_timestamp": 30}]}}]}
    trace = tmp_path / "results.json"
    trace.write_text(json.dumps(doc))

    with pytest.raises(UserError) as err:
        read_trace(trace)

    assert str(err.value) == (f"{trace}: rocprofiler-sdk-tool[0].buffer_records.kernel_dispatch[1].start_timestamp: "
                              "expected a time in ns ≥ 0, found 'x'")


@pytest.mark.parametrize(("duration", "expected"), [
    ("abc", "line 2, column Duration (ns): expected a number, found 'abc'"),
    ("NaN", "line 2, column Duration (ns): expected a finite number ≥ 0, found 'NaN'"),
    ("-1", "line 2, column Duration (ns): expected a finite number ≥ 0, found '-1'"),
])
def test_an_nsys_gpu_trace_with_a_bad_duration_names_the_line(tmp_path: Path, duration: str, expected: str) -> None:
    trace = tmp_path / "report_cuda_gpu_trace.csv"
    trace.write_text(f"Start (ns),Duration (ns),CorrId,Device,Strm,Name\n1000,{duration},7,0,7,k\n")

    with pytest.raises(UserError) as err:
        read_trace(trace)

    assert str(err.value) == f"{trace}: {expected}"


def test_nsys_device_and_stream_zero_stay_zero(tmp_path: Path) -> None:
    trace = tmp_path / "report_cuda_gpu_trace.csv"
    trace.write_text("Start (ns),Duration (ns),CorrId,Device,Strm,Name\n1000,500,0,0,0,k\n")

    event = next(read_trace(trace).events())

    assert (event.device, event.stream, event.correlation) == (0, 0, 0)


def test_a_rocprof_stats_csv_with_fractional_calls_is_refused(tmp_path: Path) -> None:
    stats = tmp_path / "results.stats.csv"
    stats.write_text('"Name","Calls","TotalDurationNs","AverageNs","Percentage"\n"k",2.5,8000,2000,100.0\n')

    with pytest.raises(UserError, match=r"line 2, column Calls: expected a whole number ≥ 0, found '2.5'"):
        read_trace(stats)
