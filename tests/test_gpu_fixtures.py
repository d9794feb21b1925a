"""Real GPU output read back on the CPU: what one `invoke compare` wrote on an NVIDIA H100 goes through the
readers a user's next command runs.

The fixtures in ``tests/fixtures/gpu_h100/`` come from ``benchmarks/gpu_check.sh`` on a lent H100 80GB HBM3
(torch 2.11.0+cu130, Triton 3.6.0; its README says what each file is): BertForMaskedLM compared with a PR that
turns persistent reductions off (``looped-reductions.patch``). They hold both sides' organized Triton kernels
with their ``index.csv`` and compiled graph module, the paired kernel rounds with the per-side tables the run
derived from them, a Kineto trace of the compiled model and of its graph module run with ``-p``, an A/A of the
same machine, and the node replay of ``tests/fixtures/traces/h100_bert-small-uncased.json.gz`` on that H100.
Nothing here needs a GPU: every test parses, and checks the project's answer against a count or a computation
done in the test from the raw file (JSON events, CSV rows, kernel text), not against the same code run twice.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import shutil
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis.kernels.compare import pair_kernels, read_kernels_csv
from analysis.kernels.identity import identify_triton
from analysis.traces import read_trace
from analysis.traces.analyses.breakdown import launch_index
from analysis.traces.analyses.replay import read_replay_set
from analysis.traces.reports.perf_report import generate_perf_reports
from analysis.traces.reports.replay_report import comparison_markdown, comparison_table, read_results, replay_paths
from foundation.formats.kernel_index import embedded_kernels, graph_module_problem, launch_counts
from foundation.formats.paired_rounds import read_rounds, side_samples
from tests.support.cli_support import invoke_in_process
from tests.support.trace_support import addmm_calls_by_shape

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import aa_noise  # noqa: E402

H100 = Path(__file__).parent / "fixtures" / "gpu_h100"
SIDES = ("base", "pr")
MODEL_TRACE = H100 / "base" / "profiles" / "BertForMaskedLM.json.gz"
GRAPH_TRACE = H100 / "base" / "profiles" / "graphs" / "0_inference_xo4ryawt.profile.json.gz"
GRAPH_TEXT = H100 / "base" / "profiles" / "graphs" / "0_inference_xo4ryawt.profile.txt"
REPLAYED_TRACE = Path(__file__).parent / "fixtures" / "traces" / "h100_bert-small-uncased.json.gz"
REPLAY_RESULTS = H100 / "replay" / "h100_bert-small-uncased_replay_results.json"
# Every CUDA launch API a Kineto trace names (runtime and driver); which one a kernel came through is read here
# from the trace, not assumed.
LAUNCH_APIS = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"}
# A looped reduction's walk over its reduction axis (``range`` or, Triton 3.x, ``tl.range``).
LOOP = re.compile(r"^\s+for r0_offset in (?:tl\.)?range\(", re.M)


def _index(side: str) -> list[dict[str, str]]:
    with open(H100 / side / "organized" / "index.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _graph_module(side: str) -> Path:
    [path] = (H100 / side / "organized" / "graphs").glob("0_inference_*.py")
    return path


def _without_prefix(kernel_name: str) -> str:
    """``triton_per_fused_x_3`` → ``fused_x_3``: what a kernel computes, whichever Triton template made it."""
    return re.sub(r"^triton_[a-z]{3}_", "", kernel_name)


# --- 1. kernel identity of real CUDA Triton kernels ----------------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
def test_every_h100_kernel_file_identifies_as_the_index_written_on_the_h100_says(side: str) -> None:
    """Given a side's organized kernels from the H100, recomputing each file's identity here gives its index row."""
    organized = H100 / side / "organized"
    rows = _index(side)
    on_disk = sorted(str(p.relative_to(organized)) for p in organized.glob("*/*.py") if p.parent.name != "graphs")

    assert sorted(r["path"] for r in rows) == on_disk and len(rows) == 11
    for row in rows:
        text = (organized / row["path"]).read_text(encoding="utf-8")
        identity = identify_triton(text)

        assert (identity.category, identity.kernel_name, identity.body_hash, identity.shape_key,
                identity.legacy_key) == (row["category"], row["kernel_name"], row["body_hash"], row["shape_key"],
                                         row["legacy_key"]), row["path"]
        # What the file says of itself, read here: its directory, its name, its decorator, its launch count.
        assert row["path"] == f"{identity.category}/{identity.kernel_name}.py"
        assert f"@triton_heuristics.{row['category']}(" in text
        assert re.search(r"^# KERNEL CALLS: (\d+)$", text, re.M).group(1) == row["calls"]


def test_the_pr_leaves_the_five_pointwise_kernels_alone_and_rewrites_the_six_reductions_as_loops() -> None:
    """Given both sides' index of the looped-reductions PR, the pointwise kernels keep their identity and the
    reductions keep their shape under a new body; the kernel comparison pairs exactly the unchanged ones by body."""
    base = {_without_prefix(r["kernel_name"]): r for r in _index("base")}
    pr = {_without_prefix(r["kernel_name"]): r for r in _index("pr")}
    assert set(base) == set(pr)
    pointwise = sorted(k for k, r in base.items() if r["category"] == "pointwise")
    reductions = sorted(k for k, r in base.items() if r["category"] != "pointwise")
    assert len(pointwise) == 5 and len(reductions) == 6

    for key in pointwise:
        assert (base[key]["kernel_name"], base[key]["body_hash"], base[key]["shape_key"]) == (
            pr[key]["kernel_name"], pr[key]["body_hash"], pr[key]["shape_key"])
    for key in reductions:
        base_text = (H100 / "base" / "organized" / base[key]["path"]).read_text(encoding="utf-8")
        pr_text = (H100 / "pr" / "organized" / pr[key]["path"]).read_text(encoding="utf-8")
        assert base[key]["kernel_name"].startswith("triton_per_") and pr[key]["kernel_name"].startswith("triton_red_")
        assert (base[key]["category"], pr[key]["category"]) == ("persistent_reduction", "reduction")
        assert base[key]["shape_key"] == pr[key]["shape_key"] and base[key]["body_hash"] != pr[key]["body_hash"]
        # The PR's change, seen in the raw text: the looped kernel walks the reduction in blocks, the persistent
        # one holds it whole.
        assert LOOP.search(pr_text) and not LOOP.search(base_text)

    pairing = pair_kernels(read_kernels_csv(H100 / "base" / "kernels.csv"),
                           read_kernels_csv(H100 / "pr" / "kernels.csv"))
    base_names = pd.read_csv(H100 / "base" / "kernels.csv")["kernel_name"]
    pr_names = pd.read_csv(H100 / "pr" / "kernels.csv")["kernel_name"]
    by_body = pairing.pairs[pairing.pairs["matched_by"] == "body_hash+shape_key"]
    assert sorted(zip(base_names[by_body["base_row"]], pr_names[by_body["pr_row"]], strict=True)) == [
        (base[k]["kernel_name"], pr[k]["kernel_name"]) for k in pointwise]


# --- 2. the compiled graph module -----------------------------------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
def test_the_h100_graph_module_runs_as_it_is_and_launches_the_kernels_its_index_lists(side: str) -> None:
    """Given a side's compiled graph module from the H100, it is whole, it embeds the index's kernels (same
    identity as their files) and its ``call()`` launches each as many times as the index says."""
    path = _graph_module(side)
    source = path.read_text(encoding="utf-8")
    rows = {r["kernel_name"]: r for r in _index(side)}
    # Counted here: ``name = async_compile.triton('name', '''`` and, in Runner.call, ``name.run(buf...`` (each
    # embedded harness also has one ``name.run(*args, ...)`` line, which is not a launch of the graph).
    embedded_here = re.findall(r"^(\w+) = async_compile\.triton\('\1', '''", source, re.M)
    launches_here = {name: len(re.findall(rf"^\s+{name}\.run\((?!\*args)", source, re.M)) for name in rows}

    assert graph_module_problem(source) is None
    kernels = embedded_kernels(source)
    assert sorted(k.variable for k in kernels) == sorted(embedded_here) == sorted(rows)
    assert dict(launch_counts(source, list(rows))) == launches_here
    assert launches_here == {name: int(r["calls"]) for name, r in rows.items()}
    assert sum(launches_here.values()) == 20
    for kernel in kernels:
        identity = identify_triton(kernel.source)
        assert (identity.body_hash, identity.shape_key) == (rows[kernel.variable]["body_hash"],
                                                            rows[kernel.variable]["shape_key"])
    assert {r["graphs"] for r in rows.values()} == {f"BertForMaskedLM/{path.stem}"}


# --- 3. the Kineto traces: perf-report ------------------------------------------------------------------------


def _events(path: Path) -> list[dict[str, Any]]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def _innermost(intervals: list[dict[str, Any]], at: dict[str, Any]) -> dict[str, Any] | None:
    """The latest-started interval on ``at``'s thread whose [ts, ts + dur) holds ``at['ts']``."""
    around = [e for e in intervals if e["tid"] == at["tid"] and e["ts"] <= at["ts"] < e["ts"] + e["dur"]]
    return max(around, key=lambda e: (e["ts"], -e["dur"])) if around else None


