"""Node replay sets: the GEMM and CONV op calls that make 99 % of their family's kernel time, as distinct shapes
that can be replayed alone (with torch, or with the vendors' benchmark tools) and tuned later.

A shape is one (op, recorded inputs) pair of a trace recorded with ``record_shapes=True``: ``Input Dims``,
``Input type``, ``Input Strides`` (where the profiler wrote them) and ``Concrete Inputs``. Its in-trace time is
the sum of the durations of the kernels its calls launched (the attribution of :mod:`analysis.traces.analyses.ops`),
summed over the ranks of a configuration. Within each family (:data:`GEMM_OPS`, :data:`CONV_OPS`) the shapes
are taken longest first until they hold :data:`COVERAGE` of the family's time; time of family ops without
usable shapes cannot be replayed and is reported as such.

The replay set file (JSON, :data:`REPLAY_FORMAT`) is the contract between the report (which writes it), the
``stages.node_replay`` stage (which replays it) and any later tuning. Top-level fields:

- ``format``: 1; ``source``: the trace files; ``devices``: the devices they name; ``platform``: rocm, cuda, ...
- ``coverage``: the target share (0.99); ``families``: per family ``{"ms": family kernel time,
  "replayable_ms": time of shapes with usable inputs, "selected_ms": time of the selected shapes}``
- ``shapes``: one entry per selected shape, ordered by family then time:

  - ``id`` (``gemm-1``, ``conv-3``), ``family`` (GEMM, CONV), ``op`` (``aten::addmm``), ``dtype`` (torch name)
  - ``inputs``: the op's arguments in order, each ``{"kind": "tensor", "sizes", "strides", "dtype"}``
    (``strides`` null when not recorded: contiguous), ``{"kind": "value", "value"}`` or ``{"kind": "none"}``,
    in the op's schema order (keyword-only arguments included, as the profiler records them): the overload of
    ``torch.ops.aten.<op>`` whose schema takes exactly these arguments replays the call
  - ``problem``: the op in the vendors' terms: GEMM ``m, n, k, batch, a_layout, b_layout, lda, ldb, ldc,
    stride_a, stride_b, stride_c, alpha, beta, bias`` (row-major torch view: C[m, n] = A[m, k] · B[k, n],
    layouts ``row``/``column``/``strided``); CONV ``n, c, k, spatial, kernel, stride, padding, dilation,
    output_padding, groups, transposed, bias, layout (NCHW/NHWC), passes`` (forward, backward_data,
    backward_weight)
  - ``calls``, ``trace_total_us``, ``trace_mean_us`` (per call), ``family_percent``
  - ``commands``: ``{tool: [command line, ...]}`` (see :mod:`analysis.traces.reports.bench_commands`) and
    ``command_notes``: ``{tool: why there is no command, or what it approximates}``
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from analysis.traces.analyses.ops import Attribution
from analysis.traces.analyses.roofline import CONV_OPS, GEMM_OPS, conv_arg, parse_concrete
from analysis.traces.model import OpShape, TraceData
from foundation.records import expect_list, expect_object, expect_str, invalid, read_json

REPLAY_FORMAT = 1
COVERAGE = 0.99
GEMM, CONV = "GEMM", "CONV"
FAMILIES = (GEMM, CONV)

# Kineto's dtype names (lower-cased) → torch dtype names.
TORCH_DTYPES = {"float": "float32", "double": "float64", "c10::half": "float16", "c10::bfloat16": "bfloat16",
                "long int": "int64", "long": "int64", "int": "int32", "short": "int16", "signed char": "int8",
                "unsigned char": "uint8", "bool": "bool", "c10::float8_e4m3fn": "float8_e4m3fn",
                "c10::float8_e4m3fnuz": "float8_e4m3fnuz", "c10::float8_e5m2": "float8_e5m2",
                "c10::float8_e5m2fnuz": "float8_e5m2fnuz"}


@dataclass(frozen=True)
class ReplayShape:
    """One distinct shape of a GEMM or CONV op and its time in the trace(s)."""

    family: str
    op: str
    dtype: str
    inputs: tuple[dict[str, Any], ...]
    problem: dict[str, Any]
    calls: int
    trace_total_us: float

    @property
    def trace_mean_us(self) -> float:
        return self.trace_total_us / self.calls if self.calls else 0.0

    @property
    def key(self) -> tuple[str, str]:
        return self.op, repr(self.inputs)


@dataclass
class FamilyTime:
    ms: float = 0.0
    replayable_ms: float = 0.0
    selected_ms: float = 0.0


@dataclass
class ReplaySet:
    source: list[str]
    devices: list[str]
    platform: str
    shapes: list[ReplayShape]
    families: dict[str, FamilyTime] = field(default_factory=dict)
    coverage: float = COVERAGE


def family_of(op: str) -> str | None:
    return GEMM if op in GEMM_OPS else CONV if op in CONV_OPS else None


# --- the op's inputs, as torch takes them --------------------------------------------------------------------


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(type(v) is int and v >= 0 for v in value):
        return value
    return None


def replay_inputs(shape: OpShape) -> tuple[dict[str, Any], ...] | None:
    """The recorded arguments as replayable inputs, or None when one of them cannot be rebuilt (a tensor list,
    a dtype without a torch name, a scalar whose value was not recorded)."""
    out = []
    for i, dims in enumerate(shape.dims):
        kind = shape.types[i] if i < len(shape.types) else ""
        dtype = TORCH_DTYPES.get(kind.lower())
        concrete = shape.concrete[i] if i < len(shape.concrete) else ""
        if dtype is not None:
            sizes = _ints(dims)
            if sizes is None:
                return None
            strides = _ints(shape.strides[i]) if i < len(shape.strides) else None
            out.append({"kind": "tensor", "sizes": sizes, "dtype": dtype,
                        "strides": strides if strides is not None and len(strides) == len(sizes) else None})
        elif kind == "" and concrete == "":
            out.append({"kind": "none"})
        elif concrete != "":
            out.append({"kind": "value", "value": parse_concrete(concrete)})
        else:
            return None  # e.g. a TensorList or a Scalar the profiler did not write
    return tuple(out)


def _strides(t: dict[str, Any]) -> list[int]:
    """Recorded strides, or the contiguous ones."""
    if t.get("strides") is not None:
        return list(t["strides"])
    sizes, acc, out = t["sizes"], 1, []
    for s in reversed(sizes):
        out.append(acc)
        acc *= max(s, 1)
    return out[::-1]


def _matrix(sizes: Sequence[int], strides: Sequence[int]) -> tuple[str, int]:
    """Layout (row/column/strided) and leading dimension of the last two dims of a (batched) matrix."""
    rows, cols = sizes[-2], sizes[-1]
    s_row, s_col = strides[-2], strides[-1]
    if s_col == 1 and (s_row >= cols or rows == 1):
        return "row", max(s_row, cols)
    if s_row == 1 and (s_col >= rows or cols == 1):
        return "column", max(s_col, rows)
    return "strided", max(s_row, s_col)


def _tensor(inputs: Sequence[dict[str, Any]], i: int) -> dict[str, Any] | None:
    return inputs[i] if i < len(inputs) and inputs[i]["kind"] == "tensor" else None


def _value(inputs: Sequence[dict[str, Any]], i: int, default: Any) -> Any:
    return inputs[i]["value"] if i < len(inputs) and inputs[i]["kind"] == "value" else default


def gemm_problem(op: str, inputs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The GEMM as C[m, n] = alpha · A[m, k] · B[k, n] (+ beta · bias), batched when ``batch`` > 1."""
    bias = None
    alpha, beta = 1.0, 0.0
    if op in ("aten::addmm", "aten::_addmm_activation", "aten::baddbmm"):  # (bias, A, B, beta, alpha)
        bias, a, b = _tensor(inputs, 0), _tensor(inputs, 1), _tensor(inputs, 2)
        beta, alpha = float(_value(inputs, 3, 1)), float(_value(inputs, 4, 1))
    elif op == "aten::linear":  # (x [..., K], weight [N, K], bias [N]): B is the weight's transpose
        x, w = _tensor(inputs, 0), _tensor(inputs, 1)
        if x is None or w is None or len(w["sizes"]) != 2 or len(x["sizes"]) < 2:
            return None
        xs = _strides(x)
        a = {"sizes": [math.prod(x["sizes"][:-1]), x["sizes"][-1]], "strides": [xs[-2], xs[-1]]}
        ws = _strides(w)
        b = {"sizes": [w["sizes"][1], w["sizes"][0]], "strides": [ws[1], ws[0]]}
        bias = _tensor(inputs, 2)
        beta = 1.0 if bias is not None else 0.0
    else:  # mm, bmm, matmul, _scaled_mm: (A, B, ...)
        a, b = _tensor(inputs, 0), _tensor(inputs, 1)
    if a is None or b is None or len(a["sizes"]) < 2 or len(b["sizes"]) < 2 or a["sizes"][-1] != b["sizes"][-2]:
        return None
    a_sizes, b_sizes = a["sizes"], b["sizes"]
    a_strides, b_strides = _strides(a), _strides(b)
    m, k, n = a_sizes[-2], a_sizes[-1], b_sizes[-1]
    batch = max(math.prod(a_sizes[:-2]), math.prod(b_sizes[:-2]))
    a_layout, lda = _matrix(a_sizes, a_strides)
    b_layout, ldb = _matrix(b_sizes, b_strides)
    bias_kind = "none"
    if bias is not None:
        bias_kind = "vector" if len(bias["sizes"]) == 1 and bias["sizes"][0] == n else "matrix"
    return {"m": m, "n": n, "k": k, "batch": batch, "a_layout": a_layout, "b_layout": b_layout, "lda": lda,
            "ldb": ldb, "ldc": n, "stride_a": a_strides[-3] if len(a_sizes) > 2 else m * k,
            "stride_b": b_strides[-3] if len(b_sizes) > 2 else k * n, "stride_c": m * n, "alpha": alpha,
            "beta": beta if bias is not None else 0.0, "bias": bias_kind}


