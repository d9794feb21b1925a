"""Fusion changes: which base kernels the PR replaced by which PR kernels, in the same graph.

A kernel with no partner on the other side (pairing: `analysis.kernels.compare.pair_kernels`) was fused
differently, split, renamed with a new body, or is new. Inductor names a kernel after the ops it fused
(``cpp_fused__log_softmax_nll_loss_forward_view_4``), and organize records the graphs that launch it, so a base-only
and a PR-only kernel are linked when they sit in a same graph (``<model>/<aot id>``,
`foundation.formats.kernel_index.graph_key`, which is the same on both sides whatever the cache names) *and* their names
share an op word. Linked kernels form a group (connected components, so a 2 → 1 fusion is one group); a kernel linked to
nothing is a group of one side ("removed" / "added"). Each group carries its launches and its time per step on both
sides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from analysis.kernels.identity import kernel_base_name
from foundation.formats.kernel_index import graph_keys

_NAME_PREFIX = re.compile(r"^(?:triton_[a-z]{3}_|cpp_)?(?:fused_)?")

FUSION_COLUMNS = ("group", "graphs", "base_kernels", "pr_kernels", "base_launches", "pr_launches",
                  "base_ms_per_step", "pr_ms_per_step", "delta_ms_per_step", "shared_ops", "change")


def op_words(kernel_name: str) -> frozenset[str]:
    """The words of the ops a kernel's name lists (``_log_softmax_nll_loss`` → log, softmax, nll, loss)."""
    stem = _NAME_PREFIX.sub("", kernel_base_name(kernel_name))
    return frozenset(w for w in stem.split("_") if w)


@dataclass(frozen=True)
class _Item:
    side: str  # "base" or "pr"
    name: str
    graphs: frozenset[str]
    ops: frozenset[str]
    launches: float
    ms_per_step: float


def _items(frame: pd.DataFrame, side: str) -> list[_Item]:
    return [_Item(side, str(name), graph_keys(graphs), op_words(str(name)), float(calls),
                  float(ms) if pd.notna(ms) else 0.0)
            for name, graphs, calls, ms in zip(frame["kernel_name"], frame["graphs"], frame["calls"],
                                                frame["ms_per_step"], strict=True)]


def _linked(a: _Item, b: _Item) -> bool:
    return bool(a.graphs & b.graphs) and bool(a.ops & b.ops)


def _components(items: list[_Item]) -> list[list[int]]:
    parent = list(range(len(items)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, a in enumerate(items):
        for j in range(i + 1, len(items)):
            b = items[j]
            if a.side != b.side and _linked(a, b):
                parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(items)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def _change(base: list[_Item], pr: list[_Item]) -> str:
    if not pr:
        return "removed (no PR kernel in its graphs names its ops)"
    if not base:
        return "added (no base kernel in its graphs names its ops)"
    if len(base) == len(pr):
        return f"{len(base)} → {len(pr)} kernels: recoded or renamed, same count"
    return f"{len(base)} → {len(pr)} kernels: {'fused' if len(pr) < len(base) else 'split'}"


def fusion_changes(only_base: pd.DataFrame, only_pr: pd.DataFrame) -> pd.DataFrame:
    """One row per group of unpaired kernels (columns `FUSION_COLUMNS`), the largest time change first."""
    items = _items(only_base, "base") + _items(only_pr, "pr")
    rows = []
    for members in _components(items):
        base = sorted((items[i] for i in members if items[i].side == "base"), key=lambda it: it.name)
        pr = sorted((items[i] for i in members if items[i].side == "pr"), key=lambda it: it.name)
        everyone = base + pr
        graphs = frozenset.intersection(*(it.graphs for it in everyone)) if len(everyone) > 1 else everyone[0].graphs
        graphs = graphs or frozenset.union(*(it.graphs for it in everyone))
        shared = (frozenset.union(*(it.ops for it in base)) & frozenset.union(*(it.ops for it in pr))
                  if base and pr else frozenset())
        base_ms = sum(it.ms_per_step for it in base)
        pr_ms = sum(it.ms_per_step for it in pr)
        rows.append({"graphs": ", ".join(sorted(graphs)), "base_kernels": ", ".join(it.name for it in base),
                     "pr_kernels": ", ".join(it.name for it in pr),
                     "base_launches": sum(it.launches for it in base), "pr_launches": sum(it.launches for it in pr),
                     "base_ms_per_step": base_ms, "pr_ms_per_step": pr_ms, "delta_ms_per_step": pr_ms - base_ms,
                     "shared_ops": ", ".join(sorted(shared)), "change": _change(base, pr)})
    frame = pd.DataFrame(rows, columns=[c for c in FUSION_COLUMNS if c != "group"])
    frame = frame.reindex(frame["delta_ms_per_step"].abs().sort_values(ascending=False, kind="stable").index)
    frame.insert(0, "group", range(1, len(frame) + 1))
    return frame.reset_index(drop=True)
