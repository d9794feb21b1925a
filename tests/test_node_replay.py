"""Node replay (``invoke perf-report -r``): the GEMM/CONV shapes that make 99 % of their family's time, taken
from the real H100/MI300X/MI250 traces and checked against a join done here from the raw JSON; the vendor
command lines agree with the kernels the trace shows; without a GPU the command writes the replay set and the
command lines, then stops with one line."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from analysis.traces import read_trace
from analysis.traces.analyses.ops import attribute
from analysis.traces.analyses.replay import conv_problem, read_replay_set, replay_inputs, select, trace_shapes
from analysis.traces.model import OpShape
from analysis.traces.reports.bench_commands import (
    commands_for,
    cutlass_us,
    hipblaslt_us,
    miopen_us,
)
from analysis.traces.reports.perf_report import generate_perf_reports
from analysis.traces.reports.replay_report import comparison_markdown, comparison_table, replay_paths
from foundation.errors import UserError
from prbench.stages.command_lines import node_replay_command
from tests.support.cli_support import invoke_in_process
from tests.support.trace_support import kernels_by_op_call

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
ROOT = Path(__file__).resolve().parents[1]
H100 = FIXTURES / "h100_bert-small-uncased.json.gz"
MI300 = FIXTURES / "mi300_bert-small-uncased.json.gz"
MI250 = FIXTURES / "mi250_minitoy_train_rocm6.2.json.gz"

# These import torch (stages.node_replay) in the test process: one xdist worker runs them all and pays for it once.
TORCH_IN_PROCESS = pytest.mark.xdist_group("torch-in-process")


def _kernels_by_op_call(path: Path) -> list[tuple[str, str, list[tuple[str, float]]]]:
    """Every addmm/mm call of the raw trace: its name, its recorded inputs (dims and strides), its kernels."""
    return [(op["name"], json.dumps([op["args"]["Input Dims"], op["args"].get("Input Strides")]), inside)
            for op, inside in kernels_by_op_call(path)]


@pytest.mark.parametrize("path", [H100, MI300, MI250], ids=["h100", "mi300x", "mi250"])
def test_each_gemm_shape_has_the_calls_and_kernel_time_of_an_independent_join(path: Path) -> None:
    expected: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for op, key, inside in _kernels_by_op_call(path):
        if inside:  # only calls that launched something are shapes
            expected[(op, key)][0] += 1
            expected[(op, key)][1] += sum(us for _, us in inside)
    trace = read_trace(path)

    shapes, family_ms = trace_shapes(trace, attribute(trace))

    found = {}
    for s in shapes:
        tensors = [t for t in s.inputs if t["kind"] == "tensor"]
        dims = [t["sizes"] for t in tensors] + [[] for t in s.inputs if t["kind"] != "tensor"]
        strides = [t["strides"] for t in tensors] + [[] for t in s.inputs if t["kind"] != "tensor"]
        found[(s.op, json.dumps([dims, strides]))] = (s.calls, s.trace_total_us)
    assert set(found) == set(expected)
    for key, (calls, us) in expected.items():
        assert found[key][0] == calls
        assert found[key][1] == pytest.approx(us, abs=1e-3 * calls)
    assert family_ms["GEMM"] * 1e3 == pytest.approx(sum(us for _, us in expected.values()), abs=1e-2)
    assert family_ms["CONV"] == 0.0


def test_the_selection_stops_once_99_percent_of_the_family_time_is_covered() -> None:
    trace = read_trace(MI250)
    shapes, family_ms = trace_shapes(trace, attribute(trace))

    chosen, times = select(shapes, family_ms)
    only_first, _ = select(shapes, family_ms, coverage=0.5)

    # addmm 24.48 µs (65.9 %), then mm 12.64 µs: 65.9 % < 99 %, so both are needed; at 50 % the first is enough.
    assert [s.op for s in chosen] == ["aten::addmm", "aten::mm"]
    assert [s.op for s in only_first] == ["aten::addmm"]
    assert times["GEMM"].selected_ms == pytest.approx(times["GEMM"].ms)


def _cijk_transposes(name: str) -> tuple[str, str]:
    """Tensile's kernel name spells the operands' index order: A 'Ailk' is not transposed, 'Alik' is; B 'Bljk'
    is not transposed, 'Bjlk' is (as TraceLens' kernel_name_parser reads them)."""
    m = re.search(r"Cijk_A(\w{3})_B(\w{3})_", name)
    assert m, name
    return ("N" if m.group(1) == "ilk" else "T"), ("N" if m.group(2) == "ljk" else "T")


@pytest.mark.parametrize("path", [MI300, MI250], ids=["mi300x", "mi250"])
def test_hipblaslt_bench_transposes_agree_with_the_hipblaslt_kernels_in_the_trace(path: Path) -> None:
    """The GEMM kernel each shape launched names its transposes; the command derived from the recorded strides
    must ask hipblaslt-bench for the same ones."""
    kernel_of = {(op, key): next(n for n, _ in inside if n.startswith("Cijk_"))
                 for op, key, inside in _kernels_by_op_call(path) if inside}
    trace = read_trace(path)
    shapes, _ = trace_shapes(trace, attribute(trace))
    assert shapes
    for s in shapes:
        tensors = [t for t in s.inputs if t["kind"] == "tensor"]
        key = json.dumps([[t["sizes"] for t in tensors] + [[] for t in s.inputs if t["kind"] != "tensor"],
                          [t["strides"] for t in tensors] + [[] for t in s.inputs if t["kind"] != "tensor"]])
        line = commands_for(s.family, s.problem, s.dtype)[0]["hipblaslt-bench"][0]
        trans = re.search(r"--transA (\w) --transB (\w)", line)
        assert trans and (trans.group(1), trans.group(2)) == _cijk_transposes(kernel_of[(s.op, key)]), line


def test_a_linear_layer_becomes_a_column_major_gemm_with_the_bias_in_the_epilogue() -> None:
    trace = read_trace(H100)
    shapes, _ = trace_shapes(trace, attribute(trace))
    head = next(s for s in shapes if s.problem["n"] == 30522)  # the LM head: x[141, 512] · W[30522, 512]ᵀ + b

    commands, notes = commands_for(head.family, head.problem, head.dtype)

    assert (head.problem["m"], head.problem["k"], head.problem["a_layout"], head.problem["b_layout"]) == (
        141, 512, "row", "column")
    assert commands["hipblaslt-bench"] == [
        "hipblaslt-bench --transA T --transB N -m 30522 -n 141 -k 512 --lda 512 --ldb 512 --ldc 30522 "
        "--ldd 30522 --a_type bf16_r --b_type bf16_r --c_type bf16_r --d_type bf16_r --compute_type f32_r "
        "--alpha 1 --beta 0 --bias_vector --bias_type bf16_r --cold_iters 10 --iters 100 --use_gpu_timer"]
    assert commands["cutlass_profiler"] == [
        "cutlass_profiler --operation=Gemm --m=141 --n=30522 --k=512 --A=bf16:row --B=bf16:column --C=bf16:row "
        "--accum=f32 --alpha=1 --beta=1 --batch_count=1 --providers=cutlass,cublas --warmup-iterations=10 "
        "--profiling-iterations=100"]
    assert "bias" in notes["cutlass_profiler"]


# Convolutions: no trace at hand has one, so the recorded inputs below are written the way Kineto records them.
CONV_TYPES = ("float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList",
              "Scalar")


def _conv(x_strides: list[int], transposed: bool = False) -> OpShape:
    weight = [64, 16, 3, 3] if transposed else [128, 32, 3, 3]
    bias = [32] if transposed else [128]  # out channels: 16 per group × 2 groups, or 128
    return OpShape(([8, 64, 56, 56], weight, bias, [], [], [], [], [], []), CONV_TYPES,
                   ("", "", "", "[2, 2]", "[1, 1]", "[1, 1]", str(transposed), "[1, 1]" if transposed else "[0, 0]",
                    "2"), (x_strides, [], [1], [], [], [], [], [], []))


def test_a_grouped_strided_conv_becomes_miopen_driver_and_cutlass_profiler_lines() -> None:
    inputs = replay_inputs(_conv([200704, 3136, 56, 1]))
    assert inputs is not None
    problem = conv_problem("aten::convolution", inputs)

    commands, notes = commands_for("CONV", problem, "float32")

    assert problem is not None and (problem["k"], problem["groups"], problem["layout"]) == (128, 2, "NCHW")
    assert commands["MIOpenDriver"] == [
        "MIOpenDriver conv -n 8 -c 64 -H 56 -W 56 -k 128 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -l 1 -j 1 -g 2 -m conv "
        "-b 1 -F 1 -t 1 -V 0 -i 100"]
    assert commands["cutlass_profiler"][0].startswith(
        "cutlass_profiler --operation=Conv2d --conv_kind=fprop --n=8 --h=56 --w=56 --c=64 --k=128 --r=3 --s=3 "
        "--pad_h=1 --pad_w=1 --stride_h=2 --stride_w=2 --dilation_h=1 --dilation_w=1 --g=2 --Activation=f32:nhwc")
    assert "NHWC" in notes["cutlass_profiler"]


def test_channels_last_transposed_and_backward_convs_keep_their_layout_mode_and_passes() -> None:
    nhwc = conv_problem("aten::convolution", replay_inputs(_conv([200704, 1, 3584, 64])) or ())
    transposed = conv_problem("aten::convolution", replay_inputs(_conv([200704, 3136, 56, 1], True)) or ())
    backward_inputs = replay_inputs(OpShape(
        ([8, 128, 28, 28], [8, 64, 56, 56], [128, 64, 3, 3], [], [], [], [], [], [], [], []),
        ("float",) * 3 + ("ScalarList",) * 4 + ("Scalar", "ScalarList", "Scalar", "ScalarList"),
        ("", "", "", "[128]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, False]")))
    backward = conv_problem("aten::convolution_backward", backward_inputs or ())

    assert nhwc is not None and transposed is not None and backward is not None
    assert "-I NHWC -O NHWC -f NHWC" in commands_for("CONV", nhwc, "float16")[0]["MIOpenDriver"][0]
    trans_line = commands_for("CONV", transposed, "bfloat16")[0]["MIOpenDriver"][0]
    assert trans_line.startswith("MIOpenDriver convbfp16 -n 8 -c 64 -H 56 -W 56 -k 32 ")  # 16 per group × 2
    assert "-m trans -Y 1 -X 1" in trans_line
    assert backward["passes"] == ["backward_data", "backward_weight"] and not backward["bias"]
    commands, _ = commands_for("CONV", backward, "float32")
    assert " -F 6 " in commands["MIOpenDriver"][0]
    assert [re.search(r"--conv_kind=(\w+)", c).group(1) for c in commands["cutlass_profiler"]] == ["dgrad",
                                                                                                     "wgrad"]


def test_the_time_each_tool_prints_is_read_from_its_output() -> None:
    hipblaslt = ("[0]:transA,transB,M,N,K,alpha,lda,stride_a,beta,ldb,stride_b,ldc,stride_c,ldd,stride_d,d_type,"
                 "compute_type,activation_type,bias_vector,hipblaslt-Gflops,us\n"
                 "[0]:N,N,128,128,128,1,128,16384,0,128,16384,128,16384,128,16384,f32_r,f32_r,none,0, 415.278, 10.1\n")
    miopen = ("MIOpen Backward Data Conv. Algorithm: 1\n"
              "GPU Kernel Time Backward Data Conv. Elapsed: 0.020000 ms (average)\n"
              "GPU Kernel Time Backward Weights Conv. Elapsed: 0.012380 ms (average)\n")
    cutlass = ("  Provider: CUTLASS\n OperationKind: gemm\n Runtime: 0.98647  ms\n"
               "  Provider: CUBLAS\n OperationKind: gemm\n Runtime: 1.25  ms\n")

    assert hipblaslt_us(hipblaslt) == pytest.approx(10.1)
    assert miopen_us(miopen) == pytest.approx(32.38)
    assert cutlass_us(cutlass) == pytest.approx(1250.0)  # the library PyTorch calls, not CUTLASS's best
    assert hipblaslt_us("hipblaslt error: no solution\n") is None and miopen_us("") is None


def test_the_replay_set_file_holds_the_shapes_and_refuses_an_edited_one(tmp_path: Path) -> None:
    (tmp_path / "mi300").mkdir()
    shutil.copy(MI300, tmp_path / "mi300")
    done = generate_perf_reports(tmp_path, formats=["md"], replay=True)
    paths = replay_paths(done[0][0].output_base)

    data = read_replay_set(paths["set"])

    assert [e["id"] for e in data["shapes"]] == ["gemm-1", "gemm-2", "gemm-3", "gemm-4"]
    assert data["platform"] == "rocm" and data["devices"] == ["AMD Instinct MI300X VF"]
    assert sum(e["family_percent"] for e in data["shapes"]) == pytest.approx(100.0, abs=0.01)
    assert data["families"]["GEMM"]["selected_ms"] == pytest.approx(data["families"]["GEMM"]["ms"])
    script = paths["commands"].read_text()
    assert script.count("hipblaslt-bench --transA") == 4 and script.count("cutlass_profiler --operation=Gemm") == 4
    data["shapes"][0]["inputs"][1]["sizes"] = ["141", 512]
    paths["set"].write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"shapes\[0\]\.inputs\[1\]: expected sizes"):
        read_replay_set(paths["set"])


