"""Where the timing's variance comes from: rounds, the processes of a round, visits, and the samples of a visit.

    python benchmarks/variance_components.py RUN [--kind models|kernels] [--json FILE]

``RUN`` is a finished run directory, any directory holding ``pair/<kind>/round-*.json`` (the GPU fixtures), or a
``.tar.gz`` of one (``tests/fixtures/readme_run/readme1-a.tar.gz``). Every item (a model, a kernel) is timed, in
each round, by one fresh worker process per side, in several visits, each visit a list of samples; per item, the
log of a sample is modelled as

    log t = side + round + process(round, side) + visit(process) + sample(visit)

with the side a fixed effect (base and PR may run different code) and the other four random, independent, with
variances estimated by the method of moments of a nested ANOVA, level by level from the bottom:

* within a visit: the pooled variance of the log samples of each visit;
* between visits: the pooled variance of the visit means within each process, less the within-visit part a mean
  of ``n`` samples still carries;
* between processes: the round × side interaction of the process means (what is left of a process's mean once its
  round and its side are taken out), less what its visits carry;
* between rounds: the variance of the round means (both sides together), less what their processes carry.

A negative estimate is set to 0 and said so. A level the record cannot tell apart is reported as not identifiable,
never guessed: one sample per visit (a record whose visits were merged) leaves the within-visit part inside the
visit level; rounds that time one side each (docker recipes) leave the process part inside the round level.

Base and PR items are paired by the plan (``pair/<kind>/plan.json``: a block with one item per side) where there
is one, else by name; an item timed on one side only is left out and counted. Across the items of a family, the
process part is split once more into what all items of one process share (a worker that runs slower as a whole:
what the identical-kernel control measures and takes out) and each item's own, from the item × round × side table
of process means.

Per family it prints the median over items of each component (as a standard deviation in % of the time and as a
share of the total), the family's shared process part, and what one round adds to the variance of a paired
base/PR ratio: ``2 (process + visits / m)``, with m the visits per process — of which the process's share decides
whether a worker may time several rounds. ``--json`` writes it all (``format_version``), with the noise levels
``benchmarks/verdict_sim.py --components`` takes.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.append(str(ROOT))

from foundation import atomic_io  # noqa: E402
from foundation.errors import UserError  # noqa: E402
from foundation.formats.paired_rounds import PAIRED_DIR, ROUND_KINDS, RoundRecord, read_rounds  # noqa: E402
from foundation.formats.stage_records import job_items, read_plan  # noqa: E402
from prbench.commands.cli import OneLineParser  # noqa: E402

FORMAT_VERSION = 1
LEVELS = ("round", "process", "visit", "within")
SIDES = ("base", "pr")

Key = tuple[int, str]  # (round, side): one process


@dataclass(frozen=True)
class Observation:
    """One visit of one side to one item: its round, its place in the round and its samples (ms)."""

    round: int
    side: str
    visit: tuple[int, int, int]  # (pass, block, position): unique within a process
    samples: tuple[float, ...]


@dataclass
class Components:
    """One item's estimated variances of log time per level (None: not identifiable from the record)."""

    item: str
    variances: dict[str, float | None]
    rounds: int  # rounds with both sides
    visits_per_process: float  # median
    samples_per_visit: float  # median
    visits_per_block: float  # median visits of one side to the item in one block and pass (2 in an ABBA block)
    visit_value_var: float  # variance of one visit's median within a process (visit + what its samples carry)
    interaction: dict[Key, float] = field(default_factory=dict)  # process mean less its round and side means
    notes: list[str] = field(default_factory=list)

    def shares(self) -> dict[str, float | None]:
        total = sum(v for v in self.variances.values() if v is not None)
        return {k: (None if v is None else (v / total if total > 0 else 0.0)) for k, v in self.variances.items()}

    def round_ratio_var(self) -> float | None:
        """What one round adds to the variance of the paired log(base / PR): two processes and their visits."""
        process = self.variances["process"]
        if process is None:
            return None
        m = max(int(self.visits_per_process), 1)
        return 2 * (process + self.visit_value_var * median_factor(m) / m)


