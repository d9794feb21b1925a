"""Fit Markdown text under a character limit without breaking it, and say what was cut.

The report shrinks its own tables before this is needed (``analysis.report.markdown.Caps``); what arrives here is
text that is over a limit anyway: a long trace diff, a pathological environment, or a finished report.md that
becomes a PR comment with a marker and a footer around it. Cutting at an arbitrary character would leave half a
table row, an open code fence or an unclosed ``<details>`` that swallows everything after it on GitHub, so the text
is cut at a line boundary and what was open is closed. ``fit_markdown`` first drops whole collapsed blocks (the
full tables, least important, last first) and only then cuts the tail.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_DETAILS_OPEN = re.compile(r"<details\b", re.IGNORECASE)
_DETAILS_CLOSE = re.compile(r"</details\s*>", re.IGNORECASE)
_SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.IGNORECASE | re.DOTALL)
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)


@dataclass(frozen=True)
class DetailsBlock:
    """A top-level ``<details>`` block: lines ``start`` to ``end`` inclusive, and its summary text."""

    start: int
    end: int
    summary: str


def cut_markdown(text: str, limit: int, note: str) -> str:
    """``text`` if it fits in ``limit`` characters, else its longest head of whole lines that fits with ``note``
    after it; a code fence or ``<details>`` block left open by the cut is closed before the note."""
    if len(text) <= limit:
        return text
    tail = "\n\n" + note.strip() + "\n"
    return _head_that_fits(text, limit - len(tail)) + tail


def fit_markdown(text: str, limit: int, full_text_at: str) -> str:
    """``text`` fitted under ``limit`` characters: drop ``<details>`` blocks from the last one up, then cut the tail
    at a line boundary; a closing note names what was cut and ``full_text_at`` (where the whole text is)."""
    if len(text) <= limit:
        return text
    lines = text.split("\n")
    dropped: list[str] = []
    for block in reversed(details_blocks(lines)):
        del lines[block.start: block.end + 1]
        dropped.insert(0, block.summary)
        kept = _squeeze_blank_lines("\n".join(lines)).rstrip()
        tail = "\n\n" + _cut_note(dropped, None, full_text_at) + "\n"
        if len(kept) + len(tail) <= limit:
            return kept + tail
    kept = _squeeze_blank_lines("\n".join(lines))
    # The note names the section the cut falls in, known only after the cut: room is kept for the longest one.
    longest = max((_cut_note(dropped, h, full_text_at) for h in _headings(kept)), key=len,
                  default=_cut_note(dropped, None, full_text_at))
    head = _head_that_fits(kept, limit - len(longest) - 3)
    headings = _headings(head)
    return head + "\n\n" + _cut_note(dropped, headings[-1] if headings else None, full_text_at) + "\n"


def details_blocks(lines: list[str]) -> list[DetailsBlock]:
    """The top-level ``<details>`` blocks of ``lines`` (nested ones belong to their parent), in order; an opening
    without its closing line is not a block (it cannot be dropped safely). Lines in code fences do not count."""
    blocks: list[DetailsBlock] = []
    depth, start = 0, 0
    fence: str | None = None
    for i, line in enumerate(lines):
        fence, in_code = _fence_state(fence, line)
        if in_code:
            continue
        opens, closes = len(_DETAILS_OPEN.findall(line)), len(_DETAILS_CLOSE.findall(line))
        if opens and depth == 0:
            start = i
        if depth == 0 and not opens:
            continue  # a stray closing tag outside any block
        depth += opens - closes
        if depth <= 0:
            found = _SUMMARY.search("\n".join(lines[start: i + 1]))
            blocks.append(DetailsBlock(start, i, _plain(found.group(1)) if found else "details"))
            depth = 0
    return blocks


def outside_code(text: str, rewrite: Callable[[str], str]) -> str:
    """``text`` with ``rewrite`` applied to its prose only: fenced code blocks are left as they are, and inline code
    spans are hidden from ``rewrite`` (kernel source such as ``kernel[grid](args)`` is not a Markdown link)."""
    out: list[str] = []
    prose: list[str] = []
    fence: str | None = None

    def flush() -> None:
        if prose:
            out.append(_rewrite_masked("\n".join(prose), rewrite))
            prose.clear()

    for line in text.split("\n"):
        fence, in_code = _fence_state(fence, line)
        if in_code:
            flush()
            out.append(line)
        else:
            prose.append(line)
    flush()
    return "\n".join(out)


def _rewrite_masked(prose: str, rewrite: Callable[[str], str]) -> str:
    spans: list[str] = []

    def hide(match: re.Match[str]) -> str:
        spans.append(match.group(0))
        return f"\ue000{len(spans) - 1}\ue001"

    masked = _CODE_SPAN.sub(hide, prose)
    return re.sub("\ue000(\\d+)\ue001", lambda m: spans[int(m.group(1))], rewrite(masked))


def _head_that_fits(text: str, room: int) -> str:
    """The longest head of whole lines of ``text`` that, with what closes its open blocks, fits in ``room``."""
    end = len(text)
    while end > 0:
        end = text.rfind("\n", 0, min(end, max(room, 0) + 1))
        if end <= 0:
            break
        head = text[:end].rstrip()
        closed = head + _closers(head)
        if len(closed) <= room:
            return closed
        end = len(head)
    return ""


def _closers(head: str) -> str:
    """What closes the code fence and the ``<details>`` blocks that ``head`` leaves open."""
    fence: str | None = None
    depth = 0
    for line in head.split("\n"):
        fence, in_code = _fence_state(fence, line)
        if not in_code:
            depth = max(0, depth + len(_DETAILS_OPEN.findall(line)) - len(_DETAILS_CLOSE.findall(line)))
    closing = "" if fence is None else "\n" + fence
    return closing + "\n\n</details>" * depth


def _fence_state(fence: str | None, line: str) -> tuple[str | None, bool]:
    """The open code fence after ``line`` (None: none), and whether ``line`` is code or a fence line."""
    match = _FENCE.match(line)
    if match is None:
        return fence, fence is not None
    marker = match.group(1)
    if fence is None:
        return marker, True
    if marker[0] == fence[0] and len(marker) >= len(fence) and not line.strip()[len(marker):].strip():
        return None, True
    return fence, True


def _cut_note(dropped: list[str], cut_in: str | None, full_text_at: str) -> str:
    parts = []
    if dropped:
        parts.append("the collapsed " + ", ".join(f"“{s}”" for s in dropped))
    if cut_in is not None:
        parts.append(f"the text from part-way through “{cut_in}” on")
    cut = " and ".join(parts) if parts else "the end of the text"
    return f"_Cut to fit the size limit: {cut}. The whole text is in {full_text_at}._"


def _headings(text: str) -> list[str]:
    return [_plain(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.MULTILINE)]


def _plain(markdown: str) -> str:
    """A summary or heading as plain words for the note (no tags, no emphasis, one line)."""
    text = re.sub(r"<[^>]+>", "", markdown)
    return re.sub(r"\s+", " ", text.replace("**", "").replace("`", "")).strip()


def _squeeze_blank_lines(text: str) -> str:
    return re.sub(r"\n{3,}", "\n\n", text)
