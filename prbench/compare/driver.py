"""``invoke compare``: plan both variants, run their stages (resumable), then compare and report.

Per variant: suite (spread over the executor's devices when it has several: ``prbench.stages.suite_shards``) →
organize. Then the paired timing rounds of the run (``pair/models-round-N``, then ``pair/kernels-round-N``; a
request with ``time_models`` off, a bisect of a kernel's step, runs no model round): base and PR timed item by item
in fresh workers, the unit of replication being the round; each side then derives its files from the rounds
(``<side>/models`` → ``suite/paired_samples.json``, ``<side>/kernels`` → ``kernels.csv``, ``kernel_samples.json``,
``kernels_seed.csv``). The report stage reads only the run directory, so ``invoke report RUN`` re-renders it later
without re-running anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from analysis.kernels.results import results_from_rounds
from analysis.report.sequential import (
    Look,
    Resolution,
    RoundsPolicy,
    RoundsUsed,
    describe_policies,
    kernel_look,
    model_look,
    policy_line,
    read_rounds_used,
    rounds_policies,
    write_rounds_used,
)
from analysis.stats.verdict_settings import VerdictSettings
from foundation import atomic_io
from foundation.errors import UserError
from foundation.formats.paired_rounds import TIMED_KEY, read_rounds, round_file, side_samples
from foundation.formats.run_layout import VariantLayout
from foundation.formats.stage_records import Plan, write_plan
from foundation.formats.suite_request import SuiteRequest
from foundation.formats.triton_ab import SETTINGS_KEY as TRITON_AB_KEY
from foundation.hip_modules import models_per_process, modules_per_worker
from prbench import __version__
from prbench.compare.round_sharding import (
    NodeFacts,
    RoundShards,
    SideRunner,
    node_summary,
    round_shards,
    run_shards,
    run_tasks,
    time_in_shards,
)
from prbench.compare.variant_plan import (
    ComparePlan,
    VariantPlan,
    local_lock,
    plan_docker,
    plan_local,
    plan_venv,
)
from prbench.executors import Executor, RunnerSpec, ShardOutcome, open_executor
from prbench.images.image_lock import RUN_NODES
from prbench.runners import StageCommand
from prbench.runners.local import LocalRunner
from prbench.runs.pipeline import Pipeline, PreparedVariant, StageSpec
from prbench.runs.run_store import Run, RunStore, input_hash
from prbench.sides.header_cache import KEEP_BYTES, prune_headers, shared_header_dir
from prbench.sides.recipes import Recipe
from prbench.sides.variants import Variant
from prbench.stages.command_lines import (
    launch_cost_command,
    on_device,
    suite_source_command,
    variant_organize_command,
    variant_profile_command,
)
from prbench.stages.kernels import default_devices
from prbench.stages.paired import PairedTiming, PlanSide, kernel_plan, model_plan, ok_models
from prbench.stages.report import render_run_report
from prbench.stages.suite import clear_outputs, kept_models, stage_inputs, suite_outputs, upstream_tree
from prbench.stages.suite import summarize as summarize_suite
from prbench.stages.suite_shards import SuiteShards, spread_shard_size, suite_shards

if TYPE_CHECKING:  # analysis.report.inputs imports pandas: only when a report is rendered
    from analysis.report.inputs import ReportSettings

STAGES = ("suite", "organize", "launch_cost", "models", "kernels", "profile", "report")


@dataclass(frozen=True)
class KernelSettings:
    warmup: int = 10
    iterations: int = 30
    timeout_s: float = 300.0


@dataclass
class CompareRequest:
    base: str
    pr: str
    recipe: Recipe
    runs_dir: Path
    run_id: str | None = None
    pytorch_src: Path | None = None
    # Docker recipes built from source: the Triton clone, and a commit or ref in it built on both sides instead of
    # the recipe's commit or PyTorch's pin (--triton-src, --triton-ref).
    triton_src: Path | None = None
    triton_ref: str | None = None
    # A Triton A/B: the same PyTorch on both sides (--pr left out or equal to --base), these two Triton commits
    # (--triton-base, default the pinned one; --triton-pr).
    triton_base: str | None = None
    triton_pr: str | None = None
    # The PyTorch tree the upstream suite runs from, as the environment sees it (default for docker recipes:
    # the image's tree); only with suite.source == "upstream".
    upstream_src: Path | None = None
    suite: SuiteRequest = field(default_factory=SuiteRequest)
    kernels: KernelSettings = field(default_factory=KernelSettings)
    stats: VerdictSettings = field(default_factory=VerdictSettings)
    rounds: int | None = None  # paired timing rounds (fresh workers each) of models and kernels (None: by device)
    # False: no model rounds (the suite still compiles the models: the kernels come from there); only a bisect of
    # a kernel asks, its step's verdict being the kernel's (the report says the models were not timed)
    time_models: bool = True
    auto_rounds: bool = False  # adaptive rounds (analysis.report.sequential): stop each kind once its verdicts settle
    max_rounds: int | None = None  # adaptive rounds: at most this many (None: the device's default)
    budget_s: float | None = None  # adaptive rounds: no round starts after this many seconds of the compare
    # adaptive rounds: a stop also needs this smallest detectable change (%); "none": no target; None: the kinds'
    # defaults on the device (analysis.report.sequential.DEFAULT_ROUNDS)
    resolution_pct: Resolution = None
    passes: int | None = None  # ABBA blocks per item in every round (None: by device)
    # 0: every model alive in one worker per side per round; N: groups of N models, fresh workers per group
    # (a GPU without memory for all models of both sides at once); None: the platform's default (ROCm: 1,
    # foundation.hip_modules).
    models_per_process: int | None = None
    # Kernel modules one kernel worker loads in a round before a fresh one takes over (0: no limit); None: the
    # platform's default (ROCm: foundation.hip_modules.ROCM_MODULES_PER_WORKER).
    modules_per_worker: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    inductor_config: dict[str, Any] = field(default_factory=dict)
    force: tuple[str, ...] = ()
    python: str = sys.executable
    profile: bool = False  # torch.profiler traces of the suite models, diffed in the report
    store: Path | None = None  # docker recipes: the store builds take their inputs from (None: Store.at())
    save_base: bool = False  # docker recipes: docker save the base image into the store, listed in the locks
    executor: str = "local"  # where the rounds' shards run: "local" (this machine's devices) or "ray"
    ray_address: str | None = None  # --executor ray: auto, ray://HOST:PORT or HOST:PORT
    devices: tuple[str, ...] = ()  # --executor local: the devices, one shard at a time each (): the recipe's one
    shard_size: int = 0  # blocks per shard of a round (0: a round is one shard)
    # models per shard of the suite (None: 1 when the executor has several devices or is Ray, else 0: one stage)
    suite_shard_size: int | None = None


def validate_force(force: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    unknown = [s for s in force if s not in STAGES]
    if unknown:
        raise UserError(f"--force {unknown[0]}: unknown stage (stages: {', '.join(STAGES)})")
    return tuple(force)


def check_sources(request: CompareRequest) -> tuple[Path, Path] | None:
    """The request's Triton flags and, for a Docker recipe built from source, both clones (given, or local in the
    recipe): one line naming the flag, before anything is written (`prbench.sides.pins.check_source_flags`);
    the clones (None: nothing is built from source)."""
    from prbench.sides.pins import check_one_pytorch, check_source_flags

    check_one_pytorch(request.base, request.pr, request.triton_pr)
    return check_source_flags(request.recipe, request.pytorch_src, request.triton_src, request.triton_ref,
                              request.triton_pr, request.triton_base)


def plan(request: CompareRequest) -> ComparePlan:
    if request.recipe.is_venv:
        from prbench.images.content_store import Store

        return plan_venv(request.base, request.pr, request.recipe, Store.at(request.store), request.python)
    if request.recipe.is_docker:
        from prbench.images.content_store import Store

        return plan_docker(request.base, request.pr, request.recipe, request.pytorch_src, Store.at(request.store),
                           triton_src=request.triton_src, triton_ref=request.triton_ref,
                           triton_base=request.triton_base, triton_pr=request.triton_pr)
    return plan_local(request.base, request.pr, request.pytorch_src, request.python, request.triton_pr)


def run_compare(request: CompareRequest, console: Console | None = None) -> tuple[Run, Any]:
    """Run (or resume) a comparison; return the run and the report's paths."""
    console = console or Console()
    request.suite.validate()
    _timing(request)  # checks --rounds and --passes
    request.stats.validate()
    if request.models_per_process is not None and (not isinstance(request.models_per_process, int)
                                                    or request.models_per_process < 0):
        raise UserError(f"--models-per-process {request.models_per_process!r}: expected 0 (all models in one "
                        "worker) or a positive number of models per worker")
    if request.modules_per_worker is not None and (not isinstance(request.modules_per_worker, int)
                                                    or request.modules_per_worker < 0):
        raise UserError(f"--modules-per-worker {request.modules_per_worker!r}: expected 0 (no limit) or a positive "
                        "number of kernel modules per worker")
    _check_devices(request)
    check_sources(request)
    tree = upstream_tree(request.suite, request.recipe, request.upstream_src)
    compare_plan = plan(request)  # every ref and patch is checked before anything is written
    from prbench.compare.doctor import DoctorInputs, preflight

    # Then, before hours of build, the machine: the engine, the base image, the GPUs, the store, the disk.
    preflight(DoctorInputs(recipe=request.recipe, runs_dir=request.runs_dir, pytorch_src=request.pytorch_src,
                           triton_src=request.triton_src, triton_ref=request.triton_ref,
                           triton_pr=request.triton_pr, triton_base=request.triton_base, base=request.base,
                           pr=request.pr, store=request.store, devices=request.devices, python=request.python,
                           suite=request.suite, env=request.env, inductor_config=request.inductor_config),
              console)
    rounds = _Rounds(request, console)
    try:
        return _compare(request, console, compare_plan, tree, rounds)
    finally:
        rounds.close()


