"""What the machine refuses (a full disk, a read-only file system, a missing or undecodable file) reaches the user
as one line naming the file and what to do, from a task or from inside a stage; a bug keeps its traceback."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from invoke import Exit

from foundation import atomic_io
from foundation.formats.run_layout import MANIFEST
from foundation.io_errors import NO_SPACE_ADVICE, no_space_in, stage_exit_code
from prbench.commands.cli import user_facing
from prbench.runs.run_lock import LOCK_FILE, RunLock
from tests.support.cli_support import invoke_in_process

ROOT = Path(__file__).resolve().parents[1]


def one_line_exit(task, *args) -> str:
    with pytest.raises(Exit) as info:
        user_facing(task)(*args)
    assert info.value.code == 2
    message = str(info.value.message)
    assert "\n" not in message
    return message


def test_a_full_disk_while_writing_names_the_file_and_what_to_do(tmp_path: Path) -> None:
    target = tmp_path / "report" / "kernels_compare.csv"

    def write_on_a_full_disk() -> None:
        with atomic_io.atomic_path(target):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what write() raises: no file name

    assert one_line_exit(write_on_a_full_disk) == (
        f"error: no space left on device writing {target}: free space or use --runs-dir elsewhere")
    assert list(target.parent.iterdir()) == []  # and no temp file is left


@pytest.mark.parametrize(("code", "advice"), [
    (errno.EROFS, "the file system is read-only; use --runs-dir on a writable one"),
    (errno.EACCES, "check its owner and permissions"),
    (errno.ENOENT, "check the path (an input may have been moved or deleted)"),
])
def test_a_refused_file_operation_names_the_file(tmp_path: Path, code: int, advice: str) -> None:
    path = tmp_path / "runs" / "r1" / "manifest.json"

    def refused() -> None:
        raise OSError(code, os.strerror(code), str(path))

    assert one_line_exit(refused) == f"error: {path}: {os.strerror(code)}; {advice}"


def test_a_file_that_is_not_json_or_not_text_is_named(tmp_path: Path) -> None:
    broken, binary = tmp_path / "plan.json", tmp_path / "samples.json"
    broken.write_text('{"kind": "models",')
    binary.write_bytes(b"\xff\xfe\x00garbage")

    def read_json(path: Path) -> object:
        return json.loads(path.read_text(encoding="utf-8"))

    assert one_line_exit(read_json, broken).startswith(
        f"error: {broken}: not valid JSON (Expecting property name enclosed in double quotes at line 1 column 19)")
    assert one_line_exit(read_json, binary).startswith(f"error: {binary}: not UTF-8 text (invalid start byte")


def test_a_bug_keeps_its_traceback() -> None:
    def buggy() -> None:
        raise KeyError("models")

    with pytest.raises(KeyError):
        user_facing(buggy)()


def test_a_task_holding_a_run_is_named_in_its_lock_file(tmp_path: Path) -> None:
    def compare_kernels() -> dict:
        with RunLock(tmp_path):
            return json.loads((tmp_path / LOCK_FILE).read_text())

    holder = user_facing(compare_kernels)()

    assert holder["command"] == "invoke compare-kernels" and holder["pid"] == os.getpid()


def test_a_stage_says_a_full_disk_in_its_one_error_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def main() -> int:
        atomic_io.write_text(tmp_path / "suite" / "suite.csv", "x")  # fine
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "suite" / "samples.json"))

    assert stage_exit_code(main) == 1
    err = capsys.readouterr().err
    assert err == (f"error: no space left on device writing {tmp_path / 'suite' / 'samples.json'}: "
                   f"{NO_SPACE_ADVICE}\n")


@pytest.mark.parametrize(("log", "named"), [
    ("OSError: [Errno 28] No space left on device: '/runs/r1/base/suite/suite.csv'\n", "/runs/r1/base/suite/suite.csv"),
    ("CppCompileError: C++ compile error\n/runs/r1/base/work/tmp/ccX.s: fatal error: error writing to "
     "/runs/r1/base/work/tmp/ccX.s: No space left on device\n", "/runs/r1/base/work/tmp/ccX.s"),
    ("/usr/bin/ld: final link failed: No space left on device\n", ""),
    ("RuntimeError: CUDA out of memory\n", None),
])
def test_a_full_disk_is_recognised_in_a_stages_output(log: str, named: str | None) -> None:
    assert no_space_in(log) == named


def test_invoke_report_on_an_unreadable_input_is_one_line_and_leaves_no_current_looking_report(
        tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    for side in ("base", "pr"):
        (run / side).mkdir(parents=True)
    (run / "pr" / "env.json").mkdir()  # where a file is expected
    (run / MANIFEST).write_text(json.dumps({"run_id": "r1", "created": "now", "stages": {}}))
    (run / "report").mkdir()
    (run / "report" / "report.md").write_text("# prbench: PR vs base\n\nverdict: improved\n")

    proc = invoke_in_process("report", "r1", "--runs-dir", str(tmp_path / "runs"))

    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {run / 'pr' / 'env.json'}: is a directory, not a regular file (expected a JSON object)"]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (run / "report").exists()
    stale = (run / "report.stale" / "report.md").read_text()
    assert stale.startswith("> **Stale report**") and "verdict: improved" in stale
    manifest = json.loads((run / MANIFEST).read_text())
    assert manifest["stages"]["report"]["status"] == "failed"

