"""The rooms' import contracts, read from the source with ``ast`` (no module is imported, so a broken stage cannot
hide a finding): every ``import`` counts, at module level, inside a function, or under ``if TYPE_CHECKING``.

``MAY_IMPORT`` is docs/architecture.md's "may import" table as data: for each folder (a package; the modules
directly in it), the folders its modules may import. Every import of the project's own modules is checked against
it, and the folders' import graph must have no loop. The doc's table is generated from the same data
(``python tests/test_import_contracts.py --write-docs``) and a test fails when the two differ. Besides:

- no module under prbench/ imports the ``stages`` package (a stage may import torch at module level; the host must
  never load it), and stages/ never imports prbench (a stage runs inside an image that has no host package);
- analysis/ and foundation/ import neither torch nor a room above them (pure data: the report renders where no
  torch is installed);
- no import circle among the modules of prbench/, analysis/ and foundation/ (a circle hides behind function-level
  imports and makes every module in it load order dependent).
- no benchmark imports the tests (a measurement must not lean on a test's stand-ins; what both need lives under
  benchmarks/, and the test helper imports it from there).

Modules are found by walking the folders; a folder that the table does not name fails the test (place it first).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("prbench", "stages", "analysis", "foundation")
DOC = ROOT / "docs" / "architecture.md"
TABLE_START = "<!-- may-import table: generated from tests/test_import_contracts.py (MAY_IMPORT); do not edit -->"
TABLE_END = "<!-- end of the may-import table -->"

_FOUNDATION = ("foundation", "foundation.formats")
_ANALYSIS_PURE = ("analysis", "analysis.stats", "analysis.kernels", "analysis.models", "analysis.traces",
                  "analysis.traces.analyses", "analysis.traces.readers", "analysis.traces.reports")
_ANALYSIS = (*_ANALYSIS_PURE, "analysis.bisect", "analysis.report", "analysis.report.sections")

# folder -> (what lives there, the folders it may import). A folder may always import itself.
MAY_IMPORT: dict[str, tuple[str, tuple[str, ...]]] = {
    "foundation": ("the one-line `UserError` (`errors`), checked readers of JSON records (`records`), atomic "
                   "writes (`atomic_io`), OS errors in words (`io_errors`), checked flag values (`flag_values`), "
                   "ROCm's HIP module table (`hip_modules`)",
                   ()),
    "foundation.formats": ("every versioned file the host and the stages exchange, one owner each: the run "
                           "layout, stage records, the suite request and options, suite.csv, index.csv "
                           "(`kernel_index`), round files, launch_cost.json, the `--modes` presets", ("foundation",)),
    "analysis": ("the Jinja environment of `analysis/templates` (`rendering`), `markdown_fit`", _FOUNDATION),
    "analysis.stats": ("verdict rules and settings, noise rules, tolerances per dtype", ("analysis", *_FOUNDATION)),
    "analysis.kernels": ("kernel identity, results, source, comparison, fusion changes, numerics, IR, a pair's "
                         "repro folder", ("analysis", "analysis.stats", *_FOUNDATION)),
    "analysis.models": ("per-model comparison and numerics",
                        ("analysis", "analysis.stats", "analysis.kernels", *_FOUNDATION)),
    "analysis.bisect": ("the next commit and the answer, bisect.json and bisect.md",
                        ("analysis", "analysis.stats", "analysis.kernels", *_FOUNDATION)),
    "analysis.report.sections": ("the report's sections: environment, experiment, gates, kernel details, "
                                 "projection, resources, time decomposition",
                                 ("analysis", "analysis.stats", "analysis.kernels", "analysis.models",
                                  *_FOUNDATION)),
    "analysis.report": ("the report: inputs, the verdict line, summary.json, report.md, plots, numerics, the "
                        "modes' matrix, when rounds stop (`sequential`)",
                        tuple(n for n in _ANALYSIS if n != "analysis.report") + _FOUNDATION),
    "analysis.traces": ("the trace model every reader fills (`model`)", _FOUNDATION),
    "analysis.traces.analyses": ("pure analyses over the trace model: breakdowns, categories, timeline, ops and "
                                 "shapes, launch costs, collectives, replay sets, serving steps, the roofline (a "
                                 "package: op name → family model, one module per family, the device peaks)",
                                 ("analysis.traces", *_FOUNDATION)),
    "analysis.traces.readers": ("Kineto, rocprof, nsys and `-p` readers (Kineto's streaming reader fills "
                                "analyses as it reads), the reader picked by content",
                                ("analysis.traces", "analysis.traces.analyses", *_FOUNDATION)),
    "analysis.traces.reports": ("what the trace commands write: perf report, trace diff, node replay files, "
                                "vendor benchmark lines, the `--format` flag",
                                ("analysis", "analysis.traces", "analysis.traces.analyses",
                                 "analysis.traces.readers", *_FOUNDATION)),
    "stages.support": ("what the runnable stages share: worker processes, timing, progress, the stage "
                       "environment, HF models, training, numerics, C++/Triton CPU helpers",
                       (*_ANALYSIS_PURE, *_FOUNDATION)),
    "stages": ("the runnable stages, `python -m stages.<name>`, run inside an environment",
               ("stages.support", *_ANALYSIS_PURE, *_FOUNDATION)),
    "prbench": ("`termination` (signals, the stop), `inductor_options`", _FOUNDATION),
    "prbench.sides": ("what a side's environment is made of: the recipe, variants and `--env`, the installed "
                      "torch, the overlay, patches, pins, git refs, the precompiled headers local sides share",
                      ("prbench", *_FOUNDATION)),
    "prbench.images": ("build plan, build and context, wheels, venv sides, lock.json, the content store, the "
                       "Docker client (`docker_engine`), Triton and PyTorch setup",
                       ("prbench", "prbench.sides", *_FOUNDATION, "analysis")),
    "prbench.runners": ("how a stage runs (local, Docker): `StageCommand`, `Runner`",
                        ("prbench", "prbench.sides", "prbench.images", *_FOUNDATION)),
    "prbench.executors": ("where shards run (local pool, Ray): `Executor`, `ShardTask`",
                          ("prbench", "prbench.sides", "prbench.images", "prbench.runners", *_FOUNDATION)),
    "prbench.runs": ("the run store (manifest.json), the run's lock, the pipeline",
                     ("prbench", "prbench.sides", "prbench.images", "prbench.runners", *_FOUNDATION)),
    "prbench.stages": ("the host side of each stage, named after `stages/<name>.py`: command lines, suite, "
                       "suite shards, kernels, paired plan, report",
                       ("prbench", "prbench.sides", "prbench.images", "prbench.runners", "prbench.executors",
                        "prbench.runs", *_ANALYSIS, *_FOUNDATION)),
    "prbench.compare": ("`invoke compare`'s driver (`CompareRequest`, `Comparison`), the variant plan, the "
                        "rounds and their shards, `doctor`, `--modes`, `bisect` (its steps are compares)",
                        ("prbench", "prbench.sides", "prbench.images", "prbench.runners", "prbench.executors",
                         "prbench.runs", "prbench.stages", *_ANALYSIS, *_FOUNDATION)),
    "prbench.publish": ("the GitHub API, the report archive",
                        ("prbench", "prbench.runs", *_ANALYSIS, *_FOUNDATION)),
    "prbench.commands": ("the invoke tasks, one module per command family, their bodies, the shared flags, the "
                         "error boundary (`cli`); `ns`, the Collection",
                         ("prbench", "prbench.sides", "prbench.images", "prbench.runners", "prbench.executors",
                          "prbench.runs", "prbench.stages", "prbench.compare", "prbench.publish", *_ANALYSIS,
                          *_FOUNDATION)),
    "tasks": ("tasks.py: hands `prbench.commands.ns` to invoke", ("prbench.commands",)),
}
# Packages that are one module cut into files (the roofline: its op table, one module per op family, the peaks):
# their modules sit in their parent folder's row, since the parent's modules and theirs import each other both ways
# (the roofline reads the categories and the serving steps; the op shapes and the replay sets read the roofline).
# The module graph still sees each of their modules, so a circle through them still fails.
MODULE_PACKAGES = {"analysis.traces.analyses.roofline"}
# The benchmarks may import every room, never tests/ (a measurement must not lean on a test's stand-ins).
MAY_IMPORT["benchmarks"] = ("measurements behind the design's numbers, run by hand",
                            tuple(n for n in MAY_IMPORT if n != "tasks"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_modules(room: str) -> dict[str, Path]:
    """A room's modules. ``templates/`` holds files the code renders or copies out (a repro folder's ``run.py``,
    run outside this project with only torch): data, not modules of the room."""
    return {module_name(p): p for p in sorted((ROOT / room).rglob("*.py"))
            if "__pycache__" not in p.parts and "templates" not in p.parts}


def project_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for room in ROOMS:
        found.update(room_modules(room))
    found["tasks"] = ROOT / "tasks.py"
    found.update({f"benchmarks.{p.stem}": p for p in sorted((ROOT / "benchmarks").glob("*.py"))})
    return found


def package_of(path: Path) -> str:
    return module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]


def imports(path: Path, package: str | None = None) -> Iterator[tuple[str, list[str], int]]:
    """(module, names taken from it, line) of every import statement in the file, at any depth; relative imports
    resolved against the file's package (default: its place under the project)."""
    package = package_of(path) if package is None else package
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, [], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, [alias.name for alias in node.names], node.lineno


