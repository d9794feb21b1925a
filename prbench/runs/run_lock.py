"""One process per run directory: an OS file lock on ``<run>/.lock``, held while the process writes into the run.

Two invocations writing the same run would interleave their stages and overwrite each other's manifest, so the
second one is refused at once with a line naming the holder (``RunInUse``). The lock is ``flock(2)``: the kernel
drops it when the holder's process ends however it ends (a crash, ``kill -9``), so a lock file left behind is not
a lock, and taking it over is the same ``flock`` call as taking a fresh one — no pid check, nothing to delete, no
window between a check and a create. The file is never removed: removing it would let two processes lock two
different files of the same name.

After taking the lock the holder writes who it is (pid, command, start time) into the file; that text is only
for the refusal message. Within one process the lock is re-entrant (the CLI takes it as soon as the flags are
parsed, the run store again when it opens the run), and it is released when the last holder in the process lets
go. The file descriptor is close-on-exec, so stage subprocesses never inherit (and never prolong) the lock.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import fcntl
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from foundation.errors import UserError
from foundation.records import read_bytes

LOCK_FILE = ".lock"
# How long a refused process waits for the holder to finish writing who it is (it does so right after locking).
_HOLDER_WAIT_S = 0.5

# What the process is doing, for the holder line ("invoke compare"); the CLI boundary sets it per task.
command_label: contextvars.ContextVar[str | None] = contextvars.ContextVar("prbench_command_label", default=None)


class RunInUse(UserError):
    """Another process holds the run's lock; the message names it and what to do."""


@dataclass(frozen=True)
class Holder:
    """Who holds a run: written into the lock file by the process that took the lock."""

    pid: int
    command: str
    started: str  # ISO 8601 with the UTC offset
    host: str

    def describe(self) -> str:
        where = f" on {self.host}" if self.host and self.host != socket.gethostname() else ""  # a shared file system
        return f"pid {self.pid}{where} ({self.command}, since {_clock(self.started)})"

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        try:
            data = json.loads(text)
            return cls(pid=int(data["pid"]), command=str(data["command"]), started=str(data["started"]),
                       host=str(data.get("host", "")))
        except (ValueError, KeyError, TypeError):
            return None  # empty (released, or the holder has not written yet) or half-written


def _clock(started: str) -> str:
    """``10:02:11`` for a lock taken today, else the date too."""
    try:
        when = dt.datetime.fromisoformat(started).astimezone()
    except ValueError:
        return started
    today = dt.datetime.now().astimezone().date()
    return when.strftime("%H:%M:%S" if when.date() == today else "%Y-%m-%d %H:%M:%S")


def current_command() -> str:
    label = command_label.get()
    if label:
        return label
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    return program if program not in ("-c", "") else "python"


@dataclass
class _Held:
    fd: int
    count: int
    ended: bool = False  # the file holds why the holder ended (`note_end`): kept when the lock is let go


# Locks this process holds, by lock file path: flock conflicts between two descriptors even in one process, so
# a second acquisition here shares the first descriptor instead of refusing its own process.
_HELD: dict[str, _Held] = {}
_HELD_GUARD = threading.Lock()