def _pooled(groups: Iterable[np.ndarray]) -> tuple[float, int]:
    """Pooled variance (ddof 1 per group) and its degrees of freedom over groups of ≥ 2 values."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) >= 2:
            ss += float(((g - g.mean()) ** 2).sum())
            df += len(g) - 1
    return (ss / df if df else math.nan), df


def _mad_squared(values: np.ndarray) -> np.ndarray:
    """The squared normal-consistent MAD along the last axis."""
    centre = np.median(values, axis=-1, keepdims=True)
    return (1.4826 * np.median(np.abs(values - centre), axis=-1)) ** 2


def _pooled_robust(groups: Iterable[np.ndarray]) -> tuple[float, int]:
    """Like `_pooled`, each group's variance taken from its MAD (one preempted sample or visit in a group moves it
    little), made unbiased for normal values of that group size (`_draws`), weighted by degrees of freedom."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) >= 2:
            ss += (len(g) - 1) * float(_mad_squared(g)) / _draws(len(g))[1]
            df += len(g) - 1
    return (ss / df if df else math.nan), df


_DRAWS: dict[int, tuple[float, float]] = {}


def _draws(n: int) -> tuple[float, float]:
    """For n standard normal values: n × the variance of their median, and the mean of their squared MAD; drawn
    once per n from a fixed seed (the exact small-sample values, which the asymptotic π/2 and 1 are not)."""
    if n not in _DRAWS:
        draws = np.random.default_rng(n).standard_normal((20_000, n))
        _DRAWS[n] = (n * float(np.median(draws, axis=1).var()), float(_mad_squared(draws).mean()))
    return _DRAWS[n]


def median_factor(n: int) -> float:
    """n × the variance of the median of n standard normal values (1 for n ≤ 2, → π/2): what a median of n
    values carries of their variance, times n."""
    return 1.0 if n <= 2 else _draws(n)[0]


def estimate(item: str, observations: list[Observation]) -> Components:
    """The four components of one item's log time, negatives set to 0.

    As the comparison summarises them: a visit by the median of its samples, a process by the median of its
    visits; within visits and between visits the spread is the pooled MAD, so a preempted sample or visit does not
    stand for the level; between processes and rounds (a handful of values each) the plain ANOVA moments. What a
    median of n values carries of the level below is that level's variance × `median_factor` (n) / n.
    """
    notes: list[str] = []
    logs = {id(o): np.log(np.array([s for s in o.samples if s > 0], dtype=float)) for o in observations}
    visits = [o for o in observations if len(logs[id(o)])]
    by_process: dict[Key, list[Observation]] = {}
    for o in visits:
        by_process.setdefault((o.round, o.side), []).append(o)
    sizes = [len(logs[id(o)]) for o in visits]
    within, within_df = _pooled_robust(logs[id(o)] for o in visits)
    variances: dict[str, float | None] = dict.fromkeys(LEVELS)
    if within_df:
        variances["within"] = within
    else:
        within = 0.0
        notes.append("within a visit: not identifiable (one sample per visit: the visit level holds it)")
    carried_within = within * statistics.fmean(median_factor(n) / n for n in sizes) if sizes else 0.0
    values = {key: np.array([float(np.median(logs[id(o)])) for o in group]) for key, group in by_process.items()}
    visit_value_var, visit_df = _pooled_robust(values.values())
    if visit_df:
        variances["visit"] = visit_value_var - carried_within
    else:
        visit_value_var = carried_within
        notes.append("between visits: not identifiable (one visit per process)")
    process_values = {key: float(np.median(v)) for key, v in values.items()}
    carried_visits = {key: visit_value_var * median_factor(len(v)) / len(v) for key, v in values.items()}
    both = sorted(r for r in {r for r, _ in process_values} if all((r, s) in process_values for s in SIDES))
    interaction: dict[Key, float] = {}
    if len(both) >= 2:
        table = np.array([[process_values[(r, s)] for s in SIDES] for r in both])
        resid = table - table.mean(axis=1, keepdims=True) - table.mean(axis=0, keepdims=True) + table.mean()
        interaction = {(r, s): float(resid[i, j]) for i, r in enumerate(both) for j, s in enumerate(SIDES)}
        ms_interaction = float((resid ** 2).sum()) / ((len(both) - 1) * (len(SIDES) - 1))
        variances["process"] = ms_interaction - statistics.fmean(carried_visits[(r, s)] for r in both for s in SIDES)
        variances["round"] = float(table.mean(axis=1).var(ddof=1)) - ms_interaction / len(SIDES)
    else:
        notes.append("between processes: not identifiable (fewer than 2 rounds timing both sides: the round "
                     "level holds it)")
        rounds = sorted({r for r, _ in process_values})
        pooled, df = _pooled(np.array([process_values[(r, s)] for r in rounds if (r, s) in process_values])
                             for s in SIDES)
        if df:
            variances["round"] = pooled - statistics.fmean(carried_visits.values())
        else:
            notes.append("between rounds: not identifiable (one round per side)")
    for level, value in variances.items():
        if value is not None and value < 0:
            variances[level] = 0.0
            notes.append(f"{level}: estimated negative, set to 0 ({value:.2e})")
    blocks: dict[tuple[int, str, int, int], int] = {}
    for o in visits:
        key = (o.round, o.side, o.visit[0], o.visit[1])
        blocks[key] = blocks.get(key, 0) + 1
    return Components(item=item, variances=variances, rounds=len(both),
                      visits_per_process=float(statistics.median(len(v) for v in values.values())) if values else 0.0,
                      samples_per_visit=float(statistics.median(sizes)) if sizes else 0.0,
                      visits_per_block=float(statistics.median(blocks.values())) if blocks else 0.0,
                      visit_value_var=visit_value_var, interaction=interaction, notes=notes)


