"""The search of `invoke bisect`: given each measured commit's outcome, which commit next and what it concludes."""

from __future__ import annotations

import math

import pytest

from analysis.bisect.search import (
    BAD,
    FOUND,
    GOOD,
    NOT_REGRESSED,
    RANGE,
    SEARCHING,
    SKIPPED,
    UNDECIDED,
    UNRESOLVED,
    conclude,
    interval,
    next_position,
)


def bisect(count: int, oracle) -> tuple[dict[int, str], list[int]]:
    """Run the search to its end against ``oracle(position) -> outcome``; the outcomes and the order measured."""
    outcomes: dict[int, str] = {}
    order: list[int] = []
    while (position := next_position(count, outcomes)) is not None:
        assert position not in outcomes, "a commit is never measured twice"
        outcomes[position] = oracle(position)
        order.append(position)
    return outcomes, order


@pytest.mark.parametrize("first_bad", range(1, 17))
def test_a_regression_planted_anywhere_in_sixteen_commits_is_found_in_five_steps(first_bad):
    outcomes, order = bisect(17, lambda p: BAD if p >= first_bad else GOOD)

    found = conclude(17, outcomes)
    assert found.status == FOUND and found.candidates == (first_bad,)
    assert order[0] == 16  # the bad endpoint is confirmed first
    assert len(order) <= 1 + math.ceil(math.log2(16))


def test_the_next_commit_halves_the_interval():
    assert next_position(17, {16: BAD}) == 8
    assert next_position(17, {16: BAD, 8: GOOD}) == 12
    assert next_position(17, {16: BAD, 8: GOOD, 12: BAD}) == 10
    assert interval(17, {16: BAD, 8: GOOD, 12: BAD}).good == 8


def test_an_undecided_commit_is_stepped_around_and_the_search_still_ends_on_one_commit():
    outcomes, order = bisect(17, lambda p: UNDECIDED if p == 8 else BAD if p >= 11 else GOOD)

    assert order[:3] == [16, 8, 7]  # the nearest untested commit replaces the undecided midpoint
    found = conclude(17, outcomes)
    assert found.status == FOUND and found.candidates == (11,)
    assert found.stepped_around == ()  # 8 lies below the last good commit (9 or 10), outside the interval


def test_a_stepped_around_commit_next_to_the_first_bad_one_leaves_a_range():
    outcomes, _ = bisect(17, lambda p: SKIPPED if p == 10 else BAD if p >= 11 else GOOD)

    found = conclude(17, outcomes)
    assert found.status == RANGE and found.candidates == (10, 11) and found.stepped_around == (10,)


def test_a_bad_endpoint_that_is_not_regressed_makes_the_range_good_after_one_step():
    outcomes, order = bisect(17, lambda p: GOOD)
    assert order == [16] and conclude(17, outcomes).status == NOT_REGRESSED


@pytest.mark.parametrize("endpoint", [UNDECIDED, SKIPPED])
def test_a_bad_endpoint_that_cannot_be_decided_blames_nothing(endpoint):
    outcomes, order = bisect(9, lambda p: endpoint if p == 8 else BAD)
    found = conclude(9, outcomes)
    assert order == [8] and found.status == UNRESOLVED and found.candidates == ()


def test_a_single_commit_after_the_good_one_needs_only_the_endpoint():
    outcomes, order = bisect(2, lambda p: BAD)
    assert order == [1] and conclude(2, outcomes).candidates == (1,)


def test_while_steps_remain_the_conclusion_says_searching_over_the_whole_interval():
    found = conclude(9, {8: BAD, 4: GOOD})
    assert found.status == SEARCHING and found.candidates == (5, 6, 7, 8)


def test_a_good_commit_after_the_first_bad_one_does_not_move_the_interval():
    assert interval(9, {8: BAD, 3: BAD, 5: GOOD}) == interval(9, {8: BAD, 3: BAD})


@pytest.mark.parametrize("count, outcomes", [(1, {}), (9, {0: GOOD}), (9, {9: BAD}), (9, {4: "flaky"})])
def test_positions_and_outcomes_outside_the_history_are_refused(count, outcomes):
    with pytest.raises(ValueError):
        next_position(count, outcomes)
