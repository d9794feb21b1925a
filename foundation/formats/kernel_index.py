"""The organized-kernels index: graph-wrapper parsing, index rows and ``index.csv`` read/write.

A compiled graph module (Inductor's "wrapper") embeds the full source of every kernel it uses
(``name = async_compile.triton('name', '''...''')`` or ``async_compile.cpp_pybinding([types], r'''...''')``)
and launches them from ``call()`` (a ``def call(args)`` function up to torch 2.12, ``class Runner: def call(self,
args)`` in 2.13). From the wrapper we get the kernels (needed in codegen-only mode, where only the first kernel
file reaches the cache) and how many times each is launched per call (= per model step for that graph).
Pure text processing: no torch import.
"""

from __future__ import annotations

import ast
import csv
import re
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from foundation.atomic_io import atomic_path
from foundation.errors import UserError
from foundation.records import check_regular, parse_cell

INDEX_COLUMNS = ("category", "kernel_name", "body_hash", "shape_key", "legacy_key", "path", "calls", "graphs",
                 "backend", "source")

_TRITON_EMBED = re.compile(
    r"^(?P<var>\w+)\s*=\s*async_compile\.triton\(\s*(?P<q>['\"])(?P<name>\w+)(?P=q)\s*,\s*[rR]?'''(?P<src>.*?)'''",
    re.M | re.S,
)
# ``cpp_pybinding([arg types], r'''...''')`` (≥2.2) or the older ctypes form ``cpp('''...''')``.
_CPP_EMBED = re.compile(
    r"^(?P<var>\w+)\s*=\s*async_compile\.(?:cpp_pybinding\(\s*(?P<types>\[[^\]]*\])\s*,|cpp\()\s*[rR]?'''(?P<src>.*?)'''",
    re.M | re.S,
)
_CALL_DEF = re.compile(r"^(?P<indent>[ \t]*)def call\((?:self,\s*)?args\)\s*:\s*$", re.M)
_EMBEDDED_STRING = re.compile(r"'''.*?'''", re.S)
_AOT_ID = re.compile(r"^# AOT ID: \[['\"]?(?P<id>[^'\"\]]+)['\"]?\]", re.M)
_BENCH_NAME = re.compile(r"compiled_module_main\(\s*['\"](?P<name>[^'\"]*)['\"]")


# Where an embedding starts, whether or not its string is complete (a truncated module cuts the last one).
_EMBED_START = re.compile(r"^(?P<var>\w+)\s*=\s*async_compile\.(?P<kind>triton|cpp_pybinding|cpp)\(", re.M)
_GRAPH_MARKER = "async_compile = AsyncCompile()"


@dataclass(frozen=True)
class EmbeddedKernel:
    variable: str  # the name call() uses to launch it
    source: str
    backend: str  # "triton" or "cpp"
    arg_types: tuple[str, ...] = ()
    complete: bool = True  # False: the module ends inside this kernel's source (what is there is kept)


@dataclass
class IndexRow:
    category: str
    kernel_name: str
    body_hash: str
    shape_key: str
    legacy_key: str
    path: str  # relative to the organized directory
    calls: int
    graphs: str  # ";"-separated graph labels (model/graph when the model is known)
    backend: str
    source: str  # where the text came from: cache-relative kernel file, or graphs/<wrapper>.py


def is_graph_wrapper(source: str) -> bool:
    return _GRAPH_MARKER in source and (
        "def call(args)" in source or "def call(self, args)" in source
    )


def looks_like_graph_module(source: str) -> bool:
    """Inductor's preamble is there, whatever follows it (a truncated module has no ``call()``)."""
    return _GRAPH_MARKER in source


def graph_module_problem(source: str) -> str | None:
    """Why a compiled graph module cannot be run as it is (None when it parses and has its ``call()``).

    A module cut short (a full disk, an interrupted copy) would otherwise pass unnoticed and take the C++ kernels
    only it holds with it.
    """
    try:
        ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        line = f" at line {exc.lineno}" if isinstance(exc, SyntaxError) and exc.lineno else ""
        reason = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        return f"cannot be parsed (SyntaxError{line}: {' '.join(reason.split())}; truncated?)"
    if not _CALL_DEF.search(_EMBEDDED_STRING.sub("", source)):
        return "has no call() function (truncated?)"
    return None


def embedded_kernels(wrapper_source: str) -> list[EmbeddedKernel]:
    # Taken as written: Inductor splices the kernel text into the string unescaped and stripped, the same text
    # its kernel file holds.
    kernels = [EmbeddedKernel(m.group("var"), m.group("src").strip() + "\n", "triton")
               for m in _TRITON_EMBED.finditer(wrapper_source)]
    for match in _CPP_EMBED.finditer(wrapper_source):
        try:
            types = tuple(ast.literal_eval(match.group("types") or "[]"))
        except (ValueError, SyntaxError):
            types = ()
        kernels.append(EmbeddedKernel(match.group("var"), match.group("src"), "cpp", types))
    return kernels


