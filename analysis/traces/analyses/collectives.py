"""Collectives (NCCL/RCCL kernels) per rank and matched across the ranks of one directory, after TraceLens's
``coll_analysis`` and its multi-rank collective report.

A collective's metadata is what Kineto copies onto its kernel's args from ``record_param_comms``
(:data:`analysis.traces.model.COLLECTIVE_ARG_KEYS`); a trace without it (older PyTorch) still names the
collective from the kernel name (``ncclKernel_SendRecv_…`` → SendRecv, ``ncclDevKernel_AllReduce_…`` →
AllReduce). Message sizes are ``nelems × bytes of dtype`` in decimal MB (1e6).

Across ranks, the k-th collective of a (process group, collective) on one rank is matched with the k-th of the
same on every other rank, in start order (TraceLens's rule; without process-group metadata the group is "").
Start times are on each rank's host clock, which the ranks of one job share. Per matched instance: latency =
the shortest duration over ranks (the time the collective itself needs once everyone has arrived), start skew =
latest start − earliest start, and each rank's wait = latest start − its start. Columns:
:data:`PER_RANK_COLUMNS`, :data:`ACROSS_COLUMNS`, :data:`STRAGGLER_COLUMNS` (documented in docs/trace-reports.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.traces.analyses.categories import is_communication
from analysis.traces.model import TraceData

PER_RANK_COLUMNS = ["rank", "process group", "group ranks", "collective", "group size", "dtype", "in msg nelems",
                    "out msg nelems", "in msg MB", "out msg MB", "stream", "count", "dur us sum", "dur us mean",
                    "dur us std", "dur us min", "dur us max"]
ACROSS_COLUMNS = ["process group", "collective", "in msg nelems", "instances", "ranks", "latency us mean",
                  "start skew us mean", "start skew us max", "end skew us mean", "last to arrive (most often)"]
STRAGGLER_COLUMNS = ["rank", "collectives", "total wait us", "mean wait us", "times last", "times first",
                     "percent last", "dur us sum"]
# Bytes per element of the dtype names record_param_comms writes.
_DTYPE_BYTES = {"Float": 4, "Int": 4, "Long": 8, "BFloat16": 2, "Bool": 1, "Byte": 1, "Char": 1, "Double": 8,
                "Half": 2, "Short": 2, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1}
_KERNEL_COLLECTIVE = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
_KEY = ["process group", "collective", "in msg nelems"]


def collective_from_kernel(name: str) -> str:
    """The collective a communication kernel's name says (``Generic`` for RCCL's generic kernel)."""
    m = _KERNEL_COLLECTIVE.search(name)
    if m:
        return m.group(1)
    return "allreduce" if "cross_device_reduce" in name else "Generic" if "Generic" in name else name[:40]


def _megabytes(nelems: str, dtype: str) -> float:
    try:
        return int(nelems) * _DTYPE_BYTES[dtype] / 1e6
    except (KeyError, ValueError):
        return np.nan


def collective_events(trace: TraceData, rank: int) -> pd.DataFrame:
    """One row per communication kernel of one rank: its metadata, stream, absolute start and end (ns)."""
    names = trace.names
    index = [i for i in range(trace.n_events) if is_communication(names[trace.name_id[i]])] \
        if not trace.collectives else sorted(trace.collectives)
    origin = int(trace.metadata.get("time_origin_ns", 0))
    rows = []
    for i in index:
        meta = trace.collectives.get(i)
        kernel = names[trace.name_id[i]]
        rows.append({
            "rank": rank, "process group": meta.group_name if meta else "",
            "group ranks": meta.group_ranks if meta else "",
            "collective": (meta.collective if meta and meta.collective else collective_from_kernel(kernel)),
            "group size": meta.group_size if meta else "", "dtype": meta.dtype if meta else "",
            "in msg nelems": meta.in_nelems if meta else "", "out msg nelems": meta.out_nelems if meta else "",
            "stream": int(trace.stream[i]), "start": origin + int(trace.start_ns[i]),
            "dur": int(trace.dur_ns[i]),
        })
    return pd.DataFrame(rows, columns=[*PER_RANK_COLUMNS[:8], "stream", "start", "dur"])


def per_rank_table(events: pd.DataFrame) -> pd.DataFrame:
    """TraceLens's coll_analysis: per rank and (group, collective, sizes, stream), count and duration stats."""
    if events.empty:
        return pd.DataFrame(columns=PER_RANK_COLUMNS)
    keys = [*PER_RANK_COLUMNS[:8], "stream"]
    g = events.groupby(keys, sort=False)["dur"].agg(["size", "sum", "mean", "std", "min", "max"]).reset_index()
    g["in msg MB"] = [_megabytes(n, d) for n, d in zip(g["in msg nelems"], g["dtype"], strict=True)]
    g["out msg MB"] = [_megabytes(n, d) for n, d in zip(g["out msg nelems"], g["dtype"], strict=True)]
    g = g.rename(columns={"size": "count"})
    for stat in ("sum", "mean", "std", "min", "max"):
        g[f"dur us {stat}"] = g.pop(stat) / 1e3
    return g.sort_values(["rank", "dur us sum"], ascending=[True, False], kind="stable") \
        .reset_index(drop=True)[PER_RANK_COLUMNS]