class RunLock:
    """``with RunLock(run_dir):`` — hold ``run_dir``'s lock for the block, or raise ``RunInUse`` at once.

    ``flag`` is the option the user changes to pick another run (named in the refusal).
    """

    def __init__(self, run_dir: Path, flag: str = "--run") -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.flag = flag
        self._held = False
        self._key = ""  # the lock file's resolved path while held (the run directory may be moved meanwhile)

    @property
    def held(self) -> bool:
        return self._held

    def acquire(self) -> RunLock:
        if self._held:
            return self
        key = str(self.path.resolve())
        with _HELD_GUARD:
            held = _HELD.get(key)
            if held is not None:
                held.count += 1
            else:
                _HELD[key] = _Held(fd=self._take(), count=1)
        self._held, self._key = True, key
        return self

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        with _HELD_GUARD:
            held = _HELD[self._key]
            held.count -= 1
            if held.count:
                return
            del _HELD[self._key]
        # Still locked: clear who we were, so a file left after a clean exit names nobody; then let go.
        if not held.ended:
            with contextlib.suppress(OSError):
                os.ftruncate(held.fd, 0)
        os.close(held.fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def _take(self) -> int:
        # O_CREAT without O_EXCL: whether the file is new or left by a dead holder, the flock alone decides.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = _read_holder(fd)
            finally:
                os.close(fd)
            raise RunInUse(self._refusal(holder)) from None
        except BaseException:
            os.close(fd)
            raise
        _write_holder(fd, Holder(pid=os.getpid(), command=current_command(),
                                 started=dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                                 host=socket.gethostname()))
        return fd

    def _refusal(self, holder: Holder | None) -> str:
        who = holder.describe() if holder else "another process"
        return f"run '{self.run_dir.name}' is in use by {who}; wait for it or pick another {self.flag}"


def note_end(run_dir: Path, reason: str) -> None:
    """Leave why this process stops writing the run in the lock file, for ``invoke status``, when the manifest
    cannot record it (a full disk). Written over the holder's line in the file's first block, which the disk
    already gave it, so it needs no free space; the next holder's line replaces it. A no-op unless held here."""
    key = str((Path(run_dir) / LOCK_FILE).resolve())
    with _HELD_GUARD:
        held = _HELD.get(key)
        if held is None:
            return
        data = (json.dumps({"ended": reason[:1000]}) + "\n").encode()
        with contextlib.suppress(OSError):
            os.pwrite(held.fd, data, 0)
            os.ftruncate(held.fd, len(data))
            held.ended = True


def ended_note(run_dir: Path) -> str | None:
    """What `note_end` left in the run's lock file (None when it holds a holder's line, or nothing)."""
    try:
        data = json.loads(read_bytes(Path(run_dir) / LOCK_FILE, "a run's lock file", 1 << 16))
    except (OSError, UserError, ValueError):
        return None
    return str(data["ended"]) if isinstance(data, dict) and isinstance(data.get("ended"), str) else None


def _write_holder(fd: int, holder: Holder) -> None:
    """Best effort: the lock is already ours; on a full disk the refusal just names no pid."""
    data = (json.dumps(asdict(holder)) + "\n").encode()
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)


def _read_holder(fd: int) -> Holder | None:
    """The holder's line; it may still be writing it (it writes right after locking), so wait a moment for it."""
    deadline = time.monotonic() + _HOLDER_WAIT_S
    while True:
        holder = Holder.parse(os.pread(fd, 4096, 0).decode("utf-8", errors="replace"))
        if holder is not None or time.monotonic() >= deadline:
            return holder
        time.sleep(0.02)


def holder_of(run_dir: Path) -> Holder | None:
    """Who is writing the run now, as far as the lock file tells without taking the lock (``invoke status`` must
    never make a starting writer fail): the holder it names, unless that process is gone from this machine. A
    holder that let go cleared the file; one that was killed left its line behind, naming a pid that no longer
    runs (a pid reused since is taken for the holder: the line is only for display)."""
    try:  # a lock file is one short line; a FIFO or a device in its place is not read (it could block forever)
        holder = Holder.parse(read_bytes(Path(run_dir) / LOCK_FILE, "a run's lock file", 1 << 16).decode(
            "utf-8", errors="replace"))
    except (OSError, UserError):
        return None
    if holder is None or (holder.host and holder.host != socket.gethostname()):
        return holder  # another machine's process (a shared file system): it cannot be checked from here
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # it runs, as another user
    return holder


@contextlib.contextmanager
def locked_runs(run_dirs: list[Path], flag: str = "--run") -> Iterator[None]:
    """Hold the locks of several runs (those that exist) for the block; a task writing into them calls this first."""
    with contextlib.ExitStack() as stack:
        for run_dir in dict.fromkeys(run_dirs):
            if run_dir.is_dir():
                stack.enter_context(RunLock(run_dir, flag=flag))
        yield
