"""Kernel identity: which kernel of the base run is "the same kernel" in the PR run.

Inductor names kernels ``triton_<cat>_fused_<ops>_<ordinal>`` where the ordinal counts kernels within one
compiled graph, so any change in fusion or ordering renumbers everything after it. Names are therefore a weak
key. The identity of a kernel here is

* ``body_hash``: sha256 of the kernel text normalized so that only what the hardware executes remains — the
  kernel name (and so its ordinal), the ``# KERNEL CALLS`` header, the decorator's ``inductor_meta`` (flags,
  ``backend_hash``, kernel name), device properties and comments are removed; argument types are kept;
* ``shape_key``: the problem size (``x``, ``y``, ``z``, ``r0_``, ``r1_`` numels) from the body literals, or,
  for dynamic shapes, from the harness's ``get_args()`` values zipped with the kernel's parameters;
* ``legacy_key``: the seed's ``<name without index> _x<xnumel>_r<r0_numel>`` (0 where a numel is absent; the
  seed's shell script left it empty), kept as a fallback for matching and for its CSV;
* ``fused_ops_name``: the name without its kind and ordinal, which with ``shape_key`` matches the same ops
  generated another way (a PR that turns persistent reductions into looped ones renames ``triton_per_*`` to
  ``triton_red_*`` and changes every body, while the kernels still compute the same thing on the same shapes).

Works on Triton kernel modules from torch 2.4 (``def triton_(``, ``rnumel``, list ``size_hints``) to 2.13
(``r0_numel``, dict ``size_hints``) and on Inductor's C++ kernels (``cpp_fused_*``, category ``cpp``).
Pure text processing: no torch import.
"""

from __future__ import annotations

import ast
import hashlib
import io
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Decorator name → category directory. ``split_scan`` and ``user_autotune`` exist upstream too.
TRITON_CATEGORIES = (
    "pointwise", "reduction", "persistent_reduction", "cooperative_reduction", "template", "foreach",
    "fixed_config", "split_scan", "user_autotune",
)
# Name prefix (``triton_<3 letters>_``) → category, for files whose decorator is unreadable.
PREFIX_CATEGORIES = {
    "poi": "pointwise", "red": "reduction", "per": "persistent_reduction", "tem": "template",
    "for": "foreach", "spl": "split_scan", "unk": "unknown",
}
CPP_CATEGORY = "cpp"
NUMEL_AXES = ("x", "y", "z", "r0_", "r1_")

_DECORATOR = re.compile(r"^@triton_heuristics\.(\w+)\(", re.M)
_META_NAME = re.compile(r"""['"]kernel_name['"]\s*:\s*['"]([A-Za-z_]\w*)['"]""")
_JIT_DEF = re.compile(r"^@triton\.jit\s*\n\s*def\s+(\w+)\s*\(", re.M)
_DEF_AFTER_JIT = re.compile(r"^@triton\.jit\s*\n(def\s+(\w+)\s*\((?P<params>[^)]*)\)\s*:)", re.M)
_TOP_LEVEL_LINE = re.compile(r"^\S", re.M)
_NUMEL_LITERAL = re.compile(r"^[ \t]+(?P<axis>x|y|z|r0_|r1_|r)numel\s*=\s*(?P<value>\d+)\s*$", re.M)
_INDEX_SUFFIX = re.compile(r"_\d+$")
_KIND_PREFIX = re.compile(r"^triton_[a-z]+_(?=fused_)")  # triton_poi_, triton_per_, triton_red_, ...
# paas-organize suffixes: ``<name>_<cache-file-hash>`` (old) or ``<name>.<8 hex>`` (new).
_PAAS_SUFFIX = re.compile(r"^(?P<base>.*_\d+)(?:_[A-Za-z0-9]+|\.[0-9a-f]{8})$")
_KERNEL_CALLS = re.compile(r"^#\s*KERNEL CALLS:.*$", re.M)


class KernelParseError(ValueError):
    """The text is not a kernel this module can identify; the message says what is missing."""


@dataclass(frozen=True)
class KernelIdentity:
    category: str
    kernel_name: str
    body_hash: str
    shape_key: str
    legacy_key: str
    backend: str  # "triton" or "cpp"

    @property
    def match_key(self) -> tuple[str, str, str]:
        """The key base and PR kernels are paired on."""
        return (self.category, self.body_hash, self.shape_key)


# --- Triton ----------------------------------------------------------------------------------------------


def is_triton_kernel_source(source: str) -> bool:
    return "@triton.jit" in source and "@triton_heuristics." in source


def triton_category(source: str, kernel_name: str | None = None) -> str:
    decorators = set(_DECORATOR.findall(source))
    known = [d for d in decorators if d in TRITON_CATEGORIES]
    if len(known) == 1:
        return known[0]
    name = kernel_name or _maybe_triton_name(source) or ""
    match = re.match(r"triton_([a-z]{3})_", name)
    return PREFIX_CATEGORIES.get(match.group(1), "unknown") if match else "unknown"


