"""Round records: what the paired timing stage measured, visit by visit, and the per-side views derived from them.

The unit of replication of a comparison is the *round*: fresh worker processes (one per side) that time every
item in ABBA blocks — A, B, B, A, base first when ``block + round + pass`` is even — so each side is first once
and last once per block; a round walks all blocks ``passes`` times. A round file ``round-<NNN>[-<side>].json``
holds one `RoundRecord`; every visit carries its round, its block, its pass and its position in the block (0–3),
so the analysis can pair base and PR within a round; a side's visits to an item in one round are pooled.

The paired view (`PairedBlocks`) keeps what the per-side view loses: which base and PR visits were timed
together. One ABBA block lasts a fraction of a second, while a shared machine changes speed (a neighbour's burst)
every few seconds, so comparing the two sides block by block and taking the median over a round's blocks leaves
a disturbance that hit some blocks out of the round's result.

The per-side view (`side_samples`) is ``{item: [[ms of round 1], [ms of round 2], ...]}``, the format of
``kernel_samples.json`` and ``suite/paired_samples.json``. Round ``i`` of base and round ``i`` of PR were
measured together; a failed visit is an empty list, so the indices stay aligned. Older files that hold one flat
list per item are read as a single round.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from foundation.atomic_io import write_json
from foundation.errors import UserError
from foundation.formats.run_layout import PAIRED_DIR as PAIRED_DIR
from foundation.formats.run_layout import SIDES as SIDES
from foundation.records import (
    expect_int,
    expect_list,
    expect_ms_list,
    expect_number,
    expect_object,
    expect_str,
    invalid,
    read_json,
)

ROUND_KINDS = ("kernels", "models")
RoundSamples = dict[str, list[list[float]]]  # item → one list of ms per round
# manifest.json: settings.timed, the kinds a run's paired rounds time. A step of a bisect of a kernel times its
# kernels alone (its verdict is the kernel's: prbench.compare.bisect); runs from before the key timed both.
TIMED_KEY = "timed"


@dataclass
class Visit:
    """One side timing one item once within a round."""

    side: str
    item: str  # organized relative kernel path, or model name
    block: int  # index of the item's block in the round's schedule
    position: int  # 0–3: the visit's place in its A B B A block
    started_s: float  # seconds since the round started
    samples: list[float] = field(default_factory=list)  # ms
    error: str = ""
    pass_index: int = 0  # which walk over the blocks (0-based; a round walks them ``passes`` times)


@dataclass
class RoundRecord:
    kind: str  # "kernels" or "models"
    round: int  # 1-based
    sides: list[str]  # the sides this record holds: both (interleaved) or one (alternating rounds)
    started_at: str  # ISO time
    wall_s: float
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)  # side → pid, device, cpu affinity, starts
    visits: list[Visit] = field(default_factory=list)
    # Where each shard of the round ran (``foundation.formats.round_shards``): its blocks, node, device, CPUs and
    # timing.
    shards: list[dict[str, Any]] = field(default_factory=list)
    # models: side → model → seconds of the first compiled call when the round prepared it (torch.compile
    # from the side's warm Inductor cache): a repeated compile per round, so its spread is known
    compiles: dict[str, dict[str, list[float]]] = field(default_factory=dict)


def models_timed(settings: Any) -> bool:
    """Whether a run's paired rounds time the models, from its manifest's settings (yes when not recorded)."""
    timed = settings.get(TIMED_KEY) if isinstance(settings, dict) else None
    return not isinstance(timed, list) or "models" in timed


def round_file(directory: Path, number: int, side: str | None = None) -> Path:
    suffix = f"-{side}" if side else ""
    return Path(directory) / f"round-{number:03d}{suffix}.json"


def write_round(path: Path, record: RoundRecord) -> None:
    write_json(path, asdict(record))


def read_round(path: Path) -> RoundRecord:
    """A round file; a truncated, hand-edited or foreign one is a UserError naming the file and the field."""
    data = expect_object(read_json(path, "a round record"), f"{path}")
    where = f"{path}: round record,"
    kind = expect_str(data.get("kind"), f"{where} kind")
    if kind not in ROUND_KINDS:
        raise invalid(f"{where} kind", f"one of {', '.join(ROUND_KINDS)}", kind)
    sides = [_side(s, f"{where} sides[{i}]") for i, s in enumerate(expect_list(data.get("sides"), f"{where} sides"))]
    visits = [_visit(v, f"{where} visits[{i}]")
              for i, v in enumerate(expect_list(data.get("visits", []), f"{where} visits"))]
    return RoundRecord(
        kind=kind, round=expect_int(data.get("round"), f"{where} round", minimum=1), sides=sides,
        started_at=expect_str(data.get("started_at", ""), f"{where} started_at"),
        wall_s=expect_number(data.get("wall_s", 0.0), f"{where} wall_s", minimum=0),
        workers=expect_object(data.get("workers", {}), f"{where} workers"), visits=visits,
        shards=[expect_object(s, f"{where} shards[{i}]")
                for i, s in enumerate(expect_list(data.get("shards", []), f"{where} shards"))],
        compiles=_compiles(data.get("compiles", {}), f"{where} compiles"))


def _compiles(value: Any, where: str) -> dict[str, dict[str, list[float]]]:
    sides = expect_object(value, where)
    return {_side(side, f"{where}: {side}"): {str(model): [expect_number(x, f"{where}.{side}.{model}", minimum=0)
                                                           for x in expect_list(times, f"{where}.{side}.{model}")]
                                              for model, times in expect_object(models, f"{where}.{side}").items()}
            for side, models in sides.items()}


def side_compiles(records: list[RoundRecord], side: str) -> dict[str, list[float]]:
    """Every first-call time (s) a side's rounds recorded per model, rounds in order (older rounds have none)."""
    out: dict[str, list[float]] = {}
    for record in sorted(records, key=lambda r: r.round):
        for model, times in record.compiles.get(side, {}).items():
            out.setdefault(model, []).extend(times)
    return out


