"""Paired timing on the host: the plans (which jobs share a block), the rounds as resumable run-level stages and
the per-side files derived from them."""

from __future__ import annotations

import io
import json
import math
import re
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from analysis.kernels.cpp_build import write_cpp_build
from analysis.report.sequential import (
    Look,
    Resolution,
    RoundsUsed,
    check_rounds_flags,
    policy_line,
    read_rounds_used,
    rounds_policies,
)
from analysis.stats.verdict_settings import VerdictSettings
from foundation.formats.kernel_index import IndexRow, write_index
from foundation.formats.paired_rounds import read_round, side_samples, write_round
from foundation.formats.run_layout import VariantLayout
from foundation.formats.stage_records import Job, read_plan
from foundation.formats.suite_request import SuiteRequest
from prbench.compare.driver import CompareRequest, Comparison, _policies, _Rounds, _settings, _Side
from prbench.compare.variant_plan import ComparePlan
from prbench.executors import RunnerSpec
from prbench.executors.local_pool import LocalPool
from prbench.runners import StageCommand
from prbench.runners.local import LocalRunner
from prbench.runs.pipeline import Pipeline
from prbench.runs.run_store import RunStore, StageStatus
from prbench.sides.recipes import load_recipe
from prbench.sides.variants import Variant
from prbench.stages.paired import PairedTiming, PlanSide, kernel_plan, model_plan, pair_jobs
from stages.paired import Side, run_round
from tests.support.cli_support import invoke_in_process

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
ROOT = Path(__file__).resolve().parents[1]


def job(job_id: int, kind: str, kernels: dict[str, str]) -> Job:
    return Job(job_id, kind, f"/o/{job_id}.py", kernels, 10, 30, 60.0)


def test_triton_jobs_pair_with_their_partners_and_graphs_greedily_by_shared_kernels() -> None:
    base = [job(0, "triton", {"t": "p/t.py"}), job(1, "triton", {"only": "p/only.py"}),
            job(2, "graph", {"a": "c/a", "b": "c/b", "c": "c/c"}), job(3, "graph", {"d": "c/d"})]
    pr = [job(0, "graph", {"a": "c/a2", "d": "c/d2"}), job(1, "graph", {"b": "c/b2", "c": "c/c2"}),
          job(2, "triton", {"t": "p/t2.py"}), job(3, "graph", {"x": "c/x"})]
    partner = {"p/t.py": "p/t2.py", "c/a": "c/a2", "c/b": "c/b2", "c/c": "c/c2", "c/d": "c/d2"}

    blocks = pair_jobs(base, pr, partner)

    pairs = [((b or {}).get("id"), (p or {}).get("id")) for b, p in ((x["base"], x["pr"]) for x in blocks)]
    # base graph 2 shares two kernels with PR graph 1 (and one with PR graph 0, which goes to base graph 3).
    assert pairs == [(0, 2), (2, 1), (3, 0), (1, None), (None, 3)]
    assert blocks[0]["base"]["kernels"] == {"t": "p/t.py"} and blocks[0]["pr"]["timeout_s"] == 60.0


def row(path: str, name: str, body: str, backend: str = "cpp", graphs: str = "M/g0") -> IndexRow:
    category = "cpp" if backend == "cpp" else "pointwise"
    return IndexRow(category, name, body, "s1", f"{name}_x0_r0", path, 1, graphs, backend, "graphs/g0.py")


def side(tmp_path: Path, name: str, rows: list[IndexRow], suite: str = "") -> PlanSide:
    directory = tmp_path / name
    write_index(directory / "organized" / "index.csv", rows)
    if suite:
        (directory / "suite").mkdir(parents=True)
        (directory / "suite" / "suite.csv").write_text(suite)
    env = {"TORCHINDUCTOR_CACHE_DIR": str(directory / "cache"), "OMP_NUM_THREADS": "1"}
    return PlanSide(name, directory, env, [tmp_path / f"{name}-overlay"], LocalRunner())


def test_the_kernel_plan_pairs_what_the_report_pairs_in_per_side_environments(tmp_path: Path) -> None:
    base = side(tmp_path, "base", [row("cpp/a.cpp", "cpp_fused_a_0", "ha"), row("cpp/b.cpp", "cpp_fused_b_1", "hb"),
                                   row("cpp/gone.cpp", "cpp_fused_gone_2", "hg", graphs="M/g1")])
    pr = side(tmp_path, "pr", [row("cpp/a.cpp", "cpp_fused_a_0", "ha"), row("cpp/b.cpp", "cpp_fused_b_1", "hb"),
                               row("cpp/new.cpp", "cpp_fused_new_2", "hn", graphs="M/g2")])

    plan = kernel_plan([base, pr], device="cpu", platform="cpu", warmup=5, iterations=7, timeout_s=30,
                       logs=tmp_path / "logs", passes=1)

    assert plan.kind == "kernels" and plan.worker == "stages.kernels"
    kernels = [((b or {}).get("kernels"), (p or {}).get("kernels")) for b, p in
               ((x["base"], x["pr"]) for x in plan.blocks)]
    assert kernels == [({"cpp_fused_a_0": "cpp/a.cpp", "cpp_fused_b_1": "cpp/b.cpp"},) * 2,
                       ({"cpp_fused_gone_2": "cpp/gone.cpp"}, None), (None, {"cpp_fused_new_2": "cpp/new.cpp"})]
    assert plan.blocks[0]["base"]["path"] == str(tmp_path / "base" / "organized" / "graphs" / "g0.py")
    env = plan.sides["pr"].env
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path / "pr-overlay")  # the side's overlay comes first
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "pr" / "cache")  # the compile's warm cache
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "pr" / "work" / "kernels" / "paired" / "triton")
    assert env["CUDA_VISIBLE_DEVICES"] == "" and plan.sides["pr"].organized == str(tmp_path / "pr" / "organized")


