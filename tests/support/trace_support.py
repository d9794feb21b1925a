"""An independent join of a raw Kineto trace, for tests that check the trace readers against it."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

GEMMS = ("aten::addmm", "aten::mm")


OpCall = tuple[dict[str, Any], list[tuple[str, float]]]  # the cpu_op event, and its kernels (name, µs)


def kernels_by_op_call(path: Path, ops: tuple[str, ...] = GEMMS) -> list[OpCall]:
    """Independently of the reader: every cpu_op call named in ``ops``, and the kernels (name, µs) whose launch
    (a runtime event on the same thread inside the op) has their correlation id."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    kernels = {e["args"]["correlation"]: (e["name"], e["dur"]) for e in events
               if e.get("cat") == "kernel" and e.get("ph") == "X"}
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and "ts" in e
                and e.get("args", {}).get("correlation") in kernels]
    calls = []
    for op in (e for e in events if e.get("cat") == "cpu_op" and e.get("name") in ops):
        inside = [kernels[r["args"]["correlation"]] for r in launches
                  if r["tid"] == op["tid"] and op["ts"] <= r["ts"] < op["ts"] + op["dur"]]
        calls.append((op, inside))
    return calls


def addmm_calls_by_shape(path: Path) -> dict[tuple[int, int, int], tuple[int, float]]:
    """(m, n, k) → (addmm calls, kernel µs of those calls), from the raw trace's independent join."""
    out: dict[tuple[int, int, int], list[float]] = defaultdict(lambda: [0, 0.0])
    for op, inside in kernels_by_op_call(path, ("aten::addmm",)):
        if inside:
            _bias, (m, k), (_, n) = op["args"]["Input Dims"][:3]
            out[(m, n, k)][0] += 1
            out[(m, n, k)][1] += sum(us for _, us in inside)
    return {key: (int(c), us) for key, (c, us) in out.items()}
