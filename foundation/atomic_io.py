"""Atomic file output: every file we write appears whole or not at all."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; rename it onto ``target`` only if the block succeeds.

    The temporary file lives in the same directory so the final ``os.replace`` is atomic, and it is removed
    on any failure (including KeyboardInterrupt) so no partial file is ever left behind.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, target)
    except OSError as exc:
        # A write() on an open file fails without a name (a full disk, say); the user needs to know which file.
        if exc.filename is None:
            exc.filename = str(target)
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(target: str | os.PathLike[str], text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(target: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def write_json(target: str | os.PathLike[str], obj: Any) -> None:
    write_text(target, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
