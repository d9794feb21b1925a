"""The local runner (the embedded default): a stage runs as a subprocess of a chosen Python."""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

from foundation.formats.stage_records import pinned_over
from prbench.runners import CODE_ROOT, STAGE_ERROR_PREFIX, ErrorLineTracker, StageCommand, StageFailed, StageLost
from prbench.sides.local_torch import SCRUBBED, InstalledTorch, installed_torch
from prbench.termination import OUTPUT_DRAIN_S, STOP_GRACE_S

_PR_SET_PDEATHSIG = 1  # prctl(2)


def keeps_bytecode(package: Path, cache_tag: str, environ: dict[str, str]) -> bool:
    """Whether processes of an interpreter (bytecode tag ``cache_tag``, e.g. ``cpython-312``) find ``package``'s
    bytecode kept: compiled beside the sources already (``<package>/_inductor/__pycache__`` holds its .pyc files),
    written there by the first process, or kept wherever the user's PYTHONPYCACHEPREFIX says."""
    if environ.get("PYTHONPYCACHEPREFIX"):
        return True
    cached = package / "_inductor" / "__pycache__"
    if cached.is_dir() and any(cached.glob(f"*.{cache_tag}.pyc")):
        return True
    return not environ.get("PYTHONDONTWRITEBYTECODE") and os.access(cached.parent, os.W_OK)


def python_keeps_bytecode(python: str) -> bool:
    """`keeps_bytecode` for the torch that ``python`` imports: found in this process when it is this interpreter,
    else by asking that one. No torch there: True (nothing to compile again; the stage says what is missing)."""
    if python == sys.executable:
        spec = importlib.util.find_spec("torch")
        where = (spec.submodule_search_locations or [""])[0] if spec else ""
        found: InstalledTorch | None = InstalledTorch(sys.implementation.cache_tag, Path(where) if where else None)
    else:
        found = installed_torch(python)
    if found is None or found.package is None:
        return True
    return keeps_bytecode(found.package, found.cache_tag, dict(os.environ))


