"""One line for what the machine refused: a full disk, a read-only file system, a missing or unreadable file.

These are not bugs in prbench and not mistakes in a flag, but the user can fix them once told which file and what
to do, so they get the same treatment as a ``UserError``: one line, no traceback. Both rooms use this module: the
host's error boundary (``prbench.commands.cli.user_facing``) and the stages' entry points (``stage_exit_code``), and the
pipeline recognises a full disk in a failed stage's log with ``no_space_in``.
"""

from __future__ import annotations

import errno
import json
import re
import sys
from collections.abc import Callable
from pathlib import PurePath

from foundation.errors import UserError

# The exceptions that mean "the machine or a file said no"; anything else escaping a task is a bug and keeps
# its traceback.
ENVIRONMENT_ERRORS: tuple[type[BaseException], ...] = (OSError, UnicodeDecodeError, json.JSONDecodeError)

NO_SPACE_ADVICE = "free space or use --runs-dir elsewhere"
_NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)

# How a full disk shows up in a stage's output: Python's OSError text, a compiler's or linker's message.
_NO_SPACE_MARKERS = re.compile(r"no space left on device|disk quota exceeded|\[errno 28\]|\benospc\b", re.I)
# The file named next to the marker: "...device: '/run/x.json'" (Python) or "writing to /tmp/cc.s: No space..."
_QUOTED_AFTER = re.compile(r"(?:no space left on device|disk quota exceeded)\S*:\s*'([^']+)'", re.I)
_PATH_BEFORE = re.compile(r"(/[^\s:'\"]+):\s*(?:no space left on device|disk quota exceeded)", re.I)


class NoSpaceLeft(UserError):
    """The disk filled up; the message names the file being written and what to do."""


def no_space_message(what: str) -> str:
    return f"no space left on device writing {what}: {NO_SPACE_ADVICE}"


def is_no_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _NO_SPACE_ERRNOS


def describe(exc: BaseException) -> str | None:
    """The one line for an environment error (None for anything else, which is a bug and keeps its traceback)."""
    if isinstance(exc, UnicodeDecodeError):
        where = _file_in_traceback(exc) or "a file this task read"
        return f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start}); is it the file that was meant?"
    if isinstance(exc, json.JSONDecodeError):
        where = _file_in_traceback(exc) or "a JSON file this task read"
        return (f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); the file is damaged "
                "or not the one that was meant")
    if isinstance(exc, OSError):
        return _describe_os_error(exc)
    return None


def _describe_os_error(exc: OSError) -> str:
    where = _filenames(exc) or _file_in_traceback(exc)
    if is_no_space(exc):
        return no_space_message(where or "the output (the file was not named)")
    reason = exc.strerror or type(exc).__name__
    advice = {
        errno.EACCES: "check its owner and permissions",
        errno.EPERM: "check its owner and permissions",
        errno.EROFS: "the file system is read-only; use --runs-dir on a writable one",
        errno.ENOENT: "check the path (an input may have been moved or deleted)",
        errno.ENOTDIR: "a part of the path is a file, not a directory",
        errno.EISDIR: "a directory is where a file was expected",
    }.get(exc.errno or -1)
    text = f"{where}: {reason}" if where else reason
    return f"{text}; {advice}" if advice else text


def _filenames(exc: OSError) -> str:
    if exc.filename is None:
        return ""
    if exc.filename2 is not None:  # rename, link: both ends matter
        return f"{exc.filename} -> {exc.filename2}"
    return str(exc.filename)


def _file_in_traceback(exc: BaseException) -> str:
    """The innermost path a frame of the failing call was working on (a path object's frame or local).

    ``json.loads`` and ``bytes.decode`` never see the file they are given the contents of, and a ``write()`` on
    an open file raises without a name; the frames that led there usually hold it (``Path.read_text``'s own
    ``self``, a caller's ``path``). Only existing files count, so a stray path elsewhere is not blamed.
    """
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            if isinstance(value, PurePath) and _is_file(value):
                return str(value)
    return ""


def _is_file(path: PurePath) -> bool:
    try:
        return bool(getattr(path, "is_file", lambda: False)())
    except OSError:
        return False


def no_space_in(text: str) -> str | None:
    """If ``text`` (a stage's output) says the disk is full: the file it names, or "" when it names none."""
    if not _NO_SPACE_MARKERS.search(text):
        return None
    for pattern in (_QUOTED_AFTER, _PATH_BEFORE):
        found = pattern.findall(text)
        if found:
            return str(found[-1])  # the last one: closest to the failure that ended the stage
    return ""


def stage_exit_code(main: Callable[[], int]) -> int:
    """Run a stage's ``main``; an environment error becomes its one ``error:`` line (the host shows it) and exit 1.

    Stages print ``error: <message>`` for what the user can fix; the runners turn that line into the host's
    one-line error, so a full disk inside a stage is named with its file instead of ending in a traceback.
    """
    try:
        return main()
    except ENVIRONMENT_ERRORS as exc:
        message = describe(exc)
        assert message is not None  # every ENVIRONMENT_ERRORS type is described
        print(f"error: {message}", file=sys.stderr, flush=True)
        return 1
