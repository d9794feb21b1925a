"""The suite spread over an executor's devices: a side's models cut into shards, each compiled on any device with its
own Inductor cache, merged into the files one suite stage writes.

The unit tests build shards from hand-written shard outputs; the integration tests compile two tiny models for
real: once as one stage (today's single-device suite), then in two shards on the local pool's two CPU devices and
on a local Ray cluster whose actor running a shard is killed mid-compile, and every run must leave the same suite.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from foundation.errors import UserError
from foundation.formats.cache_archive import archived_graph_modules
from foundation.formats.dynamo_csv import read_graph_models, read_suite_csv, read_suite_samples, write_suite_csv
from foundation.formats.run_layout import VariantLayout
from foundation.formats.suite_request import SuiteRequest
from foundation.formats.suite_shard_records import (
    ShardRecord,
    merge_graph_models,
    merge_rows,
    model_shards,
    read_shard_record,
    write_shard_record,
)
from prbench.compare.round_sharding import NodeFacts, node_summary, run_tasks
from prbench.executors import DeviceSlot, RunnerSpec, ShardOutcome, ShardTask
from prbench.executors.local_pool import LocalPool
from prbench.runners import CODE_ROOT
from prbench.runners.local import LocalRunner
from prbench.sides.recipes import load_recipe
from prbench.sides.variants import Variant
from prbench.stages.command_lines import suite_command
from prbench.stages.suite_shards import SuiteShards, spread_shard_size, suite_shards
from stages.suite import build_parser, failure_row

TWO = "BertForMaskedLM,DistilBertForMaskedLM"
LOCAL = RunnerSpec("local", platform="cpu", python=sys.executable)


def the_variant() -> Variant:
    return Variant(name="base", recipe=load_recipe("cpu-local", CODE_ROOT / "recipes"))


def shards_for(variant_dir: Path, models: str = TWO, shard_size: int = 1) -> SuiteShards:
    settings = SuiteRequest(models=models, warmup=3, iterations=10)
    env = the_variant().stage_environment(variant_dir)
    return suite_shards("base", variant_dir, "inputs0", settings, shard_size, LOCAL, env, [])


def side_cache(variant_dir: Path) -> Path:
    return Path(the_variant().stage_environment(variant_dir)["TORCHINDUCTOR_CACHE_DIR"])


# --- what a shard's stage leaves, by hand ----------------------------------------------------------------------


def write_shard(work: Path, models: tuple[str, ...], record: Path, *, graphs: dict[str, list[str]],
                cache_files: dict[str, str], ok: bool = True, cpus: tuple[int, ...] = (0,)) -> None:
    """What a shard's stage leaves in ``work``: rows (ok or fail), samples, graph lists, its cache, its record."""
    from stages.suite import SuiteSettings

    out = VariantLayout(work).suite
    out.mkdir(parents=True)
    settings = SuiteSettings(out=out, models=models, size="tiny", mode="inference", dtype="float32", warmup=3,
                             iterations=10, device="cpu", cpu_backend="cpp", backend="inductor", cache_archive=None)
    rows = [failure_row(m, settings, RuntimeError("boom")) for m in models]
    if ok:
        for row in rows:
            row["status"] = "ok"
    write_suite_csv(out / "suite.csv", rows)
    (out / "samples.json").write_text(json.dumps({m: {"eager": [1.0], "compiled": [0.5]} for m in models}))
    (out / "graph_models.json").write_text(json.dumps(graphs))
    for name, text in cache_files.items():
        path = work / "inductor-cache" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    write_shard_record(record, ShardRecord(models=models, node="n1", device="cpu", cpus=cpus,
                                           started_at="2026-01-01T00:00:00+00:00", wall_s=1.0))


def fake_shard(shards: SuiteShards, index: int, *, graphs: dict[str, list[str]], cache_files: dict[str, str],
               ok: bool = True) -> None:
    write_shard(shards.shard_dir(index), shards.shards[index], shards.record(index), graphs=graphs,
                cache_files=cache_files, ok=ok, cpus=(index,))


