"""Atomic output: a file appears whole or not at all, whatever happens while it is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foundation import atomic_io


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_write_text_and_json_create_parents_and_leave_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "base" / "suite" / "suite.csv"

    atomic_io.write_text(target, "name,speedup\nbert,1.2\n")
    atomic_io.write_json(tmp_path / "base" / "env.json", {"b": 1, "a": [1, 2]})
    atomic_io.write_bytes(tmp_path / "base" / "blob.bin", b"\x00\x01")

    assert target.read_text() == "name,speedup\nbert,1.2\n"
    assert json.loads((tmp_path / "base" / "env.json").read_text()) == {"a": [1, 2], "b": 1}
    assert (tmp_path / "base" / "blob.bin").read_bytes() == b"\x00\x01"
    assert leftovers(tmp_path / "base") == ["blob.bin", "env.json", "suite"]
    assert leftovers(target.parent) == ["suite.csv"]


@pytest.mark.parametrize("error", [RuntimeError("disk on fire"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_a_failing_block_keeps_the_previous_file_and_leaves_no_temp_file(tmp_path: Path, error) -> None:
    target = tmp_path / "kernels.csv"
    target.write_text("previous, complete content\n")

    with pytest.raises(type(error)), atomic_io.atomic_path(target) as tmp:
        assert tmp.parent == target.parent  # same directory, so the final rename is atomic
        tmp.write_text("new, half-writ")
        raise error

    assert target.read_text() == "previous, complete content\n"
    assert leftovers(tmp_path) == ["kernels.csv"]


def test_a_failing_first_write_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "report.md"

    with pytest.raises(RuntimeError), atomic_io.atomic_path(target) as tmp:
        tmp.write_text("# half a rep")
        raise RuntimeError("renderer crashed")

    assert leftovers(tmp_path) == []


def test_a_block_that_never_writes_still_produces_the_file(tmp_path: Path) -> None:
    # mkstemp creates the temp file, so an empty output is still an output (e.g. an empty log).
    with atomic_io.atomic_path(tmp_path / "empty.txt"):
        pass

    assert (tmp_path / "empty.txt").read_text() == ""
    assert leftovers(tmp_path) == ["empty.txt"]
