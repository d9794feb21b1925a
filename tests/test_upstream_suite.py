"""Upstream mode: the exact benchmarks/dynamo command lines, and their CSV ingested into our suite.csv."""

from __future__ import annotations

import csv
import sys
import textwrap
from pathlib import Path

import pytest

from analysis.dynamo_csv import (
    SUITE_COLUMNS,
    DynamoCsvError,
    ingest_dynamo_csv,
    parse_dynamo_csv,
    read_suite_csv,
)
from analysis.errors import UserError
from prbench.upstream_suite import (
    huggingface_argv,
    plan_upstream_suite,
    run_upstream_suite,
    runner_argv,
    runner_csv_name,
)

# What huggingface.py --performance writes (current main header), by hand: one model that ran, one that
# failed (written as `cuda,Foo,0,0.0,0.0` and padded with "0" to the header), a header repeated by a later
# --only run, and a model measured twice (the later row wins).
UPSTREAM_CSV = textwrap.dedent("""\
    dev,name,batch_size,speedup,abs_latency,compilation_latency,compression_ratio,eager_peak_mem,dynamo_peak_mem,calls_captured,unique_graphs,graph_breaks,unique_graph_breaks,autograd_captures,autograd_compiles,cudagraph_skips
    cuda,BertForMaskedLM,16,1.523400,12.345678,45.100000,1.210000,6.500000,5.370000,1,1,0,0,0,0,0
    cuda,Foo,0,0.0,0.0,0,0,0,0,0,0,0,0,0,0,0
    dev,name,batch_size,speedup,abs_latency,compilation_latency,compression_ratio,eager_peak_mem,dynamo_peak_mem,calls_captured,unique_graphs,graph_breaks,unique_graph_breaks,autograd_captures,autograd_compiles,cudagraph_skips
    cuda,T5Small,4,0.9,3.2,20.5,1.0,1.0,1.0,2,2,1,1,0,0,0
    cuda,T5Small,4,1.100000,3.000000,21.000000,1.050000,1.100000,1.047619,2,2,1,1,0,0,0
    cuda,Bar,0,0.0,0.0
""")


def test_huggingface_command_line_is_the_seeds_exact_flags() -> None:
    argv = huggingface_argv("BertForMaskedLM", mode="training", dtype="amp", device="cuda",
                            output_csv=Path("/r/base/work/upstream/x.csv"), python="python3")
    assert argv == [
        "python3", "benchmarks/dynamo/huggingface.py", "--performance", "--training", "--amp", "--inductor",
        "--disable-cudagraphs", "-d", "cuda", "--output=/r/base/work/upstream/x.csv", "--only", "BertForMaskedLM",
    ]
    inference = huggingface_argv("T5Small", mode="inference", dtype="float32", device="cuda",
                                 output_csv=Path("/o.csv"))
    assert inference[3:5] == ["--inference", "--float32"]
    with pytest.raises(UserError, match="--dtype 'fp8'"):
        huggingface_argv("T5Small", mode="inference", dtype="fp8", device="cuda", output_csv=Path("/o.csv"))


def test_runner_command_line_matches_run_hf_sh() -> None:
    argv = runner_argv(mode="training", dtype="amp", device="cuda", output_dir=Path("/r/up"), python="python")
    assert argv == [
        "python", "benchmarks/dynamo/runner.py", "--suites", "huggingface", "--training", "--compilers",
        "inductor_no_cudagraphs", "--dtypes", "amp", "--devices", "cuda", "--no-gh-comment", "--output-dir", "/r/up",
    ]
    assert runner_csv_name("training", "amp", "cuda") == (
        "inductor_no_cudagraphs_huggingface_amp_training_cuda_performance.csv")