class CompilingExecutor:
    """An executor that "runs" each suite shard by writing what its stage would (from the shard's command line)."""

    name = "fake"

    def __init__(self, ctrl_c_after: int | None = None) -> None:
        self.calls: list[list[str]] = []
        self.ctrl_c_after = ctrl_c_after  # shards to finish before the user presses Ctrl-C

    def run(self, tasks: list[ShardTask], done: Callable[[ShardOutcome], None]) -> None:
        self.calls.append([t.key for t in tasks])
        for number, task in enumerate(tasks):
            if number == self.ctrl_c_after:
                raise KeyboardInterrupt
            (step,) = task.steps
            args = build_parser().parse_args(step.command.args)
            models = tuple(args.models.split(","))
            write_shard(args.out.parent, models, args.shard_record, graphs={f"g-{m}": [m] for m in models},
                        cache_files={f"{m}.py": m for m in models})
            done(ShardOutcome(task.key, DeviceSlot("n1", "cpu", frozenset({0})), 0.1, 1, {"host": "n1"}))

    def close(self) -> None:
        """Nothing held."""


def test_the_models_are_cut_in_list_order_and_zero_is_one_shard() -> None:
    assert model_shards(["a", "b", "c"], 2) == [("a", "b"), ("c",)]
    assert model_shards(["a", "b", "c"], 0) == [("a", "b", "c")]


def test_the_suite_is_spread_only_with_several_devices_or_ray_unless_the_user_says() -> None:
    assert spread_shard_size(None, "local", 1, "cpu") == 0  # one device: one suite stage per side, as always
    assert spread_shard_size(None, "local", 2, "cpu") == 1
    assert spread_shard_size(None, "ray", 0, "cuda") == 1
    assert spread_shard_size(0, "ray", 0, "cpu") == 0
    assert spread_shard_size(3, "local", 1, "cpu") == 3


def test_merged_graph_lists_read_as_one_stage_wrote_them() -> None:
    models = ["A", "B", "C"]
    merged = merge_graph_models([{"g3": ["C"], "g1": ["C"]}, {"g1": ["A"], "g2": ["A"]}], models)
    assert merged == {"g1": ["A", "C"], "g2": ["A"], "g3": ["C"]}
    assert list(merged) == ["g1", "g2", "g3"]


def test_a_model_no_shard_has_is_one_error_line() -> None:
    with pytest.raises(UserError, match="no shard has a row for model B"):
        merge_rows([[{"name": "A"}]], ["A", "B"])


def test_a_shard_command_is_what_the_stage_parses_with_its_own_cache(tmp_path: Path) -> None:
    shards = shards_for(tmp_path / "base")
    task = shards.task(1)
    (step,) = task.steps
    args = build_parser().parse_args([*step.command.args, "--device", "0", "--node", "n2"])
    assert (args.models, args.out, args.shard_record) == ("DistilBertForMaskedLM",
                                                          shards.shard_dir(1) / "suite", shards.record(1))
    assert (args.device, args.node, args.cache_archive) == ("0", "n2", None)
    assert step.command.env["TORCHINDUCTOR_CACHE_DIR"] == str(shards.shard_dir(1) / "inductor-cache")
    assert step.command.env["OMP_NUM_THREADS"] == "1"  # the side's environment is kept
    assert task.outputs == (shards.record(1),)
    assert "shard 2/2 (DistilBertForMaskedLM)" in task.key