# Inductor's C++ kernel command as torch 2.13 makes it for its cache key (stages.support.environment.record_cpp_build),
# installed under ``prefix``.
KERNEL_COMMAND = (
    "g++ i -D TORCH_INDUCTOR_CPP_WRAPPER -D STANDALONE_TORCH_HEADER -D TORCH_INDUCTOR_PRECOMPILE_HEADERS -D  "
    "C10_USING_CUSTOM_GENERATED_MACROS -D CPU_CAPABILITY_AVX2  {opt} -DNDEBUG -fno-omit-frame-pointer -g1 "
    "-fno-trapping-math -funsafe-math-optimizations -ffinite-math-only -fno-signed-zeros -fno-finite-math-only "
    "-fno-unsafe-math-optimizations -fmath-errno -ffp-contract=off -fexcess-precision=fast -fno-tree-loop-vectorize "
    "-march=native -fPIC -Wall -std=c++20 -Wno-unused-variable -Wno-unknown-pragmas -pedantic -fopenmp  "
    "-I/root/.pyenv/versions/3.11.7/include/python3.11 -I{prefix}/lib/python3.11/site-packages/torch/include "
    "-I{prefix}/lib/python3.11/site-packages/torch/include/torch/csrc/api/include   -mavx2 -mfma -mf16c  -c -o o.o")


def compiled_with(plan_side: PlanSide, prefix: str, opt: str = "-O3", torch_build: str = "2.13.0+cpu 1a2b3c",
                  headers: str = "d1") -> PlanSide:
    cache = Path(plan_side.stage_env["TORCHINDUCTOR_CACHE_DIR"])
    cache.mkdir(parents=True, exist_ok=True)
    write_cpp_build(cache, [KERNEL_COMMAND.format(prefix=prefix, opt=opt)], torch_build, headers)
    return plan_side


def test_identical_cpp_code_is_timed_from_bases_graph_module_in_both_workers_and_changed_code_in_its_own(
        tmp_path: Path) -> None:
    """Identical code timed in each side's own graph ran 3–8 % apart between the sides' processes: so the PR's
    worker times an identical C++ pair from base's graph module and cache (same code, same recorded values), under
    the PR's item; a changed pair, a kernel only in the PR and a Triton kernel stay in their own side's files."""
    base = side(tmp_path, "base", [row("cpp/a.cpp", "cpp_fused_a_0", "ha"), row("cpp/b.cpp", "cpp_fused_b_1", "hb"),
                                   row("t/k.py", "triton_poi_k_0", "hk", backend="triton")])
    pr = side(tmp_path, "pr", [row("cpp/a.cpp", "cpp_fused_a_3", "ha"), row("cpp/b2.cpp", "cpp_fused_b_1", "hb2"),
                               row("cpp/new.cpp", "cpp_fused_new_2", "hn"),
                               row("t/k.py", "triton_poi_k_0", "hk", backend="triton")])
    # Both sides compile with the same flags, each in its own environment's prefix.
    compiled_with(base, "/opt/prbench/envs/base/.venv")
    compiled_with(pr, "/opt/prbench/envs/pr/.venv")

    plan = kernel_plan([base, pr], device="cpu", platform="cpu", warmup=5, iterations=7, timeout_s=30,
                       logs=tmp_path / "logs", passes=1)

    timed = [((b or {}).get("path"), (b or {}).get("kernels"), (p or {}).get("path"), (p or {}).get("kernels"),
              (p or {}).get("cache_dir")) for b, p in ((x["base"], x["pr"]) for x in plan.blocks)]
    base_graph, pr_graph = (str(tmp_path / s / "organized" / "graphs" / "g0.py") for s in ("base", "pr"))
    assert timed == [
        (str(tmp_path / "base" / "organized" / "t" / "k.py"), {"triton_poi_k_0": "t/k.py"},
         str(tmp_path / "pr" / "organized" / "t" / "k.py"), {"triton_poi_k_0": "t/k.py"}, ""),
        (base_graph, {"cpp_fused_b_1": "cpp/b.cpp"}, pr_graph,
         {"cpp_fused_b_1": "cpp/b2.cpp", "cpp_fused_new_2": "cpp/new.cpp"}, ""),
        # base's kernel variable in base's module, from base's cache; its samples are the PR's item
        (base_graph, {"cpp_fused_a_0": "cpp/a.cpp"}, base_graph, {"cpp_fused_a_0": "cpp/a.cpp"},
         str(tmp_path / "base" / "cache")),
    ]
    prepared = {(j["path"], j["cache_dir"]) for j in plan.sides["pr"].prepare}
    assert prepared == {(str(tmp_path / "pr" / "organized" / "t" / "k.py"), ""), (pr_graph, ""),
                        (base_graph, str(tmp_path / "base" / "cache"))}
    assert len({j["id"] for j in plan.sides["pr"].prepare}) == 3  # one id per job of the side