def _compare(request: CompareRequest, console: Console, compare_plan: ComparePlan, tree: Path | None,
             rounds: _Rounds) -> tuple[Run, Any]:
    rounds.executor()  # a Ray cluster is joined (and its GPUs counted) before anything runs
    # The run is ours (its lock) until the report is written; a second invocation on it is refused meanwhile.
    with RunStore(request.runs_dir).create_or_open(request.run_id, _settings(request, compare_plan, tree),
                                                   __version__) as run, _no_containers_left(run, request, console):
        # The report is always rendered anew at the end: until then the old one must not look current.
        run.retire_report()
        console.print(f"run [bold]{run.run_id}[/] in {run.root}")
        console.print(policy_line(_policies(request)), markup=False, highlight=False)
        if request.recipe.runner == "local":
            _prune_shared_headers(console)
        locks: dict[str, Any] = {}
        sides: list[_Side] = []
        triton_ab = compare_plan.triton_ab
        if triton_ab is not None:
            pytorch = "installed" if compare_plan.local is not None else "its layers built once"
            console.print(f"a Triton A/B: {triton_ab.commits()}, one PyTorch on both sides ({pytorch})",
                          markup=False, highlight=False)
        for plan_side in (compare_plan.base, compare_plan.pr):
            console.print(f"[bold]{plan_side.name}[/]: {plan_side.how}")
            runner, locks[plan_side.name], runner_spec = _environment(plan_side, request, compare_plan, run)
            pipeline = Pipeline(run, runner, console=console, force=request.force)
            local_overlay = plan_side.overlay if not request.recipe.is_docker else None
            variant = _variant(plan_side, request, triton_ab is not None)
            # A venv side's overlay shadows the venv's torch, as the local runner's shadows the installed one.
            sides.append(_Side(pipeline, pipeline.prepare(variant, local_overlay, runner_spec.python or request.python),
                               runner_spec))
        paths = Comparison(request, run, sides, rounds, tree).run_stages(locks)
    return run, paths