def cut_kernels(wrapper_source: str, complete: list[EmbeddedKernel]) -> list[EmbeddedKernel]:
    """Kernels whose embedding starts but never ends (the module was cut inside them): the text after the
    opening quotes, so they still get an index row (and a failure row once the runner tries them)."""
    seen = {k.variable for k in complete}
    cut = []
    for match in _EMBED_START.finditer(wrapper_source):
        if match.group("var") in seen:
            continue
        backend = "triton" if match.group("kind") == "triton" else "cpp"
        rest = wrapper_source[match.end():]
        quote = rest.find("'''")
        cut.append(EmbeddedKernel(match.group("var"), rest[quote + 3:] if quote >= 0 else "", backend,
                                  complete=False))
    return cut



def call_body(wrapper_source: str) -> str:
    """The text of ``call()`` (module-level or ``Runner.call``), up to the first line indented no deeper."""
    # Embedded kernel modules have their own ``def call(args)`` harness: blank the strings out first.
    wrapper_source = _EMBEDDED_STRING.sub("", wrapper_source)
    match = _CALL_DEF.search(wrapper_source)
    if not match:
        return ""
    indent = len(match.group("indent").expandtabs())
    lines = []
    for line in wrapper_source[match.end():].splitlines():
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        lines.append(line)
    return "\n".join(lines)


def launch_counts(wrapper_source: str, variables: list[str]) -> Counter[str]:
    """Launches per ``call()``: Triton ``<var>.run(`` lines and C++ ``<var>(`` calls."""
    body = call_body(wrapper_source)
    counts: Counter[str] = Counter()
    for var in variables:
        pattern = re.compile(rf"^[ \t]+{re.escape(var)}(?:\.run)?\(", re.M)
        counts[var] = len(pattern.findall(body))
    return counts


def graph_label(wrapper_source: str, fallback: str) -> str:
    """``<aot id>`` (e.g. ``0_inference``), falling back to the wrapper's file stem."""
    match = _AOT_ID.search(wrapper_source)
    return match.group("id").strip() if match else fallback


def graph_file_stem(wrapper_source: str, module_stem: str) -> str:
    """The organized name of a compiled graph module: ``<aot id>_<8 characters of its cache stem>`` (e.g.
    ``3_inference_5cookhfs``), unique within a cache; the `graphs` column of the index names graphs this way."""
    return f"{graph_label(wrapper_source, module_stem)}_{module_stem[1:9]}"


def graph_key(entry: str) -> str:
    """What a `graphs` entry (``<model>/<graph file stem>``) names independently of the cache it came from:
    ``<model>/<aot id>`` (``BertForMaskedLM/0_inference``). Base and PR compile the same graph of a model into
    modules with different cache names, so this is the key the two sides share."""
    model, _, stem = entry.strip().rpartition("/")
    aot_id = stem.rpartition("_")[0] if "_" in stem else stem
    return f"{model}/{aot_id}" if model else aot_id


def graph_entries(graphs: str) -> list[str]:
    """The entries of a `graphs` cell (``;``-separated), in order, without empties."""
    return [g.strip() for g in str(graphs or "").split(";") if g.strip()]


def graph_keys(graphs: str) -> frozenset[str]:
    """The `graph_key` of every entry of a `graphs` cell."""
    return frozenset(graph_key(entry) for entry in graph_entries(graphs))


def where_launched(graphs: str) -> str:
    """A `graphs` cell for a reader: ``model/aot id`` entries, sorted, comma-separated ("–" when empty)."""
    return ", ".join(sorted(graph_keys(graphs))) or "–"


def benchmark_model_name(wrapper_source: str) -> str | None:
    """The model named at compile time (``--only``), or None when Inductor wrote ``'None'``."""
    match = _BENCH_NAME.search(wrapper_source)
    if not match or match.group("name") in ("", "None"):
        return None
    return match.group("name")


def write_index(path: Path, rows: list[IndexRow]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(INDEX_COLUMNS))
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row))


def read_index(path: Path) -> list[IndexRow]:
    """The rows of an organized ``index.csv``; a missing, foreign or damaged one is a UserError naming the file
    (and the line of a bad row)."""
    names = {f.name for f in fields(IndexRow)}
    if Path(path).exists():
        check_regular(path, "an organized index.csv")  # a FIFO would never end
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle, restval="")
            missing = [c for c in INDEX_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise UserError(f"{path}: not an organized index (missing column(s) {', '.join(missing)})")
            rows = []
            for raw in reader:
                where = f"{path}: not an organized index: line {reader.line_num}"
                text: dict[str, str] = {k: v for k, v in raw.items() if k in names and k != "calls"}
                calls = parse_cell(raw["calls"] or "0", f"{where}, column calls", minimum=0, integer=True)
                if not text["path"].strip():
                    raise UserError(f"{where}: empty path")
                rows.append(IndexRow(calls=int(calls), **text))
            return rows
    except FileNotFoundError:
        raise UserError(f"{path}: not an organized index (file not found; run organize first)") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not an organized index (not UTF-8 text at byte {exc.start})") from None
    except csv.Error as exc:
        raise UserError(f"{path}: not an organized index ({exc})") from None
    except OSError as exc:
        raise UserError(f"{path}: not an organized index (cannot read it: {exc.strerror})") from None