def test_finished_shards_are_never_redone_and_the_merge_writes_one_suite(tmp_path: Path) -> None:
    variant_dir = tmp_path / "base"
    shards = shards_for(variant_dir)
    fake_shard(shards, 1, graphs={"gB": ["DistilBertForMaskedLM"]}, cache_files={"aa/gB.py": "B", "shared.py": "s"})
    assert shards.missing() == [0]
    with pytest.raises(UserError, match="shard 1 has no record"):
        shards.merge(side_cache(variant_dir))
    fake_shard(shards, 0, graphs={"gA": ["BertForMaskedLM"]}, cache_files={"aa/gA.py": "A", "shared.py": "s"})
    assert shards.missing() == []

    side_cache(variant_dir).mkdir(parents=True)
    (side_cache(variant_dir) / "stale.py").write_text("from an earlier attempt")
    shards.merge(side_cache(variant_dir))

    rows = read_suite_csv(variant_dir / "suite" / "suite.csv")
    assert [r["name"] for r in rows] == ["BertForMaskedLM", "DistilBertForMaskedLM"]
    assert list(read_suite_samples(variant_dir / "suite" / "samples.json")) == [r["name"] for r in rows]
    assert read_graph_models(variant_dir / "suite" / "graph_models.json") == {
        "gA": ["BertForMaskedLM"], "gB": ["DistilBertForMaskedLM"]}
    with tarfile.open(VariantLayout(variant_dir).cache_archive) as tar:
        assert sorted(tar.getnames()) == ["inductor-cache/aa/gA.py", "inductor-cache/aa/gB.py",
                                          "inductor-cache/shared.py"]
    assert sorted(p.name for p in side_cache(variant_dir).rglob("*.py")) == ["gA.py", "gB.py", "shared.py"]
    assert [p["device"] for p in shards.placements()] == ["cpu", "cpu"]


def test_a_damaged_or_foreign_record_is_no_finished_shard(tmp_path: Path) -> None:
    shards = shards_for(tmp_path / "base")
    fake_shard(shards, 0, graphs={}, cache_files={})
    shards.record(1).parent.mkdir(parents=True)
    shards.record(1).write_text('{"models": ["Bert')
    assert shards.missing() == [1]
    with pytest.raises(UserError, match=r"shard\.json"):
        read_shard_record(shards.record(1))
    other = shards_for(tmp_path / "base", models="BertForMaskedLM,GPT2ForSequenceClassification")
    assert other.missing() == [1]  # same directory, another model in shard 2: not this shard's record


def test_a_suite_where_no_model_ran_fails_after_writing_what_the_shards_said(tmp_path: Path) -> None:
    variant_dir = tmp_path / "base"
    shards = shards_for(variant_dir)
    for index in range(2):
        fake_shard(shards, index, graphs={}, cache_files={}, ok=False)
    with pytest.raises(UserError, match=r"base suite: no model compiled and ran .*RuntimeError: boom"):
        shards.merge(side_cache(variant_dir))


def test_clearing_keeps_the_current_inputs_shards_unless_forced(tmp_path: Path) -> None:
    shards = shards_for(tmp_path / "base")
    fake_shard(shards, 0, graphs={}, cache_files={})
    stale = shards.directory.parent / "other-inputs"
    stale.mkdir()
    shards.clear(keep_current=True)
    assert not stale.exists() and shards.missing() == [1]
    shards.clear(keep_current=False)
    assert shards.missing() == [0, 1]


def compare_suites(tmp_path: Path, executor: CompilingExecutor) -> list[dict[str, Any]]:
    """The suite step of ``invoke compare --devices cpu,cpu`` for both sides of run ``r``; where the shards ran."""
    from rich.console import Console

    from prbench.compare import driver as compare
    from prbench.runs.pipeline import Pipeline
    from prbench.runs.run_store import RunStore

    recipe = load_recipe("cpu-local", CODE_ROOT / "recipes")
    request = compare.CompareRequest(base="installed", pr="installed", recipe=recipe, runs_dir=tmp_path,
                                     suite=SuiteRequest(models=TWO, warmup=3, iterations=10), devices=("cpu", "cpu"))
    console = Console(file=io.StringIO())
    with RunStore(tmp_path).create_or_open("r", {}, "test") as run:
        sides = []
        for name in ("base", "pr"):
            pipeline = Pipeline(run, LocalRunner(), console=console)
            prepared = pipeline.prepare(Variant(name=name, recipe=recipe), None, sys.executable)
            sides.append(compare._Side(pipeline, prepared, LOCAL))
        comparison = compare.Comparison(request, run, sides, compare._Rounds(request, console, executor=executor))
        comparison.run_suites()
        return comparison.suite_placements()


