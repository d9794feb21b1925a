"""Host side of paired timing: the plans ``stages.paired`` runs (a round's command: ``prbench.stages.command_lines``).

Kernels: both sides' ``organized/index.csv`` are paired with ``analysis.kernels.compare.pair_kernels`` (the very
pairs the report compares); each side's jobs come from ``foundation.formats.stage_records.plan_jobs``. A job and the job
of its kernels' partners share a block, so they are timed back to back: a Triton job pairs with its partner's job, C++
graph jobs pair greedily by the number of paired kernels they share. Jobs left over get one-sided blocks at the
end (their kernels are timed; the report lists them as only in base / only in PR). A C++ pair of identical code is
timed from base's graph module in both workers (`timed_from_base`: same compiled code, same recorded values), so
the identical-kernel control measures the processes, when both sides compile C++ alike (``same_cpp_build``);
changed pairs, and every pair when the compile commands differ, are timed in each side's own graph.
The same pairs go into each side's ``kernel_outputs/numerics.json`` (``analysis.kernels.numerics``), named to its
workers, which record the kernels for the numerical A/B once per run (the PR's on base's recorded inputs). The
kernel workers' Triton cache starts as a copy of the one the side's suite filled (`seed_triton_cache`).

Models: one block per model whose suite row is ``ok`` on both sides; each side's worker prepares (compiles) the
models of its group first.

A round walks its blocks ``passes`` times (``--passes``; `PairedTiming` has the defaults by device), so every item
gets that many short ABBA blocks spread over the round, and the round's result does not hang on one visit.

A side's worker environment is what its runner gives a stage of that side (``runner.environment``: the
variant's environment, its overlay and the code on PYTHONPATH), pinned to the device; the plan holds how it differs
from the paired stage's own environment.
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.kernels.compare import IDENTICAL_CODE, normalize_kernels, pair_kernels
from analysis.kernels.cpp_build import same_cpp_build
from analysis.kernels.numerics import CONFIG_VAR as NUMERICS_CONFIG_VAR
from analysis.kernels.numerics import write_config as write_numerics_config
from analysis.report.sequential import device_kind, most_rounds
from analysis.stats.verdict_settings import check_rounds
from foundation.errors import UserError
from foundation.flag_values import whole_number
from foundation.formats.dynamo_csv import STATUS_OK, DynamoCsvError, read_suite_csv
from foundation.formats.kernel_index import IndexRow, read_index
from foundation.formats.run_layout import VariantLayout
from foundation.formats.stage_records import (
    INTERPRETER_ITERATIONS,
    KERNEL_WORKER,
    LOAD,
    MODEL_WORKER,
    Block,
    Job,
    Plan,
    SidePlan,
    device_env,
    plan_jobs,
    worker_env,
    worker_triton_cache,
)
from foundation.formats.suite_request import SuiteRequest
from foundation.hip_modules import models_per_process
from prbench.runners import Runner, StageCommand

# Passes when --passes is not given (the rounds: `analysis.report.sequential.DEFAULT_ROUNDS`). On a shared CPU one
# visit of a sub-microsecond kernel or of a millisecond model step differs from the next by 5–20 % (a neighbour's
# burst), and fresh processes differ by 1–2 %: A/A runs here reached the ±2 % margin for about half the kernels
# with 5 rounds of 16 passes and for about three quarters with 10. A GPU visit is steadier, and a model step there
# costs more.
DEFAULT_PASSES = {"cpu": 16, "gpu": 2}  # device kind → passes
PREPARE_TIMEOUT_S = 1800.0  # build + compile (from the warm cache) + warm-up of one model
VISIT_TIMEOUT_S = 900.0  # warm-up + timed steps of one model


@dataclass
class PlanSide:
    """What a plan needs from one side of the comparison."""

    name: str
    directory: Path  # runs/<id>/<side>
    stage_env: dict[str, str]  # the variant's stage environment (PreparedVariant.env)
    python_path: list[Path]  # the variant's overlay, if any
    runner: Runner

    def worker_base_env(self, module: str) -> dict[str, str]:
        """The environment the side's runner gives a stage: the same for its workers."""
        command = StageCommand(module=module, args=[], env=dict(self.stage_env), python_path=list(self.python_path))
        return self.runner.environment(command)

    def plan_env(self, worker_env: dict[str, str]) -> dict[str, str | None]:
        """How a worker's environment differs from the paired stage's own (None: unset), for the plan.

        The stage lays this over its environment, which gives the worker exactly ``worker_env`` (inside a
        container, plus the image's variables). Only the difference is written, so the user's shell environment
        (tokens and all) is not copied into the run directory.
        """
        ambient = self.runner.environment(StageCommand(module="stages.paired", args=[]))
        changed: dict[str, str | None] = {k: v for k, v in worker_env.items() if ambient.get(k) != v}
        changed.update({k: None for k in ambient if k not in worker_env})
        return changed