def _region_label(name: str) -> str:
    m = re.fullmatch(r"## Call CompiledFxGraph (\w+) ##", name)
    return f"CompiledFxGraph {m.group(1)}" if m else name


def _expected_kernel_rows(events: list[dict[str, Any]]) -> dict[tuple[str, str, str], tuple[int, float]]:
    """(parent op, graph, kernel) → (count, total µs), joined here: kernel → its launch (same correlation id) →
    the innermost cpu_op around the launch; the graph is the innermost compiled region around the launch, and an
    Inductor kernel's own record function (``triton_*``) stands for that graph."""
    kernels = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("name") in LAUNCH_APIS}
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    regions = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation") and e.get("ph") == "X"
               and (e["name"].startswith(("## Call CompiledFxGraph ", "Torch-Compiled Region"))
                    or e["name"] == "CompiledFunction")]
    rows: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for kernel in kernels:
        launch = launches[kernel["args"]["correlation"]]
        op, region = _innermost(ops, launch), _innermost(regions, launch)
        graph = _region_label(region["name"]) if region else ""
        parent = op["name"] if op else "(no launching op)"
        if graph and parent.startswith("triton_"):
            parent = graph
        rows[(parent, graph, kernel["name"])][0] += 1
        rows[(parent, graph, kernel["name"])][1] += kernel["dur"]
    return {key: (int(n), us) for key, (n, us) in rows.items()}