def test_compare_hands_both_sides_shards_to_the_executor_at_once_and_keeps_a_finished_suite(tmp_path: Path) -> None:
    executor = CompilingExecutor()
    compare_suites(tmp_path, executor)
    (keys,) = executor.calls  # one call: the two sides' shards together
    assert sorted(k.split(" (")[0] for k in keys) == ["base suite shard 1/2", "base suite shard 2/2",
                                                      "pr suite shard 1/2", "pr suite shard 2/2"]
    placements = compare_suites(tmp_path, executor)
    assert len(executor.calls) == 1  # the second invocation found both suites done
    for side in ("base", "pr"):
        assert [r["name"] for r in read_suite_csv(tmp_path / "r" / side / "suite" / "suite.csv")] == TWO.split(",")
        with tarfile.open(tmp_path / "r" / side / "inductor-cache.tar.gz") as tar:
            assert sorted(tar.getnames()) == [f"inductor-cache/{m}.py" for m in sorted(TWO.split(","))]
    assert len(placements) == 4
    # Each side's suite stage only merged its shards: the manifest says when they ran and for how long.
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    for side in ("base", "pr"):
        stage = manifest["stages"][f"{side}/suite"]
        assert stage["started"] == "2026-01-01T00:00:00+00:00" and 1.0 <= stage["duration_s"] < 5
    nodes = node_summary([], NodeFacts({"n1": {"host": "n1"}}), {}, placements)
    assert nodes == {"n1": {"devices": ["CPU 0"], "shards": 4, "facts": {"host": "n1"}}}


def test_after_ctrl_c_a_side_whose_shards_finished_is_recorded_and_only_the_rest_runs_again(tmp_path: Path) -> None:
    interrupted = CompilingExecutor(ctrl_c_after=3)  # base's two shards and pr's first finish
    with pytest.raises(KeyboardInterrupt):
        compare_suites(tmp_path, interrupted)
    assert (tmp_path / "r" / "base" / "suite" / "suite.csv").is_file()
    assert not (tmp_path / "r" / "pr" / "suite" / "suite.csv").exists()
    stages = json.loads((tmp_path / "r" / "manifest.json").read_text())["stages"]
    assert stages["base/suite"]["status"] == "done"
    assert (stages["pr/suite"]["status"], stages["pr/suite"]["error"]) == ("interrupted", "interrupted by the user")

    resumed = CompilingExecutor()
    compare_suites(tmp_path, resumed)
    (keys,) = resumed.calls
    assert [k.split(" (")[0] for k in keys] == ["pr suite shard 2/2"]
    assert [r["name"] for r in read_suite_csv(tmp_path / "r" / "pr" / "suite" / "suite.csv")] == TWO.split(",")


def test_on_one_device_the_suite_stays_one_stage_per_side(tmp_path: Path) -> None:
    from prbench.compare import driver as compare

    recipe = load_recipe("cpu-local", CODE_ROOT / "recipes")
    request = compare.CompareRequest(base="installed", pr="installed", recipe=recipe, runs_dir=tmp_path)
    rounds = compare._Rounds(request, console=None, executor=CompilingExecutor())  # type: ignore[arg-type]
    assert compare._suite_shard_size(request, rounds) == 0
    spread = compare.CompareRequest(base="installed", pr="installed", recipe=recipe, runs_dir=tmp_path,
                                    devices=("cpu", "cpu"))
    assert compare._suite_shard_size(spread, rounds) == 1


# --- real compiles ---------------------------------------------------------------------------------------------


def suite_shape(variant_dir: Path) -> dict[str, Any]:
    """What must not depend on where the models compiled: the files, each row's settings and graph counts, the
    samples per model, which models share which graphs, and how many compiled graph modules the archive holds."""
    directory = VariantLayout(variant_dir).suite
    fixed = ("dev", "name", "batch_size", "calls_captured", "unique_graphs", "graph_breaks", "unique_graph_breaks",
             "mode", "dtype", "size", "n", "warmup", "status")
    return {
        "files": sorted(p.name for p in directory.iterdir()),
        "rows": [{k: row[k] for k in fixed} for row in read_suite_csv(directory / "suite.csv")],
        "samples": {m: {k: len(v) for k, v in s.items()}
                    for m, s in read_suite_samples(directory / "samples.json").items()},
        "graphs": sorted(map(tuple, read_graph_models(directory / "graph_models.json").values())),
        "archived_graph_modules": len(archived_graph_modules(VariantLayout(variant_dir).cache_archive)),
    }