# --- kernels ---------------------------------------------------------------------------------------------------


def read_side_index(directory: Path) -> tuple[list[IndexRow], pd.DataFrame]:
    """A side's organized index (``runs/<id>/<side>``): its rows, and the frame `partners` pairs."""
    path = VariantLayout(directory).index_csv
    rows = read_index(path)
    columns = [f.name for f in fields(IndexRow)]
    frame = normalize_kernels(pd.DataFrame([asdict(r) for r in rows], columns=columns, dtype=str))
    return rows, frame


@dataclass(frozen=True)
class KernelPartners:
    """The kernel pairs the report will compare, by organized path (base → PR), and which of them both workers
    time from base's graph module (`timed_from_base`)."""

    paths: dict[str, str]
    from_base: dict[str, str]  # the C++ pairs of identical code and shapes: a subset of ``paths``


def partners(base: pd.DataFrame, pr: pd.DataFrame) -> KernelPartners:
    """Every kernel pair the report will compare (``pair_kernels``, the report's own pairing), and its C++ pairs of
    identical code.

    Only C++ pairs are timed from base's module: a C++ kernel is timed inside its graph module, loaded and run once
    to record its launches, so the side's graph (its other kernels, its recording) comes with it; a Triton job is
    its kernel's own file on its own seeded inputs, and in a Triton A/B each side's compiler builds identical source
    anew (the report's ``compiled_by``), which base's module would hide.
    """
    pairing = pair_kernels(base, pr)
    base_paths, pr_paths, backends = base["path"].tolist(), pr["path"].tolist(), base["backend"].tolist()
    paths, from_base = {}, {}
    for b, p, how in zip(pairing.pairs["base_row"], pairing.pairs["pr_row"], pairing.pairs["matched_by"],
                         strict=True):
        paths[base_paths[b]] = pr_paths[p]
        if how == IDENTICAL_CODE and backends[b] == "cpp":
            from_base[base_paths[b]] = pr_paths[p]
    return KernelPartners(paths, from_base)


def timed_from_base(base: list[Job], pr: list[Job], from_base: dict[str, str], base_cache: str
                    ) -> tuple[list[Job], list[Job]]:
    """Both sides' jobs with every identical-code C++ pair timed from base's graph module in both workers.

    Identical code timed in each side's own graph ran up to 3–8 % apart between the sides' processes (README
    command 1's tanh kernel, docs/cost-model.md): what differs is what each worker loads and records for its own
    graph, not the code. So a base graph job's identical kernels become a job of their own, and the PR's worker
    gets its copy: base's module, loaded from base's Inductor cache (``base_cache``), recorded on the same seeded
    draw, its kernels named by base's variables but reported as the PR's items (the report pairs them as before).
    The two workers then time the same compiled code on the same recorded values, and the identical-kernel
    control measures the processes, not the graphs. The PR's graph jobs keep only its other kernels (changed,
    or only in the PR): PR code in the PR's graph on its own recorded values (the numerical A/B, not the timing,
    runs the PR's kernels on base's inputs). Ids are renumbered per side.

    ``kernel_plan`` passes ``from_base`` only when both sides compile C++ alike (``same_cpp_build``: the
    commands Inductor keys its binaries by, compared without their directories), so a PR that changes only how
    Inductor compiles C++ (its flags, not the source) keeps every pair in its own side's graph and is measured.
    """
    moved = set(from_base.values())
    base_jobs: list[Job] = []
    borrowed: list[Job] = []
    for job in base:
        same = {n: p for n, p in job.kernels.items() if p in from_base} if job.kind == "graph" else {}
        rest = {n: p for n, p in job.kernels.items() if n not in same}
        if rest:
            base_jobs.append(replace(job, kernels=rest))
        if same:
            base_jobs.append(replace(job, kernels=same))
            borrowed.append(replace(job, kernels={n: from_base[p] for n, p in same.items()}, cache_dir=base_cache))
    pr_jobs = [replace(job, kernels=rest) for job in pr
               if (rest := {n: p for n, p in job.kernels.items() if job.kind != "graph" or p not in moved})]
    return ([replace(job, id=i) for i, job in enumerate(base_jobs)],
            [replace(job, id=i) for i, job in enumerate(pr_jobs + borrowed)])