@pytest.mark.parametrize("pr_build", [{"opt": "-O2"}, None, {"torch_build": "2.14.1 9f8e7d"}, {"headers": "d2"}],
                         ids=["only-a-flag-changed", "no-record", "another-torch-release", "other-kernel-headers"])
def test_identical_source_compiled_otherwise_is_timed_in_each_sides_own_graph(tmp_path: Path,
                                                                             pr_build: dict | None) -> None:
    """A PR that changes only how Inductor compiles C++ (here -O3 → -O2; the source identical), or what the
    kernels compile against (another torch release, as in a release A/B; a PR to ATen's vector headers), must be
    measured: base's binaries would hide it, so its identical-source pairs are timed in each side's own graph, as
    is every pair when a side has no record of its build."""
    base = compiled_with(side(tmp_path, "base", [row("cpp/a.cpp", "cpp_fused_a_0", "ha")]), "/opt/venv")
    pr = side(tmp_path, "pr", [row("cpp/a.cpp", "cpp_fused_a_0", "ha")])
    if pr_build is not None:
        compiled_with(pr, "/opt/venv", **pr_build)

    plan = kernel_plan([base, pr], device="cpu", platform="cpu", warmup=5, iterations=7, timeout_s=30,
                       logs=tmp_path / "logs", passes=1)

    (block,) = plan.blocks
    assert block["pr"]["path"] == str(tmp_path / "pr" / "organized" / "graphs" / "g0.py")
    assert block["pr"]["cache_dir"] == "" and block["pr"]["kernels"] == {"cpp_fused_a_0": "cpp/a.cpp"}


def test_the_plan_holds_only_how_a_workers_environment_differs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PRBENCH_TEST_TOKEN", "s3cret")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")  # a ROCm pin left in the shell must not reach a CUDA worker
    base = side(tmp_path, "base", [row("cpp/a.cpp", "cpp_fused_a_0", "ha")])
    pr = side(tmp_path, "pr", [row("cpp/a.cpp", "cpp_fused_a_0", "ha")])

    plan = kernel_plan([base, pr], device="0", platform="cuda", warmup=5, iterations=7, timeout_s=30,
                       logs=tmp_path / "logs", passes=1)

    env = plan.sides["base"].env
    assert "PRBENCH_TEST_TOKEN" not in env and "PATH" not in env  # the shell's own stays out of the run
    assert env["HIP_VISIBLE_DEVICES"] is None and env["CUDA_VISIBLE_DEVICES"] == "0"
    worker = Side("base", plan, None, say=lambda _: None).worker.env
    assert worker["PRBENCH_TEST_TOKEN"] == "s3cret" and "HIP_VISIBLE_DEVICES" not in worker
    assert worker["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "base" / "cache")


@pytest.mark.integration
def test_a_round_walks_every_block_once_per_pass_and_pools_the_visits(tmp_path: Path) -> None:
    """Three passes over two graph jobs: each item gets three ABBA blocks spread over the round, the first side
    alternating from pass to pass, and the round's samples of a side are all its visits together."""
    rows = [row("cpp/a.cpp", "cpp_fused_a_0", "ha", graphs="M/g0"), row("cpp/b.cpp", "cpp_fused_b_1", "hb",
                                                                         graphs="M/g1")]
    base, pr = side(tmp_path, "base", rows), side(tmp_path, "pr", rows)
    plan = kernel_plan([base, pr], device="cpu", platform="cpu", warmup=5, iterations=7, timeout_s=30,
                       logs=tmp_path / "logs", passes=3)
    plan.worker = "tests.support.fake_paired_worker"
    for spec in plan.sides.values():
        spec.env["PYTHONPATH"] = str(ROOT)

    record = run_round(plan, 1, ["base", "pr"], say=lambda _: None)

    assert len(plan.blocks) == 2 and plan.passes == 3
    a = [v for v in record.visits if v.item == "cpp/a.cpp"]
    assert [(v.pass_index, v.side) for v in a] == [
        (0, "pr"), (0, "base"), (0, "base"), (0, "pr"),
        (1, "base"), (1, "pr"), (1, "pr"), (1, "base"),
        (2, "pr"), (2, "base"), (2, "base"), (2, "pr")]
    b_first = next(v.started_s for v in record.visits if v.item == "cpp/b.cpp")
    assert a[3].started_s <= b_first <= a[4].started_s  # pass 0 visits every block before pass 1 starts
    assert [len(r) for r in side_samples([record], "base")["cpp/a.cpp"]] == [6 * 7]  # 6 visits of 7 samples
    assert read_round_back(tmp_path, record) == [v.pass_index for v in record.visits]
    cpu, gpu = PairedTiming.for_device("cpu"), PairedTiming.for_device("0")
    assert cpu.passes > gpu.passes >= 1 and cpu.rounds > gpu.rounds >= 3  # the shared CPU needs more of both
    assert PairedTiming.for_device("cpu", rounds=4, passes=1) == PairedTiming(4, 1)


def read_round_back(tmp_path: Path, record: Any) -> list[int]:
    write_round(tmp_path / "round-001.json", record)
    return [v.pass_index for v in read_round(tmp_path / "round-001.json").visits]


SUITE = "name,status\nBertForMaskedLM,ok\nT5Small,ok\nGPT2ForSequenceClassification,fail\nDistilGPT2,ok\n"


def test_the_model_plan_times_models_ok_on_both_sides_in_groups(tmp_path: Path) -> None:
    base = side(tmp_path, "base", [], suite=SUITE)
    pr = side(tmp_path, "pr", [], suite=SUITE.replace("T5Small,ok", "T5Small,fail"))
    suite = SuiteRequest(models="BertForMaskedLM,T5Small", warmup=4, iterations=12)

    plan = model_plan([base, pr], suite=suite, device="cpu", platform="cpu", per_process=1, logs=tmp_path,
                      passes=1)

    assert [b["base"]["model"] for b in plan.blocks] == ["BertForMaskedLM", "DistilGPT2"]
    assert plan.blocks[0]["pr"] == {"kind": "time", "model": "BertForMaskedLM", "warmup": 4, "iterations": 12,
                                    "timeout_s": plan.blocks[0]["pr"]["timeout_s"]}
    assert plan.groups == [["BertForMaskedLM"], ["DistilGPT2"]]
    prepare = plan.sides["base"].prepare[0]
    assert (prepare["kind"], prepare["dtype"], prepare["device"], prepare["backend"]) == (
        "prepare", "float32", "cpu", "inductor")
    assert plan.sides["base"].env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "base" / "cache")
    assert model_plan([base, pr], suite=suite, device="cpu", platform="cpu", per_process=0, logs=tmp_path,
                      passes=1).groups == []