def _perf_report_csvs(tmp_path: Path, trace: Path, folder: str) -> Path:
    (tmp_path / folder).mkdir()
    shutil.copy(trace, tmp_path / folder)
    result = invoke_in_process("perf-report", "-b", str(tmp_path), "--format", "csv")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    return tmp_path / folder / f"{folder}_perf_report_csvs"


def _csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False)


@pytest.mark.parametrize(("trace", "triton_parent"), [(MODEL_TRACE, "graph"), (GRAPH_TRACE, "record function")],
                         ids=["model", "graph-p"])
def test_perf_report_of_the_h100_trace_puts_every_kernel_under_the_op_that_launched_it(
        tmp_path: Path, trace: Path, triton_parent: str) -> None:
    """Given the H100's Kineto trace of the compiled model (or of its graph module run with ``-p``), the user runs
    ``invoke perf-report --format csv`` and sees every GPU kernel, all of its time, each under its launching op."""
    events = _events(trace)
    kernels = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    expected = _expected_kernel_rows(events)
    total_us = sum(e["dur"] for e in kernels)
    span_ms = (max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)) / 1e3
    device = json.loads(gzip.decompress(trace.read_bytes()))["deviceProperties"][0]["name"]

    csvs = _perf_report_csvs(tmp_path, trace, "h100")

    traces = _csv(csvs / "traces.csv")
    assert traces[["device", "device events", "kernels without op"]].values.tolist() == [[device, len(kernels), 0]]
    categories = _csv(csvs / "kernel_categories.csv")
    assert categories["count"].sum() == len(kernels)
    assert categories["time ms"].sum() == pytest.approx(total_us / 1e3, abs=1e-5)
    timeline = _csv(csvs / "gpu_timeline.csv").set_index("type")["time ms"]
    assert timeline["computation_time"] == pytest.approx(total_us / 1e3, abs=1e-5)  # one stream: no overlap
    assert timeline["total_time"] == pytest.approx(span_ms, abs=1e-5)
    summary = _csv(csvs / "kernel_summary.csv")
    found = {(r["parent op"], r["graph"], r["kernel"]): (r["count"], r["total ms"]) for _, r in summary.iterrows()}
    assert set(found) == set(expected)
    for key, (count, us) in expected.items():
        assert found[key][0] == count, key
        assert found[key][1] == pytest.approx(us / 1e3, abs=1e-6 * count), key
    triton = {key for key in expected if key[2].startswith("triton_")}
    assert len(triton) == 11 and sum(expected[k][0] for k in triton) == sum(
        e["name"].startswith("triton_") for e in kernels)
    if triton_parent == "graph":  # the model's graph ran inside its compiled region: the kernels are the graph's
        assert {k[0] for k in triton} == {k[1] for k in triton} and len({k[1] for k in triton}) == 1
        assert next(iter(triton))[0].startswith("CompiledFxGraph ")
    else:  # the -p run calls the module directly: each kernel under its own record function
        assert all(k[0] == k[2] and k[1] == "" for k in triton)
    gemm_parents = {k[0] for k in expected if not k[2].startswith("triton_")}
    assert gemm_parents == {"aten::mm", "aten::bmm", "aten::addmm"}


