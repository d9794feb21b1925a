"""The JSON files a user or CI reads say their format's version, and a file from a newer prbench is refused with one
line naming it instead of being read wrongly (README: "The machine-readable verdict and CI use")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.report.sequential import RoundsUsed, read_rounds_used, write_rounds_used
from foundation.errors import UserError
from foundation.formats.launch_cost import GraphLaunchCost, LaunchCost, read_launch_cost, write_launch_cost
from foundation.formats.run_layout import RunLayout
from prbench.runs.run_store import MANIFEST_FORMAT_VERSION, RunStore


def _bump(path: Path, key: str = "format_version") -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data[key] += 1
    path.write_text(json.dumps(data), encoding="utf-8")


def test_a_run_manifest_carries_its_version_and_one_from_a_newer_prbench_is_refused(tmp_path):
    with RunStore(tmp_path).create_or_open("r1", settings={"suite": {}}, version="0.0.0") as run:
        run.save()
    manifest = RunLayout(tmp_path / "r1").manifest
    assert json.loads(manifest.read_text(encoding="utf-8"))["format_version"] == MANIFEST_FORMAT_VERSION
    assert RunStore(tmp_path).open("r1").run_id == "r1"

    _bump(manifest)
    with pytest.raises(UserError) as err:
        RunStore(tmp_path).open("r1")
    assert str(manifest) in str(err.value) and "newer prbench" in str(err.value) and "\n" not in str(err.value)


def test_a_manifest_written_before_the_version_was_recorded_still_opens(tmp_path):
    with RunStore(tmp_path).create_or_open("old", settings={}, version="0.0.0") as run:
        run.save()
    manifest = RunLayout(tmp_path / "old").manifest
    data = json.loads(manifest.read_text(encoding="utf-8"))
    del data["format_version"]
    manifest.write_text(json.dumps(data), encoding="utf-8")
    assert RunStore(tmp_path).open("old").manifest.run_id == "old"


def test_launch_cost_says_format_version_and_older_files_with_format_still_read(tmp_path):
    path = tmp_path / "launch_cost.json"
    write_launch_cost(path, LaunchCost("cpp", [GraphLaunchCost("g", launches=4, wall_us=20.0, kernel_us=12.0)]))
    assert json.loads(path.read_text(encoding="utf-8"))["format_version"] == 1
    older = {"format": 1, "backend": "cpp", "graphs": [{"graph": "g", "launches": 4, "wall_us": 20.0,
                                                         "kernel_us": 12.0}]}
    path.write_text(json.dumps(older), encoding="utf-8")
    cost = read_launch_cost(path)
    assert cost is not None and cost.per_launch_us == pytest.approx(2.0)
    _bump(path, "format")
    with pytest.raises(UserError, match="newer prbench"):
        read_launch_cost(path)


def test_a_rounds_record_from_a_newer_prbench_is_refused(tmp_path):
    path = write_rounds_used(tmp_path, RoundsUsed("kernels", 3, "settled", "auto", 10))
    assert read_rounds_used(tmp_path) == RoundsUsed("kernels", 3, "settled", "auto", 10)
    _bump(path)
    with pytest.raises(UserError, match=r"rounds\.json: format_version 4 was written by a newer prbench"):
        read_rounds_used(tmp_path)
