"""Build-time checks run inside the image (stdlib only: it runs before and after torch is installed).

``--absent NAMES``: none of these distributions is installed (after removing the base's torch/Triton).
``--one-triton``: exactly one Triton distribution, under any of its names, is installed.
``--import-from NAME=DIR``: ``import NAME`` would load the package from under DIR (our build), found
without importing it so the check needs no GPU.
``--version NAME==VERSION``: that distribution is installed at exactly that version (a pinned wheel).
``--site-of NAME``: print the directory ``import NAME`` loads the package from the parent of (site-packages):
where a Python overlay of a wheel's package is applied.
``--keep-tritons FILE``: a wheel side keeps the Triton its pinned wheels require: every Triton distribution
installed must be one FILE (the pinned wheels' ``brought-by.json``, written by prbench.images.wheels) lists at that
version, and each kept one is printed with the requirement that brought it; any other is a failure naming what
brought it, as the ``--brought-by FILE`` records (the other install steps') say.

``--absent`` is what a build must not carry (the base image's torch and Triton, before ours is installed); it is
never applied to what a wheel requires.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import re
import sys
from pathlib import Path

TRITON_NAMES = ("triton", "pytorch-triton", "pytorch-triton-rocm", "triton-rocm")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(path: list[str] | None = None) -> dict[str, list[str]]:
    """Normalized distribution name → versions found (a name twice means two copies on sys.path, or on ``path``)."""
    found: dict[str, list[str]] = {}
    dists = importlib.metadata.distributions() if path is None else importlib.metadata.distributions(path=path)
    for dist in dists:
        name = dist.metadata["Name"]
        if name:
            found.setdefault(_normalize(name), []).append(dist.version)
    return found


def check_absent(names: list[str], path: list[str] | None = None) -> list[str]:
    present = installed(path)
    return [f"{n} {present[_normalize(n)]} is still installed" for n in names if _normalize(n) in present]


def check_one_triton() -> list[str]:
    present = installed()
    tritons = [f"{n}=={v}" for n in TRITON_NAMES for v in present.get(n, [])]
    if len(tritons) != 1:
        return [f"expected exactly one Triton distribution, found {len(tritons)}: {', '.join(tritons) or 'none'}"]
    return []


def _brought(file: str) -> dict[str, tuple[str, str]]:
    """Normalized name → (version, the requirement that brought it), from an install step's brought-by.json."""
    try:
        with open(file, encoding="utf-8") as handle:
            wheels = json.load(handle)["wheels"]
        return {_normalize(w["name"]): (str(w["version"]), str(w["brought_by"])) for w in wheels}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"prbench check failed: {file}: not a brought-by record ({exc})") from None


def check_keep_tritons(file: str, others: list[str], path: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(problems, kept): the Triton distributions installed that the pinned wheels brought are kept, each with the
    requirement that brought it; any other, or a required one missing, is a problem."""
    present = installed(path)
    allowed = _brought(file)
    elsewhere = {name: entry for other in others for name, entry in _brought(other).items()}
    problems: list[str] = []
    kept: list[str] = []
    for name in TRITON_NAMES:
        versions = present.get(name, [])
        wanted = allowed.get(name)
        if wanted is not None and versions == [wanted[0]]:
            kept.append(f"{name} {wanted[0]} kept: {wanted[1]}")
        elif versions:
            came = elsewhere.get(name)
            why = f", it came with {came[1]}" if came else ""
            problems.append(f"{name} {versions} is installed, but no pinned wheel requires it{why}")
        elif wanted is not None:
            problems.append(f"{name}=={wanted[0]} is not installed, though {wanted[1]}")
    return problems, kept


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
    parser.add_argument("--keep-tritons")
    parser.add_argument("--brought-by", action="append", default=[])
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
    if args.keep_tritons:
        triton_problems, kept = check_keep_tritons(args.keep_tritons, args.brought_by)
        problems += triton_problems
        for line in kept:
            print(f"prbench check: {line}", flush=True)
    for problem in problems:
        print(f"prbench check failed: {problem}", file=sys.stderr)
    if not problems:
        print("prbench check: ok", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