def _maybe_triton_name(source: str) -> str | None:
    meta = _META_NAME.search(source)
    if meta:
        return meta.group(1)
    jit = _JIT_DEF.search(source)
    if jit and jit.group(1) != "triton_":
        return jit.group(1)
    return None


def triton_kernel_name(source: str) -> str:
    """The descriptive name: ``inductor_meta['kernel_name']`` (≤2.5 defines ``def triton_(``), else the def name."""
    name = _maybe_triton_name(source)
    if name is None:
        raise KernelParseError("no kernel name: neither inductor_meta['kernel_name'] nor a named @triton.jit def")
    return name


def kernel_base_name(kernel_name: str) -> str:
    """Name without the paas hash suffix and without Inductor's per-graph ordinal."""
    return _INDEX_SUFFIX.sub("", strip_paas_suffix(kernel_name))


def fused_ops_name(kernel_name: str) -> str:
    """The ops a kernel fuses, without its codegen kind and ordinal: ``triton_per_fused_add_view_10`` (a
    persistent reduction) and ``triton_red_fused_add_view_10`` (the same ops as a looped one) → ``fused_add_view``."""
    return _KIND_PREFIX.sub("", kernel_base_name(kernel_name))


def strip_paas_suffix(kernel_name: str) -> str:
    match = _PAAS_SUFFIX.match(kernel_name)
    return match.group("base") if match else kernel_name


def _kernel_function_text(source: str) -> tuple[str, str, str]:
    """(def line, parameter text, body) of the @triton.jit function; body ends at the next top-level line."""
    match = _DEF_AFTER_JIT.search(source)
    if not match:
        raise KernelParseError("no '@triton.jit' function definition")
    start = match.end()
    nxt = _TOP_LEVEL_LINE.search(source, start + 1)
    body = source[start: nxt.start() if nxt else len(source)]
    return match.group(1), match.group("params"), body


def _signature_types(source: str) -> list[str]:
    """Argument types from ``triton_meta['signature']`` in order (keys are names ≥2.5, ints ≤2.4)."""
    text = _balanced_after(source, re.compile(r"""['"]signature['"]\s*:\s*\{"""))
    if text is None:
        return []
    try:
        signature = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return re.findall(r":\s*'([^']*)'", text)
    return [str(v) for v in signature.values()]


def _balanced_after(source: str, opener: re.Pattern[str]) -> str | None:
    """The ``{...}`` literal that starts at the end of ``opener`` (brace-balanced, strings respected)."""
    match = opener.search(source)
    if not match:
        return None
    start = match.end() - 1
    depth, quote = 0, ""
    for index in range(start, len(source)):
        char = source[index]
        if quote:
            if char == quote and source[index - 1] != "\\":
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "{[(":
            depth += 1
        elif char in "}])":
            depth -= 1
            if depth == 0:
                return source[start: index + 1]
    return None


def strip_python_comments(text: str) -> str:
    """Drop comments and blank lines; tokenize when the text parses, a line-based fallback when it does not."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type != tokenize.COMMENT]
        text = tokenize.untokenize(tokens)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        text = re.sub(r"^\s*#.*$", "", text, flags=re.M)
    lines = [line.rstrip() for line in text.splitlines()]
    return "\n".join(line for line in lines if line.strip())


def normalized_triton_body(source: str) -> str:
    """The text body_hash is computed from (exposed so a user can diff two kernels that hash differently)."""
    source = _KERNEL_CALLS.sub("", source)
    def_line, _params, body = _kernel_function_text(source)
    normalized_def = re.sub(r"def\s+\w+\s*\(", "def KERNEL(", def_line, count=1)
    types = _signature_types(source)
    parts = [
        "category=" + triton_category(source),
        "signature=" + ",".join(types),
        re.sub(r"\s+", " ", normalized_def),
        strip_python_comments(body),
    ]
    return "\n".join(parts)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _kernel_params(params: str) -> list[str]:
    """Runtime (non-constexpr) parameter names in order: what ``get_args()`` returns values for."""
    names = []
    for raw in params.split(","):
        raw = raw.strip()
        if not raw or "constexpr" in raw:
            continue
        names.append(raw.split(":")[0].strip())
    return names


def get_args_literals(source: str) -> list[Any] | None:
    """Values of ``get_args()``'s return tuple as literals (ints stay ints, tensors become None)."""
    match = re.search(r"^def get_args\(\):\n(?P<body>(?:[ \t]+.*\n?)+)", source, re.M)
    if not match:
        return None
    returns = re.findall(r"^[ \t]+return\s+(.*)$", match.group("body"), re.M)
    if not returns:
        return None
    values: list[Any] = []
    for item in returns[-1].split(","):
        item = item.strip()
        if not item:
            continue
        try:
            values.append(ast.literal_eval(item))
        except (ValueError, SyntaxError):
            values.append(None)
    return values


