"""What ``invoke bisect`` reads from each step's comparison and writes beside the runs.

A step is a comparison of one commit (PR side) against the good endpoint (base side), restricted to the
target: a model (its row of ``report/models_compare.csv``) or a kernel (its row of ``report/kernels_compare.csv``,
found by the base side's identity: body hash and shapes where known, else its name). The row's verdict is the
step's outcome (`outcome_of`), except that a kernel whose code and shapes are the same at the commit as at the
good endpoint (the pairing matched identical code) is good whatever its timing says: the same code cannot have
been made slower by the commit, and a no-op commit then needs no equivalence interval, which a few rounds on a
loaded machine rarely reach.

``bisect.json`` (``format_version`` `BISECT_FORMAT_VERSION`) is the record a re-run resumes from and the contract
for scripts::

    {"format_version": 1,
     "settings": {...},                      # what makes two invocations the same bisect (resumable)
     "target": {"kind": "model" | "kernel", "name", "body_hash", "shape_key", "models": [...]},
     "commits": [{"sha", "subject"}],        # first parent order, good endpoint first, bad endpoint last
     "steps": [{"position", "sha", "outcome", "verdict", "speedup", "ci_low", "ci_high", "rounds", "seconds",
                "run", "note", "good", "bad"}],   # good/bad: the interval's ends (positions) after the step
     "conclusion": {"status", "first_bad", "candidates": [sha...], "stepped_around": [sha...]}}

``bisect.md`` is the same for a reader: the conclusion first, then the table of every step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.bisect.search import (
    BAD,
    FOUND,
    GOOD,
    NOT_REGRESSED,
    OUTCOMES,
    RANGE,
    SEARCHING,
    SKIPPED,
    UNDECIDED,
    Conclusion,
)
from analysis.kernels.compare import IDENTICAL_CODE, read_table
from analysis.rendering import Column, ci_text, fmt_x, markdown_table, md_code, md_text
from foundation.errors import UserError
from foundation.records import expect_list, expect_object, expect_str, read_json

BISECT_FORMAT_VERSION = 1
BISECT_JSON = "bisect.json"
BISECT_MD = "bisect.md"
MODEL, KERNEL = "model", "kernel"
# The settings key of a Triton range (--triton-good/--triton-bad): the PyTorch commit every step builds.
TRITON_RANGE = "triton_pytorch"
SAME_CODE = "same code"  # a step's verdict word for a kernel whose code the commit left as it was

# A row's verdict (`analysis.stats.verdict`, "failed" where a side did not run) → the step's outcome. Improved is good:
# the bisect looks for the commit that made the target slower. "failed" is not decided here: the caller skips it.
_OUTCOME = {SAME_CODE: GOOD, "regressed": BAD, "equivalent": GOOD, "identical": GOOD, "improved": GOOD,
            "inconclusive": UNDECIDED}


@dataclass(frozen=True)
class BisectTarget:
    """What regressed: a model, or a kernel by its good-side name and identity (and the models that hold it)."""

    kind: str  # MODEL or KERNEL
    name: str
    body_hash: str = ""
    shape_key: str = ""
    models: tuple[str, ...] = ()  # the models the steps compile (empty: the suite's own selection)

    def describe(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass(frozen=True)
class ItemVerdict:
    """The target's row in a step's report."""

    verdict: str
    speedup: float
    ci_low: float
    ci_high: float
    rounds: int


def outcome_of(verdict: str) -> str | None:
    """The step outcome a row's verdict gives (None: the row was not compared, e.g. ``failed``)."""
    return _OUTCOME.get(verdict)


def read_target_verdict(report_dir: Path, target: BisectTarget) -> ItemVerdict | None:
    """The target's row in a step's report (None: the target is not in it)."""
    if target.kind == MODEL:
        frame = read_table(report_dir / "models_compare.csv", ("model", "verdict", "speedup", "ci_low", "ci_high",
                                                               "rounds"), "a models_compare.csv", dtype=str,
                           keep_default_na=False)
        rows = frame[frame["model"] == target.name]
    else:
        frame = read_table(report_dir / "kernels_compare.csv", ("base_name", "body_hash", "shape_key", "matched_by",
                                                                "verdict", "speedup", "ci_low", "ci_high", "rounds"),
                           "a kernels_compare.csv", dtype=str, keep_default_na=False)
        rows = frame.iloc[0:0]
        if target.body_hash:  # the identity survives renumbering; the name is the fallback
            rows = frame[(frame["body_hash"] == target.body_hash) & (frame["shape_key"] == target.shape_key)]
        if rows.empty:
            rows = frame[frame["base_name"] == target.name]
    if rows.empty:
        return None
    row = rows.iloc[0]
    # Identical source a Triton A/B's own compilers built is not the same code (its code_changed says so).
    same = (target.kind == KERNEL and row["matched_by"] == IDENTICAL_CODE
            and str(row.get("code_changed", "False")) != "True")
    rounds = _float(row["rounds"])
    return ItemVerdict(SAME_CODE if same else str(row["verdict"]), _float(row["speedup"]), _float(row["ci_low"]),
                       _float(row["ci_high"]), int(rounds) if math.isfinite(rounds) else 0)


