"""Base-vs-PR comparison of two traces: GPU timeline, kernel categories, individual kernels and host (CPU) ops.

Kernels are matched by exact name. Names that exist on one side only are reported as ``only base`` /
``only pr`` rather than dropped, because a PR that changes fusion typically renames kernels (and category
totals still compare like with like). ``diff`` is PR − base; ``diff %`` is relative to base.

What makes the two sides unlike is said first (:func:`mismatches`): other devices, platforms, ranks or world
sizes, another number of profiled steps, events left out for a missing ts/dur. Kernels without a launching op
are kept in every table (HTA drops them): the categories table shows them in a row of their own
(:data:`UNLINKED_SHARE`, outside the totals) and the ops table under :data:`analysis.traces.analyses.ops.NO_OP`. The ops
table (``ops``) compares the host ops that launched kernels: calls, host (CPU) time and the kernel time they
launched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.rendering import render_template, write_csv_dir, write_xlsx
from analysis.traces.analyses.breakdown import category_table, kernel_table
from analysis.traces.analyses.ops import UNLINKED_SHARE, attribute, ops_summary
from analysis.traces.analyses.timeline import gpu_timeline
from analysis.traces.model import TraceData
from foundation import atomic_io
from foundation.errors import UserError

OPS_COLUMNS = ["op", "status", "base calls", "pr calls", "base cpu ms", "pr cpu ms", "base ms", "pr ms", "diff ms",
               "diff %"]


@dataclass
class TraceDiff:
    base_label: str
    pr_label: str
    timeline: pd.DataFrame  # type, base ms, pr ms, diff ms, diff %
    categories: pd.DataFrame  # category, base count, pr count, base ms, pr ms, diff ms, diff %
    kernels: pd.DataFrame  # name, category, status, base count, pr count, base ms, pr ms, diff ms, diff %
    ops: pd.DataFrame  # OPS_COLUMNS
    notes: list[str]  # what makes the sides unlike, first

    @property
    def total_kernel_ms(self) -> tuple[float, float]:
        totals = self.categories[self.categories["category"] != UNLINKED_SHARE]
        return float(totals["base ms"].sum()), float(totals["pr ms"].sum())


def _diff_columns(df: pd.DataFrame) -> pd.DataFrame:
    df["diff ms"] = df["pr ms"] - df["base ms"]
    with np.errstate(divide="ignore", invalid="ignore"):
        df["diff %"] = np.where(df["base ms"] > 0, 100.0 * df["diff ms"] / df["base ms"], np.nan)
    return df


def _timeline(base: TraceData, pr: TraceData) -> pd.DataFrame:
    b = gpu_timeline(base).to_frame().set_index("type")["time ms"]
    p = gpu_timeline(pr).to_frame().set_index("type")["time ms"]
    df = pd.DataFrame({"type": b.index, "base ms": b.to_numpy(), "pr ms": p.reindex(b.index).to_numpy()})
    return _diff_columns(df)


def _differs(what: str, base: object, pr: object, consequence: str) -> list[str]:
    return [f"{what} differ: base {base}, PR {pr}; {consequence}."] if base != pr else []


def _steps(trace: TraceData) -> str:
    host = sum(not s.on_device for s in trace.steps)
    device = sum(s.on_device for s in trace.steps)
    return f"{host} ProfilerStep(s) ({device} GPU-side)"


def mismatches(base: TraceData, pr: TraceData) -> list[str]:
    """What makes the two traces unlike, one sentence each (empty when nothing does)."""
    notes = _differs("Devices", ", ".join(sorted(set(base.device_names))) or "not recorded",
                     ", ".join(sorted(set(pr.device_names))) or "not recorded",
                     "kernel names and times compare different hardware")
    notes += _differs("Platforms", base.platform, pr.platform, "kernels of the two vendors never match by name")
    notes += _differs("Ranks", f"rank {base.rank} of {base.world_size}", f"rank {pr.rank} of {pr.world_size}",
                      "the two traces may not do the same share of the work")
    notes += _differs("Step windows", _steps(base), _steps(pr), "the totals may cover different amounts of work")
    for side, trace in (("base", base), ("PR", pr)):
        if trace.skipped.count:
            notes.append(f"{side}: {trace.skipped.sentence()}")
    return notes


def _ops(base: TraceData, pr: TraceData) -> tuple[pd.DataFrame, list[int], list[float]]:
    """Host ops that launched kernels, matched by name; and each side's unlinked kernel count and ms."""
    frames, unlinked, unlinked_ms = [], [], []
    for trace in (base, pr):
        attr = attribute(trace)
        summary = ops_summary(trace, attr)[["op", "calls", "kernel time ms"]]
        ops = trace.ops
        cpu = pd.Series(ops.dur_ns / 1e6, dtype=float).groupby(
            [trace.names[i] for i in ops.name_id.tolist()]).sum() if len(ops) and ops.dur_ns.size else pd.Series()
        summary = summary.assign(cpu=summary["op"].map(cpu))
        frames.append(summary)
        unlinked.append(attr.unlinked)
        unlinked_ms.append(attr.unlinked_ns / 1e6)
    ops = frames[0].merge(frames[1], on="op", how="outer", suffixes=(" base", " pr"))
    ops["status"] = np.select([ops["calls base"].isna(), ops["calls pr"].isna()], ["only pr", "only base"], "both")
    ops = ops.rename(columns={"calls base": "base calls", "calls pr": "pr calls", "cpu base": "base cpu ms",
                              "cpu pr": "pr cpu ms", "kernel time ms base": "base ms", "kernel time ms pr": "pr ms"})
    ops[["base calls", "pr calls", "base ms", "pr ms"]] = ops[["base calls", "pr calls", "base ms", "pr ms"]].fillna(0)
    ops[["base calls", "pr calls"]] = ops[["base calls", "pr calls"]].astype("int64")
    ops = _diff_columns(ops)
    ops = ops.reindex(ops["diff ms"].abs().sort_values(ascending=False, kind="stable").index)
    return ops[OPS_COLUMNS].reset_index(drop=True), unlinked, unlinked_ms


