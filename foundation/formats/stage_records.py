"""The records the host and the stages exchange, torch-free: the host writes them, a stage reads them.

- environment variable names a stage reads (set by the host's runner, a plan, or a worker's parent);
- what pins a stage or a worker to a device (`visible_devices_env`, merged by `pinned_over`; a worker's `device_env`,
  `worker_env`) and ``--devices`` (`parse_devices`);
- a kernels run's jobs (`Job`, `plan_jobs` over an organized directory's `load_rows`), which ``stages.kernels``
  runs and ``prbench.stages.paired``/``prbench.compare.kernel_shards`` pair and shard;
- the paired timing plan (`Plan`, ``pair/<kind>/plan.json``) that ``stages.paired`` runs round by round::

    {"kind": "kernels" | "models", "worker": "stages.kernels" | "stages.model_worker",
     "device": "cpu" | "<GPU index>",
     "sides": {"base": {"env": {...}, "log": PATH, "prepare": [job, ...], "organized": DIR | null}, "pr": ...},
     "groups": [[model, ...], ...],            (models, optional; [] = one group of everything)
     "blocks": [{"base": job | null, "pr": job | null}, ...],
     "passes": P,                               (optional, default 1)
     "modules_per_worker": N,                   (kernels, optional, default 0 = no limit: the blocks are cut into
                                                 groups of N, each with fresh workers that load only its modules)
     "platform": "cpu" | "cuda" | "rocm"}       (optional: how --device pins a worker; default cuda)

  A plan job is what the worker takes, plus ``timeout_s``; its items are ``job["kernels"]`` ({kernel name:
  organized path}) or ``job["model"]``. A kernel job's ``cache_dir`` (optional) is the Inductor cache its module is
  loaded from, when not the worker's own: the PR's worker times identical-code C++ pairs from base's graph module
  (``prbench.stages.paired.timed_from_base``), whose items stay the PR's organized paths.

The stages import this module rather than the other way round, so the host never loads a stage (a stage may
import torch at module level).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from foundation.atomic_io import write_json
from foundation.errors import UserError
from foundation.formats.kernel_index import IndexRow, read_index
from foundation.formats.paired_rounds import ROUND_KINDS, SIDES
from foundation.formats.run_layout import GRAPHS_DIR, INDEX_CSV

# --- environment variables ------------------------------------------------------------------------------------
INDUCTOR_CONFIG_ENV = "PRBENCH_INDUCTOR_CONFIG"  # JSON of Inductor config overrides a stage applies
# A directory for Inductor's precompiled C++ headers that every stage on the machine shares; unset or empty: each
# TMPDIR keeps its own, as Inductor does by itself.
HEADER_DIR_ENV = "PRBENCH_INDUCTOR_HEADERS"
LIFELINE_ENV = "PRBENCH_WORKER_LIFELINE"  # the pipe a worker watches: its parent's end closing stops it
WORKER_DEVICE_ENV = "PRBENCH_WORKER_DEVICE"  # "cpu" or "gpu": what a pinned worker times on
LAYOUT_PAD_VAR = "PRBENCH_LAYOUT_PAD"  # the paired stage's random-length padding (see stages.paired)
VISIBLE_DEVICES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")

# --- workers ---------------------------------------------------------------------------------------------------
KERNEL_WORKER = "stages.kernels"  # the module a kernels worker runs (python -m ... --worker)
MODEL_WORKER = "stages.model_worker"
INTERPRETER_ITERATIONS = 1  # timed calls of a Triton kernel in the CPU interpreter (~1 s each; no warm-up)
LOAD = "load"  # a job kind: only load the module (a paired round's prepare)


def visible_devices_env(device: str, platform: str) -> dict[str, str]:
    """The environment that pins a process to ``device`` on ``platform``, the one definition every stage and worker
    of a comparison is pinned by: a GPU index (as this machine numbers its GPUs) becomes the only visible GPU, which
    torch then calls ``cuda``/``cuda:0``, through the platform's variable (HIP_VISIBLE_DEVICES on rocm: ROCm also
    honours CUDA_VISIBLE_DEVICES, and setting both would apply the index twice); ``cpu`` leaves no GPU visible.
    Merge it with `pinned_over`, so that no other visible-devices variable narrows or renumbers what it names."""
    if device == "cpu":
        return {"CUDA_VISIBLE_DEVICES": ""}
    return {"HIP_VISIBLE_DEVICES" if platform == "rocm" else "CUDA_VISIBLE_DEVICES": device}


def pinned_over(base: dict[str, str], env: dict[str, str]) -> dict[str, str]:
    """``env`` over ``base``; when ``env`` pins a device (names a visible-devices variable), none of ``base``'s
    visible-devices variables stays (a host's ROCR_VISIBLE_DEVICES=0,1 would hide GPU 7 from HIP_VISIBLE_DEVICES=7)."""
    pins = any(var in env for var in VISIBLE_DEVICES)
    merged = {key: value for key, value in base.items() if not (pins and key in VISIBLE_DEVICES)}
    merged.update(env)
    return merged


def device_env(device: str, platform: str, base: dict[str, str]) -> dict[str, str]:
    """``base`` pinned to one device (`visible_devices_env`), for a worker that times on it: one OpenMP thread on
    the CPU, and ``PRBENCH_WORKER_DEVICE`` saying which kind of device it times on."""
    env = pinned_over(base, visible_devices_env(device, platform))
    if device == "cpu":
        env.setdefault("OMP_NUM_THREADS", "1")
    env[WORKER_DEVICE_ENV] = "cpu" if device == "cpu" else "gpu"
    return env


def worker_triton_cache(work_dir: Path) -> Path:
    """The Triton cache of the workers whose scratch is ``work_dir``: theirs, kept from round to round."""
    return work_dir / "triton"


def worker_env(device: str, platform: str, base: dict[str, str], work_dir: Path,
               cache_dir: Path | None) -> dict[str, str]:
    """Environment of one worker: pinned to its device, private Triton cache, one OpenMP thread on CPU."""
    env = device_env(device, platform, base)
    env["TRITON_CACHE_DIR"] = str(worker_triton_cache(work_dir))
    inductor_cache = cache_dir or (Path(base["TORCHINDUCTOR_CACHE_DIR"]) if base.get("TORCHINDUCTOR_CACHE_DIR")
                                   else work_dir / "inductor")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_cache)
    env.setdefault("TMPDIR", str(work_dir / "tmp"))
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # no compile pool: a killed worker leaves no orphans
    env["PYTHONUNBUFFERED"] = "1"
    return env