def test_on_rocm_a_model_worker_holds_one_model_unless_the_user_says(tmp_path: Path) -> None:
    """One process holding every compiled model runs out of HIP modules on ROCm (error 209): by default each model
    gets its own worker there, what one suite process held while it compiled that model."""
    base, pr = side(tmp_path, "base", [], suite=SUITE), side(tmp_path, "pr", [], suite=SUITE)
    suite = SuiteRequest(models="BertForMaskedLM,T5Small", warmup=4, iterations=12)

    def groups(platform: str, per_process: int | None) -> list[list[str]]:
        return model_plan([base, pr], suite=suite, device="0", platform=platform, per_process=per_process,
                          logs=tmp_path, passes=1).groups

    assert groups("rocm", None) == [["BertForMaskedLM"], ["T5Small"], ["DistilGPT2"]]
    assert groups("cuda", None) == []  # every model in one worker, as before
    assert groups("rocm", 0) == []  # --models-per-process 0: the user's word wins


# --- the rounds as run-level stages ----------------------------------------------------------------------------


class FakeRunner:
    """Runs ``stages.paired`` in this process with the fake worker module; can interrupt a chosen round."""

    name = "fake"

    def __init__(self, calls: list[tuple[int, str]], interrupt: int | None = None,
                 crash: set[tuple[int, str]] | None = None, status_of: Path | None = None) -> None:
        self.calls, self.interrupt, self.crash = calls, interrupt, crash or set()
        self.local = LocalRunner()
        # With a runs directory: what ``invoke status --run r`` printed as each round's stage ran
        self.status_of, self.statuses = status_of, list[str]()

    def environment(self, command: StageCommand) -> dict[str, str]:
        return self.local.environment(command)

    def run(self, command: StageCommand) -> None:
        assert command.module == "stages.paired", command.module
        args = dict(zip(command.args[::2], command.args[1::2], strict=True))
        number = int(args["--round"])
        self.calls.append((number, args["--sides"]))
        if self.status_of is not None:
            self.statuses.append(invoke_in_process("status", "--runs-dir", str(self.status_of), "--run", "r").stdout)
        if number == self.interrupt:
            raise KeyboardInterrupt
        plan = replace(read_plan(Path(args["--plan"])), worker="tests.support.fake_paired_worker")
        for side in plan.sides.values():
            side.env["PYTHONPATH"] = str(ROOT)
        for block in plan.blocks:
            for name, job in block.items():
                if job and (number, name) in self.crash:
                    job["behave"] = "crash"
        write_round(Path(args["--out"]), run_round(plan, number, args["--sides"].split(","), say=lambda _: None))


def sides_of(tmp_path: Path, runner: FakeRunner, recipe: str = "cpu-local", force: tuple[str, ...] = ()
             ) -> tuple[list[_Side], Any, io.StringIO]:
    run = RunStore(tmp_path / "runs").create_or_open("r", {}, "0")
    out = io.StringIO()
    sides = []
    for name in ("base", "pr"):
        pipeline = Pipeline(run, runner, Console(file=out, width=200), force=force)  # type: ignore[arg-type]
        prepared = pipeline.prepare(Variant(name, load_recipe(recipe, RECIPES)), None, sys.executable)
        rows = [row("cpp/a.cpp", "cpp_fused_a_0", "ha"), row("cpp/b.cpp", "cpp_fused_b_1", "hb")]
        write_index(prepared.directory / "organized" / "index.csv", rows)
        (prepared.directory / "suite").mkdir(exist_ok=True)
        (prepared.directory / "suite" / "suite.csv").write_text(SUITE)
        sides.append(_Side(pipeline, prepared, RunnerSpec("local"), suite_hash=f"s-{name}",
                           organize_hash=f"o-{name}"))
    return sides, run, out


