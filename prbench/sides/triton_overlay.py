"""A Python-only Triton patch as an overlay on the installed Triton: a Triton A/B on a local recipe
(``invoke compare --recipe cpu-local --triton-pr fix.patch``), where nothing is built.

The patch is written against the Triton source tree, as a Docker recipe's Triton A/B applies it to the Triton it
builds: the package's Python under ``python/triton/`` and each backend's under ``third_party/<backend>/backend/``,
which the installed package holds as ``triton/`` and ``triton/backends/<backend>/`` (Triton's setup copies them
there). `triton_overlay` reads such a patch, names its files as the installed package does, and returns the
`PythonOverlay` of the ``triton`` package (paths already under ``triton/`` are taken as they are). Python outside
the package (tests, tutorials) is left out as it is for torch; a change to anything but Python (C++, MLIR, CMake)
needs a rebuild, and is refused with the reason.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from prbench.sides.overlay import PythonOverlay, read_patch

PACKAGE = "triton"
_DIFF_GIT = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
_RENAME = re.compile(r"^(rename|copy) (from|to) (\S+)$")
_FILE_LINE = re.compile(r"^(---|\+\+\+) ([ab]/)?(\S+)(.*)$")


def package_path(path: str) -> str:
    """A Triton source tree's path as the installed package names it (other paths as they are)."""
    if path.startswith("python/triton/"):
        return path.removeprefix("python/")
    parts = path.split("/")
    if len(parts) > 3 and parts[0] == "third_party" and parts[2] == "backend":
        return "/".join([PACKAGE, "backends", parts[1], *parts[3:]])
    return path


def in_package_paths(text: str) -> str:
    """The diff with every file's path made the installed package's; the hunks as they are. A ``---`` line is a
    file's only right before its ``+++`` line (inside a hunk it is a removed line that starts with ``--``)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    for i, line in enumerate(lines):
        header = _DIFF_GIT.match(line.rstrip("\n"))
        renamed = _RENAME.match(line.rstrip("\n"))
        file_line = _FILE_LINE.match(line.rstrip("\n"))
        pairs = (file_line is not None and (
            (file_line.group(1) == "---" and i + 1 < len(lines) and lines[i + 1].startswith("+++ "))
            or (file_line.group(1) == "+++" and i > 0 and lines[i - 1].startswith("--- "))))
        end = "\n" if line.endswith("\n") else ""
        if header:
            out.append(f"diff --git a/{package_path(header.group(1))} b/{package_path(header.group(2))}{end}")
        elif renamed:
            out.append(f"{renamed.group(1)} {renamed.group(2)} {package_path(renamed.group(3))}{end}")
        elif pairs and file_line is not None and file_line.group(3) != "/dev/null":
            prefix = file_line.group(2) or ""
            out.append(f"{file_line.group(1)} {prefix}{package_path(file_line.group(3))}{file_line.group(4)}{end}")
        else:
            out.append(line)
    return "".join(out)


def triton_overlay(path: Path, flag: str = "--triton-pr") -> PythonOverlay:
    """The overlay of a Python-only Triton patch file on the installed ``triton`` package (one line naming ``flag``
    when the file cannot be one)."""
    text = read_patch(path, flag)
    return PythonOverlay.from_text(in_package_paths(text), origin=str(path), flag=f"{flag} {path}", package=PACKAGE)


def patch_label(path: Path) -> str:
    """How the report and the run's records name the patch: ``fix.patch sha256:1a2b3c4d5e6f`` (its file's bytes)."""
    return f"{path.name} sha256:{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"