@pytest.mark.parametrize("trace", [MODEL_TRACE, GRAPH_TRACE], ids=["model", "graph-p"])
def test_every_triton_kernel_of_the_h100_trace_is_linked_to_its_launch_by_correlation_id(trace: Path) -> None:
    """Given the H100 trace, the reader links each Triton kernel to the driver/runtime call with its correlation
    id, the one found here in the raw JSON."""
    events = _events(trace)
    launch_name = {e["args"]["correlation"]: e["name"] for e in events
                   if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("name") in LAUNCH_APIS}
    raw_triton = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("triton_")]
    assert raw_triton and all(e["args"]["correlation"] in launch_name for e in raw_triton)
    raw_linked = sum(e["args"]["correlation"] in launch_name for e in events if e.get("cat") == "kernel")

    data = read_trace(trace)
    launch = launch_index(data)

    names = data.names
    triton = [i for i in range(data.n_events) if names[data.name_id[i]].startswith("triton_")]
    assert len(triton) == len(raw_triton)
    assert Counter(names[data.name_id[i]] for i in triton) == Counter(e["name"] for e in raw_triton)
    for i in triton:
        assert launch[i] >= 0
        assert names[data.rt_name_id[launch[i]]] == launch_name[int(data.correlation[i])]
        assert int(data.rt_correlation[launch[i]]) == int(data.correlation[i])
    assert int((launch >= 0).sum()) == raw_linked == data.n_events


def test_the_p_runs_printed_kernel_tables_agree_with_its_trace_and_the_index() -> None:
    """Given the ``-p`` run's printed output, the reader's per-call kernel table is the trace's kernels divided by
    the number of module calls, and the Triton kernels are launched as often as index.csv says."""
    events = _events(GRAPH_TRACE)
    kernels = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    count, total_us = Counter(e["name"] for e in kernels), Counter()
    for e in kernels:
        total_us[e["name"]] += e["dur"]
    # The embedding kernel runs once per module call.
    calls = count["triton_per_fused_add_embedding_expand_gather_native_layer_norm_slice_0"]
    index_calls = {r["kernel_name"]: int(r["calls"]) for r in _index("base")}

    data = read_trace(GRAPH_TEXT)

    assert not data.has_timeline and calls == 9
    assert len(data.aggregates) == len(count)
    for row in data.aggregates:
        # The printed table cuts long (cuBLAS) names: the trace's name starts with it.
        [full] = [name for name in count if name.startswith(row.name)]
        assert row.calls * calls == count[full]
        assert row.total_ns == pytest.approx(1e3 * total_us[full] / calls, abs=1.0)
        if full.startswith("triton_"):
            assert row.calls == index_calls[full]