@pytest.fixture(scope="module")
def one_stage(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Today's suite: one stage over both models on one device."""
    variant_dir = tmp_path_factory.mktemp("one-stage") / "base"
    command = suite_command(variant_dir, SuiteRequest(models=TWO, warmup=3, iterations=10), the_variant())
    command.log_path = variant_dir / "logs" / "suite.log"
    LocalRunner(stream_output=False).run(command)
    return suite_shape(variant_dir)


def run_spread(shards: SuiteShards, executor: Any, lines: list[str]) -> list[ShardOutcome]:
    outcomes: list[ShardOutcome] = []
    tasks = [shards.task(i) for i in shards.missing()]
    run_tasks(tasks, executor, lines.append, "suite", "suite shards", outcomes.append)
    shards.merge(side_cache(shards.variant_dir))
    return outcomes


@pytest.mark.integration
@pytest.mark.xdist_group("suite-shards")  # with the Ray test below: one worker compiles the module's suite once
def test_two_cpu_devices_of_the_local_pool_give_the_suite_of_one_stage(one_stage: dict[str, Any],
                                                                       tmp_path: Path) -> None:
    shards = shards_for(tmp_path / "base")
    lines: list[str] = []
    outcomes = run_spread(shards, LocalPool(["cpu", "cpu"], say=lines.append), lines)

    assert suite_shape(tmp_path / "base") == one_stage
    assert sorted(o.key.split(" (")[0] for o in outcomes) == ["base suite shard 1/2", "base suite shard 2/2"]
    assert {p["cpus"][0] for p in shards.placements()} == {0, 1}  # each shard on its CPU device
    again = run_spread(shards, LocalPool(["cpu", "cpu"], say=lines.append), lines)
    assert again == []  # finished shards are never redone


def kill_the_actor_of(record: Path, log: Path, killed: Path) -> None:
    """Once the shard writing ``record`` started compiling, SIGKILL the Ray actor that runs its stage (the stage's
    parent); its stage dies with it."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if log.is_file() and ": start" in log.read_text(errors="replace"):
            for pid in _pids_naming(str(record)):
                parent = _parent_of(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(parent, signal.SIGKILL)
                    killed.write_text(f"{parent}\n")
                    return
        time.sleep(0.5)


def _pids_naming(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if text in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(proc.name))
    return found


def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


@pytest.mark.integration
@pytest.mark.ray
@pytest.mark.xdist_group("suite-shards")
def test_a_ray_cluster_gives_the_same_suite_and_retries_the_shard_whose_actor_was_killed(
        one_stage: dict[str, Any], ray_cluster: str, tmp_path: Path) -> None:
    from prbench.executors.ray_cluster import RayExecutor

    shards = shards_for(tmp_path / "base")
    killed = tmp_path / "killed"
    threading.Thread(target=kill_the_actor_of, daemon=True, args=(
        shards.record(1), tmp_path / "base" / "logs" / "suite-shard-002.log", killed)).start()
    lines: list[str] = []
    executor = RayExecutor(ray_cluster, platform="cpu", say=lines.append)
    try:
        outcomes = run_spread(shards, executor, lines)
    finally:
        executor.close()

    assert killed.exists()
    assert {o.key.split(" (")[0]: o.attempts for o in outcomes} == {"base suite shard 1/2": 1,
                                                                      "base suite shard 2/2": 2}
    assert any("shard 2/2" in line and "lost on" in line for line in lines)
    assert suite_shape(tmp_path / "base") == one_stage
    assert all(p["node"] and p["device"] == "cpu" for p in shards.placements())
