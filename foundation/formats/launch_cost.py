"""``<variant>/launch_cost.json``: what one kernel launch costs a compiled graph beyond the kernel's own time.

Written by ``stages.launch_cost`` in the variant's environment, read by the report's time decomposition
(`analysis.report.sections.time_decomposition`), where a change in the number of launches per step is priced with it.

How it is measured (C++ kernels, the CPU backend): a compiled graph of the variant is loaded and run once to record
its kernel launches (`stages.support.cpp_replay`); the recorded calls are then made again, exactly as the graph's
``call()`` makes them (same Python binding, same arguments), each timed by the wall clock with the buffers it writes
restored first (untimed); the same passes under the profiler give each kernel's own event time. Per launch, cost = (wall
time of a pass − the kernels' own time in a pass) / launches in a pass; the file keeps each graph's value and their
median.

Schema: ``{"format_version": 1, "backend": "cpp", "per_launch_us": float | null, "graphs": [{"graph", "launches",
"wall_us", "kernel_us", "per_launch_us"}], "method": str, "reason": str}`` (``reason``: why there is no value).
Files written before ``format_version`` carry ``"format": 1`` instead; both are read.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from foundation.atomic_io import write_json
from foundation.records import (
    check_format_version,
    expect_list,
    expect_number,
    expect_object,
    expect_str,
    read_json,
)

FORMAT_VERSION = 1
METHOD = ("wall time of a graph's recorded kernel calls (the graph's own Python binding and arguments, inputs "
          "restored before each call) minus the kernels' own profiler-event time, per launch; median over graphs")


@dataclass(frozen=True)
class GraphLaunchCost:
    graph: str
    launches: int  # launches in one pass
    wall_us: float  # wall time of one pass (median over passes)
    kernel_us: float  # the kernels' own time in one pass (median over passes)

    @property
    def per_launch_us(self) -> float:
        return max(self.wall_us - self.kernel_us, 0.0) / self.launches if self.launches else float("nan")


@dataclass(frozen=True)
class LaunchCost:
    backend: str
    graphs: list[GraphLaunchCost] = field(default_factory=list)
    reason: str = ""  # why nothing was measured (no C++ graph, a Triton-only run)
    method: str = METHOD

    @property
    def per_launch_us(self) -> float | None:
        values = [g.per_launch_us for g in self.graphs if g.launches]
        return statistics.median(values) if values else None

    def spread_us(self) -> tuple[float, float] | None:
        values = [g.per_launch_us for g in self.graphs if g.launches]
        return (min(values), max(values)) if values else None


def write_launch_cost(path: Path, cost: LaunchCost) -> None:
    graphs = [{**asdict(g), "per_launch_us": g.per_launch_us} for g in cost.graphs]
    write_json(path, {"format_version": FORMAT_VERSION, "backend": cost.backend, "per_launch_us": cost.per_launch_us,
                      "graphs": graphs, "method": cost.method, "reason": cost.reason})


def read_launch_cost(path: Path) -> LaunchCost | None:
    """The file's content; None when the run has none (runs made before the stage existed)."""
    if not Path(path).is_file():
        return None
    data = expect_object(read_json(path, "a launch cost record"), str(path))
    check_format_version(data, str(path), FORMAT_VERSION, "format_version" if "format_version" in data else "format")
    graphs = []
    for i, raw in enumerate(expect_list(data.get("graphs", []), f"{path}: graphs")):
        where = f"{path}: graphs[{i}]"
        g = expect_object(raw, where)
        graphs.append(GraphLaunchCost(graph=expect_str(g.get("graph"), f"{where}.graph"),
                                      launches=int(expect_number(g.get("launches"), f"{where}.launches", 0)),
                                      wall_us=expect_number(g.get("wall_us"), f"{where}.wall_us", 0),
                                      kernel_us=expect_number(g.get("kernel_us"), f"{where}.kernel_us", 0)))
    return LaunchCost(backend=expect_str(data.get("backend", ""), f"{path}: backend"), graphs=graphs,
                      reason=expect_str(data.get("reason", ""), f"{path}: reason"),
                      method=expect_str(data.get("method", METHOD), f"{path}: method"))
