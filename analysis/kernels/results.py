"""The kernel timing table: one row per organized kernel with its sample statistics, and its files.

``kernels.csv`` (index columns + ``n,median_ms,mean_ms,std_ms,min_ms,gb,gb_per_s,status,error``),
``kernel_samples.json`` in the round format ({organized path: [[ms of round 1], [ms of round 2], ...]}) and the
seed workflow's ``kernels_seed.csv``. ``invoke kernels`` writes one round; `results_from_rounds` derives a side's
table from the paired rounds of ``invoke compare`` (``foundation.formats.paired_rounds``).

A round is one replicate (fresh worker processes), so ``median_ms`` is the median of the round medians; ``n``,
``mean_ms``, ``std_ms`` and ``min_ms`` are over all samples.
"""

from __future__ import annotations

import csv
import re
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from analysis.kernels.identity import kernel_num_gb, strip_paas_suffix
from foundation.atomic_io import atomic_path, write_json
from foundation.errors import UserError
from foundation.formats.kernel_index import INDEX_COLUMNS, IndexRow, read_index
from foundation.formats.paired_rounds import RoundRecord, RoundSamples, side_samples, visit_errors
from foundation.formats.run_layout import INDEX_CSV, KERNEL_SAMPLES, KERNELS_CSV, KERNELS_SEED_CSV
from foundation.records import check_regular, expect_object, read_json, reading

# The kernels.csv contract (docs/architecture.md), defined here only: the index columns + the timing columns.
# Its one writer is `write_results`; its one reader is `analysis.kernels.compare.read_kernels_csv` (a frame).
TIMING_COLUMNS = ("n", "median_ms", "mean_ms", "std_ms", "min_ms", "gb", "gb_per_s", "status", "error")
KERNEL_COLUMNS = INDEX_COLUMNS + TIMING_COLUMNS
NUMERIC_KERNEL_COLUMNS = ("calls", "n", "median_ms", "mean_ms", "std_ms", "min_ms", "gb", "gb_per_s")
# The seed's CSV (run_triton_new.sh); kernels_seed.csv in a run directory has the same header.
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


def summarize_rounds(row: IndexRow, rounds: list[list[float]], gb: float | None, error: str = "") -> KernelRow:
    """A row from a kernel's samples per round; a kernel without a single sample is a failure row (``error``)."""
    samples = [x for r in rounds for x in r]
    if not samples:
        return KernelRow(row, 0, None, None, None, None, gb, None, "fail", error or "no samples recorded")
    median = statistics.median(statistics.median(r) for r in rounds if r)
    std = statistics.stdev(samples) if len(samples) > 1 else 0.0
    gb_per_s = gb / (median / 1e3) if gb and median > 0 else None
    return KernelRow(row, len(samples), median, statistics.fmean(samples), std, min(samples), gb, gb_per_s, "ok", "")


def kernel_gb(path: Path) -> float | None:
    """GB a kernel moves per call, from its organized file (None when the file or the numbers are missing)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return kernel_num_gb(text)


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


def write_results(out: Path, rows: list[KernelRow], samples: RoundSamples) -> None:
    """The one writer of a side's kernel files (``samples``: only the kernels whose rows are ``ok``)."""
    _write_csv(out / KERNELS_CSV, list(KERNEL_COLUMNS), (r.as_dict() for r in rows))
    _write_csv(out / KERNELS_SEED_CSV, list(SEED_COLUMNS), (seed_row(r) for r in rows))
    write_json(out / KERNEL_SAMPLES, samples)


def merge_result_files(parts: list[Path], out: Path, order: list[str]) -> int:
    """The kernel files of one run under ``out`` from those of its shards (directories written by
    `write_results`, each over some of the index's kernels): rows in the index's order (``order``: organized
    paths), every shard's samples. Returns how many rows. A shard's malformed file is a UserError naming it."""
    rows: dict[str, dict[str, str]] = {}
    seeds: dict[str, dict[str, str]] = {}
    samples: dict[str, Any] = {}
    for part in parts:
        rows.update((r["path"], r) for r in _read_csv(part / KERNELS_CSV, KERNEL_COLUMNS))
        seeds.update((r["filename"], r) for r in _read_csv(part / KERNELS_SEED_CSV, SEED_COLUMNS))
        samples.update(expect_object(read_json(part / KERNEL_SAMPLES, "kernel samples"),
                                     str(part / KERNEL_SAMPLES)))
    missing = [path for path in order if path not in rows]
    if missing:
        raise UserError(f"kernels: no shard has a row for {missing[0]}; run the command again")
    _write_csv(out / KERNELS_CSV, list(KERNEL_COLUMNS), (rows[p] for p in order))
    _write_csv(out / KERNELS_SEED_CSV, list(SEED_COLUMNS), (seeds[p] for p in order if p in seeds))
    write_json(out / KERNEL_SAMPLES, {p: samples[p] for p in order if p in samples})
    return len(order)


def _read_csv(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    what = f"a CSV with the columns {','.join(columns)}"
    with reading(path, what), open(check_regular(path, what), newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != columns:
            raise UserError(f"{path}: expected the columns {','.join(columns)}")
        rows = list(reader)
    for number, row in enumerate(rows, 2):
        if None in row.values() or None in row:  # fewer cells than the header (a file cut mid-row), or more
            raise cut_row(path, number, len([v for v in row.values() if v is not None]), len(columns), what)
    return rows


def cut_row(path: Path, line: int, cells: int, width: int, what: str) -> UserError:
    """The one-line error of a CSV row with another number of cells than its header (a file cut mid-row)."""
    return UserError(f"{path}: line {line}: {cells} cells where the header has {width} (a row cut short?); "
                     f"expected {what}")


def check_row_widths(path: Path, what: str) -> None:
    """Every row of a CSV has as many cells as its header: a reader that fills missing cells (pandas) cannot
    tell a file cut mid-row from empty cells."""
    with reading(path, what), open(check_regular(path, what), newline="", encoding="utf-8") as handle:
        rows = csv.reader(handle)
        width = len(next(rows, []))
        for line, row in enumerate(rows, 2):
            if row and len(row) != width:
                raise cut_row(path, line, len(row), width, what)


def _write_csv(path: Path, columns: list[str], rows: Iterable[dict[str, Any]]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def rows_from_rounds(records: list[RoundRecord], side: str, organized: Path
                     ) -> tuple[list[KernelRow], RoundSamples]:
    """One side's kernel rows from the paired rounds (every index row; failures with their errors) and the
    samples of its ``ok`` rows: what `results_from_rounds` writes, and what an adaptive look compares."""
    rows = read_index(organized / INDEX_CSV)
    per_round = side_samples(records, side, [r.path for r in rows])
    errors = visit_errors(records, side)
    results = [summarize_rounds(r, per_round[r.path], kernel_gb(organized / r.path),
                                "; ".join(errors.get(r.path, [])) or "not timed in any round") for r in rows]
    return results, {r.index.path: per_round[r.index.path] for r in results if r.status == "ok"}


def results_from_rounds(records: list[RoundRecord], side: str, organized: Path, out: Path) -> list[KernelRow]:
    """One side's kernel files under ``out`` from the paired rounds.

    ``kernel_samples.json`` keeps one list per round, empty where the kernel failed that round, so round ``i``
    of base and round ``i`` of PR stay aligned.
    """
    results, samples = rows_from_rounds(records, side, organized)
    write_results(out, results, samples)
    return results
