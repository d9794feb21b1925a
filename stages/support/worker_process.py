"""Crash-isolated worker processes: ``python -m <module> --worker --result-fd N``, one job per JSON line.

Host side (`Worker`): jobs go to the worker's stdin as JSON lines; replies come back as JSON lines on a private
pipe (``--result-fd``), so whatever the worker or a kernel prints (its log) cannot corrupt a reply. A worker
that crashes (segfault) or hangs past the job's timeout is killed with its whole process group and raises
`WorkerFailure` with the reason; the caller records it and starts a fresh worker.

Worker side (`serve`): announce ``{"ready": true}``, then answer every job with the handler's reply; an
exception in the handler is the job's ``{"error": ...}``, never the worker's end.

A worker dies with the process that started it, however that one ends (SIGKILL included), and takes its own
children (a g++ compile) along: the starter holds the write end of a lifeline pipe (``$PRBENCH_WORKER_LIFELINE``
names the worker's read end), and a thread of the worker (`watch_lifeline`, the first thing ``--worker`` does)
kills the worker's process group when the pipe ends. A pipe rather than ``PR_SET_PDEATHSIG``: the signal follows
the *thread* that started the process, and workers are started from threads that end (``stages.paired``).

A reply that is not one JSON object (garbage or a half-written line on the result channel) is a protocol error:
the channel can no longer be trusted to line up replies with jobs, so the worker is killed like a crashed one and
`WorkerProtocolError` costs that one job; the next job starts a fresh worker. `reply_outcomes` checks the shape
of a well-formed reply (results per item, samples that are finite milliseconds).

Stdlib only (plus the stdlib-only ``foundation.records``): the paired orchestrator (``stages.paired``) drives
workers without importing torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from foundation.errors import UserError
from foundation.formats.stage_records import LIFELINE_ENV
from foundation.records import expect_ms_list

STARTUP_TIMEOUT_S = 300.0
_IMPORTED_AT = time.monotonic()  # in a worker: soon after the interpreter started, before torch is imported


class WorkerFailure(Exception):
    """The worker died or hung; the message is the reason recorded for the job's items."""


class WorkerProtocolError(WorkerFailure):
    """The worker answered something that is not a reply; it has been stopped (the next job restarts it)."""


def last_cpu() -> int:
    """The last CPU this process may run on: where paired workers are pinned (away from CPU 0's interrupts)."""
    return max(os.sched_getaffinity(0))


