"""Build-time checks run inside the image (stdlib only: it runs before and after torch is installed).

``--absent NAMES``: none of these distributions is installed (after removing the base's torch/Triton).
``--one-triton``: exactly one Triton distribution, under any of its names, is installed.
``--import-from NAME=DIR``: ``import NAME`` would load the package from under DIR (our build), found
without importing it so the check needs no GPU.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path

TRITON_NAMES = ("triton", "pytorch-triton", "pytorch-triton-rocm", "triton-rocm")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, list[str]]:
    """Normalized distribution name → versions found (a name twice means two copies on sys.path)."""
    found: dict[str, list[str]] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(_normalize(name), []).append(dist.version)
    return found


def check_absent(names: list[str]) -> list[str]:
    present = installed()
    return [f"{n} {present[_normalize(n)]} is still installed" for n in names if _normalize(n) in present]


def check_one_triton() -> list[str]:
    present = installed()
    tritons = [f"{n}=={v}" for n in TRITON_NAMES for v in present.get(n, [])]
    if len(tritons) != 1:
        return [f"expected exactly one Triton distribution, found {len(tritons)}: {', '.join(tritons) or 'none'}"]
    return []


def check_import_from(spec: str) -> list[str]:
    name, _, root = spec.partition("=")
    found = importlib.util.find_spec(name)
    if found is None or found.origin is None:
        return [f"'import {name}' finds nothing"]
    if not Path(found.origin).resolve().is_relative_to(Path(root).resolve()):
        return [f"'import {name}' loads {found.origin}, not the tree built under {root}"]
    return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--absent", nargs="*", default=[])
    parser.add_argument("--one-triton", action="store_true")
    parser.add_argument("--import-from", action="append", default=[])
    args = parser.parse_args()
    problems = check_absent(args.absent)
    if args.one_triton:
        problems += check_one_triton()
    for spec in args.import_from:
        problems += check_import_from(spec)
    for problem in problems:
        print(f"prbench check failed: {problem}", file=sys.stderr)
    if not problems:
        print("prbench check: ok", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