def rounds_on(sides: list[_Side], run: Any, tmp_path: Path, devices: list[str] | None = None) -> _Rounds:
    """The rounds' executor: the local pool, running every stage through the sides' fake runner."""
    fake = sides[0].pipeline.runner
    pool = LocalPool(devices or ["cpu"], say=lambda line: None, make=lambda spec: fake)  # type: ignore[arg-type,return-value]
    return _Rounds(request(tmp_path), Console(file=io.StringIO()), executor=pool)


def request(tmp_path: Path, recipe: str = "cpu-local", rounds: int = 3, passes: int = 1) -> CompareRequest:
    return CompareRequest(base="installed", pr="installed", recipe=load_recipe(recipe, RECIPES),
                          runs_dir=tmp_path / "runs", rounds=rounds, passes=passes,
                          suite=SuiteRequest(models="BertForMaskedLM,T5Small", warmup=3, iterations=10))


@pytest.mark.integration
def test_an_interrupted_round_is_redone_and_finished_rounds_are_kept(tmp_path: Path) -> None:
    calls: list[tuple[int, str]] = []
    runner = FakeRunner(calls, interrupt=3, status_of=tmp_path / "runs")
    sides, run, _ = sides_of(tmp_path, runner)
    with pytest.raises(KeyboardInterrupt):
        Comparison(request(tmp_path), run, sides, rounds_on(sides, run, tmp_path)).time_kernels()
    # While the shards ran, `invoke status` showed every round still to do as running, with its shards done so far.
    for status in runner.statuses:
        assert all(re.search(rf"pair/kernels-round-{n} +│ running", status) for n in (1, 2, 3)), status
    last = runner.statuses[-1]  # as round 3's shard started (round 2's end may not be heard yet: it just ended)
    assert re.search(r"pair/kernels-round-1 .*shards=1/1 done", last), last
    assert re.search(r"pair/kernels-round-3 .*shards=0/1 done", last), last
    assert run.record("pair/kernels-round-2").status == StageStatus.DONE
    interrupted = run.record("pair/kernels-round-3")  # its shard left nothing but the stage says what happened
    assert interrupted is not None and (interrupted.status, interrupted.error) == (StageStatus.INTERRUPTED,
                                                                                   "interrupted by the user")

    calls.clear()
    sides, run, console = sides_of(tmp_path, FakeRunner(calls))
    Comparison(request(tmp_path), run, sides, rounds_on(sides, run, tmp_path)).time_kernels()

    assert calls == [(3, "base,pr")]
    assert "pair/kernels-round-1: done earlier with the same inputs, skipped" in console.getvalue()
    samples = json.loads((run.path("base", "kernel_samples.json")).read_text())
    assert len(samples["cpp/a.cpp"]) == 3 and all(len(r) == 60 for r in samples["cpp/a.cpp"])  # 2 visits of 30
    assert read_round(run.path("pair", "kernels", "round-001.json")).sides == ["base", "pr"]
    assert (run.path("pair", "kernels", "plan.json")).is_file()
    assert run.record("base/kernels").status == StageStatus.DONE
    log = run.path("pair", "logs", "kernels-base-workers.log")
    lines = [line for line in log.read_text().splitlines() if line.startswith("graph cpp_fused_a_0,cpp_fused_b_1")]
    assert len(lines) == 6 and len({line.split(" pid ")[1] for line in lines}) == 3  # 2 visits, fresh worker a round

    calls.clear()
    sides, run, _ = sides_of(tmp_path, FakeRunner(calls), force=("kernels",))
    Comparison(request(tmp_path), run, sides, rounds_on(sides, run, tmp_path)).time_kernels()
    assert calls == [(1, "base,pr"), (2, "base,pr"), (3, "base,pr")]  # --force kernels redoes every round