def test_the_comparison_puts_replayed_next_to_in_trace_time_and_lists_what_failed() -> None:
    replay_set = {"source": ["mi300/trace.json.gz"], "devices": ["AMD Instinct MI300X VF"],
                  "families": {"GEMM": {"ms": 0.01, "replayable_ms": 0.01, "selected_ms": 0.01}},
                  "shapes": [{"id": "gemm-1", "family": "GEMM", "op": "aten::mm", "dtype": "bfloat16", "calls": 2,
                              "trace_mean_us": 5.0, "problem": {"m": 4, "n": 8, "k": 16, "batch": 1,
                                                                "a_layout": "row", "b_layout": "row",
                                                                "bias": "none"}},
                             {"id": "gemm-2", "family": "GEMM", "op": "aten::mm", "dtype": "bfloat16", "calls": 1,
                              "trace_mean_us": 2.0, "problem": {"m": 2, "n": 2, "k": 2, "batch": 1,
                                                                "a_layout": "row", "b_layout": "row",
                                                                "bias": "none"}}]}
    results = {"device": "AMD Instinct MI300X", "torch": "2.9", "warmup": 10, "iterations": 100, "results": [
        {"id": "gemm-1", "replay_median_us": 6.0, "replay_std_us": 0.1, "error": None,
         "tools": {"hipblaslt-bench": {"us": 4.5, "error": None}}},
        {"id": "gemm-2", "replay_median_us": None, "error": "RuntimeError: no kernel", "tools": {}}]}

    table = comparison_table(replay_set, results)
    markdown = comparison_markdown(table, replay_set, results)

    assert table["replay / trace"].tolist()[0] == pytest.approx(1.2)
    assert table["hipblaslt-bench / trace"].tolist()[0] == pytest.approx(0.9)
    assert "gemm-2 (replay): RuntimeError: no kernel" in markdown
    assert "Replayed on AMD Instinct MI300X" in markdown and "| gemm-1 |" in markdown


