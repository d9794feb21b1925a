"""The ``--format`` flag of the trace tasks (``perf-report``, ``trace-diff``): which files to write.

The writing itself is ``analysis.rendering``, shared with the comparison report.
"""

from __future__ import annotations

from foundation.errors import UserError

FORMATS = ("xlsx", "md", "csv")


def parse_formats(value: str | None, default: str = "xlsx") -> list[str]:
    formats = [f.strip().lower() for f in (value or default).split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise UserError(f"--format: unknown format {', '.join(unknown) or '(empty)'}; expected a comma list of "
                        f"{', '.join(FORMATS)}")
    return formats
