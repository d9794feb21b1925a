"""The launch-cost stage: what one kernel launch costs a graph of this environment beyond the kernel's own time,
measured on the variant's own graphs, written where the report prices fusion changes with it."""

from __future__ import annotations

import csv
import textwrap
from pathlib import Path

import pytest
from test_cpp_replay import GRAPH

from foundation.formats.kernel_index import INDEX_COLUMNS
from foundation.formats.launch_cost import read_launch_cost
from stages import launch_cost

# A graph whose kernel spends its time outside its own profiler event: the wall clock sees both, the event only
# the inside, so the stage must find roughly that outside time per launch.
SLOW_LAUNCH = GRAPH.replace(
    "    def __call__(self, *args):\n",
    "    def __call__(self, *args):\n        _spin(200_000)\n",
).replace("import torch\n", textwrap.dedent('''
    import time
    import torch

    def _spin(ns):
        end = time.perf_counter_ns() + ns
        while time.perf_counter_ns() < end:
            pass
'''), 1)


assert "_spin(200_000)" in SLOW_LAUNCH


def organized(root: Path, graph_text: str | None) -> Path:
    (root / "graphs").mkdir(parents=True)
    rows = []
    if graph_text is not None:
        (root / "graphs" / "0_inference_demo.py").write_text(graph_text)
        rows.append({"category": "cpp", "kernel_name": "cpp_fused_scale_0", "body_hash": "h", "shape_key": "x0_4",
                     "legacy_key": "k", "path": "cpp/cpp_fused_scale_0.cpp", "calls": 2,
                     "graphs": "M/0_inference_demo", "backend": "cpp", "source": "graphs/0_inference_demo.py"})
    else:
        rows.append({"category": "pointwise", "kernel_name": "triton_poi_fused_add_0", "body_hash": "h",
                     "shape_key": "x16", "legacy_key": "k", "path": "pointwise/triton_poi_fused_add_0.py",
                     "calls": 1, "graphs": "M/0_inference_demo", "backend": "triton",
                     "source": "pointwise/triton_poi_fused_add_0.py"})
    with open(root / "index.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(INDEX_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    return root


# The stage records how this torch builds C++ kernels (`stages.support.environment.record_cpp_build`), which asks
# Inductor for the CPU's vector ISA: on a CPU with AVX-512 BF16 Inductor compiles a test program for it and loads it
# in a Python process of its own (the tests' skipped ISA probe does not cover that one), so the stage is real
# Inductor work wherever it runs, as the integration tier is.
pytestmark = pytest.mark.integration


@pytest.mark.xdist_group("torch-in-process")  # torch in the test process: one worker imports it
def test_the_cost_is_the_wall_time_of_a_launch_minus_the_kernels_own_time(tmp_path: Path) -> None:
    root = organized(tmp_path / "organized", SLOW_LAUNCH)

    assert launch_cost.main(["--dir", str(root), "--out", str(tmp_path / "launch_cost.json"), "--passes", "30"]) == 0

    cost = read_launch_cost(tmp_path / "launch_cost.json")
    assert cost is not None and cost.backend == "cpp" and not cost.reason
    (graph,) = cost.graphs
    assert graph.graph == "0_inference_demo" and graph.launches == 3  # scale, copy, scale
    assert graph.wall_us > graph.kernel_us > 0
    # The 200 µs spun outside, within the noise of subtracting two medians: the kernels' own time comes from a
    # separate profiled pass, whose event overhead a loaded box inflates (CI once measured 194.5 µs).
    assert cost.per_launch_us is not None and 180 <= cost.per_launch_us < 2000


def test_a_run_without_cpp_graphs_records_why_there_is_no_figure(tmp_path: Path) -> None:
    root = organized(tmp_path / "organized", None)

    assert launch_cost.main(["--dir", str(root), "--out", str(tmp_path / "launch_cost.json")]) == 0

    cost = read_launch_cost(tmp_path / "launch_cost.json")
    assert cost is not None and cost.per_launch_us is None and "no C++ graph" in cost.reason
