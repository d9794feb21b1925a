"""Stage ``organize``: turn an Inductor cache (directory or .tar/.tar.gz) into standalone kernels plus an index.

    python -m stages.organize --cache DIR|ARCHIVE --out DIR [--rep 100] [--warmup 10] [--extract-to DIR]

Writes ``<out>/<category>/<kernel_name>.py`` (Triton; ``cpp/<name>.cpp`` for the default CPU backend's C++
kernels), ``<out>/graphs/<graph>.py`` (the compiled graph modules) and ``<out>/index.csv``. Kernels come from
the cache's kernel files *and* from the source every graph module embeds (codegen-only runs write just the
first kernel file). Identical kernels (category + body hash + shape key) are stored once; ``calls`` sums their
launches in all graphs' ``call()``, ``graphs`` names those graphs. Each Triton file's benchmark line is
rewritten (rep/warmup, no rejected ``return_mode``) and its device indices set to 0.

The tree is written into a temporary directory next to ``--out`` and moved into place only when everything
is there, so an error leaves ``--out`` as it was. A compiled graph module that was cut short (it does not parse,
or has no ``call()``) is a warning: its kernels keep their index rows and the kernel runner gives each a
failure row, instead of silently losing the C++ kernels only that module holds.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from analysis.kernels.benchmark_line import normalize_device_indices, prepare_kernel_source
from analysis.kernels.identity import (
    KernelIdentity,
    KernelParseError,
    identify_cpp,
    identify_triton,
    is_triton_kernel_source,
    triton_category,
)
from foundation.atomic_io import write_text
from foundation.errors import UserError
from foundation.formats.dynamo_csv import read_graph_models as read_suite_graph_models
from foundation.formats.kernel_index import (
    EmbeddedKernel,
    IndexRow,
    benchmark_model_name,
    cut_kernels,
    embedded_kernels,
    graph_file_stem,
    graph_key,
    graph_module_problem,
    launch_counts,
    looks_like_graph_module,
    write_index,
)
from foundation.formats.run_layout import GRAPHS_DIR, INDEX_CSV
from foundation.records import check_regular
from stages.entry import StageArgumentParser, run_as_script


@dataclass
class OrganizedKernel:
    identity: KernelIdentity
    text: str
    source: str
    calls: int = 0
    graphs: list[str] = field(default_factory=list)
    path: str = ""


@dataclass
class CacheScan:
    root: Path
    kernel_files: list[Path]
    wrappers: list[Path]
    broken_wrappers: dict[Path, str] = field(default_factory=dict)  # graph module → why it cannot be run
    origin: Path | None = None  # the cache as the user named it (``root`` may be a temporary extraction)


# --- input ---------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def open_cache(cache: Path, extract_to: Path | None = None) -> Iterator[Path]:
    """Yield a directory holding the cache: the directory itself, or an archive extracted (to a temp dir)."""
    if cache.is_dir():
        yield cache
        return
    if not cache.exists():
        raise UserError(f"--cache {cache}: no such directory or archive")
    if extract_to is not None:
        extract_archive(cache, extract_to)
        yield extract_to
        return
    with tempfile.TemporaryDirectory(prefix="prbench-cache-") as tmp:
        extract_archive(cache, Path(tmp))
        yield Path(tmp)


def _extract_data(tar: tarfile.TarFile, destination: Path) -> None:
    """Extract an untrusted archive refusing absolute paths, links out of the tree and device files: the "data"
    filter where this Python has it (3.10.12+, 3.11.4+), the same checks by hand on older ones (bookworm's 3.11.2,
    the Python of images built on it)."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(destination, filter="data")
        return
    root = destination.resolve()
    for member in tar.getmembers():
        target = (root / member.name).resolve()
        link = (target.parent / member.linkname).resolve() if member.issym() else (root / member.linkname).resolve()
        unsafe = (os.path.isabs(member.name) or not target.is_relative_to(root) or member.isdev()
                  or ((member.issym() or member.islnk()) and not link.is_relative_to(root)))
        if unsafe:
            raise tarfile.TarError(f"{member.name}: refused (outside the archive's tree, or a device file)")
    tar.extractall(destination)


