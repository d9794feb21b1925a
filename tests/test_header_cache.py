"""Inductor's precompiled headers, which local sides share in ``~/.cache/prbench/inductor-headers``: every Python
environment and flag set adds one of ~147 MB (one day of fresh clones here left 44, 6.1 GB). A local compare keeps
the most recently used 2 GB and removes the rest, never one used within the day."""

from __future__ import annotations

import os
from pathlib import Path

from prbench.sides.header_cache import KEEP_BYTES, SPARE_SECONDS, headers_in, prune_headers

HEADER = 147_000_000  # one precompiled header of torch 2.13's CPU build, as g++ wrote it here
DAY = 24 * 3600
NOW = 1_800_000_000.0


def leave_header(directory: Path, key: str, used_days_ago: float, size: int = HEADER) -> Path:
    """A header as Inductor leaves it: ``<key>.h`` and its precompiled ``<key>.h.gch`` (sparse: no disk taken),
    last read ``used_days_ago``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{key}.h").write_text(f"#include <{key}>\n", encoding="utf-8")
    compiled = directory / f"{key}.h.gch"
    with compiled.open("wb") as out:
        out.truncate(size)
    when = NOW - used_days_ago * DAY
    for path in (directory / f"{key}.h", compiled):
        os.utime(path, (when, when))
    return compiled


def test_a_header_directory_past_its_bound_loses_its_least_recently_used_headers(tmp_path: Path) -> None:
    # 20 environments, one a day: 2.9 GB
    for day in range(20):
        leave_header(tmp_path, f"c{day:02d}", used_days_ago=day + 1)
    (tmp_path / "locks").mkdir()

    removed = prune_headers(tmp_path, now=NOW)

    kept = headers_in(tmp_path)
    assert len(kept) == KEEP_BYTES // HEADER == 13
    assert [h.files[0].name for h in kept] == [f"c{day:02d}.h.gch" for day in range(13)]  # the most recent
    assert sorted(h.files[0].name for h in removed) == [f"c{day:02d}.h.gch" for day in range(13, 20)]
    assert not any((tmp_path / f"c{day:02d}.h").exists() for day in range(13, 20)), "each header goes whole"
    assert (tmp_path / "locks").is_dir()
    assert prune_headers(tmp_path, now=NOW) == [], "within its bound, nothing more goes"


def test_a_header_used_within_the_day_stays_whatever_the_total(tmp_path: Path) -> None:
    """A stage running now may hold a header's path (Inductor keeps it for the process): removing it would fail
    that stage's next compile."""
    for hour in range(16):
        leave_header(tmp_path, f"today{hour:02d}", used_days_ago=hour / 24)
    stale = leave_header(tmp_path, "stale", used_days_ago=SPARE_SECONDS / DAY + 0.5)

    removed = prune_headers(tmp_path, now=NOW)

    assert [h.files[0] for h in removed] == [stale]
    assert len(headers_in(tmp_path)) == 16  # 2.4 GB, all used today


def test_a_missing_header_directory_has_nothing_to_prune(tmp_path: Path) -> None:
    assert prune_headers(tmp_path / "never-made", now=NOW) == []