def pair_jobs(base: list[Job], pr: list[Job], partner: dict[str, str]) -> list[Block]:
    """Blocks of (base job, PR job) that time paired kernels back to back; leftovers one-sided at the end.

    Jobs of one kind pair by the number of paired kernels they share, most first (a Triton job shares its one
    kernel with its partner's job only); ties go to the earlier jobs, so the plan is deterministic.
    """
    pr_job_of = {path: job for job in pr for path in job.kernels.values()}
    shared: Counter[tuple[int, int]] = Counter()
    for job in base:
        for path in job.kernels.values():
            other = pr_job_of.get(partner.get(path, ""))
            if other is not None and other.kind == job.kind:
                shared[(job.id, other.id)] += 1
    used_base: dict[int, int] = {}
    used_pr: set[int] = set()
    for (b, p), _ in sorted(shared.items(), key=lambda kv: (-kv[1], kv[0])):
        if b not in used_base and p not in used_pr:
            used_base[b] = p
            used_pr.add(p)
    pr_by_id = {job.id: job for job in pr}
    blocks: list[Block] = [{"base": asdict(job), "pr": asdict(pr_by_id[used_base[job.id]])}
                           for job in base if job.id in used_base]
    blocks += [{"base": asdict(job), "pr": None} for job in base if job.id not in used_base]
    blocks += [{"base": None, "pr": asdict(job)} for job in pr if job.id not in used_pr]
    return blocks


@dataclass(frozen=True)
class PairedTiming:
    """How a comparison times its two sides together: ``rounds`` of fresh worker processes (the unit of the
    statistics), each walking every item's ABBA block ``passes`` times."""

    rounds: int
    passes: int

    @classmethod
    def for_device(cls, device: str, rounds: int | None = None, passes: int | None = None) -> PairedTiming:
        """The given values, checked (one-line errors naming the flag), or the device's defaults (rounds: the most
        any kind runs by default)."""
        kind = device_kind(device)
        return cls(rounds=check_rounds(most_rounds(kind) if rounds is None else rounds),
                   passes=whole_number("--passes", DEFAULT_PASSES[kind] if passes is None else passes, minimum=1))


def kernel_plan(sides: list[PlanSide], *, device: str, platform: str, warmup: int, iterations: int,
                timeout_s: float, logs: Path, passes: int, modules_per_worker: int = 0) -> Plan:
    """The kernel timing plan of both sides (``sides`` = base, PR), walked ``passes`` times per round, with fresh
    workers every ``modules_per_worker`` kernel modules (0: one worker per side for the round)."""
    indexes = {side.name: read_side_index(side.directory) for side in sides}
    interpreted = {side.name: device == "cpu" and any(r.backend == "triton" for r in indexes[side.name][0])
                   for side in sides}
    jobs = {side.name: plan_jobs(indexes[side.name][0], VariantLayout(side.directory).organized, warmup, iterations,
                                 timeout_s, INTERPRETER_ITERATIONS if interpreted[side.name] else None)
            for side in sides}
    base, pr = (side.name for side in sides)
    partner = partners(indexes[base][1], indexes[pr][1])
    caches = [side.stage_env["TORCHINDUCTOR_CACHE_DIR"] for side in sides]
    # Identical source is identical code only when both sides compile it alike (analysis.kernels.cpp_build);
    # otherwise every pair is timed in its own side's graph, so a PR that changes only the flags is measured.
    from_base = partner.from_base if same_cpp_build(Path(caches[0]), Path(caches[1])) else {}
    jobs[base], jobs[pr] = timed_from_base(jobs[base], jobs[pr], from_base, caches[0])
    plan_sides: dict[str, SidePlan] = {}
    for side in sides:
        organized = VariantLayout(side.directory).organized
        base_env = side.worker_base_env(KERNEL_WORKER)
        if interpreted[side.name]:
            base_env["TRITON_INTERPRET"] = "1"
        layout = VariantLayout(side.directory)
        work = layout.work / "kernels" / "paired"
        seed_triton_cache(layout.triton_cache, worker_triton_cache(work))
        env = worker_env(device, platform, base_env, work, Path(side.stage_env["TORCHINDUCTOR_CACHE_DIR"]))
        # Every fresh worker loads its side's modules before the first visit, both sides at once.
        loads = [{**asdict(job), "kind": LOAD} for job in jobs[side.name]]
        plan_sides[side.name] = SidePlan(env=side.plan_env(env), log=str(logs / f"kernels-{side.name}-workers.log"),
                                         organized=str(organized), prepare=loads)
    _numerics_configs(sides, plan_sides, partner.paths)
    return Plan(kind="kernels", worker=KERNEL_WORKER, device=device, sides=plan_sides,
                blocks=pair_jobs(jobs[base], jobs[pr], partner.paths), passes=passes, platform=platform,
                modules_per_worker=modules_per_worker)


