"""The suite CSV contract (``suite.csv``) and ingestion of upstream ``benchmarks/dynamo`` performance CSVs.

``suite.csv`` = the dynamo harness's performance columns first (so tools that read upstream CSVs read ours),
then our columns (see docs/architecture.md). Rows are kept as ``dict[str, str]`` of already formatted cells,
so rewriting the file after each model reproduces earlier rows byte for byte.

Upstream format facts (benchmarks/dynamo/common.py): floats are written as ``f"{x:.6f}"``; a failing model
gets ``dev,name,0,0.0,0.0`` padded with ``"0"`` to the header's width; per-model runs append to one file and
keep the first header; extra columns (``tag``, ``baseline``, newer dynamo stats) may appear.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from foundation import atomic_io
from foundation.errors import UserError
from foundation.records import check_regular, expect_list, expect_ms_list, expect_object, expect_str, read_json

DYNAMO_COLUMNS: tuple[str, ...] = (
    "dev", "name", "batch_size", "speedup", "abs_latency", "compilation_latency", "compression_ratio",
    "eager_peak_mem", "dynamo_peak_mem", "calls_captured", "unique_graphs", "graph_breaks", "unique_graph_breaks",
)
# Inductor's FX-graph cache lookups during the model's cold compile (the first compiled call): how many of its
# graphs were loaded from the cache rather than compiled, which the compile time depends on.
CACHE_COLUMNS: tuple[str, ...] = ("fxgraph_cache_hits", "fxgraph_cache_misses")
OUR_COLUMNS: tuple[str, ...] = (
    "mode", "dtype", "size", "eager_median_ms", "eager_mean_ms", "eager_std_ms", "compiled_median_ms",
    "compiled_mean_ms", "compiled_std_ms", "first_run_s", *CACHE_COLUMNS, "n", "warmup", "flags", "status", "error",
)
SUITE_COLUMNS: tuple[str, ...] = DYNAMO_COLUMNS + OUR_COLUMNS
# Columns a suite.csv written before they existed lacks: its rows read them as empty cells ("not recorded"), as
# do the upstream harness's rows and a failed model's.
ADDED_COLUMNS: frozenset[str] = frozenset(CACHE_COLUMNS)
REQUIRED_COLUMNS: tuple[str, ...] = tuple(c for c in SUITE_COLUMNS if c not in ADDED_COLUMNS)
# The cells that are words, not numbers (a frame reader keeps them as text).
TEXT_COLUMNS: tuple[str, ...] = ("dev", "name", "mode", "dtype", "size", "flags", "status", "error")

FLOAT_COLUMNS = frozenset({
    "speedup", "abs_latency", "compilation_latency", "compression_ratio", "eager_peak_mem", "dynamo_peak_mem",
    "eager_median_ms", "eager_mean_ms", "eager_std_ms", "compiled_median_ms", "compiled_mean_ms",
    "compiled_std_ms", "first_run_s",
})

STATUS_OK = "ok"
STATUS_FAIL = "fail"
UPSTREAM_FAILURE = "the upstream harness reported a failure (speedup 0); see its log"

Row = dict[str, str]
SuiteSamples = dict[str, dict[str, list[float]]]  # samples.json: {model: {"eager": [ms], "compiled": [ms]}}
GraphModels = dict[str, list[str]]  # graph_models.json: {compiled graph module file stem: [models that ran it]}


T = TypeVar("T")


class DynamoCsvError(UserError, ValueError):
    """A file that is not a dynamo performance CSV; the message names the file and what is missing.

    A UserError (so an invoke task reports it in one line) and a ValueError (what older callers catch)."""


def fmt_float(value: float) -> str:
    """Floats as the dynamo harness writes them."""
    return f"{value:.6f}"


def suite_csv_text(rows: Iterable[Row]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=SUITE_COLUMNS, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({col: row.get(col, "") for col in SUITE_COLUMNS})
    return buf.getvalue()


def write_suite_csv(path: str | os.PathLike[str], rows: Iterable[Row]) -> None:
    """Rewrite the whole file atomically: an interrupt leaves the previous complete version."""
    atomic_io.write_text(path, suite_csv_text(rows))


def read_suite_csv(path: str | os.PathLike[str]) -> list[Row]:
    """The rows of a suite.csv (empty when the file does not exist yet)."""
    path = Path(path)
    if not path.exists():
        return []
    check_regular(path, "a suite.csv")  # a FIFO would never end
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in ("name", "status") if c not in (reader.fieldnames or [])]
            if missing:
                raise DynamoCsvError(f"{path}: not a suite.csv (no '{missing[0]}' column)")
            # A short row's missing cells are None, an overlong row's extras a list under None: both become "".
            return [{col: (cell if isinstance(cell := row.get(col), str) else "") for col in SUITE_COLUMNS}
                    for row in reader]
    except UnicodeDecodeError as exc:
        raise DynamoCsvError(f"{path}: not a suite.csv (not UTF-8 text at byte {exc.start})") from None
    except csv.Error as exc:
        raise DynamoCsvError(f"{path}: not a suite.csv ({exc})") from None


def parse_dynamo_csv(text: str, origin: str = "<csv>") -> list[Row]:
    """Rows of an upstream performance CSV, padded to its header; the last row per (dev, name) wins."""
    lines = list(csv.reader(io.StringIO(text)))
    lines = [line for line in lines if line and any(cell.strip() for cell in line)]
    if not lines:
        return []
    header = [cell.strip() for cell in lines[0]]
    for needed in ("dev", "name", "speedup"):
        if needed not in header:
            raise DynamoCsvError(f"{origin}: not a dynamo performance CSV (no '{needed}' column in the header)")
    rows: dict[tuple[str, str], Row] = {}
    for cells in lines[1:]:
        cells = [c.strip() for c in cells]
        if cells == header:  # a repeated header from an appended per-model run
            continue
        cells = cells + ["0"] * (len(header) - len(cells))  # upstream pads short (failure) rows with "0"
        row = dict(zip(header, cells, strict=False))
        rows[(row["dev"], row["name"])] = row
    return list(rows.values())


def ingest_dynamo_rows(rows: Iterable[Row], mode: str, dtype: str, size: str) -> list[Row]:
    """Upstream rows into our schema: dynamo columns mapped, our timing columns left empty."""
    out: list[Row] = []
    for raw in rows:
        row: Row = dict.fromkeys(SUITE_COLUMNS, "")
        for col in DYNAMO_COLUMNS:
            if col in raw:
                row[col] = _normalize(col, raw[col])
        row.update(mode=mode, dtype=dtype, size=size)
        failed = _as_float(raw.get("speedup", "0")) == 0.0
        row["status"] = STATUS_FAIL if failed else STATUS_OK
        row["error"] = UPSTREAM_FAILURE if failed else ""
        out.append(row)
    return out


def ingest_dynamo_csv(
    csv_path: str | os.PathLike[str], out_csv: str | os.PathLike[str], mode: str, dtype: str, size: str = "full"
) -> list[Row]:
    """Read an upstream performance CSV and write it as our suite.csv (atomically); return the rows."""
    csv_path = Path(csv_path)
    try:
        text = check_regular(csv_path, "the upstream harness's CSV").read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DynamoCsvError(f"{csv_path}: the upstream harness wrote no CSV") from None
    rows = ingest_dynamo_rows(parse_dynamo_csv(text, origin=str(csv_path)), mode=mode, dtype=dtype, size=size)
    write_suite_csv(out_csv, rows)
    return rows


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _normalize(col: str, value: str) -> str:
    """Re-format float cells as ``%.6f`` (upstream failure rows hold ``0.0``); leave the rest as written."""
    if col in FLOAT_COLUMNS:
        number = _as_float(value)
        return fmt_float(number) if number is not None else ""
    return value


# --- the suite's JSON outputs (read on resume, by organize and by the report) -------------------------------


def parse_suite_samples(data: object, where: str) -> SuiteSamples:
    """``{model: {"eager": [ms], "compiled": [ms]}}`` (a failed model has ``{}``); every sample finite ≥ 0."""
    models = expect_object(data, where)
    return {model: {kind: expect_ms_list(values, f"{where}: {model!r}.{kind}")
                    for kind, values in expect_object(entry, f"{where}: {model!r}").items()}
            for model, entry in models.items()}


def parse_graph_models(data: object, where: str) -> GraphModels:
    """``{graph module file stem: [model, ...]}``."""
    out: GraphModels = {}
    for stem, models in expect_object(data, where).items():
        names = expect_list(models, f"{where}: {stem!r}")
        out[stem] = [expect_str(m, f"{where}: {stem!r}[{i}]") for i, m in enumerate(names)]
    return out


def read_suite_samples(path: str | os.PathLike[str]) -> SuiteSamples:
    path = Path(path)
    return parse_suite_samples(read_json(path, 'suite samples {model: {"eager": [ms], "compiled": [ms]}}'),
                               str(path))


def read_graph_models(path: str | os.PathLike[str]) -> GraphModels:
    path = Path(path)
    return parse_graph_models(read_json(path, "{graph module file stem: [models]}"), str(path))


def read_kept(path: Path, reader: Callable[[Path], T]) -> T | None:
    """An earlier attempt's file that a resumed run builds on (None when there is none).

    A damaged one is a UserError that says how to start over, since resuming cannot know what it held.
    """
    if not path.exists():
        return None
    try:
        return reader(path)
    except UserError as exc:
        raise UserError(f"{exc} (left by an earlier attempt; delete it to measure again)") from None
