"""Shards of a timing round: which blocks each one times, and the round record their records add up to.

A round (``foundation.formats.paired_rounds``) may be cut into shards, each a run of ``stages.paired`` over some of the
plan's blocks with fresh base and PR workers on one device: an item's visits all come from one shard, so base and
PR of an item are still timed together, on the same device, interleaved. The shards of a round may run one after
the other or at the same time on different devices (``prbench.executors``); each shard's record lists where it
ran in ``shards`` (node, device, CPUs), and `merge_shards` makes the round's record from them: the visits of all
shards, the workers of each side, and every shard's placement.

Block sets travel on the stage's command line as ranges: ``0-31,40,42-43``.

Stdlib only: the stage parses the ranges too.
"""

from __future__ import annotations

from typing import Any

from foundation.errors import UserError
from foundation.formats.paired_rounds import RoundRecord


def block_ranges(blocks: list[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2,5"`` (the stage's ``--blocks``)."""
    parts: list[str] = []
    ordered = sorted(set(blocks))
    start = prev = None
    for block in [*ordered, None]:
        if block is not None and prev is not None and block == prev + 1:
            prev = block
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = block
    return ",".join(parts)


def parse_block_ranges(spec: str, where: str = "--blocks") -> list[int]:
    """``"0-2,5"`` → ``[0, 1, 2, 5]``; anything else is a UserError naming ``where``."""
    blocks: set[int] = set()
    for part in spec.split(","):
        first, _, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()) or (last and int(last) < int(first)):
            raise UserError(f"{where} {spec!r}: expected block numbers and ranges like 0-31,40")
        blocks.update(range(int(first), int(last or first) + 1))
    return sorted(blocks)


def partition_blocks(count: int, shard_size: int) -> list[list[int]]:
    """The shards of a plan of ``count`` blocks: runs of ``shard_size`` blocks (0: one shard of everything)."""
    if count == 0:
        return []
    size = shard_size if shard_size > 0 else count
    return [list(range(start, min(start + size, count))) for start in range(0, count, size)]


def merge_shards(records: list[RoundRecord]) -> RoundRecord:
    """One round's record from the records of its shards (one per shard and, for docker recipes, per side).

    Visits keep their block, pass and position, so the paired view reads them as if one process had timed them;
    ``started_s`` counts from its own shard's start. ``workers`` holds, per side, every device, CPU and pid of its
    shards, ``wall_s`` the longest shard, ``shards`` where each ran, ``compiles`` every shard's first-call times.
    """
    if not records:
        raise ValueError("a round needs at least one shard")
    numbers = {r.round for r in records}
    kinds = {r.kind for r in records}
    if len(numbers) != 1 or len(kinds) != 1:
        raise UserError(f"shards of different rounds or kinds cannot be merged ({sorted(numbers)}, {sorted(kinds)})")
    sides = [s for s in ("base", "pr") if any(s in r.sides for r in records)]
    visits = sorted((v for r in records for v in r.visits), key=lambda v: (v.pass_index, v.block, v.position))
    return RoundRecord(kind=records[0].kind, round=records[0].round, sides=sides,
                       started_at=min(r.started_at for r in records), wall_s=max(r.wall_s for r in records),
                       workers={side: _merged_workers([(_first_shard(records, r), r.workers[side])
                                                        for r in records if side in r.workers])
                                for side in sides},
                       visits=visits, shards=[shard for r in records for shard in r.shards],
                       compiles=_merged_compiles(records))


def _merged_compiles(records: list[RoundRecord]) -> dict[str, dict[str, list[float]]]:
    """Each side's first-call times per model, over every shard that prepared the model."""
    out: dict[str, dict[str, list[float]]] = {}
    for record in records:
        for side, models in record.compiles.items():
            for model, times in models.items():
                out.setdefault(side, {}).setdefault(model, []).extend(times)
    return out


def _first_shard(records: list[RoundRecord], record: RoundRecord) -> int:
    """Where ``record``'s shards start in the merged record's ``shards`` list."""
    return sum(len(r.shards) for r in records[:records.index(record)])


def _merged_workers(parts: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """One side's workers over the shards; each worker start keeps the index of its shard (its clock)."""
    devices = list(dict.fromkeys(str(p.get("device", "")) for _, p in parts))
    merged: dict[str, Any] = {"device": devices[0] if len(devices) == 1 else ",".join(devices),
                              "cpus": sorted({c for _, p in parts for c in p.get("cpus", [])}),
                              "pids": [pid for _, p in parts for pid in p.get("pids", [])],
                              "starts": sum(int(p.get("starts", 0)) for _, p in parts)}
    startups = [{**startup, "shard": startup.get("shard", shard)} for shard, p in parts
                for startup in p.get("startups", []) if isinstance(startup, dict)]
    if startups:
        merged["startups"] = startups
    return merged