def parse_devices(spec: str) -> list[str]:
    """``cpu``, ``0,1,2``, or ``cpu,cpu`` (two CPU workers); each entry gets one worker."""
    devices = [d.strip() for d in spec.split(",") if d.strip()]
    for device in devices:
        if device != "cpu" and not device.isdigit():
            raise UserError(f"--devices: '{device}' is neither 'cpu' nor a GPU index")
    if not devices:
        raise UserError("--devices: empty")
    return devices


# --- a kernels run's jobs ----------------------------------------------------------------------------------------


@dataclass
class Job:
    """One unit of worker work: a Triton kernel file, or a graph module timing the C++ kernels it launches."""

    id: int
    kind: str  # "triton" or "graph"; LOAD: only load the module (a paired round's prepare)
    path: str  # absolute path of the module to import
    kernels: dict[str, str]  # kernel name → organized relative path (one entry for a Triton job)
    warmup: int
    iterations: int
    timeout_s: float
    # The Inductor cache the module's compiled kernels are loaded from; "" = the worker's own
    # (TORCHINDUCTOR_CACHE_DIR). A PR worker timing an identical-code pair from base's graph module names base's.
    cache_dir: str = ""


def load_rows(organized: Path, pattern: str | None) -> list[IndexRow]:
    index = organized / INDEX_CSV
    if not index.is_file():
        raise UserError(f"--dir {organized}: no index.csv (run organize first)")
    rows = read_index(index)
    if pattern:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise UserError(f"--filter {pattern!r}: not a valid regular expression ({exc})") from None
        rows = [r for r in rows if regex.search(r.path)]
    if not rows:
        raise UserError(f"{index}: no kernels to run" + (f" matching --filter {pattern}" if pattern else ""))
    return rows


