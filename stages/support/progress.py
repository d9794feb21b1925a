"""The one progress-line format of every stage: ``[stage] i/N text``.

The host's progress bar (``prbench.runs.pipeline.StageProgress``) follows a stage through these lines, so they are
written in one place; a line whose ``text`` ends in ``start`` means item ``i`` is under way (``i - 1`` done).
"""

from __future__ import annotations


def progress_line(stage: str, done: int, total: int, text: str) -> str:
    """The line itself, for stages that hand their lines to a callback (worker pools, the paired rounds)."""
    return f"[{stage}] {done}/{total} {text}"


def progress(stage: str, done: int, total: int, text: str) -> None:
    """Print one progress line (flushed: the runner streams and logs the stage's output as it comes)."""
    print(progress_line(stage, done, total, text), flush=True)
