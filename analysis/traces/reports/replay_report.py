"""The files of a node replay, next to the report of one configuration: the replay set, its vendor command
lines, and the table comparing replayed with in-trace times.

- ``<report>_replay_set.json``: the shapes (format in :mod:`analysis.traces.analyses.replay`);
- ``<report>_replay_commands.sh``: every tool's command line per shape, commented with the shape and its
  in-trace time, to run by hand or to start tuning from;
- ``<report>_replay_results.json``: what ``stages.node_replay`` measured (written by the stage);
- ``<report>_replay.md`` and ``<report>_replay.csv``: replayed vs in-trace time per shape.

The results file holds ``device``, ``torch``, ``warmup``, ``iterations``, ``l2_flush`` (true: each timed call
followed an L2 flush; absent in results written before the replay flushed) and ``results``: per shape ``id``,
``replay_median_us``, ``replay_mean_us``, ``replay_std_us``, ``samples``, ``error`` (why torch could not replay
it, else null) and ``tools``: ``{tool: {"us": time per call or null, "error": ..., "commands": [...]}}`` for
each tool that was on PATH.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.rendering import TRACE_STYLE, Column, fmt_num, fmt_text, markdown_table, write_csv
from analysis.traces.analyses.replay import (
    FAMILIES,
    FamilyTime,
    ReplaySet,
    ReplayShape,
    merge_shapes,
    replay_set_json,
    select,
    shape_text,
)
from analysis.traces.reports.bench_commands import TOOLS, commands_for
from foundation import atomic_io
from foundation.records import expect_list, expect_object, read_json

SET_SUFFIX = "_replay_set.json"
COMMANDS_SUFFIX = "_replay_commands.sh"
RESULTS_SUFFIX = "_replay_results.json"
TABLE_SUFFIXES = ("_replay.md", "_replay.csv")


def replay_paths(output_base: Path) -> dict[str, Path]:
    def at(suffix: str) -> Path:
        return output_base.with_name(output_base.name + suffix)

    return {"set": at(SET_SUFFIX), "commands": at(COMMANDS_SUFFIX), "results": at(RESULTS_SUFFIX),
            "md": at(TABLE_SUFFIXES[0]), "csv": at(TABLE_SUFFIXES[1])}


def build_replay_set(per_rank: list[tuple[list[ReplayShape], dict[str, float]]], source: list[str],
                     devices: list[str], platform: str) -> ReplaySet:
    """The shapes of every rank merged, then the 99 % selection per family over the ranks' summed time."""
    shapes = merge_shapes(s for s, _ in per_rank)
    family_ms = {f: sum(ms.get(f, 0.0) for _, ms in per_rank) for f in FAMILIES}
    chosen, times = select(shapes, family_ms)
    return ReplaySet(source=source, devices=devices, platform=platform, shapes=chosen, families=times)


def coverage_sentence(family: str, t: FamilyTime, count: int) -> str:
    if t.ms <= 0:
        return f"{family}: no kernel time in the trace(s)."
    missing = t.ms - t.replayable_ms
    text = (f"{family}: {count} shape(s) hold {100 * t.selected_ms / t.ms:.1f} % of {t.ms:.3f} ms of "
            f"{family} kernel time")
    if missing > 1e-9:
        text += (f"; {100 * missing / t.ms:.1f} % is in ops without usable recorded shapes (record_shapes=True "
                 "is needed) and cannot be replayed")
    return text + "."


def commands_script(data: dict[str, Any]) -> str:
    lines = ["#!/bin/sh", "# Vendor benchmark command lines of the node replay set (invoke perf-report -r).",
             "# Each block: one shape, its in-trace time per call, then one line per tool. Run the tools that",
             "# match your device: hipblaslt-bench / MIOpenDriver (ROCm), cutlass_profiler (NVIDIA).", ""]
    for entry in data["shapes"]:
        lines.append(f"# {entry['id']}: {entry['op']} {entry['dtype']} {shape_text(entry)}; "
                     f"{entry['calls']} call(s), {entry['trace_mean_us']:.3f} us per call in the trace, "
                     f"{entry['family_percent']:.1f} % of {entry['family']} time")
        for tool in TOOLS:
            lines += entry["commands"].get(tool, [])
            if tool in entry["command_notes"]:
                lines.append(f"#   {tool}: {entry['command_notes'][tool]}")
        lines.append("")
    return "\n".join(lines)


def write_replay_set(replay: ReplaySet, output_base: Path) -> list[Path]:
    """Write the replay set and its command lines; returns the paths written."""
    commands = [commands_for(s.family, s.problem, s.dtype) for s in replay.shapes]
    data = replay_set_json(replay, commands)
    paths = replay_paths(output_base)
    atomic_io.write_json(paths["set"], data)
    atomic_io.write_text(paths["commands"], commands_script(data))
    return [paths["set"], paths["commands"]]