def shared_process(items: list[Components]) -> tuple[float | None, float | None]:
    """The process variance all items of one process share, and the items' own (mean over items), from the
    item × round × side table of interaction residuals; None without ≥ 2 items over ≥ 2 common rounds."""
    usable = [c for c in items if c.interaction]
    if len(usable) < 2:
        return None, None
    keys = sorted(set.intersection(*(set(c.interaction) for c in usable)))
    rounds = sorted({r for r, _ in keys})
    if len(rounds) < 2:
        return None, None
    u = np.array([[c.interaction[k] for k in keys] for c in usable])  # items × (round, side)
    # Re-centre over the common rounds (an item may have had more) so each row is a round × side interaction.
    u = u.reshape(len(usable), len(rounds), len(SIDES))
    u = u - u.mean(axis=1, keepdims=True) - u.mean(axis=2, keepdims=True) + u.mean(axis=(1, 2), keepdims=True)
    n_items = len(usable)
    df = (len(rounds) - 1) * (len(SIDES) - 1)
    common = u.mean(axis=0)
    ms_common = n_items * float((common ** 2).sum()) / df
    ms_resid = float(((u - common) ** 2).sum()) / ((n_items - 1) * df)
    return max(0.0, (ms_common - ms_resid) / n_items), max(0.0, ms_resid)