def _instances(events: pd.DataFrame) -> pd.DataFrame:
    """Each event with its instance number: its position among its rank's (group, collective) in start order."""
    events = events.sort_values(["rank", "start"], kind="stable").copy()
    events["instance"] = events.groupby(["rank", "process group", "collective"]).cumcount()
    return events


def across_ranks(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per matched collective kind, per rank) over the instances every rank holds."""
    if events.empty or events["rank"].nunique() < 2:
        return pd.DataFrame(columns=ACROSS_COLUMNS), pd.DataFrame(columns=STRAGGLER_COLUMNS)
    ev = _instances(events)
    n_ranks = ev["rank"].nunique()
    inst = ["process group", "collective", "instance"]
    grouped = ev.groupby(inst)
    ev["ranks"] = grouped["rank"].transform("nunique")
    ev = ev[ev["ranks"] == n_ranks].copy()  # instances some rank lacks cannot be matched
    if ev.empty:
        return pd.DataFrame(columns=ACROSS_COLUMNS), pd.DataFrame(columns=STRAGGLER_COLUMNS)
    grouped = ev.groupby(inst)
    ev["end"] = ev["start"] + ev["dur"]
    ev["wait"] = grouped["start"].transform("max") - ev["start"]
    per = grouped.agg(latency=("dur", "min"), first=("start", "min"), last=("start", "max"),
                      end_first=("end", "min"), end_last=("end", "max"),
                      nelems=("in msg nelems", "first")).reset_index()
    per["skew"] = per["last"] - per["first"]
    per["end skew"] = per["end_last"] - per["end_first"]
    last_rank = ev.loc[ev.groupby(inst)["wait"].idxmin(), [*inst, "rank"]]
    first_rank = ev.loc[ev.groupby(inst)["wait"].idxmax(), [*inst, "rank"]]
    per = per.merge(last_rank.rename(columns={"rank": "last rank"}), on=inst)
    rows = []
    for (group, coll, nelems), g in per.groupby(["process group", "collective", "nelems"], sort=False):
        rows.append({"process group": group, "collective": coll, "in msg nelems": nelems, "instances": len(g),
                     "ranks": n_ranks, "latency us mean": g["latency"].mean() / 1e3,
                     "start skew us mean": g["skew"].mean() / 1e3, "start skew us max": g["skew"].max() / 1e3,
                     "end skew us mean": g["end skew"].mean() / 1e3,
                     "last to arrive (most often)": int(g["last rank"].mode().iloc[0])})
    across = pd.DataFrame(rows, columns=ACROSS_COLUMNS).sort_values(
        ["instances", "latency us mean"], ascending=False, kind="stable").reset_index(drop=True)
    times_last = last_rank["rank"].value_counts()
    times_first = first_rank["rank"].value_counts()
    by_rank = ev.groupby("rank").agg(collectives=("wait", "size"), wait=("wait", "sum"), dur=("dur", "sum"))
    stragglers = pd.DataFrame({
        "rank": by_rank.index, "collectives": by_rank["collectives"].to_numpy(),
        "total wait us": by_rank["wait"].to_numpy() / 1e3,
        "mean wait us": by_rank["wait"].to_numpy() / by_rank["collectives"].to_numpy() / 1e3,
        "times last": times_last.reindex(by_rank.index, fill_value=0).to_numpy(),
        "times first": times_first.reindex(by_rank.index, fill_value=0).to_numpy(),
        "dur us sum": by_rank["dur"].to_numpy() / 1e3})
    stragglers["percent last"] = 100.0 * stragglers["times last"] / len(per)
    # The straggler waits least (everyone else waits for it): first row, as TraceLens sorts.
    return across, stragglers.sort_values("total wait us", kind="stable").reset_index(drop=True)[STRAGGLER_COLUMNS]


def collective_sheets(traces: Sequence[tuple[int, TraceData]]) -> dict[str, pd.DataFrame]:
    """The collective sheets of one directory's ranks (empty when no rank has communication kernels)."""
    frames = [collective_events(trace, rank) for rank, trace in traces]
    events = pd.concat([f for f in frames if not f.empty], ignore_index=True) if any(
        not f.empty for f in frames) else pd.DataFrame()
    if events.empty:
        return {}
    sheets = {"collectives": per_rank_table(events)}
    across, stragglers = across_ranks(events)
    if not across.empty:
        sheets["collectives_across_ranks"] = across
        sheets["collective_stragglers"] = stragglers
    return sheets
