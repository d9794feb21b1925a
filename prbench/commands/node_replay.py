"""``invoke perf-report -r`` after the reports: replay each configuration's replay set on this machine's GPU
(``stages.node_replay``, a subprocess of the local Python) and write the replayed-vs-trace comparison next to it.

The replay set and its vendor command lines are written before this runs (by the report), so a machine without
a GPU still leaves them behind; the stage then stops with its one-line "needs a GPU" error.
"""

from __future__ import annotations

from pathlib import Path

from analysis.traces.analyses.replay import read_replay_set
from analysis.traces.reports.replay_report import coverage_lines, replay_paths, write_comparison
from prbench.stages.command_lines import node_replay_command, run_stage


def run_node_replay(output_base: Path) -> list[Path]:
    """Replay ``<output_base>_replay_set.json``; returns the results and comparison files written (none when
    the set is empty: the traces had no GEMM or CONV op with recorded shapes)."""
    paths = replay_paths(output_base)
    replay_set = read_replay_set(paths["set"])
    for line in coverage_lines(replay_set):
        print(f"{paths['set'].name}: {line}")
    if not replay_set["shapes"]:
        return []
    run_stage(node_replay_command(paths["set"], paths["results"]))
    return [paths["results"], *write_comparison(replay_set, paths["results"], output_base)]
