"""Upstream mode: the exact benchmarks/dynamo command lines, their CSV ingested into our suite.csv, and the
``stages.upstream_suite`` stage run end to end (directly and through the local runner) against a stand-in
PyTorch tree whose harness scripts write dynamo-format CSVs the way upstream does."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from foundation.errors import UserError
from foundation.formats.cache_archive import archived_graph_modules
from foundation.formats.dynamo_csv import (
    SUITE_COLUMNS,
    DynamoCsvError,
    ingest_dynamo_csv,
    parse_dynamo_csv,
    read_suite_csv,
)
from prbench.executors import RunnerSpec
from prbench.runners import CODE_ROOT, StageFailed
from stages.harness_configs import loaded_names
from stages.upstream_suite import (
    huggingface_argv,
    plan_upstream_suite,
    runner_argv,
    runner_csv_name,
)
from tests.support.cli_support import invoke_in_process

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

# The stand-in harness: appends one row per --only model as common.py does (header on a new file), compiles
# "a graph" into the Inductor cache it inherits, and records where and with what it ran. Broken fails the way
# upstream reports a failure (dev,name,0,0.0,0.0 padded with "0"); Crashes dies before writing any row.
HARNESS = textwrap.dedent("""\
    import json, os, sys
    args = sys.argv[1:]
    out = next(a.split("=", 1)[1] for a in args if a.startswith("--output="))
    name = args[args.index("--only") + 1]
    device = args[args.index("-d") + 1]
    with open(os.path.join(os.path.dirname(out), "calls.jsonl"), "a") as fh:
        fh.write(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "mark": os.environ.get("MARK")}) + "\\n")
    if name == "Crashes":
        sys.exit("Segmentation fault (stand-in)")
    header = "dev,name,batch_size,speedup,abs_latency,compilation_latency,compression_ratio,eager_peak_mem,"
    header += "dynamo_peak_mem,calls_captured,unique_graphs,graph_breaks,unique_graph_breaks"
    if name == "Broken":
        cells = [device, name, "0", "0.0", "0.0"]
        row = ",".join(cells + ["0"] * (13 - len(cells)))
    else:
        cache = os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], name[:2].lower())
        os.makedirs(cache, exist_ok=True)
        with open(os.path.join(cache, "c" + name.lower() + ".py"), "w") as fh:
            fh.write("# AOT ID: ['0_inference']\\nclass Runner:\\n    def call(self, args): pass\\n")
        row = device + "," + name + ",8,1.250000,2.000000,9.000000,1.000000,1.000000,1.000000,1,1,0,0"
    new = not os.path.exists(out)
    with open(out, "a") as fh:
        fh.write((header + "\\n" if new else "") + row + "\\n")
""")

# The stand-in runner.py: the whole list in one CSV named as runner.py names it, under --output-dir.
RUNNER = textwrap.dedent("""\
    import os, sys
    args = sys.argv[1:]
    out_dir = args[args.index("--output-dir") + 1]
    name = "_".join(["inductor_no_cudagraphs", "huggingface", args[args.index("--dtypes") + 1],
                     "training" if "--training" in args else "inference", args[args.index("--devices") + 1],
                     "performance.csv"])
    os.makedirs(out_dir, exist_ok=True)
    models = [l.split(",")[0] for l in open("benchmarks/dynamo/huggingface_models_list.txt") if l.strip()]
    with open(os.path.join(out_dir, name), "w") as fh:
        fh.write("dev,name,batch_size,speedup,abs_latency\\n")
        for m in models:
            fh.write("cpu,%s,0,0.0,0.0\\n" % m if m == "Broken" else "cpu,%s,4,2.000000,1.500000\\n" % m)
""")


# The stand-in harness as upstream's starts: its extra models' configs loaded by Hub id while it is imported
# (huggingface.py's EXTRA_MODELS), which then says what it was given.
HARNESS_LOADING_CONFIGS = textwrap.dedent("""\
    from transformers import AutoConfig
    EXTRA_MODELS = {"T5Small": AutoConfig.from_pretrained("t5-small"),
                    "AllenaiLongformerBase": AutoConfig.from_pretrained("allenai/longformer-base-4096")}
""") + HARNESS + textwrap.dedent("""\
    with open(os.path.join(os.path.dirname(out), "configs.json"), "w") as fh:
        json.dump({name: config.to_dict() for name, config in EXTRA_MODELS.items()}, fh)