@TORCH_IN_PROCESS
def test_the_host_builds_the_command_line_the_stage_parses(tmp_path: Path) -> None:
    from stages.node_replay import build_parser

    command = node_replay_command(tmp_path / "set.json", tmp_path / "out.json", iterations=20)
    args = build_parser().parse_args(command.args)

    assert (args.replay_set, args.out, args.iterations, args.warmup) == (tmp_path / "set.json",
                                                                         tmp_path / "out.json", 20, 10)


def _invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return invoke_in_process("-r", str(ROOT), *args)


@TORCH_IN_PROCESS
@pytest.mark.integration
def test_without_a_gpu_r_writes_the_replay_set_and_commands_then_stops_with_one_line(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the replay runs (see the gpu test)")
    (tmp_path / "h100").mkdir()
    shutil.copy(H100, tmp_path / "h100")

    result = _invoke("perf-report", "-b", str(tmp_path), "-r", "--format", "md")

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: node replay needs a GPU: no CUDA or ROCm device found (torch {torch.__version__}, CPU only); "
        f"the replay set and the vendor command lines are in {tmp_path / 'h100'}"]
    assert "Traceback" not in result.stdout + result.stderr
    for suffix in ("_perf_report.md", "_perf_report_replay_set.json", "_perf_report_replay_commands.sh"):
        assert (tmp_path / "h100" / f"h100{suffix}").is_file()
    assert "wrote " in result.stdout and not (tmp_path / "h100" / "h100_perf_report_replay.md").exists()