def _prune_shared_headers(console: Console) -> None:
    """The precompiled headers local sides share stay within their bound (``prbench.sides.header_cache``)."""
    directory = shared_header_dir()
    removed = prune_headers(Path(directory)) if directory else []
    if removed:
        count = f"{len(removed)} precompiled header" + ("s" if len(removed) > 1 else "")
        console.print(f"removed {count} unused for a day ({sum(h.size for h in removed) / 1e9:.1f} GB) from "
                      f"{directory}, which keeps the newest {KEEP_BYTES / 1e9:.0f} GB", markup=False, highlight=False)


@contextlib.contextmanager
def _no_containers_left(run: Run, request: CompareRequest, console: Console) -> Iterator[None]:
    """Docker recipes: the containers an earlier invocation of the run left when it was killed outright (SIGKILL:
    nothing of it could stop them) are removed before anything runs, and none of the run outlives this one. The
    run's lock is held: no live process owns a container of the run on this machine."""
    if not request.recipe.is_docker:
        yield
        return
    import requests

    import docker
    from prbench.images.docker_engine import docker_client
    from prbench.runners.docker import remove_containers, run_labels

    client, labels = docker_client(), run_labels(run.root)
    left = remove_containers(client, labels)
    if left:
        console.print(f"removed {len(left)} container(s) an earlier invocation of run {run.run_id} left running: "
                      f"{', '.join(left)}", markup=False, highlight=False)
    try:
        yield
    finally:
        # On the way out of an error or an interrupt: that error is the one to report, not the engine's.
        with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            remove_containers(client, labels)


