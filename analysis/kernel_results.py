"""The kernel timing table: one row per organized kernel with its sample statistics, and its files.

``kernels.csv`` (index columns + ``n,median_ms,mean_ms,std_ms,min_ms,gb,gb_per_s,status,error``),
``kernel_samples.json`` ({organized path: [ms, ...]}) and the seed workflow's ``kernels_seed.csv``. The kernel
runner writes one table per run; ``merge_rounds`` pools several runs of the same organized directory (the
rounds that ``invoke compare`` interleaves between base and PR) into one.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from analysis.atomic_io import atomic_path, write_json
from analysis.errors import UserError
from analysis.kernel_identity import strip_paas_suffix
from analysis.kernel_index import INDEX_COLUMNS, IndexRow, read_index

TIMING_COLUMNS = ("n", "median_ms", "mean_ms", "std_ms", "min_ms", "gb", "gb_per_s", "status", "error")
SEED_COLUMNS = ("relative_dir", "filename", "kernel_name", "ms_per_call", "gb_per_s")


@dataclass
class KernelRow:
    index: IndexRow
    n: int
    median_ms: float | None
    mean_ms: float | None
    std_ms: float | None
    min_ms: float | None
    gb: float | None
    gb_per_s: float | None
    status: str
    error: str

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self.index)
        values.update({k: _fmt(getattr(self, k)) for k in TIMING_COLUMNS})
        return values


def _fmt(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def summarize_samples(row: IndexRow, samples: list[float], error: str, gb: float | None) -> KernelRow:
    if error or not samples:
        return KernelRow(row, len(samples), None, None, None, None, gb, None, "fail", error or "no samples recorded")
    median = statistics.median(samples)
    std = statistics.stdev(samples) if len(samples) > 1 else 0.0
    gb_per_s = gb / (median / 1e3) if gb and median > 0 else None
    return KernelRow(row, len(samples), median, statistics.fmean(samples), std, min(samples), gb, gb_per_s, "ok", "")


def seed_row(row: KernelRow) -> dict[str, Any]:
    """The seed's row: its key is name (hash stripped, ordinal kept) + the ``_x<x>_r<r0>`` of legacy_key."""
    tail = re.search(r"_x\d+_r\d+$", row.index.legacy_key)
    key = strip_paas_suffix(row.index.kernel_name) + (tail.group(0) if tail else "_x0_r0")
    return {
        "relative_dir": str(Path(row.index.path).parent.as_posix()),
        "filename": row.index.path,
        "kernel_name": key,
        "ms_per_call": _fmt(row.median_ms),
        "gb_per_s": _fmt(row.gb_per_s),
    }


def write_results(out: Path, rows: list[KernelRow], samples: dict[str, list[float]]) -> None:
    _write_csv(out / "kernels.csv", [*INDEX_COLUMNS, *TIMING_COLUMNS], (r.as_dict() for r in rows))
    _write_csv(out / "kernels_seed.csv", list(SEED_COLUMNS), (seed_row(r) for r in rows))
    write_json(out / "kernel_samples.json", samples)


def _write_csv(path: Path, columns: list[str], rows: Iterable[dict[str, Any]]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


@dataclass
class _Round:
    rows: list[IndexRow]
    timing: dict[str, dict[str, str]]  # path → the round's timing columns
    samples: dict[str, list[float]]


def _read_round(directory: Path) -> _Round:
    table = directory / "kernels.csv"
    try:
        rows = read_index(table)
        with open(table, newline="", encoding="utf-8") as handle:
            timing = {raw["path"]: raw for raw in csv.DictReader(handle)}
        samples = json.loads((directory / "kernel_samples.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{directory}: not a kernel-runner output ({exc})") from None
    return _Round(rows, timing, samples)


def merge_rounds(round_dirs: list[Path], out: Path) -> list[KernelRow]:
    """Pool the samples of several runs over the same organized kernels into one table under ``out``.

    Each round ran in fresh worker processes at another time, so the pooled spread includes the
    between-process and between-moment variation that a single run's samples hide.
    """
    if not round_dirs:
        raise UserError("no kernel rounds to merge")
    rounds = [_read_round(d) for d in round_dirs]
    results: list[KernelRow] = []
    pooled: dict[str, list[float]] = {}
    for row in rounds[0].rows:
        samples = [x for r in rounds for x in r.samples.get(row.path, [])]
        errors = sorted({r.timing.get(row.path, {}).get("error", "") for r in rounds} - {""})
        gb_text = rounds[0].timing.get(row.path, {}).get("gb", "")
        gb = float(gb_text) if gb_text else None
        result = summarize_samples(row, samples, "" if samples else "; ".join(errors), gb)
        results.append(result)
        if result.status == "ok":
            pooled[row.path] = samples
    write_results(out, results, pooled)
    return results