# --- 4. the paired kernel rounds ------------------------------------------------------------------------------


def test_the_paired_rounds_hold_every_planned_visit_with_its_samples_and_make_the_side_tables() -> None:
    """Given the H100's three kernel rounds, the reader sees each side's visits and samples as planned, and the
    per-side samples and kernel tables the run wrote are what those visits make."""
    pair = H100 / "pair" / "kernels"
    plan = json.loads((pair / "plan.json").read_text())
    raw = [json.loads((pair / f"round-00{n}.json").read_text()) for n in (1, 2, 3)]
    iterations = {s: {b[s]["iterations"] for b in plan["blocks"] if b.get(s)} for s in SIDES}
    assert iterations == {"base": {30}, "pr": {30}}
    # A B B A: each side visits each of its blocks twice per pass.
    planned = {s: 2 * plan["passes"] * sum(1 for b in plan["blocks"] if b.get(s)) for s in SIDES}
    assert planned == {"base": 44, "pr": 44}

    records = read_rounds(sorted(pair.glob("round-*.json")))

    assert [r.round for r in records] == [1, 2, 3]
    for record, data in zip(records, raw, strict=True):
        for side in SIDES:
            visits = [v for v in record.visits if v.side == side]
            assert len(visits) == planned[side] == sum(v["side"] == side for v in data["visits"])
            assert all(len(v.samples) == 30 and not v.error for v in visits)
        assert Counter((v.side, v.item) for v in record.visits) == Counter(
            (v["side"], v["item"]) for v in data["visits"])
    for side in SIDES:
        per_side = side_samples(records, side)
        assert per_side == json.loads((H100 / side / "kernel_samples.json").read_text())
        table = pd.read_csv(H100 / side / "kernels.csv")
        for _, row in table.iterrows():
            rounds = [[x for v in data["visits"] if v["side"] == side and v["item"] == row["path"]
                       for x in v["samples"]] for data in raw]
            assert row["n"] == sum(len(r) for r in rounds) == 3 * 4 * 30
            # the median over rounds of each round's median (the CSV keeps 6 significant digits)
            assert row["median_ms"] == pytest.approx(statistics.median(statistics.median(r) for r in rounds),
                                                     rel=1e-5)
            assert row["min_ms"] == pytest.approx(min(min(r) for r in rounds), rel=1e-5)


# --- 5. the A/A -----------------------------------------------------------------------------------------------