@pytest.mark.integration
def test_docker_rounds_run_one_side_per_image_alternating_which_goes_first(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    calls: list[tuple[int, str]] = []
    sides, run, _ = sides_of(tmp_path, FakeRunner(calls, crash={(2, "base")}), recipe="cuda-h100")
    rounds = rounds_on(sides, run, tmp_path, ["0"])
    Comparison(request(tmp_path, recipe="cuda-h100"), run, sides, rounds).time_kernels()

    assert calls == [(1, "base"), (1, "pr"), (2, "pr"), (2, "base"), (3, "base"), (3, "pr")]
    assert read_round(run.path("pair", "kernels", "round-002-pr.json")).sides == ["pr"]
    assert run.record("pair/kernels-round-2").outputs == ["pair/kernels/round-002-base.json",
                                                          "pair/kernels/round-002-pr.json"]
    base = json.loads(run.path("base", "kernel_samples.json").read_text())
    assert [len(r) for r in base["cpp/a.cpp"]] == [60, 0, 60]  # the crashed round stays in place, empty
    pr = json.loads(run.path("pr", "kernel_samples.json").read_text())
    assert [len(r) for r in pr["cpp/b.cpp"]] == [60, 60, 60]
    plan = read_plan(run.path("pair", "kernels", "plan.json"))
    assert plan.device == "0" and plan.sides["base"].env["CUDA_VISIBLE_DEVICES"] == "0"


@pytest.mark.integration
def test_model_rounds_give_each_side_its_paired_samples(tmp_path: Path) -> None:
    calls: list[tuple[int, str]] = []
    sides, run, _ = sides_of(tmp_path, FakeRunner(calls))
    Comparison(request(tmp_path, passes=2), run, sides, rounds_on(sides, run, tmp_path)).time_models()

    assert calls == [(1, "base,pr"), (2, "base,pr"), (3, "base,pr")]
    paired = json.loads(run.path("pr", "suite", "paired_samples.json").read_text())
    assert sorted(paired) == ["BertForMaskedLM", "DistilGPT2", "T5Small"]
    assert [len(r) for r in paired["T5Small"]] == [40, 40, 40]  # 2 passes × 2 visits × 10 iterations
    assert run.record("pair/models-round-1").status == StageStatus.DONE
    assert run.record("base/models").outputs == ["base/suite/paired_samples.json"]


# --- adaptive rounds -------------------------------------------------------------------------------------------


def adaptive(tmp_path: Path, max_rounds: int | None = 5, budget_s: float | None = None,
             resolution_pct: Resolution = "none") -> CompareRequest:
    """An adaptive request; without a target by default (these tests are about when a look stops; the device's
    default targets have their own test)."""
    return replace(request(tmp_path), rounds=None, auto_rounds=True, max_rounds=max_rounds, budget_s=budget_s,
                   resolution_pct=resolution_pct)


def family(verdict: str, detectable: float = math.nan, strict_detectable: float = math.nan) -> Look:
    """A kind's family as a look finds it: the same verdict at both levels, its smallest detectable changes (%)."""
    items = () if verdict == "identical" else (verdict,)
    return Look(verdict, verdict, items, items, True, True, 0, detectable, strict_detectable)


def loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, looks: dict[int, Look], **policy: Any) -> tuple[
        list[int], RoundsUsed, str]:
    """``run_rounds`` of the kernels under an adaptive ``policy``, with ``looks[N]`` found after N rounds: the rounds
    that ran, the kind's rounds record and what the compare printed."""
    ran: list[int] = []

    class CountedBatches:
        """The round stages of the kind, counted instead of run (the loop's decisions are the subject here)."""

        def __init__(self, *_: object) -> None:
            pass

        def run(self, first: int, last: int) -> list[str]:
            ran.extend(range(first, last + 1))
            return [f"round-{n}" for n in range(first, last + 1)]

    monkeypatch.setattr("prbench.compare.driver._RoundBatches", CountedBatches)
    run = RunStore(tmp_path / "runs").create_or_open("r", {}, "0")
    printed = io.StringIO()
    the_request = adaptive(tmp_path, **policy)
    rounds = _Rounds(the_request, Console(file=printed, width=300))
    rounds.started -= 60  # the compare began a minute ago: a --budget under that is spent by the first look
    comparison = Comparison(the_request, run, [], rounds)
    comparison.run_rounds("kernels", {}, {}, lambda: None, looks.__getitem__)  # type: ignore[arg-type,return-value]
    used = read_rounds_used(run.path("pair", "kernels"))
    assert used is not None
    return ran, used, printed.getvalue()


def test_with_resolution_a_settled_kind_goes_on_until_its_detectable_change_reaches_the_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The user runs `invoke compare --resolution 3%`: the kernels regress, settled from round 3 on, but a stop
    # states its intervals at the strict level, where only round 6 tells a 3 % change apart.
    looks = {n: family("regressed", detectable=6.0 - 0.5 * n, strict_detectable=9.0 - n) for n in range(3, 9)}
    ran, used, printed = loop(tmp_path, monkeypatch, looks, max_rounds=8, resolution_pct=3.0)

    assert ran == [1, 2, 3, 4, 5, 6]
    assert (used.reason, used.resolution_pct, used.detectable_pct) == ("settled: regressed", 3.0, 3.0)
    assert (used.alpha, used.confidence) == (0.001, 0.999)  # an early stop: stated at the strict level, as before
    assert "kernels: after 5 round(s) verdict regressed, but detectable 4 % at the strict level, above the 3 % " \
           "target: one more round" in printed
    assert "kernels: 6 round(s): settled: regressed; detectable 3 % ≤ 3 % target after 6 round(s)" in printed

    # With --resolution none the same kind stops at the first settled look, as it did before targets.
    ran, used, _ = loop(tmp_path / "plain", monkeypatch, looks, max_rounds=8, resolution_pct="none")
    assert ran == [1, 2, 3] and used.resolution_pct is None and used.target() == ""


