"""Checking Inductor config overrides (recipe ``inductor_config``, ``--inductor-config``) on the host.

A typo in an override used to surface inside the environment, after an image build, as an unknown key; a value
of the wrong type (``cpp.simdlen = "abc"``) only when Inductor read it. ``check_inductor_config`` finds both
where the user typed them. It reads the host's ``torch._inductor.config`` when torch is importable there (the
environment's torch may be another version; the host's is the best reference the host has) and otherwise
checks only the shape: dotted names and JSON scalar values, which is what the stages can apply.
"""

from __future__ import annotations

import ast
import difflib
import importlib.metadata
import importlib.util
import math
import re
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation.errors import UserError

_DOTTED_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def check_inductor_config(overrides: dict[str, Any], where: str) -> None:
    """Raise a one-line ``UserError`` (``{where}: inductor config '<key>': ...``) for the first override that
    is not a setting of ``torch._inductor.config`` or whose value does not fit the setting's type."""
    if not overrides:
        return
    for key, value in overrides.items():
        _check_shape(key, value, where)
    config = _inductor_config()
    if config is None:
        for key, value in overrides.items():
            if not _is_json_scalar(value):
                raise UserError(f"{where}: inductor config '{key}': expected a boolean, number or string, "
                                f"got {value!r}")
        return
    known = _known_settings(config)
    for key, value in overrides.items():
        if key not in known:
            raise UserError(f"{where}: inductor config '{key}': {_unknown(key, known)}")
        problem = _type_problem(config, key, value)
        if problem:
            raise UserError(f"{where}: inductor config '{key}': {problem}")


def _inductor_config() -> Any | None:
    """The host's ``torch._inductor.config`` as a schema: the live module where this process already imported
    torch, else read from the installed ``torch/_inductor/config.py`` source without importing torch (the host
    never pays ~3 s of torch import to check a recipe); None where torch is not installed here."""
    live = sys.modules.get("torch._inductor.config")
    if live is not None:
        return live
    try:
        spec = importlib.util.find_spec("torch")  # locates the package; imports nothing
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    source = Path(next(iter(spec.submodule_search_locations))) / "_inductor" / "config.py"
    return SourceConfig.read(source) if source.is_file() else None


@dataclass(frozen=True)
class SettingEntry:
    """One setting as ``torch.utils._config_module`` records it: its type and its default."""

    value_type: Any
    default: Any


class _SourceDefault:
    """A default computed at import (``os.environ.get(...) == "1"``): shown as written, never compared."""

    def __init__(self, text: str) -> None:
        self.text = text if len(text) <= 60 else text[:57] + "..."

    def __repr__(self) -> str:
        return self.text


# What the annotations of config.py are written with; anything else stays a string (not modelled).
_ANNOTATION_NAMES: dict[str, Any] = {
    "Any": Any, "Optional": typing.Optional, "Union": typing.Union, "Literal": typing.Literal,
    "List": list, "Dict": dict, "Tuple": tuple, "bool": bool, "int": int, "float": float, "str": str,
    "list": list, "dict": dict, "tuple": tuple, "None": None,
}
# Calls whose result type is known whatever their arguments (``int(os.environ.get(...))``).
_CALL_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


@dataclass(frozen=True)
class SourceConfig:
    """``torch._inductor.config`` read from its source with ``ast``: the settings (module-level and nested-class
    assignments, as the config module counts them) with their annotations and literal defaults. Where a default is
    computed, its type is inferred from the expression (a comparison is a bool); where nothing is known, any
    JSON value passes."""

    _config: dict[str, SettingEntry]

    @classmethod
    def read(cls, path: Path) -> SourceConfig | None:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            return None  # an unreadable config: the shape check is all the host can do
        settings: dict[str, SettingEntry] = {}
        _collect(tree.body, "", settings)
        return cls(settings)

    def get_config_copy(self) -> dict[str, Any]:
        return {key: entry.default for key, entry in self._config.items()}