# --- replayed vs in-trace --------------------------------------------------------------------------------

COMPARISON_COLUMNS = ["id", "family", "op", "dtype", "shape", "calls", "trace us", "replay us", "replay std us",
                      "replay / trace", "replay error"]


def _ratio(a: Any, b: Any) -> float:
    return float(a) / float(b) if a is not None and b and math.isfinite(float(a)) else math.nan


def comparison_table(replay_set: dict[str, Any], results: dict[str, Any]) -> pd.DataFrame:
    """One row per shape: in-trace mean time per call against the torch replay's median (and each tool's)."""
    by_id = {r["id"]: r for r in results.get("results", [])}
    tools = [t for t in TOOLS if any(t in r.get("tools", {}) for r in by_id.values())]
    rows = []
    for entry in replay_set["shapes"]:
        r = by_id.get(entry["id"], {})
        row = {"id": entry["id"], "family": entry["family"], "op": entry["op"], "dtype": entry["dtype"],
               "shape": shape_text(entry), "calls": entry["calls"], "trace us": entry["trace_mean_us"],
               "replay us": r.get("replay_median_us"), "replay std us": r.get("replay_std_us"),
               "replay / trace": _ratio(r.get("replay_median_us"), entry["trace_mean_us"]),
               "replay error": r.get("error") or ""}
        for tool in tools:
            found = r.get("tools", {}).get(tool, {})
            row[f"{tool} us"] = found.get("us")
            row[f"{tool} / trace"] = _ratio(found.get("us"), entry["trace_mean_us"])
            row[f"{tool} error"] = found.get("error") or ""
        rows.append(row)
    columns = COMPARISON_COLUMNS + [f"{t} {c}" for t in tools for c in ("us", "/ trace", "error")]
    return pd.DataFrame(rows, columns=columns)


def coverage_lines(replay_set: dict[str, Any]) -> list[str]:
    """One sentence per family: how much of its kernel time the replay set's shapes hold."""
    lines = []
    for family in FAMILIES:
        t = replay_set["families"].get(family, {})
        count = sum(1 for e in replay_set["shapes"] if e["family"] == family)
        lines.append(coverage_sentence(family, FamilyTime(t.get("ms", 0.0), t.get("replayable_ms", 0.0),
                                                          t.get("selected_ms", 0.0)), count))
    return lines


# Results written before the replay flushed the L2 say nothing of it: their calls were timed with the launch in.
FLUSHED = " after an L2 flush (a cold cache; the flush also keeps the launch latency out of the time)"


def comparison_markdown(table: pd.DataFrame, replay_set: dict[str, Any], results: dict[str, Any]) -> str:
    lines = [f"# Node replay: {', '.join(replay_set['source'])}", "",
             f"Replayed on {results.get('device', '?')} with torch {results.get('torch', '?')}: "
             f"{results.get('warmup', '?')} warm-up calls, then {results.get('iterations', '?')} timed calls, "
             f"each between two device events{FLUSHED if results.get('l2_flush') else ''}; `replay us` is "
             "their median. `trace us` is the mean kernel time "
             "per call in the trace(s) "
             f"({', '.join(replay_set['devices']) or 'device not recorded'}).", ""]
    lines += [f"- {line}" for line in coverage_lines(replay_set)]
    columns = [Column(c, c, fmt_num if c.endswith(("us", "trace")) else fmt_text,
                      width=60 if c == "shape" else 0) for c in table.columns if not c.endswith("error")]
    lines += ["", markdown_table(table, columns, style=TRACE_STYLE), ""]
    errors = table[[c for c in table.columns if c.endswith("error")]].astype(str)
    failed = [(table.at[i, "id"], c, v) for i, row in errors.iterrows() for c, v in row.items() if v]
    if failed:
        lines += ["Not measured:", ""] + [f"- {sid} ({c.removesuffix(' error')}): {v}"
                                           for sid, c, v in failed] + [""]
    return "\n".join(lines)


def read_results(path: Path) -> dict[str, Any]:
    data = expect_object(read_json(path, "node replay results (JSON)"), str(path))
    for i, r in enumerate(expect_list(data.get("results"), f"{path}: 'results'")):
        expect_object(r, f"{path}: results[{i}]")
    return data


def write_comparison(replay_set: dict[str, Any], results_path: Path, output_base: Path) -> list[Path]:
    results = read_results(results_path)
    table = comparison_table(replay_set, results)
    paths = replay_paths(output_base)
    atomic_io.write_text(paths["md"], comparison_markdown(table, replay_set, results))
    write_csv(paths["csv"], table)
    return [paths["md"], paths["csv"]]