def extract_archive(archive: Path, destination: Path) -> None:
    if archive.exists():  # a FIFO or device would make tarfile wait forever
        check_regular(archive, "a .tar or .tar.gz of an Inductor cache (--cache)")
    try:
        with tarfile.open(archive, "r:*") as tar:
            destination.mkdir(parents=True, exist_ok=True)
            _extract_data(tar, destination)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"--cache {archive}: cannot read archive ({reason}); expected a .tar or .tar.gz of an "
                        "Inductor cache") from None


def scan_cache(root: Path, cache: Path | None = None) -> CacheScan:
    """The kernel files and graph modules under ``root``; ``cache`` is what the user named (an archive is
    extracted to a temporary ``root``, which must not be what an error message shows)."""
    kernels, wrappers = [], []
    broken: dict[Path, str] = {}
    for path in sorted(root.rglob("*.py")):
        text = _read(path)
        if looks_like_graph_module(text):
            problem = graph_module_problem(text)
            if problem:
                broken[path] = problem
            wrappers.append(path)
        elif is_triton_kernel_source(text):
            kernels.append(path)
    if not kernels and not wrappers:
        raise UserError(f"--cache {cache or root}: no Inductor kernels or compiled graphs found (expected "
                        "<xx>/c<hash>.py files from TORCHINDUCTOR_CACHE_DIR)")
    return CacheScan(root, kernels, wrappers, broken, cache or root)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


# --- collection ------------------------------------------------------------------------------------------------


class KernelCollection:
    """Distinct kernels keyed by (backend, category, body hash, shape key), in first-seen order."""

    def __init__(self) -> None:
        self.kernels: dict[tuple[str, str, str, str], OrganizedKernel] = {}

    def add(self, identity: KernelIdentity, text: str, source: str) -> OrganizedKernel:
        key = (identity.backend, *identity.match_key)
        if key not in self.kernels:
            self.kernels[key] = OrganizedKernel(identity, text, source)
        return self.kernels[key]


def identify_kernel_file(text: str, label: str) -> KernelIdentity:
    """Identity of a Triton kernel file; a file that cannot be parsed is kept whole (the runner reports it)."""
    try:
        return identify_triton(text)
    except KernelParseError as exc:
        print(f"warning: {label}: {exc}; kept unparsed", flush=True)
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
        name = f"unparsed_{Path(label).stem}"
        return KernelIdentity(triton_category(text), name, digest, "", "", "triton")


def collect(scan: CacheScan, graph_models: dict[str, list[str]] | None = None
            ) -> tuple[KernelCollection, dict[str, str]]:
    """All kernels of the cache plus {graph file name: graph module text}.

    ``graph_models`` maps a graph module's file stem to the models that compiled it (the suite records it);
    without it the model comes from the module's benchmark name, which Inductor only sets under ``--only``.
    """
    graph_models = graph_models or {}
    collection = KernelCollection()
    for path in scan.kernel_files:
        text = _read(path)
        label = path.relative_to(scan.root).as_posix()
        collection.add(identify_kernel_file(text, label), text, label)
    graphs: dict[str, str] = {}
    for path, text, graph_file, graph_names in _graph_modules(scan, graph_models):
        graphs[graph_file] = text
        embedded = embedded_kernels(text)
        problem = scan.broken_wrappers.get(path)
        if problem:
            embedded += cut_kernels(text, embedded)
            label = f"{scan.origin or scan.root}: {path.relative_to(scan.root).as_posix()}"
            names = ", ".join(k.variable for k in embedded) or "none found"
            print(f"warning: {label}: compiled graph module {problem}; its {len(embedded)} kernels ({names}) "
                  "are kept and will be failure rows", flush=True)
        counts = launch_counts(text, [k.variable for k in embedded])
        for kernel in embedded:
            origin = f"{GRAPHS_DIR}/{graph_file}"
            if kernel.backend == "cpp":
                identity = identify_cpp(kernel.variable, kernel.source, kernel.arg_types)
            elif kernel.complete:
                identity = identify_kernel_file(kernel.source, origin)
            else:
                identity = cut_identity(kernel)
            entry = collection.add(identity, kernel.source, origin)
            entry.calls += counts[kernel.variable]
            entry.graphs.extend(name for name in graph_names if name not in entry.graphs)
    return collection, graphs


