"""``invoke ARGS`` run in the test's own process, as ``python -m invoke ARGS`` runs it from the project root.

A new interpreter costs a test a second or more of imports (pandas, scipy, matplotlib) that this process has
already made; for a task whose whole effect is files and what it prints, that is all the process boundary adds.
The result reads like ``subprocess.run(..., capture_output=True, text=True)``: the exit status invoke's program
would give (``Exit`` messages on stderr), and an exception that escapes the task (a bug) printed as the
interpreter prints it, with status 1, so "no traceback" is checked the same way.

What it cannot see: output that child processes write straight to the terminal, and limits set on a process
(``ulimit``, signals). Tests about those keep their subprocess.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path

from invoke import Program, __version__

ROOT = Path(__file__).resolve().parents[2]


def invoke_in_process(*args: str, env: Mapping[str, str] | None = None,
                      cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``invoke ARGS`` in this process, from ``cwd`` (tasks.py is found from there, as on the command line), with
    ``env`` added to the environment for its duration."""
    out, err = io.StringIO(), io.StringIO()
    # The program ``python -m invoke`` runs (invoke.main), made anew: a Program keeps state between runs.
    program = Program(name="Invoke", binary="inv[oke]", binary_names=["invoke", "inv"], version=__version__)
    status = 0
    with _environment(env or {}), contextlib.chdir(cwd), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            program.run(["invoke", *args])
        except SystemExit as exc:
            status = _exit_status(exc.code, err)
        except Exception:
            traceback.print_exc()
            status = 1
    return subprocess.CompletedProcess(["invoke", *args], status, out.getvalue(), err.getvalue())


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a user mistake prints (exit status 2, no traceback)."""
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def _exit_status(code: object, err: io.StringIO) -> int:
    """What the interpreter makes of ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=err)
    return 1


@contextlib.contextmanager
def _environment(extra: Mapping[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
