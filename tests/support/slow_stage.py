"""A stand-in stage for the stop tests (stdlib only: it also runs in the bare base image): a stage that takes long.

``python -m tests.support.slow_stage --marker M --beat B --out O --seconds S``: the first attempt writes ``M`` (its pid
and host name, the container's id in a container), keeps touching ``B`` for ``S`` seconds, then writes ``O``. A later
attempt (``M`` is there) writes ``O`` at once: ``alone``, or ``competing`` when ``B`` was touched within the last
second, i.e. an earlier attempt is still running somewhere. Extra arguments (an executor's ``--device``,
``--node``) are accepted and ignored.
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
        recent = args.beat.exists() and time.time() - args.beat.stat().st_mtime < 5 * _BEAT_S
        _write(args.out, "competing" if recent else "alone")
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


def _write(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


if __name__ == "__main__":
    sys.exit(main())
