"""``invoke status``: a table of a run's stages from its manifest."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from prbench.runstore import Run, StageStatus

_STYLE = {
    StageStatus.DONE: "green",
    StageStatus.RUNNING: "yellow",
    StageStatus.FAILED: "red",
    StageStatus.INTERRUPTED: "magenta",
    StageStatus.STALE: "dim",
}


def print_status(run: Run, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title=f"run {run.run_id} ({run.root})")
    # The stage, its status and its duration stay whole on a narrow terminal; outputs and notes wrap.
    for column in ("stage", "status", "duration"):
        table.add_column(column, no_wrap=True)
    for column in ("outputs", "note"):
        table.add_column(column)
    # The manifest is stored key-sorted; show stages in the order they ran.
    for key, rec in sorted(run.manifest.stages.items(), key=lambda item: (item[1].started, item[0])):
        note = rec.error or ", ".join(f"{k}={v}" for k, v in rec.summary.items())
        table.add_row(
            key,
            f"[{_STYLE.get(rec.status, 'white')}]{rec.status}[/]",
            f"{rec.duration_s:.1f}s",
            "\n".join(rec.outputs),
            note,
        )
    if not run.manifest.stages:
        console.print(f"run {run.run_id}: no stages recorded yet")
        return
    console.print(table)
