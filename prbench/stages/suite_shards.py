"""The suite stage of a comparison spread over the executor's devices: shards of models, resumable, merged into the
files one suite stage writes.

With more than one device (``--devices cpu,cpu``, ``--devices 0,1``, or ``--executor ray``), and on ROCm on one device
too, each side's model list is cut into shards of ``--suite-shard-size`` models (default 1). On ROCm a shard of one
model is its own process, as PyTorch's harness runs each model: one process compiling every model runs out of HIP
modules at full suite scale (error 209, ``foundation.hip_modules``). A shard runs ``stages.suite`` over its models
on whatever device the executor gives it: compiling is not a paired measurement, so base and PR shards go anywhere, and
the two sides' shards are handed to the executor together. Each shard works in ``<side>/work/suite-shards/<suite inputs
hash>-<models per shard>/shard-KKK/``: its own ``suite/`` (suite.csv, samples.json, graph_models.json, outputs/), its
own Inductor cache and TMPDIR (no two compiles share a cache directory, on one node or many), and ``shard.json``,
written by the stage last (``foundation.formats.suite_shard_records``): a shard with its record is finished and never
redone (the directory is named by the stage's inputs and the cut); one without was interrupted or lost and runs again,
keeping the models it finished (as the suite stage resumes).

When every shard of a side is there, the side's ``suite`` stage merges them (`SuiteShards.merge`): the rows, samples
and graph lists in model-list order into ``<side>/suite/`` (and the recorded outputs of each model), the shards'
Inductor caches into the side's cache
directory (the one the organize stage's archive and the model rounds' warm compiles read), archived as
``inductor-cache.tar.gz`` as the stage archives it. Downstream stages see the files of one suite stage. Each model
still compiles from an empty cache of its shard, so a compile time may be longer than one process that had
compiled a shared graph for an earlier model would report.

Nodes write their shards into the run directory: on several nodes it must be one shared file system (as for the
timing rounds). Where each shard ran is in the suite's manifest summary (``shards``) and the run lock's ``nodes``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation import atomic_io
from foundation.errors import UserError
from foundation.formats.cache_archive import archive_cache
from foundation.formats.dynamo_csv import (
    STATUS_OK,
    read_graph_models,
    read_suite_csv,
    read_suite_samples,
    write_suite_csv,
)
from foundation.formats.run_layout import INDUCTOR_CACHE, VariantLayout
from foundation.formats.suite_request import SuiteRequest
from foundation.formats.suite_shard_records import (
    ShardRecord,
    merge_graph_models,
    merge_rows,
    merge_samples,
    model_shards,
    read_shard_record,
)
from foundation.hip_modules import suite_models_per_process
from prbench.executors import RunnerSpec, ShardTask, StageStep
from prbench.runners import SHARD_LABEL, SIDE_LABEL
from prbench.stages.command_lines import suite_shard_command

SHARDS_DIR = "suite-shards"
RECORD = "shard.json"
DEFAULT_SHARD_SIZE = 1  # models per shard when the suite is spread: the finest cut, so devices even out


def spread_shard_size(requested: int | None, executor: str, devices: int, platform: str) -> int:
    """Models per suite shard: 0 (one stage over every model, as on one device) unless the executor has several
    devices or is Ray, or the platform is ROCm (one process per model: ``foundation.hip_modules``);
    ``requested`` (``--suite-shard-size``) wins, 0 included."""
    if requested is not None:
        return requested
    return DEFAULT_SHARD_SIZE if executor == "ray" or devices > 1 else suite_models_per_process(platform)


@dataclass(frozen=True)
class SuiteShards:
    """The shards of one side's suite: where they work, and the commands that make them."""

    side: str
    variant_dir: Path
    digest: str  # the suite stage's input hash
    models: tuple[str, ...]
    shards: tuple[tuple[str, ...], ...]
    settings: SuiteRequest
    runner: RunnerSpec
    env: dict[str, str]  # the side's stage environment (the pipeline's, before a shard's own caches)
    python_path: tuple[Path, ...]

    @property
    def directory(self) -> Path:
        """Named by the suite's inputs and the cut: a shard's files never mix with those of another cut."""
        size = len(self.shards[0]) if self.shards else 0
        return VariantLayout(self.variant_dir).work / SHARDS_DIR / f"{self.digest}-{size}"

    def shard_dir(self, index: int) -> Path:
        return self.directory / f"shard-{index + 1:03d}"

    def record(self, index: int) -> Path:
        return self.shard_dir(index) / RECORD

    def missing(self) -> list[int]:
        """The shards without a record (never run, interrupted or lost)."""
        return [i for i in range(len(self.shards)) if not _finished(self.record(i), self.shards[i])]

    def key(self, index: int) -> str:
        """How progress lines, errors and the manifest name shard ``index``."""
        return f"{self.side} suite shard {index + 1}/{len(self.shards)} ({', '.join(self.shards[index])})"

    def task(self, index: int) -> ShardTask:
        """Shard ``index`` as an executor runs it."""
        work = self.shard_dir(index)
        out = VariantLayout(work).suite
        command = suite_shard_command(out, self.settings, self.shards[index], self.record(index),
                                      self.runner.platform)
        command.env = {**self.env, "TORCHINDUCTOR_CACHE_DIR": str(work / INDUCTOR_CACHE),
                       "TMPDIR": str(work / "tmp")}
        command.python_path = list(self.python_path)
        command.log_path = VariantLayout(self.variant_dir).log(f"suite-shard-{index + 1:03d}")
        label = self.key(index)
        command.labels = {SHARD_LABEL: label, SIDE_LABEL: self.side}
        return ShardTask(key=label, steps=(StageStep(self.runner, command),), outputs=(self.record(index),))

    def records(self) -> list[ShardRecord]:
        return [read_shard_record(self.record(i)) for i in range(len(self.shards))]

    def merge(self, cache_dir: Path) -> None:
        """The side's suite files from its shards (every shard must be there); ``cache_dir``: the side's Inductor
        cache directory, filled with every shard's cache and archived."""
        missing = self.missing()
        if missing:
            raise UserError(f"{self.side} suite: shard {missing[0] + 1} has no record in {self.directory}; run the "
                            "comparison again to compile its models")
        outs = [VariantLayout(self.shard_dir(i)) for i in range(len(self.shards))]
        models = list(self.models)
        rows = merge_rows([read_suite_csv(o.suite_csv) for o in outs], models)
        samples = merge_samples([read_suite_samples(o.suite_samples) for o in outs], models)
        graphs = merge_graph_models([_graph_models(o.graph_models) for o in outs], models)
        target = VariantLayout(self.variant_dir)
        target.suite.mkdir(parents=True, exist_ok=True)
        # The stage's order: samples, graphs, then the csv that says a model is done.
        atomic_io.write_json(target.suite_samples, samples)
        atomic_io.write_json(target.graph_models, graphs)
        _merge_outputs([o.model_outputs for o in outs], target.model_outputs)
        write_suite_csv(target.suite_csv, rows)
        _merge_caches([self.shard_dir(i) / INDUCTOR_CACHE for i in range(len(self.shards))], cache_dir)
        archive_cache(cache_dir, target.cache_archive)
        if not any(row["status"] == STATUS_OK for row in rows):
            logs = target.logs
            raise UserError(f"{self.side} suite: no model compiled and ran ({rows[0]['name']}: {rows[0]['error']}); "
                            f"logs: {logs}/suite-shard-*.log")

    def placements(self) -> list[dict[str, Any]]:
        return [record.placement() for record in self.records()]

    def clear(self, keep_current: bool) -> None:
        """Remove the shards of other inputs, or all of them (``--force suite``)."""
        parent = self.directory.parent
        if not parent.is_dir():
            return
        for stale in parent.iterdir():
            if not (keep_current and stale == self.directory):
                shutil.rmtree(stale, ignore_errors=True)