def trace_diff(base: TraceData, pr: TraceData) -> TraceDiff:
    bk, pk = kernel_table(base), kernel_table(pr)
    kernels = bk[["name", "category", "count", "total ms"]].merge(
        pk[["name", "category", "count", "total ms"]], on="name", how="outer", suffixes=(" base", " pr"))
    kernels["status"] = np.select(
        [kernels["count base"].isna(), kernels["count pr"].isna()], ["only pr", "only base"], "both")
    kernels["category"] = kernels["category base"].fillna(kernels["category pr"])
    kernels = kernels.rename(columns={"count base": "base count", "count pr": "pr count",
                                      "total ms base": "base ms", "total ms pr": "pr ms"})
    kernels[["base count", "pr count", "base ms", "pr ms"]] = kernels[
        ["base count", "pr count", "base ms", "pr ms"]].fillna(0)
    kernels[["base count", "pr count"]] = kernels[["base count", "pr count"]].astype("int64")
    kernels = _diff_columns(kernels)
    kernels = kernels.reindex(kernels["diff ms"].abs().sort_values(ascending=False, kind="stable").index)
    kernels = kernels[["name", "category", "status", "base count", "pr count", "base ms", "pr ms", "diff ms",
                       "diff %"]].reset_index(drop=True)

    bc, pc = category_table(base, bk), category_table(pr, pk)
    cats = bc[["category", "count", "time ms"]].merge(pc[["category", "count", "time ms"]], on="category",
                                                      how="outer", suffixes=(" base", " pr")).fillna(0)
    cats = cats.rename(columns={"count base": "base count", "count pr": "pr count", "time ms base": "base ms",
                                "time ms pr": "pr ms"})
    cats[["base count", "pr count"]] = cats[["base count", "pr count"]].astype("int64")
    cats = _diff_columns(cats).sort_values("base ms", ascending=False, kind="stable").reset_index(drop=True)
    cats = cats[["category", "base count", "pr count", "base ms", "pr ms", "diff ms", "diff %"]]
    ops, unlinked, unlinked_ms = _ops(base, pr)
    notes = mismatches(base, pr)
    if any(unlinked):
        row = {"category": UNLINKED_SHARE, "base count": unlinked[0], "pr count": unlinked[1],
               "base ms": unlinked_ms[0], "pr ms": unlinked_ms[1]}
        cats = pd.concat([cats, _diff_columns(pd.DataFrame([row]))], ignore_index=True)
        notes.append(f"Kernels without a launching op: base {unlinked[0]} ({unlinked_ms[0]:.3f} ms), PR "
                     f"{unlinked[1]} ({unlinked_ms[1]:.3f} ms); counted in every table here (HTA drops them), "
                     f"shown apart in the row '{UNLINKED_SHARE}'.")
    return TraceDiff(base_label=base.path.name, pr_label=pr.path.name, timeline=_timeline(base, pr),
                     categories=cats, kernels=kernels, ops=ops, notes=notes)