@pytest.mark.gpu
def test_on_a_gpu_every_shape_is_replayed_and_compared_with_its_trace_time(tmp_path: Path) -> None:
    (tmp_path / "h100").mkdir()
    shutil.copy(H100, tmp_path / "h100")

    result = _invoke("perf-report", "-b", str(tmp_path), "-r", "--format", "md")

    assert result.returncode == 0, result.stderr
    results = json.loads((tmp_path / "h100" / "h100_perf_report_replay_results.json").read_text())
    assert len(results["results"]) == 4 and results["iterations"] >= 10
    assert all(r["error"] is None and r["replay_median_us"] > 0 for r in results["results"])
    table = (tmp_path / "h100" / "h100_perf_report_replay.md").read_text()
    assert table.count("| gemm-") == 4 and "replay / trace" in table


@TORCH_IN_PROCESS
def test_the_recorded_inputs_rebuild_a_call_torch_runs_with_the_recorded_strides() -> None:
    """The replay's own tensor builder and call, on the CPU: each fixture GEMM and the written convs run, and
    the operands keep the layout the trace recorded (a transposed weight stays a transposed view)."""
    torch = pytest.importorskip("torch")
    from stages.node_replay import build_call, make_tensor

    trace = read_trace(MI250)
    shapes, _ = trace_shapes(trace, attribute(trace))
    convs = [("aten::convolution", replay_inputs(_conv([200704, 1, 3584, 64]))),
             ("aten::convolution", replay_inputs(_conv([200704, 3136, 56, 1], True)))]
    entries = [{"op": s.op, "inputs": list(s.inputs)} for s in sorted(shapes, key=lambda s: s.op)] + [
        {"op": op, "inputs": list(inputs or ())} for op, inputs in convs]

    outputs = [build_call(torch, entry, torch.device("cpu"))() for entry in entries]
    weight = make_tensor(torch, {"sizes": [512, 30522], "strides": [1, 512], "dtype": "bfloat16"}, "cpu")

    assert [tuple(o.shape) for o in outputs] == [(5, 128), (128, 128), (8, 128, 28, 28), (8, 32, 112, 112)]
    assert weight.stride() == (1, 512) and weight.dtype == torch.bfloat16 and not weight.is_contiguous()