def _side(value: Any, where: str) -> str:
    side = expect_str(value, where)
    if side not in SIDES:
        raise invalid(where, " or ".join(SIDES), side)
    return side


def _visit(value: Any, where: str) -> Visit:
    v = expect_object(value, where)
    return Visit(side=_side(v.get("side"), f"{where}.side"), item=expect_str(v.get("item"), f"{where}.item"),
                 block=expect_int(v.get("block"), f"{where}.block", minimum=0),
                 position=expect_int(v.get("position"), f"{where}.position", minimum=0),
                 started_s=expect_number(v.get("started_s"), f"{where}.started_s", minimum=0),
                 samples=expect_ms_list(v.get("samples", []), f"{where}.samples"),
                 error=expect_str(v.get("error", ""), f"{where}.error"),
                 pass_index=expect_int(v.get("pass_index", 0), f"{where}.pass_index", minimum=0))


def read_rounds(paths: list[Path]) -> list[RoundRecord]:
    return sorted((read_round(p) for p in paths), key=lambda r: r.round)


def side_samples(records: list[RoundRecord], side: str, items: list[str] | None = None) -> RoundSamples:
    """``{item: [[ms] per round]}`` for one side, rounds in order: the samples of the side's visits to the item in
    that round together (a round without a good visit gives [])."""
    numbers = sorted({r.round for r in records if side in r.sides})
    position = {n: i for i, n in enumerate(numbers)}
    wanted = items if items is not None else sorted({v.item for r in records for v in r.visits if v.side == side})
    out: RoundSamples = {item: [[] for _ in numbers] for item in wanted}
    for record in records:
        if side not in record.sides:
            continue
        for visit in record.visits:
            if visit.side == side and visit.item in out and not visit.error:
                out[visit.item][position[record.round]].extend(visit.samples)
    return out


BlockKey = tuple[int, int]  # (pass_index, block)


