"""How a side's Inductor compiles its C++ kernels: the record (``prbench-cpp-build.json`` in the side's Inductor
cache, written by ``stages.support.environment.record_cpp_build``) and the comparison of two sides' records.

Inductor keys a C++ kernel's binary by its source *and* its compile command line (the flags, the vector ISA, the
compiler, the include and library directories), so identical source is identical code only when the command is the
same. The record holds the command lines Inductor would build a kernel and its module with in that side's
environment (after the variant's Inductor config overrides). The sides' commands are compared without their
directories: each absolute path keeps only its last component, because two sides installed under different
prefixes (each recipe's own environment) compile the same code with the same flags, and a flag (``-O3``,
``-march=native``, ``-ffast-math``), a define, the compiler or the Python version still differ where they differ.
The command does not see what the kernels include: the record also names the torch build (its version and commit:
two releases compile identical source against other headers) and a digest of the headers a C++ kernel includes
(ATen's vector classes and Inductor's prefix header: a PR may change them and no kernel's source), compared as they
are. Pure data: no torch import.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

from foundation import atomic_io

CPP_BUILD_RECORD = "prbench-cpp-build.json"
CPP_BUILD_VERSION = 2

# An absolute path inside a token (``-I/opt/venv/.../include``, ``/usr/bin/g++``, ``-Wl,-rpath,/x/lib``): its
# directories, up to its last component.
_DIRECTORIES = re.compile(r"/(?:[^/\s,:=]*/)*")


def without_directories(command: str) -> tuple[str, ...]:
    """A compile command's arguments, each absolute path cut to its last component."""
    return tuple(_DIRECTORIES.sub("", token) for token in command.split())


def write_cpp_build(cache_dir: Path, commands: list[str] | None, torch_build: str = "", headers: str = "") -> None:
    """Record the side's compile commands, torch build and header digest in its cache; None commands (they could
    not be made) removes an older record, so that a stale one never vouches for this environment."""
    path = cache_dir / CPP_BUILD_RECORD
    if commands is None:
        path.unlink(missing_ok=True)
        return
    atomic_io.write_json(path, {"format_version": CPP_BUILD_VERSION, "commands": commands,
                                "torch": torch_build, "headers": headers})


def read_cpp_build(cache_dir: Path) -> tuple[tuple[str, ...], ...] | None:
    """The side's recorded build as one comparable value: each command without its directories, then the torch
    build and the header digest; None when there is no readable record of this version."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        record = json.loads((cache_dir / CPP_BUILD_RECORD).read_text(encoding="utf-8"))
        commands = record.get("commands")
        if record.get("format_version") == CPP_BUILD_VERSION and isinstance(commands, list) and commands:
            return (*(without_directories(str(c)) for c in commands),
                    (str(record.get("torch", "")), str(record.get("headers", ""))))
    return None


def cpp_build_difference(base_cache: Path, pr_cache: Path) -> str | None:
    """Why the sides' identical C++ source is not identical code, in words ("the torch build differs"); None when
    both sides recorded their build and the records are equal without their directories. A side without a record
    counts as different: its identical source is then not known to be identical code."""
    base, pr = read_cpp_build(base_cache), read_cpp_build(pr_cache)
    if base is None or pr is None:
        return f"{'base' if base is None else 'the PR'} recorded no C++ build ({CPP_BUILD_RECORD})"
    if base == pr:
        return None
    (base_torch, base_headers), (pr_torch, pr_headers) = base[-1], pr[-1]
    differ = [what for what, differs in (("the torch build", base_torch != pr_torch),
                                         ("the compile commands", base[:-1] != pr[:-1]),
                                         ("the kernels' headers", base_headers != pr_headers)) if differs]
    return " and ".join(differ) + (" differ" if len(differ) > 1 else " differs")


def same_cpp_build(base_cache: Path, pr_cache: Path) -> bool:
    """Whether both sides compile C++ kernels alike (`cpp_build_difference` finds no difference)."""
    return cpp_build_difference(base_cache, pr_cache) is None