def test_a_plan_needs_a_pytorch_source_tree(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no benchmarks/dynamo/huggingface.py"):
        plan_upstream_suite(tmp_path, tmp_path / "work", models=["BertForMaskedLM"], mode="inference",
                            dtype="float32")


def test_upstream_csv_is_parsed_as_upstream_writes_it() -> None:
    rows = {r["name"]: r for r in parse_dynamo_csv(UPSTREAM_CSV)}
    assert list(rows) == ["BertForMaskedLM", "Foo", "T5Small", "Bar"]
    assert rows["T5Small"]["speedup"] == "1.100000"  # the later measurement wins
    assert rows["Bar"]["unique_graph_breaks"] == "0"  # an unpadded failure row is padded like upstream does
    with pytest.raises(DynamoCsvError, match="no 'speedup' column"):
        parse_dynamo_csv("dev,name,accuracy\ncuda,Bert,pass\n", origin="acc.csv")


def test_ingesting_maps_dynamo_columns_and_marks_failures(tmp_path: Path) -> None:
    source = tmp_path / "inductor.csv"
    source.write_text(UPSTREAM_CSV)
    out = tmp_path / "suite" / "suite.csv"
    ingest_dynamo_csv(source, out, mode="training", dtype="amp")

    with out.open() as fh:
        assert tuple(next(csv.reader(fh))) == SUITE_COLUMNS
    rows = {r["name"]: r for r in read_suite_csv(out)}
    bert = rows["BertForMaskedLM"]
    assert (bert["dev"], bert["batch_size"], bert["speedup"], bert["abs_latency"]) == (
        "cuda", "16", "1.523400", "12.345678")
    assert (bert["compilation_latency"], bert["dynamo_peak_mem"], bert["calls_captured"]) == (
        "45.100000", "5.370000", "1")
    assert (bert["mode"], bert["dtype"], bert["size"], bert["status"], bert["error"]) == (
        "training", "amp", "full", "ok", "")
    assert bert["eager_median_ms"] == bert["compiled_std_ms"] == bert["n"] == ""  # ours: not measured upstream
    for name in ("Foo", "Bar"):
        assert rows[name]["status"] == "fail" and "speedup 0" in rows[name]["error"]
        assert rows[name]["speedup"] == "0.000000"


def test_running_a_plan_ingests_what_the_harness_wrote(tmp_path: Path) -> None:
    # A stand-in PyTorch tree whose huggingface.py appends rows the way the real harness does.
    src = tmp_path / "pytorch"
    script = src / "benchmarks" / "dynamo" / "huggingface.py"
    script.parent.mkdir(parents=True)
    script.write_text(textwrap.dedent("""\
        import os, sys
        args = sys.argv[1:]
        out = next(a.split("=", 1)[1] for a in args if a.startswith("--output="))
        name = args[args.index("--only") + 1]
        header = ",".join(["dev", "name", "batch_size", "speedup", "abs_latency", "compilation_latency",
                           "compression_ratio", "eager_peak_mem", "dynamo_peak_mem", "calls_captured",
                           "unique_graphs", "graph_breaks", "unique_graph_breaks"])
        if name == "Broken":
            row = "cuda,%s,0,0.0,0.0,0,0,0,0,0,0,0,0" % name
        else:
            row = "cuda,%s,8,1.250000,2.000000,9.000000,1.000000,1.000000,1.000000,1,1,0,0" % name
        new = not os.path.exists(out)
        with open(out, "a") as fh:
            fh.write((header + "\\n" if new else "") + row + "\\n")
        sys.exit(1 if name == "Broken" else 0)
    """))
    work = tmp_path / "run" / "base" / "work"
    plan = plan_upstream_suite(src, work, models=["BertForMaskedLM", "Broken"], mode="inference", dtype="float32",
                               env={"PATH": "/usr/bin:/bin", "MARK": "1"}, python=sys.executable)
    assert [c.argv[c.argv.index("--only") + 1] for c in plan.commands] == ["BertForMaskedLM", "Broken"]
    assert all(c.cwd == src and c.env["MARK"] == "1" for c in plan.commands)

    cache = tmp_path / "cache"
    (cache / "ab").mkdir(parents=True)
    (cache / "ab" / "cabc.py").write_text("# AOT ID: ['0_inference']\nclass Runner:\n    def call(self, args): pass\n")
    suite_csv = tmp_path / "run" / "base" / "suite" / "suite.csv"
    archive = tmp_path / "run" / "base" / "inductor-cache.tar.gz"
    rows = run_upstream_suite(plan, suite_csv, cache_dir=cache, cache_archive=archive)
    assert [(r["name"], r["status"]) for r in rows] == [("BertForMaskedLM", "ok"), ("Broken", "fail")]
    assert read_suite_csv(suite_csv) == rows

    from stages.suite import archived_graph_modules

    assert archived_graph_modules(archive) == ["inductor-cache/ab/cabc.py"]
