"""The PR comment made from a run's report.md: a hidden marker, the report with no local links, a footer, fitted.

A comment cannot show the report's PNGs or link its CSVs: those are files next to report.md. Each local image
becomes a line naming the plot (or a link to it, when ``publish`` uploaded it somewhere), each local link names
the file in the report archive (or links the upload). The first line is an HTML comment, invisible on GitHub,
by which a later ``invoke publish`` finds this comment and updates it instead of adding another; an HTML comment
anywhere else (which would hide the rest of the comment, or pose as the marker) is shown as text. GitHub refuses a
comment over ``GITHUB_COMMENT_LIMIT`` characters; the report part is fitted by ``analysis.markdown_fit``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from analysis.markdown_fit import fit_markdown, outside_code
from foundation.errors import UserError

GITHUB_COMMENT_LIMIT = 65_536
_KEY = re.compile(r"[A-Za-z0-9._-]{1,64}")
# [text](target) and ![alt](target), the target without spaces, optionally followed by a "title".
_LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"\n]*\")?\)")
_ABSOLUTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#|/)", re.IGNORECASE)


def comment_marker(key: str) -> str:
    """The hidden first line of prbench's comment for ``key`` (``--key``: one comment per key on a PR)."""
    if not _KEY.fullmatch(key):
        raise UserError(f"--key {key!r}: expected 1-64 letters, digits, '.', '_' or '-'")
    return f"<!-- prbench-report key={key} -->"


@dataclass(frozen=True)
class CommentSources:
    """Where the comment's reader finds what the comment cannot hold."""

    run_id: str
    archive_name: str
    archive_url: str | None = None  # the uploaded archive, when ``publish`` attached it somewhere
    uploaded: Mapping[str, str] = field(default_factory=dict)  # report file name → its uploaded URL


def pr_comment(report_md: str, marker: str, sources: CommentSources, limit: int = GITHUB_COMMENT_LIMIT) -> str:
    """The comment body: ``marker``, the report without local links, fitted under ``limit``, then the footer."""
    footer = "\n\n---\n" + _footer(sources) + "\n"
    report = outside_code(report_md.strip(), lambda prose: _LINK.sub(lambda m: _relink(m, sources),
                                                                      prose.replace("<!--", "&lt;!--")))
    room = limit - len(marker) - 1 - len(footer)
    fitted = fit_markdown(report, room, _archive_ref(sources)).rstrip()
    return f"{marker}\n{fitted}{footer}"


def local_targets(report_md: str) -> list[str]:
    """The local files report.md embeds or links (plots, CSVs), in order, each once."""
    found: list[str] = []

    def collect(prose: str) -> str:
        found.extend(m.group("target") for m in _LINK.finditer(prose) if not _ABSOLUTE.match(m.group("target")))
        return prose

    outside_code(report_md, collect)
    return list(dict.fromkeys(found))


def _relink(match: re.Match[str], sources: CommentSources) -> str:
    target, text = match.group("target"), match.group("text")
    if _ABSOLUTE.match(target):
        return match.group(0)
    url = sources.uploaded.get(target)
    if match.group("bang"):
        # Release downloads are served as application/octet-stream, which GitHub does not show inline: a link.
        label = f"plot: {text or target}"
        return f"[{label}]({url})" if url else f"_(plot “{text or target}”: `{target}` in {_archive_ref(sources)})_"
    return f"[{text}]({url})" if url else f"{text} (`{target}` in {_archive_ref(sources)})"


def _archive_ref(sources: CommentSources) -> str:
    if sources.archive_url:
        return f"[{sources.archive_name}]({sources.archive_url})"
    return f"`{sources.archive_name}` in run `{sources.run_id}`"


def _footer(sources: CommentSources) -> str:
    return (f"<sub>Posted by prbench `invoke publish`; later runs update this comment. The full report (CSVs, "
            f"report.xlsx, plots): {_archive_ref(sources)}.</sub>")