class _Rounds:
    """The executor of the run's timing rounds and suite shards: opened at the start (a Ray cluster that cannot be
    joined is a one-line error before any stage), closed at the end."""

    def __init__(self, request: CompareRequest, console: Console, executor: Executor | None = None) -> None:
        self.request = request
        self.console = console
        self.heard = NodeFacts()
        self._executor = executor
        self.started = time.monotonic()  # --budget counts from here

    def executor(self) -> Executor:
        if self._executor is None:
            devices = list(self.request.devices) or [_device(self.request)]
            self._executor = open_executor(self.request.executor, devices=devices,
                                           platform=self.request.recipe.platform,
                                           ray_address=self.request.ray_address, say=self.say)
        return self._executor

    def say(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None


def _earlier_nodes(run: Run) -> dict[str, Any]:
    path = run.layout.lock
    try:
        earlier = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    nodes = earlier.get("nodes") if isinstance(earlier, dict) else None
    return nodes if isinstance(nodes, dict) else {}


def _check_devices(request: CompareRequest) -> None:
    on_cpu = request.recipe.platform == "cpu"
    wrong = [d for d in request.devices if (d == "cpu") != on_cpu]
    if wrong:
        expected = "cpu (one entry per CPU device)" if on_cpu else "GPU indices"
        raise UserError(f"--devices {','.join(request.devices)}: recipe {request.recipe.name} runs on "
                        f"{request.recipe.platform}; expected {expected}")


def _environment(side: VariantPlan, request: CompareRequest, compare_plan: ComparePlan,
                 run: Run) -> tuple[Any, Any, RunnerSpec]:
    """The runner for one side, its lock, and how another node runs its stages: the local Python, or the image
    built for the side (a node without it builds it from that lock and the store)."""
    platform = request.recipe.platform
    if request.recipe.is_venv:
        return _venv_environment(side, request, run)
    if not request.recipe.is_docker:
        assert compare_plan.local is not None  # plan_local described the interpreter
        return (LocalRunner(python=request.python), local_lock(side, compare_plan.local),
                RunnerSpec("local", platform=platform, python=request.python))
    from prbench.images.build import plan_build
    from prbench.images.content_store import Store
    from prbench.images.docker_engine import docker_client
    from prbench.images.image_lock import build_and_lock, read_lock
    from prbench.runners.docker import DockerRunner, run_labels

    overlay_path = None
    if side.overlay is not None:
        overlay_path = run.path(side.name, "overlay.patch")
        atomic_io.write_text(overlay_path, side.overlay.patch_text)
    if side.wheel is not None:  # a wheel recipe: this side's wheel, the PR's Python as an overlay layer
        build_plan = plan_build(request.recipe.with_wheels(side.wheel, None), overlay=overlay_path)
    else:
        build_plan = plan_build(request.recipe, pytorch_src=request.pytorch_src, triton_src=request.triton_src,
                                pytorch_ref=side.pytorch_ref, pin=side.triton, overlay=overlay_path,
                                merge_base=compare_plan.merge_base, pytorch_first=compare_plan.triton_ab is not None,
                                triton_patch=_triton_patch(side, run))
    client = docker_client()
    outcome = build_and_lock(build_plan, client, request.runs_dir / "images",
                             lock_path=run.layout.variant(side.name).lock, store=Store.at(request.store),
                             save_base=request.save_base)
    runner = DockerRunner(outcome.result.image_id, platform, writable=[run.root], client=client,
                          labels=run_labels(run.root))
    spec = RunnerSpec("docker", platform=platform, image=outcome.result.tag, image_id=outcome.result.image_id,
                      lock=outcome.lock_path, store=Store.at(request.store).root, writable=(run.root,),
                      run=run.root)
    return runner, read_lock(outcome.lock_path), spec


def _triton_patch(side: VariantPlan, run: Run) -> Path | None:
    """A Triton A/B's --triton-pr patch, kept in the run beside the side (as its overlay is)."""
    if side.triton_patch is None:
        return None
    kept = run.path(side.name, "triton.patch")
    atomic_io.write_text(kept, side.triton_patch.read_text(encoding="utf-8"))
    return kept


def _venv_environment(side: VariantPlan, request: CompareRequest, run: Run) -> tuple[Any, Any, RunnerSpec]:
    """A venv recipe's side: its venv (built from the store's wheels, or found by its inputs' hash), the side's lock,
    and this Python's runner on the venv's interpreter."""
    from prbench.images import venv
    from prbench.images.content_store import Store
    from prbench.images.image_lock import read_lock

    store = Store.at(request.store)
    recipe = venv.pinned(request.recipe.with_wheels(side.wheel, None), store, request.python)
    overlay = (side.overlay.sha256, side.overlay.patch_text) if side.overlay is not None else None
    outcome = venv.build_and_lock(venv.plan(recipe, request.python), store, request.runs_dir / venv.VENVS_DIR,
                                  lock_path=run.layout.variant(side.name).lock, overlay=overlay)
    python = str(outcome.python)
    return (LocalRunner(python=python), read_lock(outcome.lock_path),
            RunnerSpec("local", platform=request.recipe.platform, python=python))


def _variant(side: VariantPlan, request: CompareRequest, triton_ab: bool) -> Variant:
    return Variant(
        name=side.name,
        recipe=request.recipe,
        pytorch_ref=side.pytorch_ref,
        overlay_sha256=side.overlay.sha256 if side.overlay else None,
        # a Triton the PyTorch commit does not fix: --triton-ref's, or a Triton A/B's (one PyTorch, two Tritons)
        triton_commit=_triton_identity(side) if request.triton_ref is not None or triton_ab else None,
        env=dict(request.env),
        inductor_config=dict(request.inductor_config),
    )


def _triton_identity(side: VariantPlan) -> str | None:
    """The side's Triton as its variant's identity records it: the commit, and a patch on it by its sha256."""
    if side.triton is None:
        return None
    if side.triton_patch is None:
        return side.triton.commit
    return f"{side.triton.commit}+{hashlib.sha256(side.triton_patch.read_bytes()).hexdigest()}"


@dataclass
class _Side:
    pipeline: Pipeline
    prepared: PreparedVariant
    runner_spec: RunnerSpec
    suite_hash: str = ""
    organize_hash: str = ""


def _suite_shard_size(request: CompareRequest, rounds: _Rounds) -> int:
    """Models per suite shard (0: the suite is one stage per side). The upstream harness is never cut (it runs each
    model in its own process already)."""
    if request.suite.source == "upstream":
        if request.suite_shard_size:
            rounds.say("suite: the upstream harness runs as one stage per side; --suite-shard-size is not used")
        return 0
    return spread_shard_size(request.suite_shard_size, request.executor, len(request.devices),
                             request.recipe.platform)


def _suite_spec(side: _Side, request: CompareRequest, upstream_src: Path | None) -> StageSpec:
    """The suite stage of one side. How it is cut is not one of its inputs: the same models with the same settings
    are the same suite, so a suite done on one device is kept when the run goes on over a cluster, and back."""
    directory = side.prepared.directory
    return StageSpec(
        name="suite",
        inputs=stage_inputs(request.suite, upstream_src),
        outputs=suite_outputs(directory),
        # stages.upstream_suite when request.suite.source == "upstream", else stages.suite
        command=lambda: _on_device(suite_source_command(directory, request.suite, upstream_src), request),
        summarize=lambda: summarize_suite(directory),
        reset=lambda: clear_outputs(directory),
        kept=lambda: kept_models(directory, request.suite),
    )


class Comparison:
    """One comparison: the request, its run, both sides (pipeline, prepared variant, runner) and the executor of
    its rounds. Each stage of ``invoke compare`` after the sides are prepared is a method, in the order
    `run_stages` calls them; what a stage needs comes from here rather than from a list of parameters."""

    def __init__(self, request: CompareRequest, run: Run, sides: list[_Side], rounds: _Rounds,
                 upstream_src: Path | None = None) -> None:
        self.request, self.run, self.sides, self.rounds, self.upstream_src = request, run, sides, rounds, upstream_src
        self.timing = _timing(request)
        self.policies = _policies(request)
        self._suite_shards: dict[str, SuiteShards] = {}  # per side, when the suite is cut into shards

    def run_stages(self, locks: dict[str, Any]) -> Any:
        """suite → organize → launch_cost per side, model rounds (unless the request times no model) and kernel
        rounds, [profile], the run lock, the report; the report's paths."""
        self.run_suites()
        for side in self.sides:
            _prepare_kernels(side, self.request)
        if self.request.time_models:
            self.time_models()
        else:
            self.rounds.say("models: not timed in this run (a bisect of a kernel times its kernels alone); no model "
                            "rounds")
        self.time_kernels()
        if self.request.profile:
            for side in self.sides:
                self.profile(side)
        locks[RUN_NODES] = node_summary(sorted(self.run.layout.paired.glob("*/round-*.json")), self.rounds.heard,
                                        _earlier_nodes(self.run), self.suite_placements())
        atomic_io.write_json(self.run.layout.lock, locks)
        return render_run_report(self.run, self.report_settings())

    # --- the suites ---------------------------------------------------------------------------------------------

    def run_suites(self) -> None:
        """Each side's suite stage: one stage per side, or (several devices) both sides' shards through the
        executor together, then each side's stage merges its shards (``prbench.stages.suite_shards``)."""
        shard_size = _suite_shard_size(self.request, self.rounds)
        specs = [_suite_spec(side, self.request, self.upstream_src) for side in self.sides]
        pending: list[tuple[_Side, StageSpec, SuiteShards]] = []
        if shard_size:
            specs = [self._sharded(side, spec, shard_size) for side, spec in zip(self.sides, specs, strict=True)]
            for side, spec in zip(self.sides, specs, strict=True):
                shards = self._suite_shards[side.prepared.variant.name]
                if side.pipeline.stage_pending(side.prepared, spec):
                    shards.clear(keep_current=not side.pipeline.forced(spec))
                    pending.append((side, spec, shards))
        if pending:
            self._run_suite_shards(pending, specs)
        self._record_suites(specs)

    def _sharded(self, side: _Side, spec: StageSpec, shard_size: int) -> StageSpec:
        """A side's suite stage as the merge of its shards (the shards run through the executor)."""
        prepared = side.prepared
        shards = suite_shards(prepared.variant.name, prepared.directory, side.pipeline.stage_digest(prepared, spec),
                              self.request.suite, shard_size, side.runner_spec, prepared.env, prepared.python_path)
        self._suite_shards[prepared.variant.name] = shards
        # kept=None: the shards keep what they finished themselves; the side's own suite.csv is only their merge.
        return replace(spec, command=None, kept=None,
                       host=partial(shards.merge, Path(prepared.env["TORCHINDUCTOR_CACHE_DIR"])),
                       summarize=partial(_sharded_summary, prepared.directory, shards, self.rounds.heard),
                       ran_before=partial(_suite_time, shards))

    def _run_suite_shards(self, pending: list[tuple[_Side, StageSpec, SuiteShards]], specs: list[StageSpec]) -> None:
        # A spread suite shows as running while its shards run (its stage only merges them).
        entries = [side.pipeline.stage_entry(side.prepared, spec) for side, spec, _ in pending]
        with self.run.running_elsewhere(dict(entries)) as progress:
            heard = _shard_counter([(key, shards) for (key, _), (_, _, shards) in zip(entries, pending, strict=True)],
                                   progress, self.rounds.heard.add)
            tasks = [shards.task(i) for _, _, shards in pending for i in shards.missing()]
            try:
                run_tasks(tasks, self.rounds.executor(), self.rounds.say, "suite",
                          f"suite shards of {len(pending)} side(s)", heard)
            except BaseException:
                # Interrupted, or a shard failed: a side whose shards all finished is recorded all the same.
                for side, spec, shards in pending:
                    if not shards.missing():
                        side.suite_hash = side.pipeline.run_stage(side.prepared, spec)
                raise

    def _record_suites(self, specs: list[StageSpec]) -> None:
        for side, spec in zip(self.sides, specs, strict=True):
            side.suite_hash = side.pipeline.run_stage(side.prepared, spec)

    def suite_placements(self) -> list[dict[str, Any]]:
        """Where the suite shards of both sides ran, as their stages recorded it (none for a suite of one stage)."""
        placements: list[dict[str, Any]] = []
        for side in self.sides:
            record = self.run.record(f"{side.prepared.variant.name}/suite")
            shards = record.summary.get("shards") if record is not None else None
            if isinstance(shards, list):
                placements += [s for s in shards if isinstance(s, dict)]
        return placements

    # --- the paired rounds --------------------------------------------------------------------------------------

    def plan_sides(self) -> list[PlanSide]:
        return [PlanSide(s.prepared.variant.name, s.prepared.directory, s.prepared.env, s.prepared.python_path,
                         s.pipeline.runner) for s in self.sides]

    def time_models(self) -> None:
        """Model rounds: the compiled step of every model that ran on both sides, interleaved base/PR."""
        request, console = self.request, self.rounds.console
        if request.suite.source == "upstream":
            console.print("[yellow]models: the upstream harness's models cannot be rebuilt by the paired model "
                          "worker; the report compares the suite's own timings[/]")
            return
        plan_sides = self.plan_sides()
        if not set(ok_models(plan_sides[0])) & set(ok_models(plan_sides[1])):
            console.print("[yellow]models: no model ran on both sides; no model rounds[/]")
            return
        per_process = _models_per_process(request)
        settings = {"suite": request.suite.inputs(), "models_per_process": per_process, "passes": self.timing.passes}
        hashes = self.run_rounds("models", {s.prepared.variant.name: s.suite_hash for s in self.sides}, settings,
                                 lambda: model_plan(plan_sides, suite=request.suite, device=_device(request),
                                                    platform=request.recipe.platform,
                                                    per_process=per_process,
                                                    logs=self.run.layout.paired_logs, passes=self.timing.passes),
                                 self.models_look)
        for side in self.sides:
            name = side.prepared.variant.name
            out = VariantLayout(side.prepared.directory).paired_samples
            side.pipeline.run_stage(side.prepared, StageSpec(
                name="models",
                inputs={"rounds": hashes},
                outputs=[out],
                host=partial(self._derive_model_samples, name, out),
                summarize=partial(_model_count, out),
            ))

    def time_kernels(self) -> None:
        """Kernel rounds: every organized kernel, each paired kernel timed back to back with its partner.

        Timing base and PR at different moments lets the machine's drift (clock, thermals, neighbours) pose as a
        change; interleaving them item by item in ABBA order cancels it between the sides, and fresh workers per
        round put the between-process spread into the rounds the report's intervals are built from.
        """
        request = self.request
        per_worker = _modules_per_worker(request)
        settings: dict[str, Any] = {**asdict(request.kernels), "passes": self.timing.passes}
        if per_worker:  # runs without a limit keep the input hashes they had before there was one
            settings["modules_per_worker"] = per_worker
        hashes = self.run_rounds(
            "kernels", {s.prepared.variant.name: s.organize_hash for s in self.sides}, settings,
            lambda: kernel_plan(self.plan_sides(), device=_device(request), platform=request.recipe.platform,
                                warmup=request.kernels.warmup, iterations=request.kernels.iterations,
                                timeout_s=request.kernels.timeout_s, logs=self.run.layout.paired_logs,
                                passes=self.timing.passes, modules_per_worker=per_worker),
            self.kernels_look)
        for side in self.sides:
            name, directory = side.prepared.variant.name, side.prepared.directory
            side.pipeline.run_stage(side.prepared, StageSpec(
                name="kernels",
                inputs={"rounds": hashes},
                outputs=list(VariantLayout(directory).kernel_results),
                host=partial(self._derive_kernels, name, directory),
                summarize=partial(_kernel_count, directory),
            ))

    def run_rounds(self, kind: str, upstream: dict[str, str], settings: dict[str, Any],
                   build_plan: Callable[[], Plan], look: LookAfter | None = None) -> list[str]:
        """The paired rounds of one kind, each a joint stage; their input hashes.

        Fixed rounds: all of them. Adaptive rounds (``look`` given, `analysis.report.sequential`): the minimum first,
        then one at a time until ``look`` says the verdicts are settled (and with ``--resolution`` fine enough),
        ``--max-rounds`` is reached or ``--budget`` is spent; ``pair/<kind>/rounds.json`` says how many ran, why,
        the level the kind's verdicts are stated at and whether the target was reached. The shards of a batch of
        rounds go to the executor together
        (``prbench.compare.round_sharding``); then each round's stage merges its shards into the round file (a round
        done earlier is skipped, as before).
        """
        policy, say = self.policies[kind], self.rounds.say
        batches = _RoundBatches(self, kind, upstream, settings, build_plan)
        adaptive = policy.auto and look is not None
        used = policy.min_rounds if adaptive else policy.max_rounds
        hashes = batches.run(1, used)
        reason, stopped, found = "fixed", False, None
        while adaptive and look is not None:
            if policy.max_rounds == policy.min_rounds:  # --max-rounds is the minimum: no look
                reason = f"--max-rounds reached (the minimum, {policy.min_rounds}: no early look)"
                break
            found = look(used)
            decision = policy.after_look(found, used, time.monotonic() - self.rounds.started)
            stopped, reason = decision.settled, decision.reason
            if decision.stop:
                break
            say(f"{kind}: after {used} round(s) {reason}: one more round")
            hashes += batches.run(used + 1, used + 1)
            used += 1
        strictly = policy.stated_strictly(used, stopped)
        stated = policy.stated_settings(self.request.stats, used, stopped)
        record = RoundsUsed(kind, used, reason, "auto" if adaptive else "fixed", policy.max_rounds, stated.alpha,
                            stated.confidence, policy.resolution_pct if adaptive else None,
                            found.stated_detectable(strictly) if found is not None else None)
        write_rounds_used(self.run.layout.paired_kind(kind), record)
        if adaptive:
            say(f"{kind}: {used} round(s): {reason}" + (f"; {record.target()}" if record.target() else ""))
        return hashes

    def round_file(self, kind: str, number: int, side: str) -> Path:
        """Local recipes time both sides in one process (one file); docker and venv recipes one side per image or
        venv."""
        return round_file(self.run.layout.paired_kind(kind), number,
                          side if self.request.recipe.sides_apart else None)

    def round_paths(self, kind: str, rounds: int) -> list[Path]:
        """Every round file of rounds 1..``rounds`` (one per round, or one per side and round for docker)."""
        return sorted({self.round_file(kind, n, s.prepared.variant.name) for s in self.sides
                       for n in range(1, rounds + 1)})

    def rounds_run(self, kind: str) -> int:
        """How many rounds of a kind ran (its rounds.json; all of them in a run from before adaptive rounds)."""
        used = read_rounds_used(self.run.layout.paired_kind(kind))
        return used.rounds if used is not None else self.timing.rounds

    def _side_rounds(self, kind: str, side: str) -> list[Path]:
        return [self.round_file(kind, n, side) for n in range(1, self.rounds_run(kind) + 1)]

    def _levels(self, kind: str) -> tuple[VerdictSettings, VerdictSettings]:
        policy = self.policies[kind]
        return policy.run_settings(self.request.stats), policy.strict_settings(self.request.stats)

    def models_look(self, rounds: int) -> Look:
        """The model family after ``rounds`` rounds, at the run and the strict level (`analysis.report.sequential`)."""
        from analysis.models.compare import compare_models, read_suite_frame
        from foundation.formats.paired_rounds import PairedBlocks

        records = read_rounds(self.round_paths("models", rounds))
        base, pr = (read_suite_frame(VariantLayout(s.prepared.directory).suite_csv) for s in self.sides)
        paired = [side_samples(records, s.prepared.variant.name) for s in self.sides]
        blocks = PairedBlocks.from_records(records)
        compared = [compare_models(base, pr, None, None, level, paired[0], paired[1], blocks)
                    for level in self._levels("models")]
        return model_look(compared[0], compared[1])

    def kernels_look(self, rounds: int) -> Look:
        """The kernel family after ``rounds`` rounds, at the run and the strict level (`analysis.report.sequential`)."""
        import pandas as pd

        from analysis.kernels.compare import compare_kernels
        from analysis.kernels.results import KERNEL_COLUMNS, rows_from_rounds
        from foundation.formats.paired_rounds import PairedBlocks

        records = read_rounds(self.round_paths("kernels", rounds))
        frames, samples = [], []
        for side in self.sides:
            rows, side_samples_ = rows_from_rounds(records, side.prepared.variant.name,
                                                   VariantLayout(side.prepared.directory).organized)
            frames.append(pd.DataFrame([r.as_dict() for r in rows], columns=list(KERNEL_COLUMNS)))
            samples.append(side_samples_)
        blocks = PairedBlocks.from_records(records)
        compared = [compare_kernels(frames[0], frames[1], samples[0], samples[1], level, blocks)
                    for level in self._levels("kernels")]
        return kernel_look(compared[0], compared[1])

    def _derive_model_samples(self, side: str, out: Path) -> None:
        atomic_io.write_json(out, side_samples(read_rounds(self._side_rounds("models", side)), side))

    def _derive_kernels(self, side: str, directory: Path) -> None:
        results_from_rounds(read_rounds(self._side_rounds("kernels", side)), side,
                            VariantLayout(directory).organized, directory)

    # --- profile and report -------------------------------------------------------------------------------------

    def profile(self, side: _Side) -> None:
        prepared = side.prepared
        directory = prepared.directory
        files = VariantLayout(directory)
        side.pipeline.run_stage(prepared, StageSpec(
            name="profile",
            inputs={"suite": side.suite_hash},
            outputs=[files.profile_index],
            command=lambda: _on_device(variant_profile_command(directory, self.request.suite.device,
                                                               Path(prepared.env["TORCHINDUCTOR_CACHE_DIR"])),
                                       self.request),
            reset=lambda: shutil.rmtree(files.profiles, ignore_errors=True),
        ))

    def report_settings(self) -> ReportSettings:
        """The report's settings from the request itself (what the manifest records, not read back from it)."""
        from analysis.report.inputs import ReportSettings

        suite = stage_inputs(self.request.suite, self.upstream_src)
        return ReportSettings(warmup=suite.get("warmup"), iterations=suite.get("iterations"),
                              rounds=self.timing.rounds, passes=self.timing.passes,
                              stats=_run_level(request=self.request))


def _suite_time(shards: SuiteShards) -> tuple[str, float] | None:
    """When the side's suite shards ran (its stage only merges them)."""
    return time_in_shards(shards.placements())


def _sharded_summary(directory: Path, shards: SuiteShards, heard: NodeFacts) -> dict[str, Any]:
    """The suite's summary, where each of its shards ran (the run lock's ``nodes`` reads them back), and those this
    invocation had to run again."""
    return {**summarize_suite(directory), "shards": shards.placements(),
            **heard.redone_summary([shards.key(i) for i in range(len(shards.shards))])}


def _prepare_kernels(side: _Side, request: CompareRequest) -> None:
    """organize → launch_cost for one side (after its suite); organize reads files only, launch_cost runs the side's
    graphs on the compare's device."""
    pipeline, prepared = side.pipeline, side.prepared
    directory = prepared.directory
    files = VariantLayout(directory)
    side.organize_hash = pipeline.run_stage(prepared, StageSpec(
        name="organize",
        inputs={"suite": side.suite_hash},
        outputs=[files.index_csv],
        command=lambda: variant_organize_command(directory),
        summarize=lambda: {"kernels": _count_rows(files.index_csv)},
        reset=lambda: shutil.rmtree(files.organized, ignore_errors=True),
    ))
    # What one more or one fewer kernel launch costs this side's graphs: the report prices fusion changes with it.
    pipeline.run_stage(prepared, StageSpec(
        name="launch_cost",
        inputs={"organize": side.organize_hash},
        outputs=[files.launch_cost],
        command=lambda: _on_device(launch_cost_command(directory), request),
        reset=lambda: files.launch_cost.unlink(missing_ok=True),
    ))


def _device(request: CompareRequest) -> str:
    """The device of the stages that run once per side (suite, launch_cost, profile) and of the paired plans: the
    first of --devices, else the CPU, or on a GPU recipe the first GPU the shell's HIP/CUDA_VISIBLE_DEVICES names
    (the seed picks its GPU that way), else GPU 0 (the executor's default too)."""
    if request.devices:
        return request.devices[0]
    if request.recipe.platform == "cpu":
        return "cpu"
    visible = default_devices(None).split(",")[0].strip()
    return visible if visible.isdigit() else "0"


def _models_per_process(request: CompareRequest) -> int:
    """Models per model worker: ``--models-per-process``, else the platform's default (ROCm: one model per worker,
    what one suite process held; ``foundation.hip_modules``)."""
    given = request.models_per_process
    return models_per_process(request.recipe.platform) if given is None else given


def _modules_per_worker(request: CompareRequest) -> int:
    """Kernel modules per kernel worker: ``--modules-per-worker``, else the platform's default."""
    given = request.modules_per_worker
    return modules_per_worker(request.recipe.platform) if given is None else given


def _on_device(command: StageCommand, request: CompareRequest) -> StageCommand:
    """A stage of one side pinned to the compare's device, as its shards and paired workers are pinned to theirs."""
    return on_device(command, _device(request), request.recipe.platform)


def _timing(request: CompareRequest) -> PairedTiming:
    """Rounds (the most a kind may run) and passes; checks --rounds, --max-rounds and --passes."""
    return PairedTiming.for_device(_device(request), request.rounds if request.rounds is not None
                                   else request.max_rounds, request.passes)


def _policies(request: CompareRequest) -> dict[str, RoundsPolicy]:
    """Each kind's rounds: fixed --rounds, or adaptive up to --max-rounds or the kind's default, with the
    --resolution target or the kind's default (`analysis.report.sequential.rounds_policies`)."""
    return rounds_policies(_device(request), _timing(request).rounds if request.rounds is not None else None,
                           request.auto_rounds, request.max_rounds, request.budget_s, request.resolution_pct)


def _run_level(request: CompareRequest) -> VerdictSettings:
    """The level the report states its verdicts at after the last round: what the early looks left (the same for
    every kind: `RoundsPolicy.run_max_rounds`)."""
    return _policies(request)["kernels"].run_settings(request.stats)


LookAfter = Callable[[int], Look]  # a kind's family after N rounds — `analysis.report.sequential`


class _RoundBatches:
    """The stages of a kind's rounds 1..max, run a batch of consecutive rounds at a time."""

    def __init__(self, comparison: Comparison, kind: str, upstream: dict[str, str], settings: dict[str, Any],
                 build_plan: Callable[[], Plan]) -> None:
        self.comparison, self.kind, self.build_plan = comparison, kind, build_plan
        self.sides, self.request, self.run_, self.rounds = (comparison.sides, comparison.request, comparison.run,
                                                            comparison.rounds)
        self.pipeline = self.sides[0].pipeline
        self.shard_sets: dict[int, RoundShards] = {}
        self.specs = [self._spec(number, upstream, settings)
                      for number in range(1, comparison.policies[kind].max_rounds + 1)]

    def _spec(self, number: int, upstream: dict[str, str], settings: dict[str, Any]) -> StageSpec:
        names = [s.prepared.variant.name for s in self.sides]
        outputs = sorted({self.comparison.round_file(self.kind, number, name) for name in names})
        inputs = {"kind": self.kind, "upstream": upstream, "settings": settings, "round": number,
                  "docker": self.request.recipe.sides_apart}  # the name kept: earlier runs' hashes stay
        if self.request.shard_size:  # runs recorded before there were shards keep their input hashes
            inputs["shard_size"] = self.request.shard_size

        def merge() -> None:
            self.shard_sets[number].merge()

        def reset() -> None:
            _remove(outputs)
            if number in self.shard_sets:
                self.shard_sets[number].clear(keep_current=True)

        def summarize() -> dict[str, Any]:
            # The shards this invocation had to run again (a node lost mid-run): what was redone where.
            shards = self.shard_sets.get(number)
            keys = [shards.key(i) for i in range(len(shards.shards))] if shards is not None else []
            return {**_round_summary(outputs), **self.rounds.heard.redone_summary(keys)}

        return StageSpec(name=f"{self.kind}-round-{number}", inputs=inputs, outputs=outputs, host=merge,
                         summarize=summarize, reset=reset,
                         ran_before=partial(_round_time, outputs))

    def _shards(self) -> None:
        """The plan (built once, when a round first has to run) and every round's shards on it."""
        if self.shard_sets:
            return
        plan_path = self.run_.layout.paired_plan(self.kind)
        the_plan = self.build_plan()
        write_plan(plan_path, the_plan)
        runners = [SideRunner(s.prepared.variant.name, s.runner_spec) for s in self.sides]
        for number, spec in enumerate(self.specs, start=1):
            self.shard_sets[number] = round_shards(self.kind, number, input_hash(dict(spec.inputs)),
                                                   self.run_.layout.paired_kind(self.kind), plan_path,
                                                   len(the_plan.blocks), self.request.shard_size, runners,
                                                   apart=self.request.recipe.sides_apart,
                                                   logs=self.run_.layout.paired_logs)

    def run(self, first: int, last: int) -> list[str]:
        """Rounds ``first``..``last`` (1-based): the pending ones' shards, then every one's stage; their hashes."""
        batch = self.specs[first - 1:last]
        pipeline = self.pipeline
        pending = [spec for spec in batch if pipeline.joint_pending(spec)]
        # The pending rounds show as running while their shards run (their stages only merge the shards' records).
        with self.run_.running_elsewhere(dict(map(pipeline.joint_entry, pending))) as progress:
            if pending:
                self._shards()
                todo = [self.shard_sets[int(spec.name.rsplit("-", 1)[1])] for spec in pending]
                for shards in todo:
                    shards.clear(keep_current=not pipeline.forced(self.specs[shards.number - 1]))
                heard = _shard_counter([(pipeline.joint_entry(self.specs[shards.number - 1])[0], shards)
                                        for shards in todo], progress, self.rounds.heard.add)
                try:
                    run_shards(todo, self.rounds.executor(), self.rounds.say, heard)
                except BaseException:
                    # Interrupted, or a shard failed: the rounds whose shards all finished are recorded all the same.
                    for spec in pending:
                        if not self.shard_sets[int(spec.name.rsplit("-", 1)[1])].missing():
                            pipeline.run_joint_stage(spec)
                    raise
            return [pipeline.run_joint_stage(spec) for spec in batch]


def _shard_counter(stages: list[tuple[str, RoundShards | SuiteShards]], progress: Callable[[str, dict[str, Any]], None],
                   also: Callable[[ShardOutcome], None]) -> Callable[[ShardOutcome], None]:
    """The executor's ``on_done``: counts each stage's finished shards for ``invoke status`` (the records already on
    disk are read once, here, not again per finished shard) and passes each outcome on to ``also``."""
    owner: dict[str, str] = {}
    done: dict[str, int] = {}
    total: dict[str, int] = {}
    for key, shards in stages:
        missing = shards.missing()
        owner.update({shards.task(i).key: key for i in missing})
        done[key], total[key] = len(shards.shards) - len(missing), len(shards.shards)
        progress(key, {"shards": f"{done[key]}/{total[key]} done"})

    def heard(outcome: ShardOutcome) -> None:
        also(outcome)
        key = owner.get(outcome.key)
        if key is not None:
            done[key] += 1
            progress(key, {"shards": f"{done[key]}/{total[key]} done"})

    return heard


def _remove(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _round_summary(paths: list[Path]) -> dict[str, Any]:
    visits = [v for record in read_rounds(paths) for v in record.visits]
    return {"visits": len(visits), "failed": sum(1 for v in visits if v.error)}


def _round_time(paths: list[Path]) -> tuple[str, float] | None:
    """When the round's shards ran (its stage only merges their records)."""
    return time_in_shards([shard for record in read_rounds(paths) for shard in record.shards])


def _model_count(out: Path) -> dict[str, Any]:
    return {"models": _count_keys(out)}


def _kernel_count(directory: Path) -> dict[str, Any]:
    return {"rows": _count_rows(VariantLayout(directory).kernels_csv)}


def _settings(request: CompareRequest, compare_plan: ComparePlan, upstream_src: Path | None) -> dict[str, Any]:
    return {
        "recipe": request.recipe.name,
        "base": request.base,
        "pr": request.pr,
        "installed_commit": compare_plan.installed_commit,
        "merge_base": compare_plan.merge_base,
        **({"triton_ref": request.triton_ref} if request.triton_ref else {}),
        **({TRITON_AB_KEY: compare_plan.triton_ab.to_json()} if compare_plan.triton_ab else {}),
        "suite": stage_inputs(request.suite, upstream_src),
        "kernels": asdict(request.kernels),
        "rounds": _timing(request).rounds,
        "rounds_policy": describe_policies(_policies(request)),
        "passes": _timing(request).passes,
        # always written: a resumed run's settings are updated key by key, so the key must say what this one does
        TIMED_KEY: ["models", "kernels"] if request.time_models else ["kernels"],
        "models_per_process": _models_per_process(request),
        "modules_per_worker": _modules_per_worker(request),
        # the level the verdicts are stated at: with adaptive rounds, what the early looks left
        # (analysis.report.sequential)
        "stats": _run_level(request).describe(),
    }


def _count_keys(json_path: Path) -> int:
    return len(json.loads(json_path.read_text(encoding="utf-8")))


def _count_rows(csv_path: Path) -> int:
    with open(csv_path, encoding="utf-8") as fh:
        return max(sum(1 for _ in fh) - 1, 0)
