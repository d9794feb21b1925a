"""A full disk, for real: ``--runs-dir`` on a 1 MiB tmpfs. The user gets one line saying the disk is full and
which file, no traceback, and nothing half-written is left behind to be mistaken for a result.

Mounting a tmpfs needs root (CI runs as root); elsewhere these tests are skipped, saying why.
"""

from __future__ import annotations

import errno
import io
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from foundation.formats.run_layout import MANIFEST
from foundation.io_errors import describe, is_no_space
from prbench.runners import StageCommand
from prbench.runners.local import LocalRunner
from prbench.runs.pipeline import Pipeline, StageSpec
from prbench.runs.run_store import RunStore, StageStatus
from prbench.sides.recipes import load_recipe
from prbench.sides.variants import Variant
from tests.support.cli_support import invoke_in_process
from tests.support.compare_data import kernel_specs, kernels_frame, model_rounds, suite_frame, write_variant

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"BertForMaskedLM": 40.0, "GPT2": 30.0}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB file system of its own, unmounted afterwards whatever happens."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "prbench-test", str(mount_point)],
                                 capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("no mount command here: cannot make a small file system to fill")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)  # still busy: detach it


def fill(disk: Path, leave_kib: int) -> None:
    """Fill the disk, then free ``leave_kib``: the next writes start fine and run out part way."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    filler.chmod(0o644)
    size = filler.stat().st_size
    with open(filler, "r+b") as out:
        out.truncate(max(size - leave_kib * 1024, 0))


def finished_comparison(runs: Path) -> Path:
    """A run whose stages are done (kernels, suites, model rounds) and whose report is from an earlier render."""
    specs = kernel_specs(50, seed=13, models=tuple(MODELS))
    run = runs / "r1"
    for side, seed, factor in (("base", 14, None), ("pr", 15, {0: 0.5})):
        kernels, samples = kernels_frame(specs, seed=seed, factor=factor)
        suite, suite_samples = suite_frame(MODELS, seed=seed + 2)
        write_variant(run / side, kernels, samples, suite, suite_samples, env={"torch": {"commit": side[0] * 40}},
                      model_samples=model_rounds(MODELS, seed=seed + 4, round_cv=0.003))
    (run / MANIFEST).write_text(json.dumps({"run_id": "r1", "created": "now", "stages": {},
                                            "settings": {"rounds": 5}}))
    (run / "report").mkdir()
    (run / "report" / "report.md").write_text("# prbench: PR vs base\n\n**improved**\n")
    (run / "report" / "summary.json").write_text('{"verdict": "improved"}\n')
    return run


def temp_files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".tmp")]


def test_invoke_report_on_a_full_disk_is_one_line_and_leaves_nothing_half_written(small_disk: Path) -> None:
    runs = small_disk / "runs"
    run = finished_comparison(runs)
    fill(small_disk, leave_kib=32)  # room for the manifest, not for the report's tables, plots and workbook

    proc = invoke_in_process("report", "r1", "--runs-dir", str(runs))

    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: no space left on device writing {run}/"), proc.stderr
    assert lines[0].endswith(": free space or use --runs-dir elsewhere")
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (run / "report").exists()  # the half-rendered report is gone...
    assert temp_files(runs) == []  # ...and so is every temp file
    stale = (run / "report.stale" / "report.md").read_text()  # the old one is kept, saying what it is
    assert stale.startswith("> **Stale report**") and "**improved**" in stale
    record = json.loads((run / MANIFEST).read_text())["stages"]["report"]  # still valid JSON
    assert record["status"] == StageStatus.FAILED and "No space left on device" in record["error"]


CHATTY_STAGE = textwrap.dedent("""
    import sys
    out = sys.argv[1]
    for i in range(40000):  # about 2.4 MB of output: more than the whole disk
        print(f"compiling kernel {i:6d} of 40000 ...........................", flush=True)
    open(out, "w").write("done")
""")


@pytest.mark.integration
def test_a_stage_whose_log_fills_the_disk_fails_naming_the_log_and_does_not_hang(small_disk: Path,
                                                                                  tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "prbench_test_chatty_stage.py").write_text(CHATTY_STAGE)
    run = RunStore(small_disk / "runs").create_or_open("r1", {}, "0.1.0")
    pipeline = Pipeline(run, LocalRunner(stream_output=False), Console(file=io.StringIO()))
    prepared = pipeline.prepare(Variant(name="base", recipe=load_recipe("cpu-local", ROOT / "recipes")),
                                overlay=None, python=sys.executable)
    out = prepared.directory / "out.txt"
    spec = StageSpec(name="suite", inputs={}, outputs=[out], command=lambda: StageCommand(
        module="prbench_test_chatty_stage", args=[str(out)], python_path=[code], timeout_s=120))

    started = time.monotonic()
    with pytest.raises(OSError) as info:
        pipeline.run_stage(prepared, spec)

    assert time.monotonic() - started < 60  # the stage kept running to its end: its output was still drained
    assert is_no_space(info.value)
    log = prepared.directory / "logs" / "suite.log"
    assert describe(info.value) == f"no space left on device writing {log}: free space or use --runs-dir elsewhere"
    assert not out.exists() and temp_files(small_disk / "runs") == []
    record = run.record("base/suite")
    assert record is not None and record.status == StageStatus.FAILED
    run.close()
