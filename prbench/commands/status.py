"""``invoke status``: a table of a run's stages from its manifest, and whether a process is writing the run now."""

from __future__ import annotations

import datetime as dt
import re

from rich.console import Console
from rich.table import Table

from prbench.commands.cli import task, user_facing
from prbench.commands.flags import runs_dir_from
from prbench.runs.run_lock import ended_note, holder_of
from prbench.runs.run_store import Run, StageRecord, StageStatus

STOPPED = "stopped"  # recorded as running, but no process is writing the run any more
_STYLE = {
    StageStatus.DONE: "green",
    StageStatus.RUNNING: "yellow",
    StageStatus.FAILED: "red",
    StageStatus.INTERRUPTED: "magenta",
    StageStatus.STALE: "dim",
    STOPPED: "magenta",
}
_STOPPED_NOTE = ("no process is writing this run: the one that ran this stage ended without recording it "
                 "(killed?); the same command again resumes it")


def print_status(run: Run, console: Console | None = None) -> None:
    console = console or Console()
    if not run.manifest.stages:
        console.print(f"run {run.run_id}: no stages recorded yet")
        return
    holder = holder_of(run.root)
    ended = None if holder else ended_note(run.root)
    title = f"run {run.run_id} ({run.root})"
    table = Table(title=title + (f", in use by {holder.describe()}" if holder else ""))
    # The stage, its status and its duration stay whole on a narrow terminal; outputs and notes wrap.
    for column in ("stage", "status", "duration"):
        table.add_column(column, no_wrap=True)
    for column in ("outputs", "note"):
        table.add_column(column)
    # The manifest is stored key-sorted; show stages in the order they ran (rounds started together by number).
    for key, rec in sorted(run.manifest.stages.items(), key=lambda item: (item[1].started, _in_number_order(item[0]))):
        status, duration, note = _row(rec, writing=holder is not None, ended=ended)
        table.add_row(key, f"[{_STYLE.get(status, 'white')}]{status}[/]", duration, "\n".join(rec.outputs), note)
    console.print(table)


def _in_number_order(key: str) -> list[tuple[int, str]]:
    """``pair/models-round-2`` before ``pair/models-round-10``."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", key)]


def _row(rec: StageRecord, writing: bool, ended: str | None = None) -> tuple[str, str, str]:
    """(status, duration, note) of one stage: a running stage's time so far, or why it is not running (``ended``:
    what the last writer left in the lock file when it could not record it here)."""
    note = rec.error or ", ".join(f"{k}={v}" for k, v in rec.summary.items())
    if rec.status != StageStatus.RUNNING:
        return rec.status, f"{rec.duration_s:.1f}s", note
    if not writing:
        return STOPPED, f"{rec.duration_s:.1f}s", (f"ended: {ended}; the same command again resumes it" if ended
                                                   else _STOPPED_NOTE)
    try:
        elapsed = (dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(rec.started)).total_seconds()
    except (TypeError, ValueError):
        return rec.status, "", note
    return rec.status, f"{max(elapsed, 0.0):.0f}s so far", note


@task(help={"run": "Run id under the runs directory (default: the most recent run)",
            "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)"})
@user_facing
def status(ctx, run=None, runs_dir=None):
    """Show each stage of a run: status, duration, outputs and errors."""
    from prbench.runs.run_store import RunStore

    store = RunStore(runs_dir_from(ctx, runs_dir))
    print_status(store.open(run) if run else store.latest())