def test_the_h100_aa_read_back_from_its_run_says_what_the_h100_measured(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Given the A/A run's report/summary.json, ``aa_noise.py --run`` reads kernels geomean 0.988 with 1.0 inside
    its interval and nothing flagged, the gate passes, and its JSON is the one the H100 wrote when it measured."""
    summary = json.loads((H100 / "aa" / "summary.json").read_text())
    measured = json.loads((H100 / "aa" / "aa_noise.json").read_text())
    run_id = measured["repeats"][0]["aa"]["run_id"]
    (tmp_path / "runs" / run_id / "report").mkdir(parents=True)
    shutil.copy(H100 / "aa" / "summary.json", tmp_path / "runs" / run_id / "report" / "summary.json")
    kernels = summary["kernels"]
    assert round(kernels["geomean"], 3) == 0.988 and kernels["ci_low"] <= 1.0 <= kernels["ci_high"]
    assert (kernels["improved"] + kernels["regressed"]) / kernels["n"] == 0.0

    code = aa_noise.main(["--run", run_id, "--runs-dir", str(tmp_path / "runs"), "--json",
                          str(tmp_path / "aa.json"), "--max-flagged-share", "0"])

    out = capsys.readouterr().out
    assert code == 0, out
    side = aa_noise.read_summary(tmp_path / "runs", run_id).kernels
    assert (side.geomean, side.ci_low, side.ci_high, side.n) == (kernels["geomean"], kernels["ci_low"],
                                                                 kernels["ci_high"], kernels["n"])
    assert side.ci_contains_one is True and side.flagged_share == 0.0
    assert (f"kernels inconclusive {kernels['geomean']:.3f} [{kernels['ci_low']:.3f}, {kernels['ci_high']:.3f}] "
            "1.0 in CI, flagged 0.0%") in out
    assert "A/A gate passed" in out
    written = json.loads((tmp_path / "aa.json").read_text())
    # The H100's benchmark counted the models' split-half as passed although it could not run (3 rounds): it is
    # now unknown; and each side now says which offset between the sides it saw (none: kernels were not
    # "identical" in that older summary). Everything else is what the H100 wrote.
    measured["repeats"][0]["aa"]["models"]["control_passed"] = None
    for family in ("kernels", "models"):
        measured["repeats"][0]["aa"][family]["offset"] = None
        measured["repeats"][0]["aa"][family]["rounds"] = 3  # the rounds each kind ran, now read from the summary
    measured["totals"]["models"].update(controls_known=0, controls_passed=0)
    assert written["repeats"] == measured["repeats"] and written["totals"] == measured["totals"]


# --- 6. node replay on the H100 -------------------------------------------------------------------------------


def test_the_h100_replay_results_sit_next_to_the_trace_times_of_the_four_gemm_shapes(tmp_path: Path) -> None:
    """Given the replay set of the H100 BERT trace (made here, as ``perf-report -r`` makes it) and what the H100
    replay measured, the comparison shows four addmm rows: replayed median, trace mean per call and their ratio."""
    (tmp_path / "h100").mkdir()
    shutil.copy(REPLAYED_TRACE, tmp_path / "h100")
    [(group, _)] = generate_perf_reports(tmp_path, formats=["md"], replay=True)
    paths = replay_paths(group.output_base)
    results_raw = json.loads(REPLAY_RESULTS.read_text())
    replayed = {r["id"]: r["replay_median_us"] for r in results_raw["results"]}
    in_trace = addmm_calls_by_shape(REPLAYED_TRACE)
    assert len(in_trace) == 4

    replay_set = read_replay_set(paths["set"])
    results = read_results(REPLAY_RESULTS)
    table = comparison_table(replay_set, results)
    markdown = comparison_markdown(table, replay_set, results)

    assert table["id"].tolist() == ["gemm-1", "gemm-2", "gemm-3", "gemm-4"]
    assert set(table["op"]) == {"aten::addmm"} and set(table["family"]) == {"GEMM"}
    assert (table["replay error"] == "").all()
    for row, entry in zip(table.to_dict("records"), replay_set["shapes"], strict=True):
        problem = entry["problem"]
        calls, us = in_trace[(problem["m"], problem["n"], problem["k"])]
        trace_mean = us / calls
        assert row["calls"] == calls
        assert row["trace us"] == pytest.approx(trace_mean, abs=1e-3)
        assert row["replay us"] == replayed[row["id"]]
        assert row["replay / trace"] == pytest.approx(replayed[row["id"]] / trace_mean, rel=1e-3)
        assert f"| {row['id']} | GEMM | aten::addmm | bfloat16 |" in markdown
    assert f"Replayed on {results_raw['device']} with torch {results_raw['torch']}" in markdown
    # These were timed before the replay flushed the L2 (their small GEMMs replayed 4-6x their trace time: the
    # launch was in the time), and the report must not claim the flush for them.
    assert "l2_flush" not in results_raw and "L2 flush" not in markdown
    assert "after an L2 flush" in comparison_markdown(table, replay_set, {**results, "l2_flush": True})
    assert markdown.count("| gemm-") == 4 and "Not measured" not in markdown
