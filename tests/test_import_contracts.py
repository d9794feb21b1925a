"""The rooms' import contracts, read from the source with ``ast`` (no module is imported, so a broken stage cannot
hide a finding): every ``import`` counts, at module level, inside a function, or under ``if TYPE_CHECKING``.

- no module under prbench/ imports stages/ (a stage may import torch at module level; the host must never load it);
- analysis/ imports neither prbench, stages, nor torch (pure data: the report renders where no torch is installed);
- stages/ never imports prbench (a stage runs inside an image that has no host package);
- no import circle among the modules of prbench/ and analysis/ (a circle hides behind function-level imports and
  makes every module in it load order dependent).

Modules are found by walking the folders, so the checks keep holding when modules move into subpackages.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("prbench", "stages", "analysis")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_modules(room: str) -> dict[str, Path]:
    """A room's modules. ``templates/`` holds files the code renders or copies out (a repro folder's ``run.py``,
    run outside this project with only torch): data, not modules of the room."""
    return {module_name(p): p for p in sorted((ROOT / room).rglob("*.py"))
            if "__pycache__" not in p.parts and "templates" not in p.parts}


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


def imported_modules(path: Path, known: Iterable[str]) -> set[str]:
    """The known modules the file imports: ``from pkg import mod`` counts as mod (not pkg's __init__) when mod is a
    module, ``from pkg import name`` as pkg."""
    known = set(known)
    found: set[str] = set()
    for module, names, _ in imports(path):
        subs = {f"{module}.{name}" for name in names} & known
        found |= subs
        if module in known and (not names or len(subs) < len(names)):
            found.add(module)
    return found


def top(name: str) -> str:
    return name.split(".", 1)[0]


def findings(room: str, forbidden: set[str]) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line} imports {name}"
            for path in room_modules(room).values()
            for name, line in imported_names(path) if top(name) in forbidden]


def module_graph() -> dict[str, set[str]]:
    """{module: the project modules it imports} over prbench/ and analysis/ (a package counts as its __init__)."""
    modules: dict[str, Path] = {**room_modules("prbench"), **room_modules("analysis")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = imported_modules(path, modules) - {name}
        # A package's __init__ may reach into its own children (the facade that picks an implementation, as
        # prbench.executors.open_executor does); a child importing its package is an ordinary edge.
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
                    work.append((child, iter(sorted(graph[child]))))
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


def test_the_host_never_imports_a_stage():
    assert findings("prbench", {"stages"}) == []


def test_analysis_imports_neither_the_host_nor_the_stages_nor_torch():
    assert findings("analysis", {"prbench", "stages", "torch"}) == []


def test_a_stage_never_imports_the_host():
    assert findings("stages", {"prbench"}) == []


def test_no_import_circle_among_the_host_and_analysis_modules():
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

