"""Keep the Triton IR a GPU run really compiled for a few of its changed kernel pairs: fixtures for `invoke ir`.

    python benchmarks/triton_ir_fixtures.py --run RUN_DIR --out DIR [--pairs N]

`invoke ir` compiles a run's changed Triton pairs for a named target without a GPU, each kernel's *first*
autotuning config; what a GPU run compiled (every config it autotuned, for the GPU it ran on) stays in the
side's Triton caches under ``<run>/<side>/work/`` (the suite's and the kernel workers'), one ``<cache key>/``
directory per compiled version holding ``<name>.ttir .ttgir .llir .ptx|.amdgcn .json``. This takes the run's
changed Triton pairs (paired as the report pairs them: `prbench.commands.ir.changed_triton_pairs`), keeps
up to N whose IR both sides' caches hold (one pair per kind of kernel first: persistent reduction, looped
reduction, pointwise, ...), and copies every distinct version of each kernel (by its TTGIR) to
``DIR/<side>/<kernel name>/<cache key>/``, which `analysis.kernels.ir.read_kernel_ir` reads as it is. The list
goes to ``DIR/pairs.json``::

    {"format_version": 1, "run": "<run id>", "changed": <changed Triton pairs in the run>,
     "pairs": [{"base": "<name>", "pr": "<name>", "base_versions": ["<cache key>", ...], "pr_versions": [...]}]}
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.kernels.ir import IR_SUFFIXES  # noqa: E402
from foundation import atomic_io  # noqa: E402
from foundation.errors import UserError  # noqa: E402
from foundation.flag_values import whole_number  # noqa: E402
from foundation.formats.run_layout import SIDES, RunLayout  # noqa: E402
from foundation.records import check_format_version, read_json  # noqa: E402
from prbench.commands.cli import OneLineParser  # noqa: E402

PAIRS_FILE = "pairs.json"
FORMAT_VERSION = 1
DEFAULT_PAIRS = 4


@dataclass(frozen=True)
class KeptPair:
    base: str
    pr: str
    base_versions: tuple[str, ...]
    pr_versions: tuple[str, ...]

    def versions(self, side: str) -> tuple[str, ...]:
        return self.base_versions if side == "base" else self.pr_versions

    def name(self, side: str) -> str:
        return self.base if side == "base" else self.pr


@dataclass(frozen=True)
class KeptPairs:
    run: str
    changed: int
    pairs: tuple[KeptPair, ...]


def cached_versions(side_work: Path, name: str) -> dict[str, Path]:
    """Every distinct compiled version of kernel ``name`` in a side's caches: cache key → its directory (two
    caches that compiled the same TTGIR are one version; the first key in path order names it)."""
    found: dict[str, Path] = {}
    seen: set[str] = set()
    for ttgir in sorted(side_work.rglob(f"{name}.ttgir")):
        digest = hashlib.sha256(ttgir.read_bytes()).hexdigest()
        if digest not in seen and ttgir.parent.name not in found:
            seen.add(digest)
            found[ttgir.parent.name] = ttgir.parent
    return found


def kind_of(name: str) -> str:
    """``triton_per_fused_…`` → ``per``: the kind of kernel Inductor's name says (persistent, looped, pointwise)."""
    parts = name.split("_")
    return parts[1] if len(parts) > 2 else name


def choose(pairs: Iterable[tuple[str, str]], limit: int) -> list[tuple[str, str]]:
    """Up to ``limit`` pairs, one of each kind of base kernel in turn, in name order within a kind."""
    by_kind: dict[str, list[tuple[str, str]]] = {}
    for pair in sorted(pairs):
        by_kind.setdefault(kind_of(pair[0]), []).append(pair)
    chosen: list[tuple[str, str]] = []
    while len(chosen) < limit and any(by_kind.values()):
        for kind in sorted(by_kind):
            if by_kind[kind] and len(chosen) < limit:
                chosen.append(by_kind[kind].pop(0))
    return chosen


def copy_version(source: Path, name: str, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for suffix in IR_SUFFIXES:
        if (path := source / f"{name}{suffix}").is_file():
            shutil.copyfile(path, target / path.name)


def keep(run: Path, out: Path, limit: int) -> KeptPairs:
    from prbench.commands.ir import finished_changed_pairs

    changed = finished_changed_pairs(run, "a CPU run's kernels are C++")
    works = {side: RunLayout(run).variant(side).work for side in SIDES}
    found = {}
    for base, pr in changed:
        versions = (cached_versions(works["base"], base), cached_versions(works["pr"], pr))
        if all(versions):
            found[(base, pr)] = versions
    if not found:
        raise UserError(f"--run {run.name}: none of its {len(changed)} changed Triton pairs has IR in both sides' "
                        f"caches ({works['base']}, {works['pr']})")
    kept = []
    for base, pr in choose(found, limit):
        base_versions, pr_versions = found[(base, pr)]
        for side, name, side_versions in (("base", base, base_versions), ("pr", pr, pr_versions)):
            for key, directory in side_versions.items():
                copy_version(directory, name, out / side / name / key)
        kept.append(KeptPair(base, pr, tuple(base_versions), tuple(pr_versions)))
    result = KeptPairs(run.name, len(changed), tuple(kept))
    atomic_io.write_json(out / PAIRS_FILE, {
        "format_version": FORMAT_VERSION, "run": result.run, "changed": result.changed,
        "pairs": [{"base": p.base, "pr": p.pr, "base_versions": list(p.base_versions),
                   "pr_versions": list(p.pr_versions)} for p in result.pairs]})
    return result


def read_kept_pairs(directory: Path) -> KeptPairs:
    """``DIR/pairs.json`` as `keep` wrote it."""
    path = Path(directory) / PAIRS_FILE
    data = read_json(path, "the kept Triton IR's pairs.json")
    if not isinstance(data, dict) or not isinstance(data.get("pairs"), list):
        raise UserError(f"{path}: not a kept-IR list (expected an object with pairs)")
    check_format_version(data, str(path), FORMAT_VERSION)
    try:
        pairs = tuple(KeptPair(str(p["base"]), str(p["pr"]), tuple(map(str, p["base_versions"])),
                               tuple(map(str, p["pr_versions"]))) for p in data["pairs"])
        return KeptPairs(str(data["run"]), int(data["changed"]), pairs)
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{path}: a pair lacks {exc} (expected base, pr, base_versions, pr_versions)") from None


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished GPU comparison's run directory")
    parser.add_argument("--out", type=Path, required=True, help="where <side>/<kernel>/<cache key>/ and pairs.json go")
    parser.add_argument("--pairs", default=str(DEFAULT_PAIRS),
                        help=f"changed pairs to keep, at most (default {DEFAULT_PAIRS})")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        kept = keep(args.run, args.out, whole_number("--pairs", args.pairs, minimum=1))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for pair in kept.pairs:
        print(f"{pair.base} ({len(pair.base_versions)} versions) -> {pair.pr} ({len(pair.pr_versions)} versions)")
    print(f"kept {len(kept.pairs)} of {kept.changed} changed Triton pairs in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
