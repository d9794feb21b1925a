"""A stand-in stage for the stop tests (stdlib only: it also runs in the bare base image): a stage that takes long.

``python -m tests.support.slow_stage --marker M --beat B --out O --seconds S``: the first attempt writes ``M`` (its pid
and host name, the container's id in a container), keeps touching ``B`` for ``S`` seconds, then writes ``O``. A later
attempt (``M`` is there) watches ``B`` for a second and writes ``O``: ``competing`` when it was touched meanwhile,
i.e. an earlier attempt still runs somewhere, else ``alone`` (a beat that merely ended a moment ago is not one: on a
fast machine a retry starts within a second of its first attempt's removal). Extra arguments (an executor's
``--device``, ``--node``) are accepted and ignored.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

_BEAT_S = 0.2


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--marker", type=Path, required=True)
    parser.add_argument("--beat", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=300.0)
    args, _ = parser.parse_known_args()
    if args.marker.exists():
        _write(args.out, "competing" if _beats(args.beat, 5 * _BEAT_S) else "alone")
        return 0
    _write(args.marker, f"{os.getpid()} {socket.gethostname()}")
    print("[slow_stage] 1/1 started", flush=True)
    deadline = time.monotonic() + args.seconds
    try:
        while time.monotonic() < deadline:
            args.beat.touch()
            time.sleep(_BEAT_S)
    except KeyboardInterrupt:
        return 130
    _write(args.out, "finished")
    return 0


def _beats(beat: Path, within: float) -> bool:
    """Whether ``beat`` is touched within the next ``within`` seconds."""
    def mtime() -> int | None:
        return beat.stat().st_mtime_ns if beat.exists() else None

    before, deadline = mtime(), time.monotonic() + within
    while time.monotonic() < deadline:
        time.sleep(_BEAT_S / 4)
        if mtime() != before:
            return True
    return False


def _write(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


if __name__ == "__main__":
    sys.exit(main())