def suite_shards(side: str, variant_dir: Path, digest: str, settings: SuiteRequest, shard_size: int,
                 runner: RunnerSpec, env: dict[str, str], python_path: Iterable[Path]) -> SuiteShards:
    models = settings.validate()
    return SuiteShards(side, variant_dir, digest, tuple(models), tuple(model_shards(models, shard_size)),
                       settings, runner, dict(env), tuple(python_path))


def _finished(record: Path, models: tuple[str, ...]) -> bool:
    if not record.is_file():
        return False
    try:
        return read_shard_record(record).models == models
    except UserError:
        return False  # a damaged record is no finished shard: the shard runs again and replaces it


def _graph_models(path: Path) -> dict[str, list[str]]:
    return read_graph_models(path) if path.is_file() else {}


def _merge_outputs(shard_outputs: list[Path], target: Path) -> None:
    """The shards' recorded model outputs (``analysis.models.numerics``: one file per model) into the side's."""
    for directory in shard_outputs:
        if directory.is_dir():
            shutil.copytree(directory, target, dirs_exist_ok=True)


def _merge_caches(shard_caches: list[Path], cache_dir: Path) -> None:
    """The side's cache directory holds the union of the shards' caches (their entries are named by content, so
    two shards' copies of one entry are the same)."""
    if cache_dir.exists():
        shutil.rmtree(cache_dir)
    cache_dir.mkdir(parents=True)
    for cache in shard_caches:
        if cache.is_dir():
            shutil.copytree(cache, cache_dir, symlinks=True, dirs_exist_ok=True)