def imported_names(path: Path, package: str | None = None) -> Iterator[tuple[str, int]]:
    """(dotted name, line): each imported module, and ``a.b`` for ``from a import b`` (b may be a module)."""
    for module, names, line in imports(path, package):
        yield module, line
        yield from ((f"{module}.{name}", line) for name in names if name != "*")


def imported_modules(path: Path, known: Iterable[str]) -> dict[str, int]:
    """{known module the file imports: line}: ``from pkg import mod`` counts as mod (not pkg's __init__) when mod
    is a module, ``from pkg import name`` as pkg; ``import a.b.c`` as the longest known prefix."""
    known = set(known)
    found: dict[str, int] = {}
    for module, names, line in imports(path):
        subs = {f"{module}.{name}" for name in names} & known
        for sub in subs:
            found.setdefault(sub, line)
        target = module
        while target not in known and "." in target:
            target = target.rpartition(".")[0]
        if target in known and (not names or len(subs) < len(names)):
            found.setdefault(target, line)
    return found


def folder_of(module: str, path: Path) -> str:
    """The table's row of a module: its package (a package's __init__ is in its own row; a module package's
    modules, :data:`MODULE_PACKAGES`, in its parent's); the project's root files are their own rows (``tasks``)."""
    folder = module if path.name == "__init__.py" or "." not in module else module.rpartition(".")[0]
    return folder.rpartition(".")[0] if folder in MODULE_PACKAGES else folder


