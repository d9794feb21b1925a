"""Is this Markdown well formed as GitHub shows it? A text-level check with GitHub's own renderer (cmark-gfm).

``gfm_problems`` renders the text with cmarkgfm (GitHub's fork of cmark, with the GFM extensions, raw HTML kept as
GitHub keeps ``<details>``) and returns one line per problem a reader would see:

- a table row whose cell count differs from its header's (GitHub pads or drops cells silently: an unescaped ``|``
  in a cell, or a line of text glued under a table, shifts a row);
- a table in the source that did not render as ``<table>`` (a missing blank line, a table swallowed by an HTML
  block), or table syntax left as raw text;
- ``<details>`` blocks that are not balanced, or have no ``<summary>`` first;
- a link or image whose target is neither absolute (``https://``, ``#anchor``) nor a file that exists in
  ``files_in`` (the report directory).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import cmarkgfm
from cmarkgfm.cmark import Options

_DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


def render_gfm(markdown: str) -> str:
    """The HTML GitHub's renderer makes of ``markdown`` (before GitHub's sanitizer, which keeps these tags)."""
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def gfm_problems(markdown: str, files_in: Path | None = None) -> list[str]:
    html = render_gfm(markdown)
    tables = source_tables(markdown)
    problems = [problem for table in tables for problem in table_row_problems(table)]
    rendered = html.count("<table>")
    if rendered != len(tables):
        problems.append(f"{len(tables)} table(s) in the source, {rendered} rendered as <table>")
    shape = _HtmlShape()
    shape.feed(html)
    shape.close()
    problems += shape.problems
    problems += [f"link target {target!r} is neither absolute nor a file of the report"
                 for target in shape.targets if not _resolves(target, files_in)]
    return problems


def source_tables(markdown: str) -> list[list[tuple[int, str]]]:
    """Each GFM table of the source (outside code fences): its lines with their 1-based numbers, header first.
    A table runs from its header to the first blank line: any line in between is a row to GitHub."""
    lines = markdown.split("\n")
    tables: list[list[tuple[int, str]]] = []
    fence: str | None = None
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match:
            marker = match.group(1)
            fence = marker if fence is None else (None if marker[0] == fence[0] else fence)
        elif fence is None and "|" in lines[i] and i + 1 < len(lines) and _DELIMITER_ROW.match(lines[i + 1]) \
                and "-" in lines[i + 1]:
            end = i + 2
            while end < len(lines) and lines[end].strip() and not _breaks_table(lines[end]):
                end += 1
            tables.append([(n + 1, lines[n]) for n in range(i, end) if n != i + 1])
            i = end
            continue
        i += 1
    return tables


def table_row_problems(table: list[tuple[int, str]]) -> list[str]:
    (header_line, header), *rows = table
    width = len(cells(header))
    return [f"line {number}: {len(cells(row))} cell(s) under a {width}-column header (line {header_line}): "
            f"{row[:80]!r}" for number, row in rows if len(cells(row)) != width]


def cells(row: str) -> list[str]:
    """A table row's cells as GFM splits them: on every ``|`` not escaped by a backslash (code spans too)."""
    text = row.strip()
    text = text[1:] if text.startswith("|") else text
    text = text[:-1] if text.endswith("|") and not text.endswith("\\|") else text
    return re.split(r"(?<!\\)\|", text)


def _breaks_table(line: str) -> bool:
    """A line that starts another block (and so ends the table) instead of being one more row."""
    stripped = line.lstrip()
    return bool(re.match(r"(#{1,6}\s|>|```|~~~|<(details|/details|summary|div|table)\b)", stripped))


def _resolves(target: str, files_in: Path | None) -> bool:
    parts = urlsplit(target)
    if parts.scheme in ("http", "https", "mailto") or target.startswith("#"):
        return True
    if parts.scheme or parts.netloc or files_in is None or target.startswith("/"):
        return False
    path = (files_in / unquote(parts.path)).resolve()
    return path.is_relative_to(files_in.resolve()) and path.is_file()


class _HtmlShape(HTMLParser):
    """Walks the rendered HTML: details/summary nesting, link targets, table syntax left as text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.targets: list[str] = []
        self._open_details: list[bool] = []  # per open <details>: has its <summary> been seen
        self._expect_summary = False
        self._in_code = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "details":
            self._open_details.append(False)
            self._expect_summary = True
            return
        if tag == "summary":
            if not self._open_details or not self._expect_summary:
                self.problems.append("a <summary> that is not the first thing in a <details>")
            else:
                self._open_details[-1] = True
        elif self._expect_summary and tag == "p":
            return  # a paragraph wrapper: what it holds decides
        elif self._expect_summary:
            self.problems.append(f"a <details> whose first element is <{tag}>, not <summary>")
        self._expect_summary = False
        if tag in ("pre", "code"):
            self._in_code += 1
        if tag == "a" and values.get("href") is not None:
            self.targets.append(str(values["href"]))
        if tag == "img" and values.get("src") is not None:
            self.targets.append(str(values["src"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "details":
            if not self._open_details:
                self.problems.append("a </details> with no open <details>")
            elif not self._open_details.pop():
                self.problems.append("a <details> without a <summary>")
        if tag in ("pre", "code"):
            self._in_code = max(0, self._in_code - 1)

    def handle_data(self, data: str) -> None:
        if self._expect_summary and data.strip():
            self.problems.append(f"a <details> that starts with text, not <summary>: {data.strip()[:60]!r}")
            self._expect_summary = False
        if not self._in_code and re.search(r"\|\s*:?-{3,}:?\s*\|", data):
            self.problems.append(f"table syntax shown as text (not rendered): {data.strip()[:80]!r}")

    def close(self) -> None:
        super().close()
        if self._open_details:
            self.problems.append(f"{len(self._open_details)} <details> never closed")
