"""Shards of the suite stage: which models each one compiles, where it ran, and the suite files they add up to.

A spread suite (``prbench.stages.suite_shards``) runs ``stages.suite`` once per shard, each over some of the models, in
its own output directory and with its own Inductor cache. A shard's stage writes, last, a record of where it ran
(`ShardRecord`); the host then merges the shards' ``suite.csv`` rows, ``samples.json`` and ``graph_models.json``
into the side's own files, in the order of the model list, so the files are those of one stage over every model.

Compiling is not a paired measurement: the shards of one model list may run on any device, base and PR apart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from foundation import atomic_io
from foundation.errors import UserError
from foundation.formats.dynamo_csv import GraphModels, Row, SuiteSamples
from foundation.formats.round_shards import partition_blocks
from foundation.records import expect_int, expect_list, expect_number, expect_object, expect_str, read_json


@dataclass(frozen=True)
class ShardRecord:
    """Where one shard of the suite ran and what it covered (``shard.json``, written by the stage last)."""

    models: tuple[str, ...]
    node: str
    device: str  # "cpu" or a GPU index as the node's processes see it
    cpus: tuple[int, ...]  # a CPU device's CPUs (empty on a GPU)
    started_at: str
    wall_s: float

    def placement(self) -> dict[str, Any]:
        """The entry the suite's manifest summary and the run lock's ``nodes`` read (as a round's ``shards``)."""
        return {"models": list(self.models), "node": self.node, "device": self.device, "cpus": list(self.cpus),
                "started_at": self.started_at, "wall_s": self.wall_s}


def write_shard_record(path: Path, record: ShardRecord) -> None:
    atomic_io.write_json(path, asdict(record))


def read_shard_record(path: Path) -> ShardRecord:
    """A shard's record; a malformed one is a UserError naming the file and the field."""
    data = expect_object(read_json(path, "suite shard record"), str(path))
    return ShardRecord(
        models=tuple(expect_str(m, f"{path}: models[{i}]")
                     for i, m in enumerate(expect_list(data.get("models"), f"{path}: models"))),
        node=expect_str(data.get("node"), f"{path}: node"),
        device=expect_str(data.get("device"), f"{path}: device"),
        cpus=tuple(expect_int(c, f"{path}: cpus[{i}]", minimum=0)
                   for i, c in enumerate(expect_list(data.get("cpus"), f"{path}: cpus"))),
        started_at=expect_str(data.get("started_at"), f"{path}: started_at"),
        wall_s=expect_number(data.get("wall_s"), f"{path}: wall_s", minimum=0),
    )


def model_shards(models: list[str], shard_size: int) -> list[tuple[str, ...]]:
    """The models of each shard: runs of ``shard_size`` models in list order (0: one shard of every model)."""
    return [tuple(models[i] for i in block) for block in partition_blocks(len(models), shard_size)]


def merge_rows(parts: list[list[Row]], models: list[str]) -> list[Row]:
    """The suite's rows in model-list order; every model must have its row in some shard."""
    by_name = {row["name"]: row for rows in parts for row in rows}
    missing = [m for m in models if m not in by_name]
    if missing:
        raise UserError(f"suite: no shard has a row for model {missing[0]}; run the comparison again")
    return [by_name[m] for m in models]


def merge_samples(parts: list[SuiteSamples], models: list[str]) -> SuiteSamples:
    """``samples.json`` of the whole suite: each model's samples, in model-list order."""
    by_name = {name: samples for part in parts for name, samples in part.items()}
    return {m: by_name[m] for m in models if m in by_name}


def merge_graph_models(parts: list[GraphModels], models: list[str]) -> GraphModels:
    """``graph_models.json`` of the whole suite: each compiled graph module with every model that ran it, models in
    model-list order (as one stage lists them); graphs in the order their first model ran."""
    rank = {m: i for i, m in enumerate(models)}
    users: dict[str, set[str]] = {}
    for part in parts:
        for stem, names in part.items():
            users.setdefault(stem, set()).update(names)
    ordered = {stem: sorted(names, key=lambda n: (rank.get(n, len(rank)), n)) for stem, names in users.items()}
    first = {stem: rank.get(names[0], len(rank)) if names else len(rank) for stem, names in ordered.items()}
    order = sorted(ordered, key=lambda stem: first[stem])  # stable: a model's graphs keep their order
    return {stem: ordered[stem] for stem in order}
