"""Run by the oldest Python an image has (tests/test_image_python.py): compile every file of the image's code and
every script the host runs with an image's interpreter, and import every module of its packages whose imports this
interpreter has (scripts outside the packages, such as a repro folder's run.py that reads the files beside it when
loaded, are compiled only).

argv: the project root, then the files. stdin: JSON ``{"scripts": {name: source}, "host_stdlib": [names]}``: the
host's ``python -c`` scripts, and the host Python's standard-library module names (a module missing here that the
host's standard library has is a newer one's, such as ``tomllib``: an error, not a dependency this Python lacks).
Prints one JSON object: ``compiled`` (how many files and scripts), ``imported`` (module names), ``needs``
({module: the third-party package it needs, e.g. torch}) and ``errors`` ({file or module: message}).
This file itself runs on that Python: standard library only.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path


def module_name(path: Path, root: Path) -> str | None:
    """The dotted name ``path`` imports under from ``root``; None outside a package (a script, a template)."""
    parts = path.relative_to(root).with_suffix("").parts
    packages = [root.joinpath(*parts[:i]) for i in range(1, len(parts))]
    if not packages or not all((p / "__init__.py").is_file() for p in packages):
        return None
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def main() -> None:
    root = Path(sys.argv[1]).resolve()
    files = [Path(a).resolve() for a in sys.argv[2:]]
    given = json.load(sys.stdin)
    host_stdlib = set(given["host_stdlib"])
    ours = {name.partition(".")[0] for name in (module_name(f, root) for f in files) if name}
    sys.dont_write_bytecode = True  # no 3.10 bytecode left in the checkout
    sys.path.insert(0, str(root))
    errors: dict[str, str] = {}
    sources = {str(f.relative_to(root)): f.read_text(encoding="utf-8") for f in files}
    sources.update(given["scripts"])
    for where, source in sources.items():
        try:
            compile(source, where, "exec", dont_inherit=True)
        except SyntaxError as exc:
            errors[where] = f"line {exc.lineno}: {exc.msg}"
    imported: list[str] = []
    needs: dict[str, str] = {}
    for path in files:
        where, name = str(path.relative_to(root)), module_name(path, root)
        if name is None or where in errors:
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").partition(".")[0]
            if missing in ours or missing in host_stdlib or not missing:
                errors[where] = f"ModuleNotFoundError: {exc}"
            else:
                needs[where] = missing
        except Exception as exc:
            errors[where] = f"{type(exc).__name__}: {exc}"
        else:
            imported.append(name)
    print(json.dumps({"compiled": len(sources), "imported": imported, "needs": needs, "errors": errors}))


if __name__ == "__main__":
    main()
