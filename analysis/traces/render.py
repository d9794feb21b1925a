"""Writing report tables: Markdown (Jinja templates in ``analysis/templates``), xlsx and a directory of CSVs.

All files go through ``analysis.atomic_io`` so an interrupted report never leaves a partial file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from analysis import atomic_io

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
EXCEL_SHEET_CHARS = 31
FORMATS = ("xlsx", "md", "csv")


def _cell(value: Any, floatfmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return format(value, floatfmt)
    # Pipes and newlines would break the Markdown table.
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(df: pd.DataFrame, floatfmt: str = ".3f", max_name: int = 90) -> str:
    """A GitHub Markdown table; long names (C++ kernel signatures) are shortened to ``max_name`` chars."""
    if df is None or df.empty:
        return "_(none)_"
    header = "| " + " | ".join(str(c) for c in df.columns) + " |"
    numeric = [pd.api.types.is_numeric_dtype(df[c]) for c in df.columns]
    sep = "| " + " | ".join("---:" if n else "---" for n in numeric) + " |"
    lines = [header, sep]
    for row in df.itertuples(index=False):
        cells = []
        for value in row:
            text = _cell(value, floatfmt)
            cells.append(text if len(text) <= max_name else text[: max_name - 1] + "…")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def jinja_env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["md"] = markdown_table
    return env


def render_template(name: str, **context: Any) -> str:
    return jinja_env().get_template(name).render(**context)


def sheet_name(name: str, taken: set[str]) -> str:
    """Excel allows at most 31 characters and unique names; shorten and number on collision."""
    base = name[:EXCEL_SHEET_CHARS]
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        suffix = f"~{n}"
        candidate = base[: EXCEL_SHEET_CHARS - len(suffix)] + suffix
    taken.add(candidate)
    return candidate


def write_xlsx(path: Path, sheets: Mapping[str, pd.DataFrame]) -> Path:
    taken: set[str] = set()
    with atomic_io.atomic_path(path) as tmp:
        with pd.ExcelWriter(tmp, engine="openpyxl") as writer:
            for name, df in sheets.items():
                df.to_excel(writer, sheet_name=sheet_name(name, taken), index=False)
    return path


def write_csv_dir(directory: Path, sheets: Mapping[str, pd.DataFrame]) -> Path:
    for name, df in sheets.items():
        atomic_io.write_text(directory / f"{name}.csv", df.to_csv(index=False))
    return directory


def parse_formats(value: str | None, default: str = "xlsx") -> list[str]:
    from analysis.errors import UserError

    formats = [f.strip().lower() for f in (value or default).split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise UserError(f"--format: unknown format {', '.join(unknown) or '(empty)'}; expected a comma list of "
                        f"{', '.join(FORMATS)}")
    return formats