def test_a_cpu_compare_without_flags_holds_kernels_to_2_percent_and_models_to_3(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The user runs README command 1 (`invoke compare --base=installed --pr=PATCH`, no rounds flags) on the CPU.
    flags = check_rounds_flags(None, None, None, None)
    the_request = replace(request(tmp_path), rounds=flags.rounds, auto_rounds=flags.auto, max_rounds=flags.max_rounds,
                          budget_s=flags.budget_s, resolution_pct=flags.resolution_pct)
    policies = _policies(the_request)
    assert {kind: (p.max_rounds, p.resolution_pct) for kind, p in policies.items()} == {
        "models": (10, 3.0), "kernels": (24, 2.0)}
    # One run level for both kinds: the early looks are spent over the kernels' 21.
    assert policies["models"].run_settings(VerdictSettings()) == policies["kernels"].run_settings(VerdictSettings())
    assert policies["kernels"].run_settings(VerdictSettings()).alpha == pytest.approx(0.05 - 21 * 0.001)
    # What the compare prints before its rounds, and what the manifest records.
    assert policy_line(policies) == ("rounds: adaptive from 3, each kind until its verdicts are settled: models at "
                                     "most 10, until detectable ≤ 3 %; kernels at most 24, until detectable ≤ 2 %")
    compare_plan = ComparePlan(base=None, pr=None, installed_commit=None, merge_base=None)  # type: ignore[arg-type]
    recorded = _settings(the_request, compare_plan, None)["rounds_policy"]
    assert recorded == {"mode": "auto", "min_rounds": 3, "max_rounds": 24, "budget_s": None,
                        "kinds": {"models": {"max_rounds": 10, "resolution_pct": 3.0},
                                  "kernels": {"max_rounds": 24, "resolution_pct": 2.0}}}

    # The kernels regress clearly from round 3 on, but only round 6 resolves 2 % at the strict level.
    looks = {n: family("regressed", detectable=4.0 - 0.4 * n, strict_detectable=5.0 - 0.5 * n) for n in range(3, 25)}
    ran, used, printed = loop(tmp_path, monkeypatch, looks, max_rounds=None, resolution_pct=None)
    assert ran == [1, 2, 3, 4, 5, 6] and (used.max_rounds, used.resolution_pct, used.detectable_pct) == (24, 2.0, 2.0)
    assert "above the 2 % target: one more round" in printed

    # On a GPU the defaults stay 5 rounds without a target.
    gpu = rounds_policies("0", None, True)
    assert {kind: (p.max_rounds, p.resolution_pct) for kind, p in gpu.items()} == {"models": (5, None),
                                                                                  "kernels": (5, None)}


def test_with_resolution_the_maximum_or_the_budget_ends_the_rounds_and_says_the_target_was_not_reached(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    never = {n: family("improved", detectable=4.5, strict_detectable=7.0) for n in range(3, 6)}
    ran, used, printed = loop(tmp_path, monkeypatch, never, max_rounds=5, resolution_pct=3.0)

    assert ran == [1, 2, 3, 4, 5] and used.reason == "--max-rounds reached (settled: improved)"
    # Ran to the last round: stated at the run level, and so is the detectable change it ended at.
    assert used.detectable_pct == 4.5 and used.alpha == pytest.approx(0.05 - 2 * 0.001)
    assert used.target() == "3 % target not reached: detectable 4.5 % after 5 round(s)"
    assert "3 % target not reached" in printed

    ran, used, _ = loop(tmp_path / "budget", monkeypatch, never, max_rounds=5, resolution_pct=3.0, budget_s=0.001)
    assert ran == [1, 2, 3] and used.reason.startswith("--budget 0.001 s spent after ")
    assert used.reason.endswith("(settled: improved)") and used.detectable_pct == 4.5
    assert used.describe().startswith("kernels: 3 of at most 5 round(s), --budget 0.001 s spent after 60 s")
    assert "; 3 % target not reached: detectable 4.5 % after 3 round(s); stated at alpha" in used.describe()

    # A kind where no code changed has nothing to resolve: it stops once settled, and says so.
    ran, used, _ = loop(tmp_path / "same", monkeypatch, {3: family("identical")}, resolution_pct=3.0)
    assert ran == [1, 2, 3] and used.target().startswith("3 % target: no detectable change to hold to it")


@pytest.mark.integration
def test_adaptive_kernel_rounds_stop_after_three_when_no_kernel_changed(tmp_path: Path) -> None:
    calls: list[tuple[int, str]] = []
    sides, run, _ = sides_of(tmp_path, FakeRunner(calls))

    Comparison(adaptive(tmp_path), run, sides, rounds_on(sides, run, tmp_path)).time_kernels()

    # The two kernels have the same code on both sides: after the minimum there is nothing left to decide.
    assert calls == [(1, "base,pr"), (2, "base,pr"), (3, "base,pr")]
    used = read_rounds_used(run.path("pair", "kernels"))
    assert used is not None and (used.rounds, used.mode, used.max_rounds) == (3, "auto", 5)
    assert used.reason == "settled: identical"
    samples = json.loads(run.path("base", "kernel_samples.json").read_text())
    assert [len(r) for r in samples["cpp/a.cpp"]] == [60, 60, 60]  # the side's files hold the rounds that ran


@pytest.mark.integration
def test_adaptive_rounds_go_on_until_the_look_settles_or_the_maximum(tmp_path: Path) -> None:
    calls: list[tuple[int, str]] = []
    sides, run, _ = sides_of(tmp_path, FakeRunner(calls))
    looks: list[int] = []

    def look(rounds: int) -> Look:
        looks.append(rounds)
        return family("regressed" if rounds == 4 else "inconclusive")

    plan = partial(kernel_plan, [PlanSide(s.prepared.variant.name, s.prepared.directory, s.prepared.env,
                                          s.prepared.python_path, s.pipeline.runner) for s in sides],
                   device="cpu", platform="cpu", warmup=1, iterations=3, timeout_s=60, logs=tmp_path, passes=1)
    comparison = Comparison(adaptive(tmp_path), run, sides, rounds_on(sides, run, tmp_path))
    hashes = comparison.run_rounds("kernels", {}, {}, plan, look)

    assert looks == [3, 4] and len(hashes) == 4 and [n for n, _ in calls] == [1, 2, 3, 4]
    stopped = read_rounds_used(run.path("pair", "kernels"))
    assert stopped.reason == "settled: regressed"
    # Stopped early: the report states this kind at the strict level of the look that stopped it.
    assert (stopped.alpha, stopped.confidence) == (0.001, 0.999)

    # Never settled: the maximum ends it, and says what the last look found.
    calls.clear()
    sides, run, _ = sides_of(tmp_path / "again", FakeRunner(calls))
    Comparison(adaptive(tmp_path, max_rounds=5), run, sides, rounds_on(sides, run, tmp_path)).run_rounds(
        "kernels", {}, {}, plan, lambda rounds: family("inconclusive"))
    used = read_rounds_used(run.path("pair", "kernels"))
    assert [n for n, _ in calls] == [1, 2, 3, 4, 5] and used.reason == "--max-rounds reached (verdict inconclusive)"
    assert (used.alpha, used.confidence) == pytest.approx((0.05 - 2 * 0.001, 0.95 + 2 * 0.001))  # the run level


@pytest.mark.integration
def test_adaptive_rounds_capped_at_the_minimum_run_it_without_a_look(tmp_path: Path) -> None:
    """``--max-rounds 3`` leaves no early look to spend a level on: the three rounds run, the verdicts are stated
    at the run's own level, and no look is asked for (its strict level would be no level at all)."""
    calls: list[tuple[int, str]] = []
    sides, run, _ = sides_of(tmp_path, FakeRunner(calls))
    plan = partial(kernel_plan, [PlanSide(s.prepared.variant.name, s.prepared.directory, s.prepared.env,
                                          s.prepared.python_path, s.pipeline.runner) for s in sides],
                   device="cpu", platform="cpu", warmup=1, iterations=3, timeout_s=60, logs=tmp_path, passes=1)

    def look(rounds: int) -> Look:
        raise AssertionError(f"looked after {rounds} rounds")

    Comparison(adaptive(tmp_path, max_rounds=3), run, sides, rounds_on(sides, run, tmp_path)).run_rounds(
        "kernels", {}, {}, plan, look)

    used = read_rounds_used(run.path("pair", "kernels"))
    assert [n for n, _ in calls] == [1, 2, 3]
    assert used is not None and (used.rounds, used.mode, used.max_rounds) == (3, "auto", 3)
    assert used.reason == "--max-rounds reached (the minimum, 3: no early look)"
    assert (used.alpha, used.confidence) == (0.05, 0.95)


@pytest.mark.integration
def test_a_spent_budget_stops_adaptive_rounds_after_the_minimum(tmp_path: Path) -> None:
    calls: list[tuple[int, str]] = []
    sides, run, _ = sides_of(tmp_path, FakeRunner(calls))
    plan = partial(kernel_plan, [PlanSide(s.prepared.variant.name, s.prepared.directory, s.prepared.env,
                                          s.prepared.python_path, s.pipeline.runner) for s in sides],
                   device="cpu", platform="cpu", warmup=1, iterations=3, timeout_s=60, logs=tmp_path, passes=1)
    Comparison(adaptive(tmp_path, budget_s=0.001), run, sides, rounds_on(sides, run, tmp_path)).run_rounds(
        "kernels", {}, {}, plan, lambda rounds: family("inconclusive"))

    used = read_rounds_used(run.path("pair", "kernels"))
    assert [n for n, _ in calls] == [1, 2, 3] and used.reason.startswith("--budget 0.001 s spent after ")


def test_round_ones_kernel_workers_start_from_the_triton_binaries_their_suite_compiled(tmp_path: Path) -> None:
    """A fresh kernel worker compiles every Triton kernel it loads, one at a time; before this, round 1's workers
    found an empty cache and the later rounds round 1's (an H200: 12.3-16.0 s against 5.9-8.1 s a round). Each side's
    workers now start from a copy of what its own suite compiled; a cache a round already filled is kept."""
    sides = [side(tmp_path, name, [row("triton/t.py", "triton_poi_fused_add_0", "h0", backend="triton")])
             for name in ("base", "pr")]
    for plan_side in sides:
        binary = VariantLayout(plan_side.directory).triton_cache / f"KEY-{plan_side.name}" / "triton_poi.cubin"
        binary.parent.mkdir(parents=True)
        binary.write_bytes(plan_side.name.encode())

    plan = kernel_plan(sides, device="0", platform="cuda", warmup=5, iterations=7, timeout_s=30,
                       logs=tmp_path / "logs", passes=1)

    caches = {name: Path(Side(name, plan, None, say=lambda _: None).worker.env["TRITON_CACHE_DIR"])
              for name in ("base", "pr")}
    for name, cache in caches.items():
        assert cache.is_relative_to(tmp_path / name / "work")
        assert (cache / f"KEY-{name}" / "triton_poi.cubin").read_bytes() == name.encode()  # its own side's only
        assert not (cache / f"KEY-{'pr' if name == 'base' else 'base'}").exists()

    later = VariantLayout(sides[0].directory).triton_cache / "KEY-later" / "x.cubin"
    later.parent.mkdir()
    later.write_bytes(b"compiled after round 1")
    kernel_plan(sides, device="0", platform="cuda", warmup=5, iterations=7, timeout_s=30, logs=tmp_path / "logs",
                passes=1)
    assert not (caches["base"] / "KEY-later").exists()