def _collect(body: list[ast.stmt], prefix: str, out: dict[str, SettingEntry]) -> None:
    for node in body:
        if isinstance(node, ast.ClassDef):
            group = f"{prefix}{node.name}."
            for base in node.bases:  # ``class cuda(cutlass)``: the group has its base group's settings too
                if isinstance(base, ast.Name):
                    inherited = f"{prefix}{base.id}."
                    out.update({group + k[len(inherited):]: v for k, v in list(out.items()) if k.startswith(inherited)})
            _collect(node.body, group, out)
        elif isinstance(node, ast.If):  # settings defined per platform: either branch names them
            _collect(node.body + node.orelse, prefix, out)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            _add(out, prefix, node.target.id, _annotation(node.annotation), node.value)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            _add(out, prefix, node.targets[0].id, _NO_ANNOTATION, node.value)


def _add(out: dict[str, SettingEntry], prefix: str, name: str, annotation: Any, value: ast.expr) -> None:
    default = _default(value)
    if annotation is _NO_ANNOTATION:
        annotation = _inferred_type(value, default)
    out[prefix + name] = SettingEntry(annotation, default)


def _annotation(node: ast.expr) -> Any:
    text = ast.unparse(node)
    try:
        # The text is the installed torch's own source (what importing it would run anyway), evaluated with no
        # builtins and only the typing names above.
        return eval(compile(ast.Expression(node), "<config annotation>", "eval"),
                    {"__builtins__": {}}, dict(_ANNOTATION_NAMES))
    except Exception:  # a forward reference or a class of torch's own: not modelled
        return text


def _default(value: ast.expr) -> Any:
    """The literal default (``Config(default=...)`` included), or a _SourceDefault for a computed one."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "Config":
        for keyword in value.keywords:
            if keyword.arg == "default":
                return _default(keyword.value)
    try:
        return ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _SourceDefault(ast.unparse(value))


def _inferred_type(value: ast.expr, default: Any) -> Any:
    """An unannotated setting's type, as torch's config module infers it: the default's own type."""
    if not isinstance(default, _SourceDefault):
        return Any if default is None else type(default)
    if isinstance(value, ast.Compare) or (isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not)):
        return bool
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in _CALL_TYPES:
        return _CALL_TYPES[value.func.id]
    return Any


def _check_shape(key: Any, value: Any, where: str) -> None:
    if not isinstance(key, str) or not _DOTTED_NAME_RE.fullmatch(key):
        raise UserError(f"{where}: inductor config {key!r}: expected a dotted setting name like 'cpp.simdlen'")
    if not _is_json_like(value):
        raise UserError(f"{where}: inductor config '{key}': expected a JSON value (boolean, number, string, "
                        f"list or table), got {value!r}")


def _is_json_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)  # NaN and infinities have no JSON spelling
    return isinstance(value, bool | int | str)