def _graph_modules(scan: CacheScan, graph_models: dict[str, list[str]]
                   ) -> list[tuple[Path, str, str, list[str]]]:
    """(path, text, organized file name, graph names) of each graph module, in the order of their graph keys
    (``<model>/<aot id>``, which base and PR share), not the cache's.

    A C++ kernel is timed in the first graph it is seen in, under its name there (``plan_jobs``). In the cache's
    order a byte-identical GELU-tanh kernel was first seen in GPT2's graph on one side and in Albert's on the
    other: another launch, on other buffers and values, 3.6–5.7 % apart in one process, and the identical-kernel
    control failed (``benchmarks/identical_bias.py``, docs/cost-model.md). In key order both sides time it in
    the same model's graph.
    """
    modules = []
    for path in scan.wrappers:
        text = _read(path)
        graph_file = f"{graph_file_stem(text, path.stem)}.py"
        models = graph_models.get(path.stem) or [m for m in [benchmark_model_name(text)] if m]
        names = [f"{model}/{graph_file[:-3]}" for model in models] or [graph_file[:-3]]
        modules.append((path, text, graph_file, names))
    return sorted(modules, key=lambda m: (min(graph_key(name) for name in m[3]), m[2]))


def cut_identity(kernel: EmbeddedKernel) -> KernelIdentity:
    """A Triton kernel whose source the module's end cut off: named by its variable, keyed by what is there."""
    digest = hashlib.sha256(kernel.source.encode("utf-8")).hexdigest()[:16]
    return KernelIdentity(triton_category(kernel.source, kernel.variable), kernel.variable, digest, "", "", "triton")


# --- output ----------------------------------------------------------------------------------------------------


def assign_paths(collection: KernelCollection) -> None:
    """``<category>/<name>.py``; a second, different kernel with the same name gets ``.<hash8>`` (paas style)."""
    taken: set[str] = set()
    for kernel in collection.kernels.values():
        ident = kernel.identity
        suffix = ".cpp" if ident.backend == "cpp" else ".py"
        path = f"{ident.category}/{ident.kernel_name}{suffix}"
        if path in taken:
            key = hashlib.sha256(f"{ident.body_hash}|{ident.shape_key}".encode()).hexdigest()[:8]
            path = f"{ident.category}/{ident.kernel_name}.{key}{suffix}"
        taken.add(path)
        kernel.path = path


def kernel_file_text(kernel: OrganizedKernel, rep: int, warmup: int) -> str:
    if kernel.identity.backend == "cpp":
        return f"// KERNEL CALLS: {kernel.calls}\n{kernel.text.strip()}\n"
    body = prepare_kernel_source(kernel.text, rep=rep, warmup=warmup, env=os.environ)
    return f"# KERNEL CALLS: {kernel.calls}\n{body.strip()}\n"


def index_rows(collection: KernelCollection) -> list[IndexRow]:
    rows = [
        IndexRow(
            category=k.identity.category, kernel_name=k.identity.kernel_name, body_hash=k.identity.body_hash,
            shape_key=k.identity.shape_key, legacy_key=k.identity.legacy_key, path=k.path, calls=k.calls,
            graphs=";".join(k.graphs), backend=k.identity.backend, source=k.source,
        )
        for k in collection.kernels.values()
    ]
    return sorted(rows, key=lambda r: (r.category, r.kernel_name, r.path))