GPU_RUN = Path(__file__).parent / "fixtures" / "gpu_h100" / "base" / "profiles"


@TORCH_IN_PROCESS
@pytest.mark.parametrize("trace", ["BertForMaskedLM.json.gz", "graphs/0_inference_xo4ryawt.profile.json.gz"])
def test_the_gemms_of_a_compiled_model_replay_with_their_recorded_out_buffer(trace: str) -> None:
    """Given the H100 trace of a model compiled by Inductor, whose GEMMs are ``extern_kernels.mm(a, b, out=buf)``
    calls (the trace records the out tensor as a third input), every shape rebuilds a call that runs and writes
    into that buffer. On the H100 each of them failed: three arguments picked ``mm.dtype``, whose third is a dtype."""
    torch = pytest.importorskip("torch")
    from stages.node_replay import build_call

    trace_data = read_trace(GPU_RUN / trace)
    shapes, _ = trace_shapes(trace_data, attribute(trace_data))
    raw = json.loads(gzip.decompress((GPU_RUN / trace).read_bytes()))["traceEvents"]
    gemm_ops = {e["name"] for e in raw if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::bmm",
                                                                                       "aten::addmm")}

    outputs = {s.op: build_call(torch, {"op": s.op, "inputs": list(s.inputs)}, torch.device("cpu"))()
               for s in sorted(shapes, key=lambda s: s.op)}

    assert set(outputs) == gemm_ops == {"aten::mm", "aten::bmm", "aten::addmm"}
    assert {op: tuple(o.shape) for op, o in outputs.items() if op != "aten::mm"} == {
        "aten::bmm": (4, 32, 32), "aten::addmm": (64, 1000)}