""")


def pytorch_tree(tmp_path: Path) -> Path:
    src = tmp_path / "pytorch"
    dynamo = src / "benchmarks" / "dynamo"
    dynamo.mkdir(parents=True)
    (dynamo / "huggingface.py").write_text(HARNESS)
    (dynamo / "runner.py").write_text(RUNNER)
    (dynamo / "huggingface_models_list.txt").write_text("BertForMaskedLM,16\nBroken,8\nCrashes,8\nT5Small,4\n")
    return src


def stage_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TORCHINDUCTOR_CACHE_DIR")}
    env.update(PYTHONPATH=str(CODE_ROOT), PYTHONUNBUFFERED="1", MARK="variant-env",
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "run" / "base" / "work" / "inductor-cache"))
    return env


def run_stage(tmp_path: Path, src: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "stages.upstream_suite", "--pytorch-src", str(src),
            "--out", str(tmp_path / "run" / "base" / "suite"), "--device", "cpu",
            "--cache-archive", str(tmp_path / "run" / "base" / "inductor-cache.tar.gz"), *extra]
    return subprocess.run(argv, env=stage_env(tmp_path), cwd=CODE_ROOT, capture_output=True, text=True,
                          timeout=120)


# --- the exact command lines -----------------------------------------------------------------------------


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


def test_a_plan_runs_each_model_from_the_tree_into_one_csv_under_out(tmp_path: Path) -> None:
    src = pytorch_tree(tmp_path)
    plan = plan_upstream_suite(src, tmp_path / "suite", models=["BertForMaskedLM", "T5Small"], mode="training",
                               dtype="amp", device="cuda", python="python3")
    expected_csv = tmp_path / "suite" / "upstream" / runner_csv_name("training", "amp", "cuda")
    assert plan.output_csv == expected_csv
    assert [c.argv for c in plan.commands] == [
        huggingface_argv(m, mode="training", dtype="amp", device="cuda", output_csv=expected_csv, python="python3")
        for m in ("BertForMaskedLM", "T5Small")]
    assert all(c.cwd == src for c in plan.commands)
    with pytest.raises(UserError, match=r"no benchmarks/dynamo/huggingface.py"):
        plan_upstream_suite(tmp_path / "empty", tmp_path / "suite", models=["BertForMaskedLM"], mode="inference",
                            dtype="float32")


# --- the CSV the harness writes ------------------------------------------------------------------------


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


# --- the stage, end to end -----------------------------------------------------------------------------


@pytest.mark.integration
def test_the_stage_runs_each_model_in_the_tree_and_writes_the_suite_files(tmp_path: Path) -> None:
    src = pytorch_tree(tmp_path)
    proc = run_stage(tmp_path, src, "--models", "BertForMaskedLM,Broken,Crashes,T5Small", "--mode", "training")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    suite = tmp_path / "run" / "base" / "suite"
    rows = read_suite_csv(suite / "suite.csv")
    assert [(r["name"], r["status"]) for r in rows] == [
        ("BertForMaskedLM", "ok"), ("Broken", "fail"), ("Crashes", "fail"), ("T5Small", "ok")]
    bert, broken, crashed = rows[0], rows[1], rows[2]
    assert (bert["dev"], bert["speedup"], bert["abs_latency"], bert["mode"], bert["dtype"], bert["size"]) == (
        "cpu", "1.250000", "2.000000", "training", "float32", "full")
    assert "speedup 0" in broken["error"] and broken["batch_size"] == "0"
    assert "exited with code 1" in crashed["error"] and crashed["speedup"] == "0.000000"

    # Each model ran the seed's exact command, from the tree, with the environment the stage was given.
    calls = [json.loads(line) for line in (suite / "upstream" / "calls.jsonl").read_text().splitlines()]
    csv_path = suite / "upstream" / runner_csv_name("training", "float32", "cpu")
    assert [c["argv"][1:] for c in calls] == [
        huggingface_argv(m, mode="training", dtype="float32", device="cpu", output_csv=csv_path)[2:]
        for m in ("BertForMaskedLM", "Broken", "Crashes", "T5Small")]
    assert {c["cwd"] for c in calls} == {str(src)} and {c["mark"] for c in calls} == {"variant-env"}

    assert json.loads((suite / "samples.json").read_text()) == {}
    assert json.loads((suite / "graph_models.json").read_text()) == {
        "cbertformaskedlm": ["BertForMaskedLM"], "ct5small": ["T5Small"]}
    assert sorted(archived_graph_modules(tmp_path / "run" / "base" / "inductor-cache.tar.gz")) == [
        "inductor-cache/be/cbertformaskedlm.py", "inductor-cache/t5/ct5small.py"]
    assert "[upstream] 1/4 BertForMaskedLM: start" in proc.stdout
    assert "[upstream] 2/4 Broken: fail" in proc.stdout
    assert "[upstream] 2 ok, 2 failed" in proc.stdout


@pytest.mark.integration
def test_a_second_run_keeps_the_models_that_ran_and_retries_the_failures(tmp_path: Path) -> None:
    src = pytorch_tree(tmp_path)
    assert run_stage(tmp_path, src, "--models", "BertForMaskedLM,Broken").returncode == 0
    again = run_stage(tmp_path, src, "--models", "BertForMaskedLM,Broken")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1/2 BertForMaskedLM: done earlier, kept" in again.stdout
    assert "2/2 Broken: start" in again.stdout
    rows = read_suite_csv(tmp_path / "run" / "base" / "suite" / "suite.csv")
    assert [(r["name"], r["status"]) for r in rows] == [("BertForMaskedLM", "ok"), ("Broken", "fail")]
    # The kept model's graph stays in the archive: a resumed run does not empty the cache.
    assert archived_graph_modules(tmp_path / "run" / "base" / "inductor-cache.tar.gz") == [
        "inductor-cache/be/cbertformaskedlm.py"]


@pytest.mark.integration
def test_the_stage_exits_non_zero_when_every_model_failed(tmp_path: Path) -> None:
    proc = run_stage(tmp_path, pytorch_tree(tmp_path), "--models", "Broken,Crashes")
    assert proc.returncode == 1
    assert "[upstream] 0 ok, 2 failed" in proc.stdout
    assert len(read_suite_csv(tmp_path / "run" / "base" / "suite" / "suite.csv")) == 2


@pytest.mark.integration
def test_the_harness_loads_its_hub_configs_offline_from_the_configs_the_stage_wrote(tmp_path: Path) -> None:
    src = pytorch_tree(tmp_path)
    # A name it loads only later (no model of this run needs it) and that the stage has no config for.
    (src / "benchmarks" / "dynamo" / "huggingface.py").write_text(HARNESS_LOADING_CONFIGS + textwrap.dedent("""\
        def later():
            return AutoConfig.from_pretrained("someorg/unheard-of")
    """))

    proc = run_stage(tmp_path, src, "--models", "BertForMaskedLM")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [(r["name"], r["status"]) for r in read_suite_csv(tmp_path / "run" / "base" / "suite" / "suite.csv")] == [
        ("BertForMaskedLM", "ok")]
    configs = json.loads((tmp_path / "run" / "base" / "suite" / "upstream" / "configs.json").read_text())
    assert (configs["T5Small"]["model_type"], configs["T5Small"]["d_model"]) == ("t5", 512)
    longformer = configs["AllenaiLongformerBase"]
    assert (longformer["model_type"], longformer["max_position_embeddings"]) == ("longformer", 4098)
    hf_home = tmp_path / "run" / "base" / "work" / "hf-home"
    assert (hf_home / "hub" / "models--allenai--longformer-base-4096" / "refs" / "main").is_file()
    assert (f"[upstream] HF configs for the harness (offline, transformers {transformers_version()}): t5-small, "
            f"allenai/longformer-base-4096 -> {hf_home}") in proc.stdout
    assert "[upstream] note: no offline config for someorg/unheard-of; the harness cannot load it" in proc.stdout


def test_the_stage_reads_which_configs_the_harness_loads_from_its_source(tmp_path: Path) -> None:
    script = tmp_path / "huggingface.py"
    script.write_text(HARNESS_LOADING_CONFIGS + textwrap.dedent("""\
        def later():
            return AutoConfig.from_pretrained("t5-small"), AutoConfig.from_pretrained(os.environ["NAME"])
    """))
    # Every literal name once, in order; a name computed at run time cannot be known beforehand.
    assert loaded_names(script) == ["t5-small", "allenai/longformer-base-4096"]


def transformers_version() -> str:
    from importlib.metadata import version

    return version("transformers")


@pytest.mark.integration
def test_use_runner_runs_the_whole_suite_through_runner_py(tmp_path: Path) -> None:
    proc = run_stage(tmp_path, pytorch_tree(tmp_path), "--use-runner", "--models", "all")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = read_suite_csv(tmp_path / "run" / "base" / "suite" / "suite.csv")
    assert [(r["name"], r["status"]) for r in rows] == [
        ("BertForMaskedLM", "ok"), ("Broken", "fail"), ("Crashes", "ok"), ("T5Small", "ok")]
    assert "[upstream] 2/4 Broken: fail" in proc.stdout
    assert json.loads((tmp_path / "run" / "base" / "suite" / "graph_models.json").read_text()) == {}
    assert (tmp_path / "run" / "base" / "inductor-cache.tar.gz").is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--models", "BertForMaskedLM", "--pytorch-src", "{tmp}/nowhere"],
         "error: --pytorch-src {tmp}/nowhere: no benchmarks/dynamo/huggingface.py there"),
        (["--models", "GPT3"], "error: --models: unknown model 'GPT3'"),
        (["--models", "BertForMaskedLM", "--use-runner"], "error: --use-runner: runner.py runs the whole HF suite"),
        (["--models", ","], "error: --models: no model named"),
    ],
)
@pytest.mark.integration
def test_the_stage_rejects_bad_values_in_one_line_and_writes_nothing(tmp_path: Path, extra: list[str],
                                                                     message: str) -> None:
    src = pytorch_tree(tmp_path)
    proc = run_stage(tmp_path, src, *[a.replace("{tmp}", str(tmp_path)) for a in extra])
    assert proc.returncode == 2
    assert proc.stderr.strip() == proc.stderr.strip().splitlines()[0]
    assert proc.stderr.startswith(message.replace("{tmp}", str(tmp_path))), proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.integration
def test_upstream_command_runs_the_stage_through_the_local_runner(tmp_path: Path) -> None:
    from foundation.formats.suite_request import SuiteRequest
    from prbench.runners.local import LocalRunner
    from prbench.sides.recipes import load_recipe
    from prbench.sides.variants import Variant
    from prbench.stages.command_lines import upstream_command
    from prbench.stages.suite import suite_outputs

    src = pytorch_tree(tmp_path)
    variant_dir = tmp_path / "run" / "base"
    variant = Variant(name="base", recipe=load_recipe("cpu-local", CODE_ROOT / "recipes"), env={"MARK": "runner"})
    settings = SuiteRequest(source="upstream", models="BertForMaskedLM,Broken", device="cpu")
    command = upstream_command(variant_dir, settings, src)
    assert command.module == "stages.upstream_suite"
    command.env = variant.stage_environment(variant_dir)  # what the pipeline adds
    LocalRunner(stream_output=False).run(command)

    assert all(p.exists() for p in suite_outputs(variant_dir))
    rows = read_suite_csv(variant_dir / "suite" / "suite.csv")
    assert [(r["name"], r["status"]) for r in rows] == [("BertForMaskedLM", "ok"), ("Broken", "fail")]
    call = json.loads((variant_dir / "suite" / "upstream" / "calls.jsonl").read_text().splitlines()[0])
    assert call["mark"] == "runner" and call["cwd"] == str(src)
    assert archived_graph_modules(variant_dir / "inductor-cache.tar.gz") == ["inductor-cache/be/cbertformaskedlm.py"]

    # A user mistake inside the stage reaches the host as its one line.
    bad = upstream_command(tmp_path / "run2" / "base", SuiteRequest(source="upstream", models="GPT3"), src)
    with pytest.raises(StageFailed, match=r"^--models: unknown model 'GPT3'"):
        LocalRunner(stream_output=False).run(bad)


# --- the host side: asking for it --------------------------------------------------------------------------


def invoke(tmp_path: Path, task: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = stage_env(tmp_path)
    env.pop("PYTHONPATH")
    env.pop("TORCHINDUCTOR_CACHE_DIR")
    return subprocess.run([sys.executable, "-m", "invoke", task, *args], env=env, cwd=CODE_ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.integration
def test_invoke_suite_with_the_upstream_source_runs_the_harness_in_the_tree(tmp_path: Path) -> None:
    src = pytorch_tree(tmp_path)
    runs = tmp_path / "runs"
    proc = invoke(tmp_path, "suite", "--suite-source", "upstream", "--upstream-src", str(src),
                  "--models", "BertForMaskedLM,Broken", "--runs-dir", str(runs), "--run", "up")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    variant = runs / "up" / "base"
    rows = read_suite_csv(variant / "suite" / "suite.csv")
    assert [(r["name"], r["status"], r["dev"]) for r in rows] == [("BertForMaskedLM", "ok", "cpu"),
                                                                   ("Broken", "fail", "cpu")]
    # The stage ran with the variant's environment: its cache is the one the run archives.
    assert archived_graph_modules(variant / "inductor-cache.tar.gz") == ["inductor-cache/be/cbertformaskedlm.py"]
    manifest = json.loads((runs / "up" / "manifest.json").read_text())
    assert manifest["stages"]["base/suite"]["status"] == "done"
    assert manifest["settings"]["suite"]["source"] == "upstream"
    assert manifest["settings"]["suite"]["upstream_src"] == str(src)
    assert "suite: 1 ok, 1 failed" in proc.stdout and "1.25x" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--suite-source", "nightly"], "--suite-source 'nightly': expected one of builtin, upstream"),
        (["--suite-source", "upstream"], "--upstream-src: required with --suite-source upstream"),
        (["--suite-source", "upstream", "--upstream-src", "{tmp}"], "no benchmarks/dynamo/huggingface.py there"),
        (["--upstream-src", "{tmp}"], "--upstream-src: only used with --suite-source upstream"),
    ],
)
def test_invoke_suite_and_compare_reject_a_bad_source_before_writing_anything(tmp_path: Path, args: list[str],
                                                                               message: str) -> None:
    runs = tmp_path / "runs"
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    for task, extra in (("suite", []), ("compare", ["--pr", "installed"])):
        proc = invoke_in_process(task, *args, *extra, "--runs-dir", str(runs), "--run", "r1", cwd=CODE_ROOT)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode != 0 and len(lines) == 1 and message in lines[0], (task, proc.stderr)
        assert not runs.exists()


def test_a_docker_recipe_runs_the_harness_from_the_images_pytorch_tree() -> None:
    from foundation.formats.suite_request import SuiteRequest
    from prbench.images.build import render_dockerfile
    from prbench.images.build_plan import PYTORCH_SRC_IN_IMAGE
    from prbench.sides.pins import SourceTree
    from prbench.sides.recipes import load_recipe
    from prbench.stages.suite import upstream_tree

    recipe = load_recipe("cuda-h100", CODE_ROOT / "recipes")
    assert recipe.pytorch is not None
    dockerfile = render_dockerfile(recipe, SourceTree("pytorch", Path("/src/pytorch"), recipe.pytorch.commit),
                                   SourceTree("triton", Path("/src/triton"), "a" * 40))
    assert f"COPY src/pytorch {PYTORCH_SRC_IN_IMAGE}\n" in dockerfile
    upstream = SuiteRequest(source="upstream", device="cuda")
    assert upstream_tree(upstream, recipe, None) == Path(PYTORCH_SRC_IN_IMAGE)
    assert upstream_tree(upstream, recipe, Path("/elsewhere/pytorch")) == Path("/elsewhere/pytorch")
    assert upstream_tree(SuiteRequest(), recipe, None) is None
    # the help tells the truth
    assert PYTORCH_SRC_IN_IMAGE in __import__("prbench.commands.flags").commands.flags.SUITE_HELP["upstream_src"]


def test_compare_runs_the_upstream_stage_and_a_source_change_redoes_the_suite(tmp_path: Path) -> None:
    from foundation.formats.suite_request import SuiteRequest
    from prbench.compare import driver as compare
    from prbench.sides.recipes import load_recipe

    class RecordingPipeline:  # stands in for the pipeline: keeps the specs compare hands it
        def __init__(self) -> None:
            self.specs: list = []

        def run_stage(self, prepared, spec) -> str:
            self.specs.append(spec)
            return "hash"

    recipe = load_recipe("cpu-local", CODE_ROOT / "recipes")
    prepared = compare.PreparedVariant(variant=None, directory=tmp_path / "base", python_path=[],  # type: ignore[arg-type]
                                       env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
    suites = {}
    for source, tree in (("upstream", tmp_path / "pytorch"), ("builtin", None)):
        request = compare.CompareRequest(base="installed", pr="installed", recipe=recipe, runs_dir=tmp_path,
                                         suite=SuiteRequest(source=source))
        pipeline = RecordingPipeline()
        side = compare._Side(pipeline, prepared, RunnerSpec("local"))  # type: ignore[arg-type]
        rounds = compare._Rounds(request, console=None)  # type: ignore[arg-type]
        compare.Comparison(request, None, [side], rounds, tree).run_suites()  # type: ignore[arg-type]
        suites[source] = pipeline.specs[0]
    upstream = suites["upstream"].command()
    assert upstream.module == "stages.upstream_suite"
    assert upstream.args[upstream.args.index("--pytorch-src") + 1] == str(tmp_path / "pytorch")
    assert suites["builtin"].command().module == "stages.suite"
    assert suites["upstream"].inputs != suites["builtin"].inputs
    assert "source" not in suites["builtin"].inputs  # earlier builtin runs keep their input hash