def _float(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str


@dataclass(frozen=True)
class Step:
    """One measured commit: its outcome, the target's numbers, what it cost and the interval it left."""

    position: int
    sha: str
    outcome: str
    verdict: str = ""
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    rounds: int = 0
    seconds: float = 0.0
    run: str = ""
    note: str = ""  # why a step was skipped or left undecided
    good: int = 0  # the interval after this step
    bad: int = 0


@dataclass
class BisectRecord:
    settings: dict[str, Any]
    target: BisectTarget
    commits: list[Commit]
    steps: list[Step] = field(default_factory=list)

    def outcomes(self) -> dict[int, str]:
        return {s.position: s.outcome for s in self.steps}

    def to_dict(self, conclusion: Conclusion) -> dict[str, Any]:
        shas = [c.sha for c in self.commits]
        first_bad = shas[conclusion.candidates[0]] if conclusion.status == FOUND else None
        return {"format_version": BISECT_FORMAT_VERSION, "settings": self.settings,
                "target": {**asdict(self.target), "models": list(self.target.models)},
                "commits": [asdict(c) for c in self.commits],
                "steps": [_clean(asdict(s)) for s in self.steps],
                "conclusion": {"status": conclusion.status, "first_bad": first_bad,
                               "candidates": [shas[p] for p in conclusion.candidates],
                               "stepped_around": [shas[p] for p in conclusion.stepped_around]}}


def _clean(step: dict[str, Any]) -> dict[str, Any]:
    """NaN is not JSON: a number that does not exist is null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in step.items()}


def read_record(path: Path) -> BisectRecord:
    """A ``bisect.json`` written by an earlier invocation (one-line UserError naming the file and field)."""
    data = expect_object(read_json(path, "a bisect.json"), f"{path}")
    if data.get("format_version") != BISECT_FORMAT_VERSION:
        raise UserError(f"{path}: format_version {data.get('format_version')!r}, expected {BISECT_FORMAT_VERSION}; "
                        "give another --bisect id or remove the file")
    target = expect_object(data.get("target"), f"{path}: target")
    commits = [Commit(expect_str(c.get("sha"), f"{path}: commits[{i}].sha"),
                      expect_str(c.get("subject"), f"{path}: commits[{i}].subject"))
               for i, c in enumerate(expect_object(c, f"{path}: commits[{i}]")
                                     for i, c in enumerate(expect_list(data.get("commits"), f"{path}: commits")))]
    steps = [_step(expect_object(s, f"{path}: steps[{i}]"), f"{path}: steps[{i}]", len(commits))
             for i, s in enumerate(expect_list(data.get("steps"), f"{path}: steps"))]
    return BisectRecord(settings=expect_object(data.get("settings"), f"{path}: settings"),
                        target=BisectTarget(kind=expect_str(target.get("kind"), f"{path}: target.kind"),
                                            name=expect_str(target.get("name"), f"{path}: target.name"),
                                            body_hash=str(target.get("body_hash") or ""),
                                            shape_key=str(target.get("shape_key") or ""),
                                            models=tuple(str(m) for m in expect_list(target.get("models", []),
                                                                                      f"{path}: target.models"))),
                        commits=commits, steps=steps)


def _step(raw: Mapping[str, Any], where: str, count: int) -> Step:
    position = raw.get("position")
    if not isinstance(position, int) or not 0 < position < count:
        raise UserError(f"{where}.position: expected a commit position 1..{count - 1}, found {position!r}")
    outcome = expect_str(raw.get("outcome"), f"{where}.outcome")
    if outcome not in OUTCOMES:
        raise UserError(f"{where}.outcome: expected one of {', '.join(OUTCOMES)}, found {outcome!r}")
    numbers = {k: (float(raw[k]) if isinstance(raw.get(k), (int, float)) else None)
               for k in ("speedup", "ci_low", "ci_high")}
    return Step(position=position, sha=expect_str(raw.get("sha"), f"{where}.sha"), outcome=outcome,
                verdict=str(raw.get("verdict") or ""), **numbers, rounds=int(raw.get("rounds") or 0),
                seconds=float(raw.get("seconds") or 0.0), run=str(raw.get("run") or ""),
                note=str(raw.get("note") or ""), good=int(raw.get("good") or 0), bad=int(raw.get("bad") or 0))


# --- bisect.md ------------------------------------------------------------------------------------------------

_OUTCOME_WORDS = {GOOD: "good", BAD: "**bad**", UNDECIDED: "undecided (stepped around)",
                  SKIPPED: "skipped (stepped around)"}


def headline(record: BisectRecord, conclusion: Conclusion) -> str:
    """The one line that answers the bisect (Markdown)."""
    commits = record.commits
    good, bad = commits[0], commits[-1]
    what = "Triton commit" if TRITON_RANGE in record.settings else "commit"
    if conclusion.status == FOUND:
        first = commits[conclusion.candidates[0]]
        return f"First bad {what}: {md_code(first.sha[:12])} {md_text(first.subject)}"
    if conclusion.status == RANGE:
        shown = ", ".join(md_code(commits[p].sha[:12]) for p in conclusion.candidates)
        return (f"The first bad {what} is one of {len(conclusion.candidates)}: {shown} (the others between were "
                "undecided or skipped)")
    if conclusion.status == NOT_REGRESSED:
        return (f"No regression: {md_code(bad.sha[:12])} is not regressed against {md_code(good.sha[:12])}; "
                "the range is good")
    if conclusion.status == SEARCHING:
        left = conclusion.interval.bad - conclusion.interval.good
        return f"Searching: {left} commit(s) left between {md_code(commits[conclusion.interval.good].sha[:12])} " \
               f"and {md_code(commits[conclusion.interval.bad].sha[:12])}"
    return (f"Unresolved: the bad endpoint {md_code(bad.sha[:12])} could not be shown regressed or equivalent "
            f"against {md_code(good.sha[:12])} (see its step); nothing in between was blamed")


def render_markdown(record: BisectRecord, conclusion: Conclusion) -> str:
    commits = record.commits
    subjects = {c.sha: c.subject for c in commits}
    rows = pd.DataFrame([{
        "step": i, "commit": s.sha[:12], "subject": subjects.get(s.sha, ""),
        "position": f"{s.position}/{len(commits) - 1}",
        "outcome": _OUTCOME_WORDS[s.outcome], "verdict": s.verdict or "–",
        "speedup": fmt_x(s.speedup) if s.speedup is not None else "–",
        "ci": ci_text(s.ci_low, s.ci_high), "rounds": s.rounds or "–", "time": f"{s.seconds:.0f} s",
        "interval": f"{commits[s.good].sha[:8]}..{commits[s.bad].sha[:8]} ({s.bad - s.good} left)",
        "run": s.run, "note": s.note or "",
    } for i, s in enumerate(record.steps, start=1)])
    columns = [Column("step", "step"), Column("commit", "commit", code=True), Column("subject", "subject", width=48),
               Column("position", "position"), Column("outcome", "outcome", markup=True),
               Column("verdict", "verdict"), Column("speedup", "speedup"), Column("ci", "CI"),
               Column("rounds", "rounds"), Column("time", "time"), Column("interval", "interval after", code=True),
               Column("run", "run", code=True), Column("note", "note")]
    total = sum(s.seconds for s in record.steps)
    stepped = [s for s in record.steps if s.outcome in (UNDECIDED, SKIPPED)]
    lines = [f"# Bisect of {md_text(record.target.describe())}", "",
             f"**{headline(record, conclusion)}**", "",
             f"Good {md_code(commits[0].sha[:12])}, bad {md_code(commits[-1].sha[:12])}: {len(commits) - 1} "
             f"commit(s) after the good one, {len(record.steps)} step(s) in {total:.0f} s. Every step compares the "
             "commit (PR side) against the good endpoint (base side) with the paired rounds of `invoke compare`; "
             "regressed is bad, equivalent, identical or improved is good, still inconclusive after the most "
             "rounds a step may take is undecided and stepped around.", ""]
    if TRITON_RANGE in record.settings:
        lines += [f"The commits are Triton's; every step builds PyTorch "
                  f"{md_code(str(record.settings[TRITON_RANGE])[:12])} on both sides (a Triton A/B).", ""]
    if record.target.models:
        lines += [f"Models compiled at each step: {', '.join(md_code(m) for m in record.target.models)}.", ""]
    lines += [markdown_table(rows, columns).rstrip("\n"), ""]
    if stepped:
        lines += ["Stepped around (`git bisect skip`): " + "; ".join(
            f"{md_code(s.sha[:12])} {_OUTCOME_WORDS[s.outcome].split(' ')[0]}: {md_text(s.note)}" for s in stepped),
            ""]
    return "\n".join(lines)
