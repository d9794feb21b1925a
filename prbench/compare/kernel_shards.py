"""``invoke kernels`` over an executor: the plan's kernel jobs cut into shards, each timed on one device of the local
pool or a Ray cluster, merged into the files one ``stages.kernels`` run writes.

A job is what ``foundation.formats.stage_records.plan_jobs`` makes of the index (a Triton kernel file, or a graph module
and the C++ kernels it launches); a shard is ``--shard-size`` consecutive jobs, run as ``stages.kernels --jobs
<ranges>`` on the device the executor places it on, writing its kernels.csv, kernels_seed.csv and kernel_samples.json
into ``<out>/work/kernel-shards/<settings hash>/shard-KKK/``. A shard whose three files are there is finished and never
redone (the directory is named by the index and the settings); an interrupted or lost one runs again. When every
shard is there, `KernelShards.merge` writes ``<out>/kernels.csv`` & co. in the index's order. On several nodes the
organized directory and ``--out`` must be on one shared file system at the same paths.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from analysis.kernels.results import merge_result_files
from foundation.errors import UserError
from foundation.formats.round_shards import block_ranges, partition_blocks
from foundation.formats.run_layout import INDEX_CSV, KERNEL_RESULT_FILES, VariantLayout
from foundation.formats.stage_records import load_rows, plan_jobs
from prbench.compare.round_sharding import run_tasks
from prbench.executors import Executor, RunnerSpec, ShardTask, StageStep
from prbench.runs.run_store import input_hash
from prbench.stages.command_lines import kernels_command

SHARDS_DIR = "kernel-shards"


@dataclass(frozen=True)
class KernelRequest:
    """What ``invoke kernels`` times, as its flags say."""

    organized: Path
    out: Path
    warmup: int
    iterations: int
    timeout_s: float
    cache_dir: Path | None
    filter_regex: str | None
    env: dict[str, str]


@dataclass(frozen=True)
class KernelShards:
    request: KernelRequest
    directory: Path
    shards: tuple[tuple[int, ...], ...]  # the plan's job ids of each shard
    order: tuple[str, ...]  # the index rows' organized paths, in index order

    def shard_dir(self, index: int) -> Path:
        return self.directory / f"shard-{index + 1:03d}"

    def outputs(self, index: int) -> tuple[Path, ...]:
        return tuple(self.shard_dir(index) / name for name in KERNEL_RESULT_FILES)

    def missing(self) -> list[int]:
        return [i for i in range(len(self.shards)) if not all(p.is_file() for p in self.outputs(i))]

    def task(self, index: int) -> ShardTask:
        r = self.request
        shard = self.shard_dir(index)
        command = kernels_command(r.organized, shard, warmup=r.warmup, iterations=r.iterations,
                                  timeout_s=r.timeout_s, cache_dir=r.cache_dir, work_dir=VariantLayout(shard).work,
                                  filter_regex=r.filter_regex, env=r.env, log_path=shard / "kernels.log")
        command.args += ["--jobs", block_ranges(list(self.shards[index]))]
        runner = RunnerSpec("local", python=sys.executable)
        return ShardTask(key=f"kernels shard {index + 1}/{len(self.shards)}", steps=(StageStep(runner, command),),
                         outputs=self.outputs(index))

    def merge(self) -> int:
        missing = self.missing()
        if missing:
            raise UserError(f"kernels: shard {missing[0] + 1} has no results in {self.directory}; run the command "
                            "again to time it")
        self.request.out.mkdir(parents=True, exist_ok=True)
        return merge_result_files([self.shard_dir(i) for i in range(len(self.shards))], self.request.out,
                                  list(self.order))


def kernel_shards(request: KernelRequest, shard_size: int) -> KernelShards:
    """The shards of the index's jobs (``shard_size`` jobs each; 0: one shard)."""
    rows = load_rows(request.organized, request.filter_regex)
    jobs = plan_jobs(rows, request.organized, request.warmup, request.iterations, request.timeout_s, None)
    index = (request.organized / INDEX_CSV).read_bytes()
    digest = input_hash({"index": hashlib.sha256(index).hexdigest(), "organized": str(request.organized),
                         "warmup": request.warmup, "iterations": request.iterations, "timeout_s": request.timeout_s,
                         "cache_dir": str(request.cache_dir), "filter": request.filter_regex,
                         "shard_size": shard_size, "env": request.env})
    shards = tuple(tuple(jobs[i].id for i in block) for block in partition_blocks(len(jobs), shard_size))
    directory = VariantLayout(request.out).work / SHARDS_DIR / digest
    return KernelShards(request, directory, shards, tuple(r.path for r in rows))


def executor_platform(organized: Path) -> str:
    """Where ``invoke kernels`` runs on a Ray cluster: C++ kernels (only) on CPU devices (a CPU-only cluster's fake
    GPUs), anything with Triton kernels on GPUs."""
    from foundation.formats.kernel_index import read_index

    return "cpu" if all(row.backend == "cpp" for row in read_index(organized / INDEX_CSV)) else "cuda"


def time_kernels(request: KernelRequest, shard_size: int, executor: Executor,
                 say: Callable[[str], None] = print) -> int:
    """Every missing shard through the executor (a progress line each, naming where it ran), then the merge;
    the number of kernel rows written. Ctrl-C stops the running shards and keeps the finished ones."""
    shards = kernel_shards(request, shard_size)
    tasks = [shards.task(i) for i in shards.missing()]
    if len(tasks) < len(shards.shards):
        say(f"[kernels] {len(shards.shards) - len(tasks)} of {len(shards.shards)} shards done earlier, kept")
    run_tasks(tasks, executor, say, "kernels", f"kernel shards of {sum(map(len, shards.shards))} jobs")
    return shards.merge()