class LocalRunner:
    name = "local"

    def __init__(self, python: str | None = None, stream_output: bool = True, die_with_parent: bool = True) -> None:
        self.python = python or sys.executable
        self.stream_output = stream_output
        # The host or an executor's node process (a Ray actor) may be killed outright (SIGKILL, the OOM killer):
        # its stage, in a session of its own that no terminal signal reaches, must not outlive it.
        self.die_with_parent = die_with_parent
        # Every stage running now: an executor with several devices runs one per device through the same runner,
        # and interrupt() must reach them all.
        self._running: set[subprocess.Popen] = set()
        self._interrupted: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def environment(self, command: StageCommand) -> dict[str, str]:
        # A stage pinned to a device sees only its pin, none of this shell's visible-devices variables.
        env = pinned_over({k: v for k, v in os.environ.items() if k not in SCRUBBED}, command.env)
        env["PYTHONPATH"] = os.pathsep.join([*map(str, command.python_path), str(CODE_ROOT)])
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def run(self, command: StageCommand) -> None:
        argv = [self.python, "-m", command.module, *command.args]
        log = _open_log(command.log_path)
        try:
            proc = subprocess.Popen(
                argv,
                env=self.environment(command),
                cwd=CODE_ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,  # so an interrupt or timeout can stop the whole process group
                preexec_fn=partial(_prepare_child, command.cpus, self.die_with_parent),
            )
        except OSError as exc:
            raise StageFailed(f"stage {command.label}: cannot start {self.python} ({exc.strerror})") from None
        with self._lock:
            self._running.add(proc)
        # A reader thread copies output so the main thread can enforce the timeout while output flows.
        errors = ErrorLineTracker(command.on_line)
        log_failures: list[OSError] = []
        reader = threading.Thread(target=self._copy_output, args=(proc, log, errors, log_failures), daemon=True)
        reader.start()
        stopped = False  # by Ctrl-C or interrupt(): the user is waiting (prbench.termination's bound)
        try:
            code = proc.wait(timeout=command.timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            where = f"; log: {command.log_path}" if command.log_path else ""
            raise StageFailed(f"stage {command.label}: timed out after {command.timeout_s:g}s{where}") from None
        except KeyboardInterrupt:
            stopped = True
            _stop(proc)
            raise
        finally:
            with self._lock:
                self._running.discard(proc)
                interrupted = proc in self._interrupted
                self._interrupted.discard(proc)
            # The stage has exited: whatever is left of its group (a helper that ignores SIGINT, a worker
            # pool) is killed, so nothing outlives the stage or keeps the output pipe open.
            _kill_group(proc)
            # Let the reader drain the pipe before the log is closed under it. What is left of the group is
            # killed, so only a process outside it (a compile-worker pool in a session of its own) could hold the
            # pipe open longer. A stage that ended by itself gets 10 s, however busy the machine.
            reader.join(timeout=OUTPUT_DRAIN_S if stopped or interrupted else 10.0)
            if log:
                _close_log(log, log_failures)
        if log_failures:
            # The log could not be written (a full disk, usually): the stage's record of what happened is gone,
            # so the stage has not run as it should, whatever its exit code.
            failure = log_failures[0]
            failure.filename = failure.filename or str(command.log_path)
            raise failure
        if interrupted:
            raise KeyboardInterrupt
        if code < 0 and -code != signal.SIGINT:
            where = f"; log: {command.log_path}" if command.log_path else ""
            raise StageLost(f"stage {command.label} was killed ({_signal_name(-code)}){where}")
        if code != 0:
            raise errors.failure(command, f"failed with exit code {code}")

    def interrupt(self) -> None:
        """Stop the running stages as Ctrl-C would (SIGINT, then SIGKILL); their ``run`` raises KeyboardInterrupt."""
        with self._lock:
            running = list(self._running)
            self._interrupted.update(running)
        _stop(*running)

    def _copy_output(self, proc: subprocess.Popen, log, errors: ErrorLineTracker,
                     log_failures: list[OSError]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            errors.feed(line)
            if log and not log_failures:
                try:
                    log.write(line)
                    log.flush()
                except OSError as exc:
                    # Keep draining the pipe: a stage blocked writing to a full pipe would hang until its timeout.
                    log_failures.append(exc)
            # The stage's own "error:" line is not echoed: the host raises it as its one-line error, and the
            # user should read it once (it stays in the log).
            if self.stream_output and not line.startswith(STAGE_ERROR_PREFIX):
                sys.stdout.write(line)
                sys.stdout.flush()


def _open_log(path: Path | None):
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "a", encoding="utf-8")


def _close_log(log, log_failures: list[OSError]) -> None:
    try:
        log.close()
    except OSError as exc:  # the last buffered lines did not fit either
        if not log_failures:
            log_failures.append(exc)


def _prepare_child(cpus: frozenset[int] | None, die_with_parent: bool) -> None:
    """In the stage's process, before it starts.

    A host started with SIGINT ignored (a background job, nohup) or blocked passes that on, and the graceful stop
    in ``_stop`` is a SIGINT: take it back. ``cpus``: the executor's CPU device. ``die_with_parent``: SIGKILL when
    the process (strictly: the thread) that started the stage dies, so a killed node process leaves no stage
    behind; the stage's workers then read the end of their input and leave too.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # A child inherits its starter's signal mask across exec: a thread that blocks SIGINT (a Ray actor's thread)
    # would leave the stage deaf to the graceful stop.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if cpus:
        os.sched_setaffinity(0, cpus)
    if die_with_parent:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _stop(*procs: subprocess.Popen) -> None:
    """SIGINT first so each stage can finish its current atomic write; SIGKILL for those that have not stopped
    `STOP_GRACE_S` later. The stages share the grace (a node with eight stages stops in one, not eight)."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            continue
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