def triton_numels(source: str, args: Sequence[Any] | None = None) -> dict[str, int | None]:
    """Numel per axis (``x``, ``y``, ``z``, ``r0_``, ``r1_``); body literals first, else signature × args."""
    numels: dict[str, int | None] = {}
    for match in _NUMEL_LITERAL.finditer(source):
        axis = "r0_" if match.group("axis") == "r" else match.group("axis")  # ≤2.6 ``rnumel``
        numels.setdefault(axis, int(match.group("value")))
    try:
        _, params, _ = _kernel_function_text(source)
    except KernelParseError:
        return numels
    names = _kernel_params(params)
    values = list(args) if args is not None else get_args_literals(source)
    for name in names:
        axis = _numel_axis(name)
        if axis is None or axis in numels:
            continue
        numels[axis] = None
        if values is not None and len(values) == len(names):
            value = values[names.index(name)]
            numels[axis] = int(value) if isinstance(value, int) and not isinstance(value, bool) else None
    return numels


def _numel_axis(param: str) -> str | None:
    match = re.fullmatch(r"(x|y|z|r0_|r1_|r)numel", param)
    if not match:
        return None
    return "r0_" if match.group(1) == "r" else match.group(1)


def format_shape_key(numels: dict[str, int | None]) -> str:
    """``x32_r0_128``: axes in fixed order, ``?`` for a numel that is only known at run time."""
    parts = [f"{axis}{'?' if numels[axis] is None else numels[axis]}" for axis in NUMEL_AXES if axis in numels]
    return "_".join(parts)


def seed_key(kernel_name: str, numels: dict[str, int | None]) -> str:
    """run_triton_new.sh's key: name (paas hash stripped, ordinal kept) + ``_x<x>_r<r0>``, 0 when absent."""
    return f"{strip_paas_suffix(kernel_name)}_x{numels.get('x') or 0}_r{numels.get('r0_') or 0}"


def legacy_key(kernel_name: str, numels: dict[str, int | None]) -> str:
    """The seed's key without the ordinal, so it survives renumbering."""
    return f"{kernel_base_name(kernel_name)}_x{numels.get('x') or 0}_r{numels.get('r0_') or 0}"


def identify_triton(source: str, args: Sequence[Any] | None = None) -> KernelIdentity:
    name = triton_kernel_name(source)
    numels = triton_numels(source, args)
    return KernelIdentity(
        category=triton_category(source, name),
        kernel_name=name,
        body_hash=_hash(normalized_triton_body(source)),
        shape_key=format_shape_key(numels),
        legacy_key=legacy_key(name, numels),
        backend="triton",
    )


# --- C++ (the default CPU backend) ---------------------------------------------------------------------------

_CPP_PROFILE_LINE = re.compile(r"^.*RAIIAtenRecordFunctionHandle\s+record_\w+\(.*\);\s*$", re.M)
_CPP_LOOP = re.compile(
    r"for\s*\(\s*int64_t\s+(?P<var>\w+)\s*=[^;]*;\s*(?P=var)\s*<\s*(?:static_cast<int64_t>\()?\s*(?P<bound>\w+?)L?\s*\)?\s*;"
)


def strip_cpp_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"(?m)//.*$", "", text)
    lines = [line.strip() for line in text.splitlines()]
    return "\n".join(line for line in lines if line)


def normalized_cpp_body(source: str, arg_types: Sequence[str] = ()) -> str:
    """C++ text without the profiler RAII line (it embeds the graph ordinal and kernel name) and comments."""
    body = _CPP_PROFILE_LINE.sub("", source)
    return "category=cpp\nsignature=" + ",".join(arg_types) + "\n" + strip_cpp_comments(body)


def cpp_loop_bounds(source: str) -> dict[str, str]:
    """Largest literal (or symbolic) trip bound per loop variable, in first-seen order."""
    bounds: dict[str, str] = {}
    for match in _CPP_LOOP.finditer(source):
        var, bound = match.group("var"), match.group("bound")
        previous = bounds.get(var)
        if previous is None or (bound.isdigit() and previous.isdigit() and int(bound) > int(previous)):
            bounds[var] = bound
    return bounds


def identify_cpp(kernel_name: str, source: str, arg_types: Sequence[str] = ()) -> KernelIdentity:
    bounds = cpp_loop_bounds(source)
    shape_key = "_".join(f"{var}_{bound}" for var, bound in bounds.items())
    outer = [int(b) for b in bounds.values() if b.isdigit()]
    x = outer[0] if outer else 0
    r0 = outer[1] if len(outer) > 1 else 0
    return KernelIdentity(
        category=CPP_CATEGORY,
        kernel_name=kernel_name,
        body_hash=_hash(normalized_cpp_body(source, arg_types)),
        shape_key=shape_key,
        legacy_key=f"{kernel_base_name(kernel_name)}_x{x}_r{r0}",
        backend="cpp",
    )


# --- harness facts ---------------------------------------------------------------------------------------------

_NUM_GB = re.compile(r"""(?:['"]kernel_num_gb['"]\s*:\s*|^[ \t]*num_gb\s*=\s*)(?P<gb>[0-9.]+(?:e[-+]?\d+)?)""", re.M)


def kernel_num_gb(source: str) -> float | None:
    """Bytes moved per launch (GB) as Inductor estimated them at compile time; None when not recorded."""
    match = _NUM_GB.search(source)
    return float(match.group("gb")) if match else None
