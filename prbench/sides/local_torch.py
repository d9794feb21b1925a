"""The torch (or Triton) an interpreter imports, found without importing it: a local side's environment (the overlay
shadows it; the local runner asks whether it keeps bytecode). ``SCRUBBED``: variables of the calling shell
that would silently change what a stage measures, never passed on.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

SCRUBBED = ("PYTHONPATH", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_FORCE_DISABLE_CACHES")


# The package's name is the script's argument (sys.argv[1]).
_FIND_PACKAGE = ("import importlib.util as u, sys; s = u.find_spec(sys.argv[1]); "
                 "print(sys.implementation.cache_tag); print(s.submodule_search_locations[0] if s else '')")


@dataclass(frozen=True)
class InstalledTorch:
    """Where an interpreter imports torch from, found without importing it."""

    cache_tag: str  # the interpreter's bytecode tag, e.g. cpython-312
    package: Path | None  # the torch (or asked) package directory; None when that interpreter has none


def installed_torch(python: str, package: str = "torch") -> InstalledTorch | None:
    """Ask ``python`` (a process of a fraction of a second) with the environment its stages get, so that a
    PYTHONPATH of the calling shell does not decide; None when it does not run. ``package``: another package found
    the same way (a Triton A/B's ``triton``)."""
    shell = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    try:
        proc = subprocess.run([python, "-c", _FIND_PACKAGE, package], capture_output=True, text=True, check=False,
                              env=shell)
    except OSError:
        return None
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) < 2:
        return None
    return InstalledTorch(cache_tag=lines[-2], package=Path(lines[-1]) if lines[-1] else None)