@TORCH_IN_PROCESS
def test_each_replayed_call_is_timed_after_an_l2_flush_so_its_launch_is_not_timed() -> None:
    """The replay times with the kernel stage's timer: a flush is enqueued before every timed call's start event
    (it keeps the GPU busy while the call is dispatched), and the events' milliseconds become microseconds."""
    torch = pytest.importorskip("torch")
    from stages.kernels import DeviceEventTimer
    from stages.node_replay import replay_shape

    log: list[str] = []

    class Event:
        def record(self) -> None:
            log.append("event")

        def elapsed_time(self, end: object) -> float:
            return 0.006

    timer = DeviceEventTimer(Event, lambda: log.append("sync"), lambda: log.append("flush"))
    entry = {"id": "gemm-1", "op": "aten::mm", "inputs": [
        {"kind": "tensor", "sizes": [8, 4], "strides": None, "dtype": "float32"},
        {"kind": "tensor", "sizes": [4, 2], "strides": None, "dtype": "float32"}]}

    result = replay_shape(torch, timer, entry, warmup=2, iterations=10, device=torch.device("cpu"))

    assert result["error"] is None and result["samples"] == 10
    assert result["replay_median_us"] == pytest.approx(6.0)
    timed = log[log.index("sync") + 1:]
    assert timed[:3] == ["flush", "event", "event"] and timed.count("flush") == 10


@TORCH_IN_PROCESS
def test_a_vendor_tool_on_path_is_run_and_its_printed_time_read(tmp_path: Path) -> None:
    """The stage's tool runner with stand-ins for hipblaslt-bench: one prints its CSV, one fails."""
    from stages.node_replay import run_tool

    good = tmp_path / "hipblaslt-bench"
    good.write_text("#!/bin/sh\necho 'transA,transB,M,N,K,hipblaslt-Gflops,us'\necho \"T,N,$4,$6,$8, 99.5, 12.25\"\n")
    bad = tmp_path / "broken-bench"
    bad.write_text("#!/bin/sh\necho 'rocblaslt error: no solution found' >&2\nexit 3\n")
    for tool in (good, bad):
        tool.chmod(0o755)

    found = run_tool("hipblaslt-bench", [f"{good} --transA T -m 512 -n 141 -k 512"] * 2, timeout_s=30)
    failed = run_tool("hipblaslt-bench", [f"{bad} -m 1"], timeout_s=30)

    assert found == {"us": 24.5, "error": None, "commands": [f"{good} --transA T -m 512 -n 141 -k 512"] * 2}
    assert failed["us"] is None and failed["error"] == "exit 3, no time printed: rocblaslt error: no solution found"


def test_a_dry_run_with_replay_names_the_replay_files_too(tmp_path: Path) -> None:
    (tmp_path / "mi250").mkdir()
    shutil.copy(MI250, tmp_path / "mi250")

    done = generate_perf_reports(tmp_path, formats=["md"], dry_run=True, replay=True)

    assert [p.name for p in done[0][1]] == ["mi250_perf_report.md", "mi250_perf_report_replay_set.json",
                                            "mi250_perf_report_replay_commands.sh"]
    assert not any(p.exists() for p in done[0][1])
