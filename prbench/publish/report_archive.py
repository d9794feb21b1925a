"""A run's report as one file: ``<run>/report.tar.gz`` with ``report/``, ``lock.json`` and ``manifest.json``.

A PR comment holds only the Markdown; the CSVs, report.xlsx and the plots travel as this archive (``invoke publish``
writes it and, when asked, uploads it as a release asset). The lock and the manifest come along so that whoever
downloads it can rebuild the environments (``invoke rebuild --lock``) and see the settings. Members sit under
``<run-id>/``, owned by no one (uid 0, no user names), with the files' own mtimes, in name order and with a zero
gzip timestamp: the same report gives the same bytes.
"""

from __future__ import annotations

import gzip
import tarfile
from pathlib import Path

from foundation import atomic_io
from foundation.errors import UserError
from foundation.formats.run_layout import COMMENT_MD, LOCK_JSON, MANIFEST, REPORT_DIR, REPORT_MD
from prbench.runs.run_store import Run

ARCHIVE_NAME = "report.tar.gz"
_BESIDE_REPORT = (LOCK_JSON, MANIFEST)


def report_markdown(run: Run) -> str:
    """What the PR comment is made of: the run's comment form (comment.md, under 20,000 characters), or report.md
    of a report rendered before there was one; a run without either is a one-line error saying what to run."""
    comment = run.layout.report / COMMENT_MD
    if comment.is_file():
        return comment.read_text(encoding="utf-8")
    path = run.layout.report / REPORT_MD
    if not path.is_file():
        stale = " (its previous report is in report.stale/, from before the run started recomputing)" \
            if (run.layout.stale_report / REPORT_MD).is_file() else ""
        raise UserError(f"run '{run.run_id}': no {REPORT_DIR}/{REPORT_MD}{stale}; finish the run or render it with "
                        f"`invoke report {run.run_id}`")
    return path.read_text(encoding="utf-8")


def write_report_archive(run: Run) -> Path:
    """Write ``<run>/report.tar.gz`` (replacing an earlier one, atomically) and return its path."""
    members = _members(run)
    target = run.path(ARCHIVE_NAME)
    with atomic_io.atomic_path(target) as tmp, tmp.open("wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in members:
            tar.add(path, arcname=f"{run.run_id}/{run.relative(path)}", recursive=False, filter=_anonymous)
    return target


def _members(run: Run) -> list[Path]:
    report = run.layout.report
    files = sorted(p for p in report.rglob("*") if p.is_file() and not p.name.startswith("."))
    return [report, *files, *(run.path(name) for name in _BESIDE_REPORT if run.path(name).is_file())]


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