def folder_edges(modules: dict[str, Path]) -> dict[tuple[str, str], list[str]]:
    """{(folder, folder it imports): ['file:line imports module', ...]}. A package's __init__ reaching into its
    own children (a facade: ``analysis.traces`` hands on ``read_trace``) is not an edge."""
    edges: dict[tuple[str, str], list[str]] = {}
    for name, path in modules.items():
        here = folder_of(name, path)
        for target, line in imported_modules(path, modules).items():
            there = folder_of(target, modules[target])
            if there == here or (path.name == "__init__.py" and there.startswith(f"{name}.")):
                continue
            edges.setdefault((here, there), []).append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    return edges


def contract_breaches(edges: dict[tuple[str, str], list[str]], table: dict[str, tuple[str, tuple[str, ...]]]
                      ) -> list[str]:
    found = []
    for (here, there), where in sorted(edges.items()):
        if here not in table:
            found.append(f"{here}: a folder the may-import table does not name ({where[0]})")
        elif there not in table[here][1]:
            found += [f"{line} ({here} may not import {there})" for line in where]
    return found


def findings(room: str, forbidden: set[str]) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line} imports {name}"
            for path in room_modules(room).values()
            for name, line in imported_names(path) if name.split(".", 1)[0] in forbidden]


def module_graph() -> dict[str, set[str]]:
    """{module: the project modules it imports} over prbench/, analysis/ and foundation/ (a package counts as its
    __init__)."""
    modules: dict[str, Path] = {**room_modules("prbench"), **room_modules("analysis"), **room_modules("foundation")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set(imported_modules(path, modules)) - {name}
        graph[name] = {t for t in targets if not (path.name == "__init__.py" and t.startswith(f"{name}."))}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def folder_graph(edges: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for here, there in edges:
        graph.setdefault(here, set()).add(there)
        graph.setdefault(there, set())
    return graph


def table_markdown(table: dict[str, tuple[str, tuple[str, ...]]]) -> str:
    def path(folder: str) -> str:
        return "`tasks.py`" if folder == "tasks" else f"`{folder.replace('.', '/')}/`"

    rows = ["| folder | what lives there | may import (besides itself) |", "|---|---|---|"]
    for folder, (what, allowed) in table.items():
        may = ", ".join(path(a) for a in allowed) or "the standard library, numpy, pandas"
        rows.append(f"| {path(folder)} | {what} | {may} |")
    return "\n".join([TABLE_START, *rows, TABLE_END])


def write_docs() -> None:
    text = DOC.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(TABLE_START) + r".*?" + re.escape(TABLE_END), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: table_markdown(MAY_IMPORT), text)
    else:  # the hand-written table (its header row, up to the first blank line) is replaced once
        old = re.compile(r"^\| room / subpackage \|.*?\n(?=\n)", re.S | re.M)
        if not old.search(text):
            raise SystemExit(f"{DOC}: neither the generated table's markers nor the old table found")
        text = old.sub(lambda _: table_markdown(MAY_IMPORT) + "\n", text, count=1)
    DOC.write_text(text, encoding="utf-8")


def test_every_import_is_one_the_table_allows():
    assert contract_breaches(folder_edges(project_modules()), MAY_IMPORT) == []


def test_the_folders_import_each_other_in_no_loop():
    assert cycles(folder_graph(folder_edges(project_modules()))) == []


def test_the_table_allows_no_loop_either():
    """The table itself is layered: a loop it allowed would only wait for an import to close it."""
    allowed = folder_graph((here, there) for here, (_, targets) in MAY_IMPORT.items() for there in targets)
    assert cycles(allowed) == []


def test_the_docs_table_is_the_contract_tests_table():
    assert table_markdown(MAY_IMPORT) in DOC.read_text(encoding="utf-8"), \
        "docs/architecture.md differs from MAY_IMPORT: run python tests/test_import_contracts.py --write-docs"


def test_the_host_never_imports_a_stage():
    assert findings("prbench", {"stages"}) == []


def test_analysis_and_foundation_import_neither_the_host_nor_the_stages_nor_torch():
    assert findings("analysis", {"prbench", "stages", "torch"}) == []
    assert findings("foundation", {"prbench", "stages", "analysis", "torch"}) == []


def test_a_stage_never_imports_the_host():
    assert findings("stages", {"prbench"}) == []


def test_a_benchmark_never_imports_the_tests():
    assert findings("benchmarks", {"tests"}) == []


def test_no_import_circle_among_the_host_analysis_and_foundation_modules():
    assert cycles(module_graph()) == []


def test_the_checks_see_function_level_and_type_only_imports(tmp_path):
    """Given a module that hides its imports in a function and under TYPE_CHECKING, the reader still finds them,
    and a two-module circle is reported by its members."""
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from stages.kernels import Job\n"
                      "def f():\n    import torch\n    from . import sibling\n", encoding="utf-8")
    names = {name for name, _ in imported_names(source, package="pkg")}
    assert {"stages.kernels", "stages.kernels.Job", "torch", "pkg.sibling"} <= names
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_an_import_the_table_forbids_is_named_with_its_line():
    """Given the folders' imports with one the table does not allow (the stats reaching up into kernels), the
    check names the file, the line and the rule; a folder the table lacks is named too."""
    table = {"analysis.stats": ("", ("analysis",)), "analysis.kernels": ("", ("analysis.stats",))}
    edges = {("analysis.stats", "analysis.kernels"): ["analysis/stats/x.py:3 imports analysis.kernels.compare"],
             ("analysis.kernels", "analysis.stats"): ["analysis/kernels/y.py:5 imports analysis.stats.verdict"],
             ("analysis.new", "analysis"): ["analysis/new/z.py:1 imports analysis.rendering"]}
    assert contract_breaches(edges, table) == [
        "analysis.new: a folder the may-import table does not name (analysis/new/z.py:1 imports analysis.rendering)",
        "analysis/stats/x.py:3 imports analysis.kernels.compare (analysis.stats may not import analysis.kernels)"]
    assert cycles(folder_graph(edges)) == [["analysis.kernels", "analysis.stats"]]


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-docs"]:
        raise SystemExit("usage: python tests/test_import_contracts.py --write-docs")
    write_docs()
