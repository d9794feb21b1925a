"""Checking Inductor config overrides (recipe ``inductor_config``, ``--inductor-config``) on the host.

A typo in an override used to surface inside the environment, after an image build, as an unknown key; a value
of the wrong type (``cpp.simdlen = "abc"``) only when Inductor read it. ``check_inductor_config`` finds both
where the user typed them. It reads the host's ``torch._inductor.config`` when torch is importable there (the
environment's torch may be another version; the host's is the best reference the host has) and otherwise
checks only the shape: dotted names and JSON scalar values, which is what the stages can apply.
"""

from __future__ import annotations

import difflib
import math
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from analysis.errors import UserError

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
    """``torch._inductor.config``, or None where torch is not importable on this host. Imported here, not at
    module level: recipes are loaded by light commands that must not pay for torch unless they need it."""
    try:
        import torch._inductor.config as config
    except ImportError:
        return None
    return config


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
    import torch

    what = f"not a setting of torch._inductor.config (torch {torch.__version__} on this host)"
    group = sorted(k for k in known if k.startswith(key + "."))
    if group:
        return f"{what}: '{key}' is a group of settings; name one, like '{group[0]}'"
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    return f"{what}; did you mean {', '.join(repr(c) for c in close)}?" if close else what


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
