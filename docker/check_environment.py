"""Build-time checks run inside the image (stdlib only: it runs before and after torch is installed).

``--absent NAMES``: none of these distributions is installed (after removing the base's torch/Triton).
``--one-triton``: exactly one Triton distribution, under any of its names, is installed.
``--import-from NAME=DIR``: ``import NAME`` would load the package from under DIR (our build), found
without importing it so the check needs no GPU.
``--version NAME==VERSION``: that distribution is installed at exactly that version (a pinned wheel).
``--site-of NAME``: print the directory ``import NAME`` loads the package from the parent of (site-packages):
where a Python overlay of a wheel's package is applied.
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


def check_version(spec: str) -> list[str]:
    name, _, version = spec.partition("==")
    found = installed().get(_normalize(name), [])
    if found != [version]:
        return [f"expected {name}=={version}, found {', '.join(found) or 'none'}"]
    return []


def site_of(name: str) -> str:
    found = importlib.util.find_spec(name)
    if found is None or not found.submodule_search_locations:
        raise SystemExit(f"prbench check failed: 'import {name}' finds no package")
    return str(Path(next(iter(found.submodule_search_locations))).resolve().parent)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--absent", nargs="*", default=[])
    parser.add_argument("--one-triton", action="store_true")
    parser.add_argument("--import-from", action="append", default=[])
    parser.add_argument("--version", action="append", default=[])
    parser.add_argument("--site-of")
    args = parser.parse_args()
    if args.site_of:
        print(site_of(args.site_of))
        return 0
    problems = check_absent(args.absent)
    if args.one_triton:
        problems += check_one_triton()
    for spec in args.import_from:
        problems += check_import_from(spec)
    for spec in args.version:
        problems += check_version(spec)
    for problem in problems:
        print(f"prbench check failed: {problem}", file=sys.stderr)
    if not problems:
        print("prbench check: ok", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