def render_trace_diff_markdown(diff: TraceDiff, top: int = 25, heading_level: int = 1) -> str:
    """Markdown section; ``heading_level`` lets a larger report embed it under its own headings."""
    base_ms, pr_ms = diff.total_kernel_ms
    return render_template("trace_diff.md.j2", diff=diff, top=top, h="#" * heading_level,
                           base_ms=base_ms, pr_ms=pr_ms,
                           only_base=int((diff.kernels["status"] == "only base").sum()),
                           only_pr=int((diff.kernels["status"] == "only pr").sum()))


def trace_diff_sheets(diff: TraceDiff) -> dict[str, pd.DataFrame]:
    return {"notes": pd.DataFrame({"note": diff.notes}, columns=["note"]), "timeline": diff.timeline,
            "categories": diff.categories, "kernels": diff.kernels, "ops": diff.ops}


def profile_dirs_markdown(base_dir: Path, pr_dir: Path, top: int = 15) -> str | None:
    """Trace diffs for every model profiled on both sides (``<model>.json.gz`` in each profiles dir).

    This is the section the compare report embeds; None when no model has a trace on both sides.
    """
    from analysis.traces.readers.by_content import read_trace

    names = sorted({p.name for p in base_dir.glob("*.json.gz")} & {p.name for p in pr_dir.glob("*.json.gz")})
    sections = []
    for name in names:
        model = name.removesuffix(".json.gz")
        try:
            diff = trace_diff(read_trace(base_dir / name), read_trace(pr_dir / name))
        except UserError as exc:
            # One unusable profile (an empty or malformed trace) is said in its section, not the report's end.
            sections.append(f"### Profile of {model}\n\nNot compared: {exc}")
            continue
        sections.append(f"### Profile of {model}\n\n" + render_trace_diff_markdown(diff, top=top, heading_level=4))
    return "\n\n".join(sections) if sections else None


def write_trace_diff(diff: TraceDiff, markdown: str, out: Path, formats: list[str]) -> list[Path]:
    """Write the diff as ``<out>.md``, ``<out>.xlsx`` and/or ``<out>_csvs/``; return what was written."""
    written = []
    for fmt in formats:
        if fmt == "md":
            target = out.with_name(out.name + ".md")
            atomic_io.write_text(target, markdown)
        elif fmt == "xlsx":
            target = write_xlsx(out.with_name(out.name + ".xlsx"), trace_diff_sheets(diff))
        else:
            target = write_csv_dir(out.with_name(out.name + "_csvs"), trace_diff_sheets(diff))
        written.append(target)
    return written