@dataclass
class Family:
    kind: str
    items: list[Components]
    left_out: list[str]  # items timed on one side only

    def median(self, level: str) -> float | None:
        values = [v for c in self.items if (v := c.variances[level]) is not None]
        return float(statistics.median(values)) if values else None

    def median_share(self, level: str) -> float | None:
        """Each level's share of the total of the medians (the shares sum to 1)."""
        medians = {lv: self.median(lv) for lv in LEVELS}
        total = sum(v for v in medians.values() if v is not None)
        value = medians[level]
        return None if value is None else (value / total if total > 0 else 0.0)

    def notes(self) -> list[str]:
        """Each item's notes, the numbers left out, with how many items they hold for."""
        counted: dict[str, int] = {}
        for c in self.items:
            for note in c.notes:
                counted[note.split(" (")[0]] = counted.get(note.split(" (")[0], 0) + 1
        return [f"{note} ({n} of {len(self.items)} items)" for note, n in counted.items()]

    def summary(self) -> dict[str, Any]:
        common, own = shared_process(self.items)
        ratio = [v for v in (c.round_ratio_var() for c in self.items) if v is not None]
        process_part = [2 * c.variances["process"] / v for c in self.items
                        if (v := c.round_ratio_var()) and c.variances["process"] is not None]
        per_block = statistics.median(c.visits_per_block for c in self.items) if self.items else 1.0
        per_process = statistics.median(c.visits_per_process for c in self.items) if self.items else 0.0
        visit_value = statistics.median(c.visit_value_var for c in self.items) if self.items else 0.0
        m = max(int(per_process), 1)
        carried = visit_value * median_factor(m) / m  # what a process's median of its visits carries
        median_round = self.median("round")
        return {
            "items": len(self.items), "left_out": self.left_out,
            "rounds": max((c.rounds for c in self.items), default=0),
            "visits_per_process": per_process, "visits_per_block": per_block,
            "samples_per_visit": statistics.median(c.samples_per_visit for c in self.items) if self.items else 0,
            "median_variance": {lv: self.median(lv) for lv in LEVELS},
            "median_sd_pct": {lv: _sd_pct(self.median(lv)) for lv in LEVELS},
            "share": {lv: self.median_share(lv) for lv in LEVELS},
            "process_shared_variance": common, "process_own_variance": own,
            "round_ratio_sd_pct": _sd_pct(statistics.median(ratio)) if ratio else None,
            "process_share_of_round_ratio": statistics.median(process_part) if process_part else None,
            "notes": self.notes(),
            # What benchmarks/verdict_sim.py --components reads: one simulated visit is one block's pooled visits.
            "sim_noise": {
                "round_sd": math.sqrt(median_round) if median_round is not None else None,
                # One item alone cannot split its process part: all of it is the item's own then.
                "process_sd": math.sqrt(common) if common is not None else 0.0,
                "item_sd": math.sqrt(max(0.0, own - carried)) if own is not None
                else math.sqrt(self.median("process") or 0.0),
                "visit_sd": math.sqrt(visit_value / max(per_block, 1.0)),
                "passes": max(1, round(per_process / max(per_block, 1.0))),
            },
        }


def _sd_pct(variance: float | None) -> float | None:
    return None if variance is None else 100 * math.sqrt(variance)


def pairs_from_plan(directory: Path) -> dict[str, str]:
    """{base item: PR item} for the plan's blocks that hold one item per side (none without a plan)."""
    path = directory / "plan.json"
    if not path.is_file():
        return {}
    out = {}
    for block in read_plan(path).blocks:
        base, pr = block.get("base"), block.get("pr")
        if base and pr:
            b, p = list(job_items(base).values()), list(job_items(pr).values())
            if len(b) == 1 and len(p) == 1:
                out[b[0]] = p[0]
    return out


def family(kind: str, records: list[RoundRecord], pairs: dict[str, str]) -> Family:
    """Every item of one kind, base and PR paired, estimated."""
    by_side: dict[str, dict[str, list[Observation]]] = {s: {} for s in SIDES}
    for record in records:
        for v in record.visits:
            if v.error or not v.samples:
                continue
            by_side[v.side].setdefault(v.item, []).append(
                Observation(record.round, v.side, (v.pass_index, v.block, v.position), tuple(v.samples)))
    items, left_out = [], []
    paired_pr = set()
    for base_item in sorted(by_side["base"]):
        pr_item = pairs.get(base_item, base_item)
        if pr_item not in by_side["pr"]:
            left_out.append(f"base:{base_item}")
            continue
        paired_pr.add(pr_item)
        name = base_item if pr_item == base_item else f"{base_item} | {pr_item}"
        items.append(estimate(name, by_side["base"][base_item] + by_side["pr"][pr_item]))
    left_out += [f"pr:{i}" for i in sorted(set(by_side["pr"]) - paired_pr)]
    return Family(kind, items, left_out)