class Worker:
    """One worker process of ``module``; ``cpus`` is where `pin_now` pins it (every thread).

    Pinning is left to the caller so that start-up and compilation can use every CPU and only the timed
    work shares the one chosen for it.
    """

    def __init__(self, name: str, module: str, env: dict[str, str], log_path: Path,
                 cpus: set[int] | None = None) -> None:
        self.name = name
        self.module = module
        self.env = env
        self.log_path = log_path
        self.cpus = cpus
        self.proc: subprocess.Popen[bytes] | None = None
        self.result_fd = -1
        self.lifeline_fd = -1
        self.buffer = b""
        self.starts = 0
        self.pids: list[int] = []
        self.ready_s = 0.0  # the last start: seconds from spawning the process to its ready line
        self.imports_s: float | None = None  # the part of it the worker spent importing (torch...) and setting up

    def start(self) -> None:
        for key in ("TRITON_CACHE_DIR", "TMPDIR"):
            if self.env.get(key):
                Path(self.env[key]).mkdir(parents=True, exist_ok=True)
        read_fd, write_fd = os.pipe()
        life_read, life_write = os.pipe()  # the lifeline: ends when this process does (see the module's doc)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # the worker keeps its own copy of the descriptor
            try:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", self.module, "--worker", "--result-fd", str(write_fd)],
                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                    env={**self.env, LIFELINE_ENV: str(life_read)},
                    pass_fds=(write_fd, life_read), start_new_session=True,  # a kill takes the worker's children too
                )
            except BaseException:
                os.close(life_write)
                raise
            finally:
                os.close(write_fd)
                os.close(life_read)
        self.result_fd, self.buffer, self.lifeline_fd = read_fd, b"", life_write
        self.starts += 1
        self.pids.append(self.proc.pid)
        spawned = time.monotonic()
        ready = self._receive(STARTUP_TIMEOUT_S, "starting")
        if ready.get("ready") is not True:
            self.stop()
            raise WorkerProtocolError("protocol error: the worker's first reply is not {\"ready\": true}; "
                                      "worker restarted")
        self.ready_s = round(time.monotonic() - spawned, 3)
        imports_s = ready.get("imports_s")
        self.imports_s = float(imports_s) if isinstance(imports_s, (int, float)) else None  # older ones do not say

    def pin_now(self) -> None:
        if self.cpus is not None and self.proc is not None:
            pin(self.proc.pid, self.cpus)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def run(self, job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one job and wait for its reply (a worker that is not running is started first)."""
        if not self.alive:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            reason = self._death_reason("receiving the job")
            self.stop()
            raise WorkerFailure(reason) from None
        return self._receive(timeout_s, "running it")

    def _receive(self, timeout_s: float, doing: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise WorkerFailure(f"timeout: no result after {timeout_s:.0f} s {doing}; worker restarted")
            ready, _, _ = select.select([self.result_fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self.result_fd, 1 << 16)
            if not chunk:
                reason = self._death_reason(doing)
                self.stop()
                raise WorkerFailure(reason)
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return self._decode(line, doing)

    def _decode(self, line: bytes, doing: str) -> dict[str, Any]:
        try:
            reply = json.loads(line)
        except ValueError:  # not JSON, or not UTF-8
            reply = None
        if isinstance(reply, dict):
            return reply
        # Out of step: whatever follows on the channel may answer this job, not the next one. Start afresh.
        self.stop()
        shown = " ".join(repr(line[:60])[2:-1].split()) + ("..." if len(line) > 60 else "")
        raise WorkerProtocolError(f"protocol error: the worker's reply while {doing} is not a JSON object "
                                  f"({shown or 'an empty line'}); worker restarted")

    def _death_reason(self, doing: str) -> str:
        assert self.proc is not None
        code = self.proc.wait()
        if code < 0:
            try:
                what = signal.Signals(-code).name
            except ValueError:
                what = f"signal {-code}"
            return f"worker crashed ({what}) while {doing}; worker restarted"
        return f"worker exited with code {code} while {doing}; worker restarted (log: {self.log_path})"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc is not None and self.proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        if self.result_fd >= 0:
            os.close(self.result_fd)
            self.result_fd = -1
        if self.lifeline_fd >= 0:
            os.close(self.lifeline_fd)
            self.lifeline_fd = -1
        self.proc = None


def pin(pid: int, cpus: set[int]) -> None:
    """Pin every thread of ``pid``: sched_setaffinity(pid) alone moves only the thread whose id is ``pid``."""
    try:
        threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        threads = [pid]
    for thread in threads:
        with contextlib.suppress(ProcessLookupError):  # a thread that already ended
            os.sched_setaffinity(thread, cpus)


Outcomes = dict[str, tuple[list[float], str]]  # reply key → (samples in ms, error)


def reply_entry(reply: dict[str, Any], key: str) -> tuple[dict[str, Any], str]:
    """(the reply's entry for ``key``, the error to record for it or ""); a mis-shaped reply is that error."""
    results = reply.get("results", {})
    job_error = reply.get("error") or ""
    if not isinstance(job_error, str):
        return {}, f"bad reply: 'error' is not text ({type(job_error).__name__})"
    if not isinstance(results, dict):
        return {}, job_error or f"bad reply: 'results' is not an object ({type(results).__name__})"
    entry = results.get(key, {})
    if not isinstance(entry, dict):
        return {}, f"bad reply: results[{key!r}] is not an object ({type(entry).__name__})"
    error = entry.get("error") or job_error
    if not isinstance(error, str):
        return {}, f"bad reply: results[{key!r}].error is not text ({type(error).__name__})"
    return entry, error


def reply_outcomes(reply: dict[str, Any], keys: list[str]) -> Outcomes:
    """A reply split per key; samples must be finite milliseconds ≥ 0, and a key without samples is an error."""
    out: Outcomes = {}
    for key in keys:
        entry, error = reply_entry(reply, key)
        samples: list[float] = []
        if not error:
            try:
                samples = expect_ms_list(entry.get("samples", []), f"results[{key!r}].samples")
            except UserError as exc:
                error = f"bad reply: {exc}"
        out[key] = ([] if error else samples, error or ("" if samples else "no samples in the worker's reply"))
    return out


# --- worker side --------------------------------------------------------------------------------------------


def one_line_error(exc: BaseException) -> str:
    """``Type: message`` on one line, with the module's line number when the error points into it."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    where = ""
    if isinstance(exc, SyntaxError) and exc.lineno:
        where = f" (line {exc.lineno})"
    return f"{type(exc).__name__}: {message}{where}"[:500]


def watch_lifeline() -> None:
    """In a worker: end the worker's process group (itself and its children) when the lifeline pipe from its
    starter ends. Called first by ``--worker``; a process started without a lifeline (by hand) watches nothing."""
    fd = os.environ.pop(LIFELINE_ENV, None)  # popped: the worker's own children have no lifeline of theirs
    if fd is None:
        return

    def watch() -> None:
        try:
            while os.read(int(fd), 1):  # nothing is ever written: only the end (b"") comes
                pass
        except (OSError, ValueError):  # not a pipe of ours after all (started by hand with the variable set)
            return
        if os.getpgid(0) == os.getpid():  # its own group (start_new_session): its children go too
            os.killpg(0, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()


# A worker's job handler: a job's dict in, its reply's dict out.
JobHandler = Callable[[dict[str, Any]], dict[str, Any]]


def serve(result_fd: int, handle: JobHandler) -> int:
    """The worker loop: ready, then one reply line per job line until stdin closes."""
    results = os.fdopen(result_fd, "w", buffering=1)
    imports_s = round(time.monotonic() - _IMPORTED_AT, 3)
    results.write(json.dumps({"ready": True, "pid": os.getpid(), "imports_s": imports_s}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = handle(json.loads(line))
        except BaseException as exc:
            reply = {"error": one_line_error(exc)}
        results.write(json.dumps(reply) + "\n")
    return 0