@dataclass
class PairedBlocks:
    """The samples of every visit of rounds that timed both sides together, by round, block and side."""

    rounds: list[int]  # round numbers, in order (index i = round i of the per-side views)
    samples: dict[tuple[str, str], dict[int, dict[BlockKey, list[float]]]]  # (side, item) → round → block → ms

    @classmethod
    def from_records(cls, records: list[RoundRecord]) -> PairedBlocks | None:
        """None unless every record holds both sides (docker recipes time each side in its own image, apart)."""
        if not records or any(set(r.sides) != set(SIDES) for r in records):
            return None
        samples: dict[tuple[str, str], dict[int, dict[BlockKey, list[float]]]] = {}
        for record in records:
            for visit in record.visits:
                if not visit.error and visit.samples:
                    blocks = samples.setdefault((visit.side, visit.item), {}).setdefault(record.round, {})
                    blocks.setdefault((visit.pass_index, visit.block), []).extend(visit.samples)
        return cls(sorted(r.round for r in records), samples)

    def round_log_ratios(self, base_item: str, pr_item: str) -> list[float]:
        """Per round: the median over its blocks of ``log(base median / PR median)`` within the block (NaN for a
        round without a block that timed both items)."""
        base, pr = self.samples.get(("base", base_item), {}), self.samples.get(("pr", pr_item), {})
        out = []
        for number in self.rounds:
            b_blocks, p_blocks = base.get(number, {}), pr.get(number, {})
            ratios = [_log_ratio(b_blocks[key], p_blocks[key]) for key in b_blocks if key in p_blocks]
            finite = [r for r in ratios if math.isfinite(r)]
            out.append(statistics.median(finite) if finite else math.nan)
        return out


    def round_half_log_ratios(self, side: str, item: str) -> list[float]:
        """Per round: ``log(half A / half B)`` of one side's own blocks of an item, each half the median of its
        block medians (NaN for a round with fewer than four blocks).

        The blocks of a round, in (pass, block) order, go to the halves as A B B A, A B B A, …: the side started
        first in every other pass, so each half holds as many first starts as second ones (an order effect
        cancels), and both halves sit at the same mean position in the round (a drift over the round cancels).
        Splitting A A B B instead put half B two passes later on average: a loaded A/A whose machine slowed over
        each round failed that split at 0.995× [0.992, 0.998]. Only the first multiple of four blocks is used,
        for the same balance.
        """
        out = []
        for number in self.rounds:
            blocks = self.samples.get((side, item), {}).get(number, {})
            keys = sorted(blocks)[: len(blocks) // 4 * 4]
            if not keys:
                out.append(math.nan)
                continue
            medians = [statistics.median(blocks[key]) for key in keys]
            first = [m for j, m in enumerate(medians) if j % 4 in (0, 3)]
            second = [m for j, m in enumerate(medians) if j % 4 in (1, 2)]
            out.append(_log_ratio(first, second))
        return out


def read_paired_blocks(directory: Path, rounds: int | None) -> PairedBlocks | None:
    """The blocks of rounds 1..``rounds`` in ``directory`` when each round timed both sides together (one file
    per round); None otherwise (no rounds recorded, a round missing, or one file per side)."""
    if not rounds:
        return None
    paths = [round_file(directory, n) for n in range(1, rounds + 1)]
    if not all(p.is_file() for p in paths):
        return None
    return PairedBlocks.from_records(read_rounds(paths))


def _log_ratio(base: list[float], pr: list[float]) -> float:
    b, p = statistics.median(base), statistics.median(pr)
    return math.log(b / p) if b > 0 and p > 0 else math.nan


def visit_errors(records: list[RoundRecord], side: str) -> dict[str, list[str]]:
    """Every error a side's visits recorded, per item (for the failure rows of kernels.csv)."""
    errors: dict[str, list[str]] = {}
    for record in records:
        for visit in record.visits:
            if visit.side == side and visit.error:
                errors.setdefault(visit.item, []).append(f"round {record.round}: {visit.error}")
    return errors


def parse_round_samples(data: Any, where: str) -> RoundSamples:
    """Validate ``{item: [[ms], ...]}``; a flat ``{item: [ms, ...]}`` (one round, older runs) is accepted.

    Every sample must be a finite number of milliseconds ≥ 0; an error names the item and the round.
    """
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected an object mapping items to lists of rounds of milliseconds")
    out: RoundSamples = {}
    for item, value in data.items():
        rounds = expect_list(value, f"{where}: {item!r}")
        if rounds and all(isinstance(x, list) for x in rounds):
            out[item] = [expect_ms_list(r, f"{where}: {item!r} round {i + 1}") for i, r in enumerate(rounds)]
        else:
            out[item] = [expect_ms_list(rounds, f"{where}: {item!r}")]
    return out


def read_round_samples(path: Path) -> RoundSamples:
    path = Path(path)
    return parse_round_samples(read_json(path, "per-round samples {item: [[ms of round 1], ...]}"), str(path))