def families(run: Path, kinds: Iterable[str]) -> list[Family]:
    """The families a run directory recorded rounds for."""
    out = []
    for kind in kinds:
        directory = run / PAIRED_DIR / kind
        paths = sorted(directory.glob("round-*.json"))
        if paths:
            out.append(family(kind, read_rounds(paths), pairs_from_plan(directory)))
    if not out:
        raise UserError(f"{run}: expected paired rounds ({PAIRED_DIR}/<kind>/round-*.json), found none")
    return out


def open_run(path: Path, scratch: Path) -> Path:
    """A run directory: ``path`` itself, or the one directory of a ``.tar.gz`` extracted into ``scratch``."""
    if path.is_dir():
        return path
    if not path.is_file() or not path.name.endswith((".tar.gz", ".tgz")):
        raise UserError(f"{path}: expected a run directory or a .tar.gz of one")
    with tarfile.open(path) as archive:
        archive.extractall(scratch, filter="data")
    found = sorted({p.parents[2] for p in scratch.glob(f"**/{PAIRED_DIR}/*/round-*.json")})
    if len(found) != 1:
        raise UserError(f"{path}: expected one run directory with {PAIRED_DIR}/<kind>/round-*.json inside, "
                        f"found {len(found)}")
    return found[0]


def table(fam: Family) -> list[str]:
    """The family's summary and its items, as printed."""
    s = fam.summary()
    lines = [f"{fam.kind}: {s['items']} items paired ({len(s['left_out'])} on one side only, left out), "
             f"{s['rounds']} rounds with both sides, {s['visits_per_process']:g} visits per process "
             f"({s['visits_per_block']:g} per block), {s['samples_per_visit']:g} samples per visit",
             f"  {'level':<10} {'median sd %':>12} {'share':>8}"]
    for level in LEVELS:
        sd, share = s["median_sd_pct"][level], s["share"][level]
        lines.append(f"  {level:<10} {_fmt(sd, '.3f'):>12} {_fmt(share, '.1%'):>8}")
    common, own = s["process_shared_variance"], s["process_own_variance"]
    lines.append(f"  process, shared by every item of a worker: sd {_fmt(_sd_pct(common), '.3f')} %; "
                 f"each item's own (with its visits' part): sd {_fmt(_sd_pct(own), '.3f')} %")
    lines.append(f"  one round's paired log ratio: sd {_fmt(s['round_ratio_sd_pct'], '.3f')} % (median), of which "
                 f"the two processes {_fmt(s['process_share_of_round_ratio'], '.1%')} of the variance")
    lines += [f"  note: {n}" for n in s["notes"]]
    lines.append(f"  {'item':<60} " + " ".join(f"{lv + ' sd%':>11}" for lv in LEVELS))
    for c in fam.items:
        lines.append(f"  {c.item[:60]:<60} " + " ".join(f"{_fmt(_sd_pct(c.variances[lv]), '.3f'):>11}"
                                                        for lv in LEVELS))
    return lines


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def report(run: Path, fams: list[Family], source: str) -> dict[str, Any]:
    return {"format_version": FORMAT_VERSION, "source": source, "run": run.name, "levels": list(LEVELS),
            "families": {f.kind: {**f.summary(), "per_item": [
                {"item": c.item, "variance": c.variances, "share": c.shares(), "rounds": c.rounds,
                 "visits_per_process": c.visits_per_process, "samples_per_visit": c.samples_per_visit,
                 "notes": c.notes} for c in f.items]} for f in fams}}


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="a run directory (or one holding pair/<kind>/round-*.json), or a .tar.gz")
    p.add_argument("--kind", choices=ROUND_KINDS, help="one family only (default: both that were recorded)")
    p.add_argument("--json", type=Path, help="write the components here (format_version "
                   f"{FORMAT_VERSION}); benchmarks/verdict_sim.py --components reads it")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="variance-") as scratch:
            run = open_run(args.run, Path(scratch))
            fams = families(run, [args.kind] if args.kind else ROUND_KINDS)
            for fam in fams:
                print("\n".join(table(fam)))
            if args.json:
                atomic_io.write_json(args.json, report(run, fams, str(args.run)))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
