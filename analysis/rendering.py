"""Turning tables into files, once for every report: cell formats, the Markdown table writer, the Jinja
environment of ``analysis/templates``, CSV and xlsx.

Users: the comparison report (``analysis.report.render``), the trace renderers (``analysis.traces.reports.perf_report``,
``analysis.traces.reports.trace_diff``) and ``invoke compare-kernels``. Every file goes through
``foundation.atomic_io``, so an interrupted report never leaves a partial file.
"""

from __future__ import annotations

import functools
import html
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from foundation import atomic_io

if TYPE_CHECKING:  # jinja2 is imported when a template is first rendered
    import jinja2

TEMPLATE_DIR = Path(__file__).parent / "templates"
EXCEL_SHEET_CHARS = 31

# --- cell formats ----------------------------------------------------------------------------------------


def finite(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and math.isfinite(float(x))


def fmt_x(x: Any) -> str:
    return f"{float(x):.3f}×" if finite(x) else "–"


def _three_digits(value: float) -> str:
    """A magnitude below 1000 with three significant digits and no exponent (0.05 → 0.0500, 123.4 → 123)."""
    value = float(f"{value:.3g}")  # round first: 0.9996 is 1.00, not 1.000
    digits = 2 - math.floor(math.log10(abs(value))) if value else 2
    return f"{value:.{max(0, digits)}f}"


_TIME_UNITS = (("s", 1e3), ("ms", 1.0), ("µs", 1e-3), ("ns", 1e-6))


def fmt_time(ms: Any) -> str:
    """A time given in ms in the unit that shows three significant digits: ``35.2 µs``, ``2.69 ms``, ``8.61 s``."""
    if not finite(ms):
        return "–"
    x = float(f"{float(ms):.3g}")
    if x == 0:
        return "0"
    unit, scale = next(((u, f) for u, f in _TIME_UNITS if abs(x) >= f), _TIME_UNITS[-1])
    return f"{_three_digits(x / scale)} {unit}"


def fmt_gb(x: Any) -> str:
    """A size given in GB (10⁹ bytes, the suite's unit) in the unit that reads best: kB, MB or GB."""
    if not finite(x):
        return "–"
    size = float(x) * 1e9
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(size) >= scale:
            value = size / scale
            return f"{value:.3g} {unit}" if abs(value) < 100 else f"{value:.0f} {unit}"
    return f"{size:.0f} B"


def fmt_delta_time(ms: Any) -> str:
    """A signed change of a time given in ms (PR − base: + is slower), in the unit `fmt_time` picks."""
    return ("+" if float(ms) >= 0 else "−") + fmt_time(abs(float(ms))) if finite(ms) else "–"


def fmt_pct(x: Any) -> str:
    return f"{float(x):+.1f} %" if finite(x) else "–"


def fmt_share(x: Any) -> str:
    return f"{100 * float(x):.1f} %" if finite(x) else "–"


P_FLOOR = 1e-4  # p- and q-values below it are shown as "< 0.0001": more digits claim a precision no test has


def fmt_p(x: Any) -> str:
    if not finite(x):
        return "–"
    return f"< {P_FLOOR:g}" if float(x) < P_FLOOR else f"{float(x):.2g}" if float(x) < 0.001 else f"{float(x):.3f}"


def fmt_text(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


def fmt_num(x: Any) -> str:
    if not finite(x):
        return fmt_text(x)
    return f"{int(x)}" if float(x).is_integer() else f"{float(x):.4g}"


def ci_text(low: Any, high: Any) -> str:
    return f"{fmt_x(low)}–{fmt_x(high)}" if finite(low) and finite(high) else "–"


# --- untrusted text in Markdown and HTML -----------------------------------------------------------------
# Kernel, model and graph names, environment values and trace symbols come from files a user may have been
# handed. Every one that reaches report.md, a trace report or the PR comment goes through one of these, so none
# becomes markup: no HTML tag or comment (``<!--`` would hide the rest of a GitHub comment, ``</details>`` close
# a block), no link, image or emphasis.

_HTML_CHARS = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
# The punctuation that opens inline Markdown: escapes, code spans, emphasis, links and images, strikethrough; and
# what GitHub turns into a link by itself (``http://``, ``www.``), escaped where it would. (An e-mail address
# still becomes a mailto: link, whatever is escaped; it opens nothing by itself.)
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*\[\]~]|:(?=//)|(?<=\bwww)\.)", re.IGNORECASE)
_BACKTICKS = re.compile(r"`+")


def _one_line(value: Any) -> str:
    return " ".join(("" if value is None else str(value)).splitlines())


def md_text(value: Any) -> str:
    """Text shown as it is in Markdown prose or a table cell: HTML's ``& < >`` as entities, Markdown's
    punctuation backslash-escaped, line breaks as spaces."""
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", _one_line(value)).translate(_HTML_CHARS)


def md_code(value: Any) -> str:
    """A name as a Markdown code span, where nothing is markup: fenced by one more backtick than the longest run
    inside, padded with a space when it starts or ends with a backtick or a space (CommonMark strips one each)."""
    text = _one_line(value)
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def html_text(value: Any) -> str:
    """Text inside an HTML element of the report (``<summary>``, ``<code>``): ``& < >`` as entities."""
    return html.escape(_one_line(value), quote=False)


def code_fence(text: str, info: str = "") -> tuple[str, str]:
    """The opening and closing fence for a code block holding ``text``: backticks, one more than any run in it
    (at least three), so no line of the text can close the block early."""
    fence = "`" * max(3, max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    return fence + info, fence


# --- Markdown tables -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One column of a Markdown table: which field, its header, how its cells read."""

    key: Any
    header: str
    fmt: Callable[[Any], str] = fmt_text
    width: int = 0  # 0: cells are never shortened
    # Kernel names differ at both ends (prefix and hash suffix), so the report keeps both; the trace tables
    # shorten C++ signatures at the end, where only argument lists are lost.
    cut: str = "middle"
    rule: str = "---"  # the separator cell: "---:" aligns the column right
    code: bool = False  # a name (kernel, model, graph): shown as a code span, see `md_code`
    # Markdown prbench writes itself (a fixed word in bold), kept as it is; never for a value read from a file.
    markup: bool = False


@dataclass(frozen=True)
class TableStyle:
    """The two layouts in use: the comparison report's, and the trace reports' (which pads its rule line)."""

    empty: str = "_none_\n"
    padded_rule: bool = False
    trailing_newline: bool = True


REPORT_STYLE = TableStyle()
TRACE_STYLE = TableStyle(empty="_(none)_", padded_rule=True, trailing_newline=False)


def _shorten(text: str, width: int, cut: str) -> str:
    if not width or len(text) <= width:
        return text
    if cut == "end":
        return text[: width - 1] + "…"
    half = (width - 1) // 2
    return text[:half] + "…" + text[-(width - 1 - half):]


def cell(text: Any, width: int = 0, cut: str = "middle", code: bool = False, markup: bool = False) -> str:
    """A value as one Markdown table cell that shows exactly its text (`md_text`, or `md_code` for a name;
    ``markup``: prbench's own Markdown, kept), optionally shortened: newlines become spaces and pipes are escaped,
    so it never splits the row."""
    text = "" if text is None else str(text)
    # Shortened before it is escaped: a cut inside "&lt;" or between "\\" and "|" would leave markup behind.
    short = _shorten(text.replace("\r", " ").replace("\n", " "), width, cut)
    shown = short if markup else md_code(short) if code and short else md_text(short)
    return shown.replace("|", "\\|")


def markdown_table(frame: pd.DataFrame | None, columns: list[Column], max_rows: int | None = None,
                   rest_in: str | None = None, style: TableStyle = REPORT_STYLE) -> str:
    """A GitHub table of the first ``max_rows`` rows (all when None), then a line naming the file that has
    the rest (``rest_in``)."""
    if frame is None or frame.empty:
        return style.empty
    rule = (("| " + " | ".join(c.rule for c in columns) + " |") if style.padded_rule
            else ("|" + "|".join(c.rule for c in columns) + "|"))
    lines = ["| " + " | ".join(c.header for c in columns) + " |", rule]
    shown = frame if max_rows is None else frame.head(max_rows)
    for row in shown.to_dict("records"):
        cells = (cell(c.fmt(row.get(c.key)), c.width, c.cut, c.code, c.markup) for c in columns)
        lines.append("| " + " | ".join(cells) + " |")
    rest = len(frame) - len(shown)
    if rest > 0:
        where = f" in {rest_in}" if rest_in else ""
        lines.append(f"\n_{rest} more rows{where}_")
    return "\n".join(lines) + ("\n" if style.trailing_newline else "")


def _plain_cell(floatfmt: str) -> Callable[[Any], str]:
    def fmt(value: Any) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return ""
        return format(value, floatfmt) if isinstance(value, float) else str(value)

    return fmt


def frame_table(frame: pd.DataFrame | None, floatfmt: str = ".3f", max_name: int = 90) -> str:
    """Every column of ``frame`` as it is (the trace reports): floats with ``floatfmt``, numbers aligned
    right, long names (C++ kernel signatures) shortened to ``max_name`` characters."""
    if frame is None or frame.empty:
        return TRACE_STYLE.empty
    fmt = _plain_cell(floatfmt)
    columns = [Column(c, str(c), fmt, max_name, "end", "---:" if pd.api.types.is_numeric_dtype(frame[c]) else "---")
               for c in frame.columns]
    return markdown_table(frame, columns, style=TRACE_STYLE)


# --- templates -------------------------------------------------------------------------------------------


@functools.cache
def jinja_env() -> jinja2.Environment:
    """The templates of ``analysis/templates``: Markdown, so no autoescaping; a missing name is an error."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters.update(x=fmt_x, time=fmt_time, pct=fmt_pct, share=fmt_share, num=fmt_num, md=frame_table, gb=fmt_gb,
                       dtime=fmt_delta_time, code=md_code, text=md_text)
    return env


def render_template(name: str, **context: Any) -> str:
    return jinja_env().get_template(name).render(**context)


# --- CSV and xlsx ----------------------------------------------------------------------------------------


def write_csv(path: Path, frame: pd.DataFrame) -> Path:
    with atomic_io.atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
    return path


def write_csv_dir(directory: Path, sheets: Mapping[str, pd.DataFrame]) -> Path:
    """One ``<sheet>.csv`` per table: the CSV twin of an xlsx."""
    for name, frame in sheets.items():
        write_csv(directory / f"{name}.csv", frame)
    return directory


def sheet_name(name: str, used: set[str]) -> str:
    """Excel sheet names: ≤ 31 characters, none of []:*?/\\, unique (Excel compares them case-blind)."""
    clean = "".join("_" if ch in "[]:*?/\\" else ch for ch in name)[:EXCEL_SHEET_CHARS] or "Sheet"
    candidate, i = clean, 2
    while candidate.lower() in used:
        suffix = f" ({i})"
        candidate, i = clean[: EXCEL_SHEET_CHARS - len(suffix)] + suffix, i + 1
    used.add(candidate.lower())
    return candidate


def _xlsx_value(x: Any) -> Any:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    if isinstance(x, np.generic):
        x = x.item()
        return None if isinstance(x, float) and not math.isfinite(x) else x
    return x if isinstance(x, (int, float, str, bool)) else str(x)


# A cell text starting with one of these is a formula to a spreadsheet (OWASP's list for CSV injection; tab and
# carriage return too, which some tools strip before they look).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def write_xlsx(path: Path, sheets: Iterable[tuple[str, pd.DataFrame]] | Mapping[str, pd.DataFrame]) -> Path:
    """One sheet per table, in order; NaN and infinities become empty cells; text is never a formula."""
    from openpyxl import Workbook

    pairs = sheets.items() if isinstance(sheets, Mapping) else sheets
    wb = Workbook(write_only=True)  # streaming: thousands of kernel rows without building a cell tree
    used: set[str] = set()
    for name, frame in pairs:
        ws = wb.create_sheet(sheet_name(name, used))
        ws.append([_xlsx_cell(ws, str(c)) for c in frame.columns])
        for row in frame.itertuples(index=False):
            ws.append([_xlsx_cell(ws, _xlsx_value(v)) for v in row])
    with atomic_io.atomic_path(path) as tmp:
        wb.save(tmp)
    return path


def _xlsx_cell(ws: Any, value: Any) -> Any:
    """A text that would read as a formula (a name like ``=HYPERLINK(...)``) as a text cell marked the way Excel
    marks what a user typed after a quote (``quotePrefix``): shown as it is, never evaluated, also when edited."""
    if not (isinstance(value, str) and value.startswith(FORMULA_START)):
        return value
    from openpyxl.cell import WriteOnlyCell

    text = WriteOnlyCell(ws, value=value)
    text.data_type = "s"  # openpyxl would store "=..." as a formula
    text.quotePrefix = True
    return text
