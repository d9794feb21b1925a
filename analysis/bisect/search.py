"""The search of ``invoke bisect``: which commit to measure next, and what the measured steps conclude.

Pure logic over positions in a first-parent history ``commits[0..n-1]``: ``commits[0]`` is the good endpoint
(every step is compared against it, so it is never measured itself) and ``commits[n-1]`` the bad one. A step
measures one commit against the good endpoint and has one outcome:

* ``bad``: the comparison called the target regressed;
* ``good``: equivalent, identical or improved;
* ``undecided``: still inconclusive after the most rounds the bisect may spend on a step;
* ``skipped``: the commit could not be built or run (its diff needs a rebuild the bisect cannot make, a stage
  failed, the target is not in its report).

Undecided and skipped commits are stepped around as ``git bisect skip`` does: the search goes on among the
untested commits of the interval, and when only such commits are left between the last good and the first bad
commit, the answer is the range that holds the first bad commit rather than one commit.

The bad endpoint is measured first: a regression that does not show between the endpoints (good, or undecided)
ends the bisect there instead of blaming some commit in between.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

GOOD, BAD, UNDECIDED, SKIPPED = "good", "bad", "undecided", "skipped"
OUTCOMES = (GOOD, BAD, UNDECIDED, SKIPPED)
STEPPED_AROUND = (UNDECIDED, SKIPPED)

# What a finished bisect concluded (`Conclusion.status`).
FOUND = "found"  # one commit is the first bad one
RANGE = "range"  # the first bad commit is one of several, the others undecided or skipped
NOT_REGRESSED = "not regressed"  # the bad endpoint is not regressed against the good one
UNRESOLVED = "unresolved"  # the bad endpoint itself could not be decided (or built)
SEARCHING = "searching"  # steps remain


@dataclass(frozen=True)
class Interval:
    """The last known good and the first known bad position (the first bad commit lies in (good, bad])."""

    good: int
    bad: int

    def inside(self) -> range:
        """The positions strictly between the two ends."""
        return range(self.good + 1, self.bad)


@dataclass(frozen=True)
class Conclusion:
    status: str  # FOUND, RANGE, NOT_REGRESSED, UNRESOLVED or SEARCHING
    interval: Interval
    candidates: tuple[int, ...]  # positions that may be the first bad commit (FOUND: exactly one)
    stepped_around: tuple[int, ...]  # undecided or skipped positions inside the interval


def check_outcomes(count: int, outcomes: Mapping[int, str]) -> None:
    """A history of ``count`` commits (at least the two endpoints) and outcomes only for measurable positions."""
    if count < 2:
        raise ValueError(f"a bisect needs the good and the bad endpoint; got {count} commit(s)")
    for position, outcome in outcomes.items():
        if not 0 < position < count:
            raise ValueError(f"position {position} is not a measured commit of a history of {count}")
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome {outcome!r} at position {position}: expected one of {', '.join(OUTCOMES)}")


def interval(count: int, outcomes: Mapping[int, str]) -> Interval:
    """The first bad position (the bad endpoint until a step is bad earlier) and the last good one before it.

    A good commit after the first bad one (a flaky step, or a regression undone and redone) does not move the
    interval: the first bad commit is searched for before the first commit known bad, as git bisect does.
    """
    check_outcomes(count, outcomes)
    bad = min((p for p, o in outcomes.items() if o == BAD), default=count - 1)
    good = max((p for p, o in outcomes.items() if o == GOOD and p < bad), default=0)
    return Interval(good, bad)


def next_position(count: int, outcomes: Mapping[int, str]) -> int | None:
    """The commit to measure next, or None when the bisect is done.

    The bad endpoint first; then the untested position nearest the middle of the interval (the earlier of two
    equally near), so a stepped-around commit costs at most one extra step per skip, as ``git bisect skip``.
    """
    check_outcomes(count, outcomes)
    last = count - 1
    if last not in outcomes:
        return last
    if outcomes[last] != BAD and not any(o == BAD for o in outcomes.values()):
        return None
    span = interval(count, outcomes)
    untested = [p for p in span.inside() if p not in outcomes]
    if not untested:
        return None
    middle = (span.good + span.bad) / 2
    return min(untested, key=lambda p: (abs(p - middle), p))


def conclude(count: int, outcomes: Mapping[int, str]) -> Conclusion:
    """What the steps so far show (``SEARCHING`` while `next_position` has a commit to measure)."""
    check_outcomes(count, outcomes)
    last = count - 1
    span = interval(count, outcomes)
    around = tuple(p for p in span.inside() if outcomes.get(p) in STEPPED_AROUND)
    ends = outcomes.get(last)
    if ends is not None and ends != BAD and not any(o == BAD for o in outcomes.values()):
        return Conclusion(NOT_REGRESSED if ends == GOOD else UNRESOLVED, span, (), ())
    if next_position(count, outcomes) is not None:
        return Conclusion(SEARCHING, span, tuple(range(span.good + 1, span.bad + 1)), around)
    candidates = (*around, span.bad)
    return Conclusion(FOUND if len(candidates) == 1 else RANGE, span, candidates, around)