def _layout(t: dict[str, Any]) -> str:
    """NCHW / NHWC (NCDHW / NDHWC) from the recorded strides: channels last when C has the smallest stride."""
    sizes, strides = t["sizes"], _strides(t)
    spatial = len(sizes) - 2
    if strides[1] == 1 and sizes[1] > 1 and min(strides[2:] or [1]) >= sizes[1]:
        return "NDHWC" if spatial == 3 else "NHWC"
    return "NCDHW" if spatial == 3 else "NCHW"


def conv_problem(op: str, inputs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    backward = op == "aten::convolution_backward"
    first = 1 if backward else 0
    x, w = _tensor(inputs, first), _tensor(inputs, first + 1)
    if x is None or w is None or len(x["sizes"]) < 3 or len(x["sizes"]) != len(w["sizes"]):
        return None
    spatial = len(x["sizes"]) - 2

    def ints(key: str, default: int) -> list[int]:
        value = conv_arg(op, key, [_value(inputs, i, None) for i in range(len(inputs))], default)
        value = value if isinstance(value, list) else [value]
        return [int(v) for v in ((value * spatial)[:spatial] if len(value) == 1 else value)]

    transposed = bool(conv_arg(op, "transposed", [_value(inputs, i, None) for i in range(len(inputs))], False))
    groups = int(conv_arg(op, "groups", [_value(inputs, i, None) for i in range(len(inputs))], 1))
    out_channels = w["sizes"][1] * groups if transposed else w["sizes"][0]
    if backward:
        mask = _value(inputs, 10, [True, True, True])
        mask = mask if isinstance(mask, list) and len(mask) >= 2 else [True, True, True]
        passes = [p for p, on in zip(("backward_data", "backward_weight"), mask[:2], strict=True) if on]
        bias = len(mask) > 2 and bool(mask[2])
    else:
        passes = ["forward"]
        bias = _tensor(inputs, 2) is not None
    return {"n": x["sizes"][0], "c": x["sizes"][1], "k": out_channels, "spatial": x["sizes"][2:],
            "kernel": w["sizes"][2:], "stride": ints("stride", 1), "padding": ints("padding", 0),
            "dilation": ints("dilation", 1), "output_padding": ints("output_padding", 0), "groups": groups,
            "transposed": transposed, "bias": bias, "layout": _layout(x), "passes": passes}


def problem_of(op: str, inputs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    try:
        return gemm_problem(op, inputs) if op in GEMM_OPS else conv_problem(op, inputs)
    except (IndexError, KeyError, TypeError, ValueError):
        return None  # inputs that do not fit the op's schema: the time counts as not replayable


# --- selecting the shapes ------------------------------------------------------------------------------------


def trace_shapes(trace: TraceData, attr: Attribution) -> tuple[list[ReplayShape], dict[str, float]]:
    """Every GEMM/CONV shape of one trace that launched kernels, and each family's kernel time in ms."""
    ops = trace.ops
    family_ms = dict.fromkeys(FAMILIES, 0.0)
    if not len(ops):
        return [], family_ms
    linked = attr.op_index >= 0
    time_per_op = np.bincount(attr.op_index[linked], weights=trace.dur_ns[linked], minlength=len(ops))
    groups: dict[tuple[int, int], list[float]] = {}
    for i in np.flatnonzero(time_per_op > 0).tolist():
        name = trace.names[int(ops.name_id[i])]
        family = family_of(name)
        if family is None:
            continue
        family_ms[family] += float(time_per_op[i]) / 1e6
        entry = groups.setdefault((int(ops.name_id[i]), int(ops.shape_id[i])), [0, 0.0])
        entry[0] += 1
        entry[1] += float(time_per_op[i])
    shapes = []
    for (name_id, shape_id), (calls, ns) in groups.items():
        name = trace.names[name_id]
        inputs = replay_inputs(ops.shapes[shape_id]) if shape_id >= 0 else None
        problem = problem_of(name, inputs) if inputs is not None else None
        if inputs is None or problem is None:
            continue
        tensors = [t for t in inputs if t["kind"] == "tensor"]
        shapes.append(ReplayShape(family_of(name) or "", name, tensors[0]["dtype"] if tensors else "", inputs,
                                  problem, int(calls), ns / 1e3))
    return shapes, family_ms


def merge_shapes(per_trace: Iterable[list[ReplayShape]]) -> list[ReplayShape]:
    """The same shape in several ranks is one shape: calls and time add up."""
    merged: dict[tuple[str, str], ReplayShape] = {}
    for shapes in per_trace:
        for s in shapes:
            seen = merged.get(s.key)
            merged[s.key] = s if seen is None else ReplayShape(
                s.family, s.op, s.dtype, s.inputs, s.problem, seen.calls + s.calls,
                seen.trace_total_us + s.trace_total_us)
    return list(merged.values())


def select(shapes: list[ReplayShape], family_ms: dict[str, float],
           coverage: float = COVERAGE) -> tuple[list[ReplayShape], dict[str, FamilyTime]]:
    """Per family, the longest shapes until they hold ``coverage`` of the family's kernel time."""
    chosen: list[ReplayShape] = []
    times: dict[str, FamilyTime] = {}
    for family in FAMILIES:
        mine = sorted((s for s in shapes if s.family == family), key=lambda s: (-s.trace_total_us, s.op, s.key))
        total_us = family_ms.get(family, 0.0) * 1e3
        t = times[family] = FamilyTime(ms=total_us / 1e3, replayable_ms=sum(s.trace_total_us for s in mine) / 1e3)
        acc = 0.0
        for s in mine:
            if total_us and acc >= coverage * total_us:
                break
            chosen.append(s)
            acc += s.trace_total_us
        t.selected_ms = acc / 1e3
    return chosen, times


def shape_id(family: str, index: int) -> str:
    return f"{family.lower()}-{index}"


def shape_text(shape: ReplayShape | dict[str, Any]) -> str:
    """A short human form of the problem (the report's ``shape`` column)."""
    family = shape.family if isinstance(shape, ReplayShape) else shape["family"]
    p = shape.problem if isinstance(shape, ReplayShape) else shape["problem"]
    if family == GEMM:
        text = f"M={p['m']} N={p['n']} K={p['k']}" + (f" B={p['batch']}" if p["batch"] > 1 else "")
        return text + f" A:{p['a_layout']} B:{p['b_layout']}" + (f" +bias({p['bias']})" if p["bias"] != "none" else "")
    spatial = "x".join(map(str, p["spatial"]))
    kernel = "x".join(map(str, p["kernel"]))
    return (f"N={p['n']} C={p['c']} K={p['k']} {spatial} k{kernel} s{p['stride']} p{p['padding']}"
            + (f" g{p['groups']}" if p["groups"] > 1 else "") + (" transposed" if p["transposed"] else "")
            + f" {p['layout']} {'+'.join(p['passes'])}")


# --- the file ---------------------------------------------------------------------------------------------


def replay_set_json(replay: ReplaySet, commands: list[tuple[dict[str, list[str]], dict[str, str]]]) -> dict[str, Any]:
    """The replay set file's content; ``commands`` holds each shape's (commands, notes), in shape order."""
    counters = dict.fromkeys(FAMILIES, 0)
    entries = []
    for s, (cmds, notes) in zip(replay.shapes, commands, strict=True):
        counters[s.family] += 1
        family_ms = replay.families[s.family].ms
        entries.append({
            "id": shape_id(s.family, counters[s.family]), "family": s.family, "op": s.op, "dtype": s.dtype,
            "inputs": list(s.inputs), "problem": s.problem, "calls": s.calls,
            "trace_total_us": round(s.trace_total_us, 3), "trace_mean_us": round(s.trace_mean_us, 3),
            "family_percent": round(100.0 * s.trace_total_us / 1e3 / family_ms, 3) if family_ms else 0.0,
            "commands": cmds, "command_notes": notes,
        })
    return {"format": REPLAY_FORMAT, "source": replay.source, "devices": replay.devices,
            "platform": replay.platform, "coverage": replay.coverage,
            "families": {f: {"ms": round(t.ms, 6), "replayable_ms": round(t.replayable_ms, 6),
                             "selected_ms": round(t.selected_ms, 6)} for f, t in replay.families.items()},
            "shapes": entries}


def read_replay_set(path: Path) -> dict[str, Any]:
    """A replay set file, checked for what the replay uses (a foreign or edited file is a one-line error)."""
    data = expect_object(read_json(path, "a node replay set (JSON)"), f"{path}")
    if data.get("format") != REPLAY_FORMAT:
        raise invalid(f"{path}: 'format'", f"{REPLAY_FORMAT} (a replay set written by invoke perf-report -r)",
                      data.get("format"))
    for i, entry in enumerate(expect_list(data.get("shapes"), f"{path}: 'shapes'")):
        where = f"{path}: shapes[{i}]"
        expect_object(entry, where)
        expect_str(entry.get("id"), f"{where}.id")
        op = expect_str(entry.get("op"), f"{where}.op")
        if not op.startswith("aten::"):
            raise invalid(f"{where}.op", "an aten operator (aten::<name>)", op)
        for j, item in enumerate(expect_list(entry.get("inputs"), f"{where}.inputs")):
            kind = expect_object(item, f"{where}.inputs[{j}]").get("kind")
            if kind == "tensor":
                sizes = item.get("sizes")
                strides = item.get("strides")
                if _ints(sizes) is None or (strides is not None and (_ints(strides) is None
                                                                    or len(strides) != len(sizes))):
                    raise invalid(f"{where}.inputs[{j}]", "sizes (and strides) as lists of whole numbers ≥ 0",
                                  item)
                if item.get("dtype") not in TORCH_DTYPES.values():
                    raise invalid(f"{where}.inputs[{j}].dtype", "a torch dtype name", item.get("dtype"))
            elif kind not in ("value", "none"):
                raise invalid(f"{where}.inputs[{j}].kind", "tensor, value or none", kind)
    return data