def organize(cache: Path, out: Path, rep: int = 100, warmup: int = 10,
             extract_to: Path | None = None, graph_models: dict[str, list[str]] | None = None) -> list[IndexRow]:
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory")
    with open_cache(cache, extract_to) as root:
        scan = scan_cache(root, cache)
        print(f"organize: {len(scan.kernel_files)} kernel files, {len(scan.wrappers)} compiled graphs in {cache}",
              flush=True)
        collection, graphs = collect(scan, graph_models)
    assign_paths(collection)
    rows = index_rows(collection)
    with staged_directory(out) as staging:
        for kernel in collection.kernels.values():
            write_text(staging / kernel.path, kernel_file_text(kernel, rep, warmup))
        for name, text in graphs.items():
            write_text(staging / GRAPHS_DIR / name, normalize_device_indices(text))
        write_index(staging / INDEX_CSV, rows)
    return rows


@contextlib.contextmanager
def staged_directory(out: Path) -> Iterator[Path]:
    """A temporary directory next to ``out`` whose entries replace their namesakes in ``out`` when the block
    succeeds (``index.csv`` last, so an index always describes files that are there); removed in any case."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as exc:
        raise UserError(f"--out {out}: cannot write there ({exc.strerror})") from None
    try:
        yield staging
        publish(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def publish(staging: Path, out: Path) -> None:
    """Move each top-level entry of ``staging`` into ``out``; what it replaces goes back into ``staging``
    (deleted with it). Entries of ``out`` the new tree does not have (a log, say) are left alone."""
    out.mkdir(exist_ok=True)
    for entry in sorted(staging.iterdir(), key=lambda p: (p.name == INDEX_CSV, p.name)):
        if entry.name.startswith(".replaced-"):
            continue
        target = out / entry.name
        if target.is_dir() and not target.is_symlink():
            os.replace(target, staging / f".replaced-{entry.name}")
        elif target.exists() or target.is_symlink():
            target.unlink()
        os.replace(entry, target)


def read_graph_models(path: Path) -> dict[str, list[str]]:
    try:
        return read_suite_graph_models(path)
    except UserError as exc:
        raise UserError(f"--graph-models {exc}") from None


def summary(rows: list[IndexRow]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.category] = counts.get(row.category, 0) + 1
    return ", ".join(f"{n} {category}" for category, n in sorted(counts.items()))


def build_parser() -> argparse.ArgumentParser:
    parser = StageArgumentParser(prog="python -m stages.organize", description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, type=Path, help="Inductor cache directory or .tar/.tar.gz of one")
    parser.add_argument("--out", required=True, type=Path, help="output directory (organized kernels)")
    parser.add_argument("--rep", type=int, default=100, help="rep= written into each kernel's benchmark line")
    parser.add_argument("--warmup", type=int, default=10, help="warmup= written into each kernel's benchmark line")
    parser.add_argument("--extract-to", type=Path, default=None,
                        help="keep an extracted archive here (the kernel runner needs it as --cache-dir)")
    parser.add_argument("--graph-models", type=Path, default=None,
                        help="JSON {graph module file stem: [models]} written by the suite stage")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # No prepare_inductor(): organize reads files and compiles nothing, and importing torch to set the
    # variant's Inductor config (every default recipe has some) cost each organize stage 4-5 s.
    graph_models = read_graph_models(args.graph_models) if args.graph_models else None
    rows = organize(args.cache, args.out, rep=args.rep, warmup=args.warmup, extract_to=args.extract_to,
                    graph_models=graph_models)
    print(f"organize: {len(rows)} kernels ({summary(rows)}) → {args.out / 'index.csv'}", flush=True)
    return 0


if __name__ == "__main__":
    run_as_script(main)