def plan_jobs(rows: list[IndexRow], organized: Path, warmup: int, iterations: int, timeout_s: float,
              interpreter_iterations: int | None) -> list[Job]:
    """Triton rows → one job each; C++ rows → one job per graph (timed where the kernel was first seen: organize
    reads graphs in graph-key order, so that is the same model's graph on both sides)."""
    jobs: list[Job] = []
    graph_kernels: dict[str, dict[str, str]] = {}
    for row in rows:
        if row.backend == "cpp":
            graph = row.graphs.split(";")[0].rsplit("/", 1)[-1] if row.graphs else ""
            graph_kernels.setdefault(graph, {})[row.kernel_name] = row.path
            continue
        w, n = (0, interpreter_iterations) if interpreter_iterations else (warmup, iterations)
        jobs.append(Job(len(jobs), "triton", str(organized / row.path), {row.kernel_name: row.path}, w, n, timeout_s))
    for graph, kernels in graph_kernels.items():
        path = organized / GRAPHS_DIR / f"{graph}.py"
        jobs.append(Job(len(jobs), "graph", str(path), kernels, warmup, iterations,
                        timeout_s * max(1, len(kernels))))
    return jobs


# --- the paired timing plan ----------------------------------------------------------------------------------------

PlanJob = dict[str, Any]
Block = dict[str, PlanJob | None]


@dataclass
class SidePlan:
    env: dict[str, str | None]  # laid over this stage's environment; None unsets a variable
    log: str
    prepare: list[PlanJob] = field(default_factory=list)  # sent to every fresh worker before any visit
    organized: str | None = None  # kernels: where stale *.best_config files are deleted before a round


@dataclass
class Plan:
    kind: str
    worker: str
    device: str
    sides: dict[str, SidePlan]
    blocks: list[Block]
    groups: list[list[str]] = field(default_factory=list)
    passes: int = 1  # the blocks are walked this many times per round
    platform: str = ""  # cpu, cuda or rocm: how a worker is pinned to another device (--device); "" = cuda
    # Kernel modules one worker loads before a fresh one takes over (foundation.hip_modules); 0: no limit.
    modules_per_worker: int = 0


def job_items(job: PlanJob) -> dict[str, str]:
    """{key in the worker's reply: item}: the kernels a job times, or its model."""
    if "kernels" in job:
        return dict(job["kernels"])
    return {job["model"]: job["model"]}


def write_plan(path: Path, plan: Plan) -> None:
    write_json(path, asdict(plan))


def read_plan(path: Path) -> Plan:
    """Load and check a plan; any problem is a UserError naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"--plan {path}: cannot read the plan ({type(exc).__name__}: {exc})") from None
    try:
        plan = _parse_plan(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UserError(f"--plan {path}: not a paired timing plan ({type(exc).__name__}: {exc})") from None
    return plan


def _parse_plan(data: dict[str, Any]) -> Plan:
    sides = {name: SidePlan(**side) for name, side in data["sides"].items()}
    plan = Plan(kind=data["kind"], worker=data["worker"], device=str(data["device"]), sides=sides,
                blocks=list(data["blocks"]), groups=[list(g) for g in data.get("groups") or []],
                passes=data.get("passes", 1), platform=str(data.get("platform", "")),
                modules_per_worker=data.get("modules_per_worker", 0))
    if not isinstance(plan.passes, int) or isinstance(plan.passes, bool) or plan.passes < 1:
        raise ValueError(f"passes {plan.passes!r} is not a positive whole number")
    limit = plan.modules_per_worker
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise ValueError(f"modules_per_worker {limit!r} is not a whole number")
    if plan.kind not in ROUND_KINDS:
        raise ValueError(f"kind {plan.kind!r} is not one of {', '.join(ROUND_KINDS)}")
    if not plan.sides or any(s not in SIDES for s in plan.sides):
        raise ValueError(f"sides {sorted(plan.sides)}: expected base and/or pr")
    if plan.device != "cpu" and not plan.device.isdigit():
        raise ValueError(f"device {plan.device!r} is neither 'cpu' nor a GPU index")
    for i, block in enumerate(plan.blocks):
        jobs = {side: job for side, job in block.items() if job is not None}
        if set(block) - set(plan.sides) or not jobs:
            raise ValueError(f"block {i} has no job, or one for a side the plan does not describe")
        for job in jobs.values():
            float(job["timeout_s"])
            job_items(job)
    grouped = {item for group in plan.groups for item in group}
    if plan.groups and any(set(job_items(j).values()) - grouped for b in plan.blocks for j in b.values() if j):
        raise ValueError("a block's item is in none of the groups")
    return plan