def _is_json_like(value: Any) -> bool:
    """What survives the trip to the stages (``PRBENCH_INDUCTOR_CONFIG`` is JSON); TOML dates do not."""
    if isinstance(value, list):
        return all(_is_json_like(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_like(v) for k, v in value.items())
    return value is None or _is_json_scalar(value)


def _known_settings(config: Any) -> set[str]:
    """Every dotted setting name; the module's other attributes (``os``, ``save_config``) are not settings."""
    return set(config.get_config_copy())


def _unknown(key: str, known: set[str]) -> str:
    what = f"not a setting of torch._inductor.config (torch {_torch_version()} on this host)"
    group = sorted(k for k in known if k.startswith(key + "."))
    if group:
        return f"{what}: '{key}' is a group of settings; name one, like '{group[0]}'"
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    return f"{what}; did you mean {', '.join(repr(c) for c in close)}?" if close else what


def _torch_version() -> str:
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# --- types ------------------------------------------------------------------------------------------------


def _type_problem(config: Any, key: str, value: Any) -> str | None:
    """Why ``value`` cannot be ``key``'s value, or None. The setting's annotation decides where it is made of
    types a JSON value can be (``int | None`` rejects "abc" even though the default is None); otherwise the
    default's type decides, a None default taking any JSON value."""
    annotation, default = _annotation_and_default(config, key)
    verdict = _fits(value, annotation) if annotation is not _NO_ANNOTATION else None
    if verdict is None:
        if _fits_default(value, default):
            return None
        return f"expected {_describe_default(default)} (the default is {default!r}), got {value!r}"
    if verdict:
        return None
    return f"expected {_describe(annotation)} (the default is {default!r}), got {value!r}"


_NO_ANNOTATION = object()


def _annotation_and_default(config: Any, key: str) -> tuple[Any, Any]:
    """The setting's declared type and default. Recent torch keeps both in ``_config`` entries; older torch
    keeps plain values there, so the current value stands in for the default and there is no annotation."""
    entry = getattr(config, "_config", {}).get(key)
    if entry is not None and hasattr(entry, "value_type") and hasattr(entry, "default"):
        return entry.value_type, entry.default
    owner = config
    for part in key.split("."):
        owner = getattr(owner, part)
    return _NO_ANNOTATION, owner


def _fits(value: Any, annotation: Any) -> bool | None:
    """Whether ``value`` has the annotated type: True, False, or None when the annotation names something this
    check does not model (a forward reference such as ``'CUDAGraphPolicy | None'``)."""
    if isinstance(annotation, str):
        return None
    if annotation is Any:
        return True
    simple = _simple_check(annotation)
    if simple is not None:
        return simple(value)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return _any_fits(value, args)
    if origin is typing.Literal:
        # type() as well as ==: True == 1, yet a bool is not the Literal 1.
        return any(type(value) is type(option) and value == option for option in args)
    if origin in (list, tuple):
        return _sequence_fits(value, origin, args)
    if origin is dict:
        return isinstance(value, dict) and _all_fit(list(value.values()), args[1] if args else Any)
    return False  # a callable, a class instance: nothing a recipe or a flag can spell


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_SIMPLE: dict[Any, Callable[[Any], bool]] = {
    None: lambda v: v is None,
    type(None): lambda v: v is None,
    bool: lambda v: isinstance(v, bool),
    int: _is_int,
    float: _is_number,
    str: lambda v: isinstance(v, str),
    list: lambda v: isinstance(v, list),
    tuple: lambda v: isinstance(v, list),  # a TOML or JSON array
    dict: lambda v: isinstance(v, dict),
}


def _simple_check(annotation: Any) -> Callable[[Any], bool] | None:
    try:
        return _SIMPLE.get(annotation)
    except TypeError:  # an unhashable annotation is no plain type
        return None


def _any_fits(value: Any, options: tuple[Any, ...]) -> bool | None:
    verdicts = [_fits(value, option) for option in options]
    if True in verdicts:
        return True
    return None if None in verdicts else False


def _all_fit(values: list[Any], annotation: Any) -> bool | None:
    verdicts = [_fits(v, annotation) for v in values]
    if False in verdicts:
        return False
    return None if None in verdicts else True


def _sequence_fits(value: Any, origin: Any, args: tuple[Any, ...]) -> bool | None:
    if not isinstance(value, list):
        return False
    if origin is tuple and args and args[-1] is not Ellipsis:  # tuple[int, int, int]: one type per position
        if len(args) != len(value):
            return False
        verdicts = [_fits(v, a) for v, a in zip(value, args, strict=True)]
        return False if False in verdicts else (None if None in verdicts else True)
    return _all_fit(value, args[0] if args else Any)


def _fits_default(value: Any, default: Any) -> bool:
    if default is None:
        return True  # already known to be JSON-like
    for kind, fits in ((bool, _SIMPLE[bool]), (int, _is_int), (float, _is_number), (str, _SIMPLE[str]),
                       (list | tuple, _SIMPLE[list]), (dict, _SIMPLE[dict])):
        if isinstance(default, kind):
            return fits(value)
    return False  # a callable or an object: not settable from a recipe or a flag


def _describe_default(default: Any) -> str:
    if isinstance(default, list | tuple):
        return "a list"
    if isinstance(default, dict):
        return "a table"
    if isinstance(default, float):
        return "a number"
    return type(default).__name__


def _describe(annotation: Any) -> str:
    """An annotation in words: ``int | None`` -> 'int or None', a Literal -> 'one of 'a', 'b''."""
    if annotation is None or annotation is type(None):
        return "None"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")