def seed_triton_cache(suite_cache: Path, workers_cache: Path) -> None:
    """The kernel workers' Triton cache starts as a copy of the Triton binaries the side's suite compiled, both sides
    alike. A fresh kernel worker compiles every Triton kernel it loads, every configuration it autotunes, one at a
    time (no compile pool: `worker_env`); later rounds find round 1's binaries in the cache, round 1 found none: on
    an H200, 11 tiny kernels, round 1 took 12.3–16.0 s and later rounds 5.9–8.1 s (docs/gpu-validation.md). The
    autotuning itself still runs in every fresh worker (each round deletes the chosen configurations). A cache
    already there (a round ran) is kept."""
    if workers_cache.exists() or not suite_cache.is_dir() or not any(suite_cache.iterdir()):
        return
    shutil.copytree(suite_cache, workers_cache)


def _numerics_configs(sides: list[PlanSide], plan_sides: dict[str, SidePlan], partner: dict[str, str]) -> None:
    """The numerical A/B of the paired kernels (``analysis.kernels.numerics``): each side's numerics.json, named
    to its workers; the PR side runs its kernels on base's recorded inputs."""
    base, pr = sides
    outputs = {side.name: VariantLayout(side.directory).kernel_outputs for side in sides}
    reference = {base.name: None, pr.name: (outputs[base.name], VariantLayout(base.directory).organized)}
    pairs = {base.name: partner, pr.name: {p: b for b, p in partner.items()}}
    for side in sides:
        config = write_numerics_config(outputs[side.name], VariantLayout(side.directory).organized,
                                       reference[side.name], pairs[side.name])
        plan_sides[side.name].env[NUMERICS_CONFIG_VAR] = str(config)


# --- models ----------------------------------------------------------------------------------------------------


def ok_models(side: PlanSide) -> list[str]:
    path = VariantLayout(side.directory).suite_csv
    try:
        return [row["name"] for row in read_suite_csv(path) if row["status"] == STATUS_OK]
    except DynamoCsvError as exc:
        raise UserError(str(exc)) from None


def model_jobs(model: str, suite: SuiteRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    """(prepare job, time job) of one model, measured as the suite measured it."""
    prepare = {"kind": "prepare", "model": model, "size": suite.size, "mode": suite.mode, "dtype": suite.dtype,
               "device": suite.device, "backend": "inductor", "warmup": suite.warmup, "timeout_s": PREPARE_TIMEOUT_S}
    time = {"kind": "time", "model": model, "warmup": suite.warmup, "iterations": suite.iterations,
            "timeout_s": VISIT_TIMEOUT_S}
    return prepare, time


def model_plan(sides: list[PlanSide], *, suite: SuiteRequest, device: str, platform: str, per_process: int | None,
               logs: Path, passes: int) -> Plan:
    """The model timing plan: models ok on both sides, in groups of ``per_process`` (0: all in one worker; None:
    the platform's default, one model per worker on ROCm: ``foundation.hip_modules``), walked ``passes``
    times per round."""
    if per_process is None:
        per_process = models_per_process(platform)
    base, pr = sides
    on_pr = set(ok_models(pr))
    models = [m for m in ok_models(base) if m in on_pr]
    jobs = {m: model_jobs(m, suite) for m in models}
    plan_sides = {}
    for side in sides:
        env = device_env(device, platform, side.worker_base_env(MODEL_WORKER))
        env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # warm cache: no compile pool to start (or to orphan)
        if suite.cpu_backend == "triton" and device == "cpu":
            env["TRITON_INTERPRET"] = "1"  # as the suite compiled them
        plan_sides[side.name] = SidePlan(env=side.plan_env(env), log=str(logs / f"models-{side.name}-workers.log"),
                                         prepare=[jobs[m][0] for m in models])
    groups = [models[i:i + per_process] for i in range(0, len(models), per_process)] if per_process else []
    return Plan(kind="models", worker=MODEL_WORKER, device=device, sides=plan_sides,
                blocks=[{"base": jobs[m][1], "pr": jobs[m][1]} for m in models], groups=groups, passes=passes,
                platform=platform)

