"""Parser for the stdout of ``python <compiled graph module>.py -p`` (Inductor's ``compiled_module_main``).

The output holds the torch.profiler ``key_averages`` table (10 rows), then on GPU one tabulate table per
kernel category (``== triton_pointwise category kernels ==``: kernel, self device ms per run, count per run,
percent of wall time), ``Percent of time when <DEVICE> is busy``, ``Total wall time`` and the one-line
``Output for tabulate:`` summary. On CPU there are no category tables ("No device detected"); the per-kernel
information is then the ``cpp_fused_*`` rows of the key_averages table (present with
``cpp.enable_kernel_profile``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.traces.model import KernelAggregate, TraceBuilder, TraceData
from analysis.traces.readers.fileio import open_text, reading
from analysis.traces.readers.kineto import CPU_KERNEL_NAME
from foundation.errors import UserError
from foundation.records import parse_cell

if TYPE_CHECKING:
    import pandas as pd

MARKER = "Profiling result for a compiled module of benchmark"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CATEGORY = re.compile(r"^\s*== (?P<cat>\S+) category kernels ==")
_BUSY = re.compile(r"Percent of time when (?P<dev>\S+) is busy: (?P<pct>\d+(?:\.\d*)?)%")
_WALL = re.compile(r"^Total wall time (?P<ms>\d+(?:\.\d*)?) ms")
_TABULATE = re.compile(r"^Output for tabulate: (?P<name>[^,]*), (?P<poi>[\d.]+)%, (?P<red>[\d.]+)%, "
                       r"(?P<per>[\d.]+)%, (?P<tunk>[\d.]+)%, (?P<unk>[\d.]+)%, (?P<busy>[\d.]+)%, "
                       r"(?P<wall>[\d.]+)ms$")
_TIME = re.compile(r"^(?P<v>-?[\d.]+)(?P<u>ns|us|ms|s)$")
_TIME_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


@dataclass
class CompiledModuleProfile:
    path: Path
    benchmark: str
    wall_ms: float | None
    busy_percent: float | None
    # Columns: category, kernel, ms (self device time per run), count (per run), percent (of wall time).
    category_kernels: pd.DataFrame
    # Columns: name, self_cpu_us, self_device_us, calls (totals over all profiled runs).
    ops: pd.DataFrame
    tabulate: dict[str, str] = field(default_factory=dict)

    def to_trace_data(self) -> TraceData:
        """Per-kernel aggregates: the device category tables when present, else the CPU kernel rows."""
        b = TraceBuilder(self.path, "compiled-module-profile")
        if not self.category_kernels.empty:
            b.platform = "gpu"
            for row in self.category_kernels.itertuples(index=False):
                b.aggregates.append(KernelAggregate(name=row.kernel, calls=max(round(row.count), 1),
                                                    total_ns=round(row.ms * 1e6)))
        else:
            b.platform = "cpu"
            for row in self.ops.itertuples(index=False):
                if CPU_KERNEL_NAME.search(row.name):
                    if row.self_cpu_us < 0:  # a profiler accounting slip; a kernel cannot take negative time
                        raise UserError(f"{self.path}: profiler table row {row.name}: expected a self CPU time "
                                        f"≥ 0, found {row.self_cpu_us:g} us")
                    b.aggregates.append(KernelAggregate(name=row.name, calls=int(row.calls),
                                                        total_ns=round(row.self_cpu_us * 1e3), kind="cpu_kernel"))
        b.metadata = {"benchmark": self.benchmark, "wall_ms": self.wall_ms, "busy_percent": self.busy_percent}
        return b.build()


def _time_us(text: str) -> float | None:
    m = _TIME.match(text.strip())
    if not m:
        return None
    try:
        value = float(m.group("v")) * _TIME_US[m.group("u")]
    except ValueError:  # "1.2.3us" matches the pattern but is no number
        return None
    return value if math.isfinite(value) else None


def _split(line: str) -> list[str]:
    return [c for c in re.split(r"\s{2,}", line.strip()) if c]


def _op_table(lines: list[str], path: Path) -> pd.DataFrame:
    """The key_averages table: columns are delimited by the dash runs of its separator line."""
    import pandas as pd  # here, not at the top: trace format detection imports this module for MARKER

    columns = ["name", "self_cpu_us", "self_device_us", "calls"]
    for i, line in enumerate(lines):
        above = lines[i - 1].strip() if i > 0 else ""
        if line.lstrip().startswith("Name") and "Self CPU" in line and above and set(above) <= {"-", " "}:
            spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[i - 1])]
            header = [line[a:b + 2].strip() for a, b in spans]
            rows = []
            for number, row in enumerate(lines[i + 2:], start=i + 3):
                if not row.strip() or set(row.strip()) <= {"-", " "}:
                    break
                cells = dict(zip(header, (row[a:b + 2].strip() for a, b in spans), strict=False))
                device = next((cells[h] for h in header if h.startswith("Self ") and h not in ("Self CPU", "Self CPU %")
                               and not h.endswith("%")), "")
                rows.append({"name": cells.get("Name", ""), "self_cpu_us": _time_us(cells.get("Self CPU", "")) or 0.0,
                             "self_device_us": _time_us(device) or 0.0,
                             "calls": int(parse_cell(cells.get("# of Calls", "0") or "0",
                                                     f"{path}: line {number}, column # of Calls", 0, integer=True))})
            return pd.DataFrame(rows, columns=columns)
    return pd.DataFrame(columns=columns)


def parse_compiled_module_profile(text: str, path: Path = Path("<stdout>")) -> CompiledModuleProfile:
    import pandas as pd  # here, not at the top: trace format detection imports this module for MARKER

    if MARKER not in text:
        raise UserError(f"{path}: no '{MARKER}' line; not the output of a compiled module run with -p")
    lines = [_ANSI.sub("", line.rstrip("\n")) for line in text.splitlines()]
    benchmark = ""
    wall = busy = None
    tab: dict[str, str] = {}
    kernels: list[dict[str, object]] = []
    category = None
    for number, line in enumerate(lines, start=1):
        if line.startswith(MARKER):
            benchmark = line[len(MARKER):].strip().rstrip(":")
        elif m := _CATEGORY.match(line):
            category = m.group("cat")
        elif category and line.strip() and not line.lstrip().startswith(("Kernel", "---")):
            cells = _split(line)
            if cells[0] == "Total":
                category = None
            elif len(cells) >= 4:
                where = f"{path}: line {number} ({category} table)"
                kernels.append({"category": category, "kernel": cells[0],
                                "ms": parse_cell(cells[1], f"{where}, ms", minimum=0),
                                "count": parse_cell(cells[2], f"{where}, count", minimum=0),
                                "percent": parse_cell(cells[3].rstrip("%"), f"{where}, percent", minimum=0)})
        if m := _BUSY.search(line):
            busy = float(m.group("pct"))
        elif m := _WALL.match(line):
            wall = float(m.group("ms"))
        elif m := _TABULATE.match(line):
            tab = m.groupdict()
    return CompiledModuleProfile(
        path=path, benchmark=benchmark, wall_ms=wall, busy_percent=busy,
        category_kernels=pd.DataFrame(kernels, columns=["category", "kernel", "ms", "count", "percent"]),
        ops=_op_table(lines, path), tabulate=tab)


def read_compiled_module_profile(path: Path) -> CompiledModuleProfile:
    with reading(path, "profile output"), open_text(path) as fh:
        text = fh.read()
    return parse_compiled_module_profile(text, path)
