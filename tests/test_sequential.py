"""Adaptive rounds: the levels the early looks spend and the run keeps, when a look may stop, and the flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.errors import UserError
from analysis.stats.sequential import (
    Look,
    RoundsPolicy,
    RoundsUsed,
    check_rounds_flags,
    parse_duration,
    read_rounds_used,
    settled,
    write_rounds_used,
)
from analysis.stats.verdict_settings import VerdictSettings

NOMINAL = VerdictSettings()


def test_the_early_looks_spend_from_the_nominal_level_and_the_report_states_what_is_left() -> None:
    policy = RoundsPolicy(max_rounds=10, auto=True)  # looks after rounds 3..9 may stop early
    assert policy.early_looks == 7
    run = policy.run_settings(NOMINAL)
    assert run.alpha == pytest.approx(0.05 - 7 * 0.001) and run.confidence == pytest.approx(0.95 + 7 * 0.001)
    strict = policy.strict_settings(NOMINAL)
    assert (strict.alpha, strict.confidence) == (0.001, 0.999)
    # Union over the looks: what the early looks spend plus the run level is the nominal level, never more.
    assert policy.early_looks * strict.alpha + run.alpha == pytest.approx(NOMINAL.alpha)
    # Fixed rounds look once: the nominal level.
    assert RoundsPolicy(max_rounds=10).run_settings(NOMINAL) == NOMINAL


def test_a_kind_that_stopped_early_states_its_intervals_at_the_strict_level_of_that_look() -> None:
    policy = RoundsPolicy(max_rounds=10, auto=True)
    assert policy.stated_settings(NOMINAL, 4, settled_early=True) == policy.strict_settings(NOMINAL)
    # Ran to the last round, or stopped by --budget (a stop the data did not choose): the run level.
    assert policy.stated_settings(NOMINAL, 10, settled_early=True) == policy.run_settings(NOMINAL)
    assert policy.stated_settings(NOMINAL, 6, settled_early=False) == policy.run_settings(NOMINAL)
    assert RoundsPolicy(max_rounds=10).stated_settings(NOMINAL, 10, settled_early=False) == NOMINAL


def test_many_looks_never_spend_more_than_half_the_level() -> None:
    policy = RoundsPolicy(max_rounds=60, auto=True)
    run = policy.run_settings(NOMINAL)
    assert run.alpha == pytest.approx(NOMINAL.alpha / 2) and run.confidence == pytest.approx(0.975)


def look(verdict: str = "regressed", strict: str | None = None, items: tuple[str, ...] = ("regressed",),
         strict_items: tuple[str, ...] | None = None, passed: bool = True, open_items: int = 0) -> Look:
    return Look(verdict, strict or verdict, items, strict_items or items, passed, passed, open_items)


@pytest.mark.parametrize(("looks", "stop", "why"), [
    ([look()], True, "settled: regressed"),
    ([look("identical", items=())], True, "settled: identical"),
    ([look("inconclusive")], False, "verdict inconclusive"),
    # The strict test does not yet reach the verdict the report would state: one more round.
    ([look("regressed", strict="inconclusive")], False, "not yet at the strict level (inconclusive)"),
    ([look(items=("regressed", "regressed"), strict_items=("regressed", "inconclusive"))], False, "1 item(s) differ"),
    ([look(passed=False)], False, "a control failed"),
    # The family is settled but a kernel that may be a finding is not decided yet: stopping would hide it.
    ([look("equivalent", items=("inconclusive",), open_items=1)], False, "1 item(s) beyond the threshold"),
    ([look(), look("inconclusive")], False, "verdict inconclusive"),
])
def test_a_look_stops_only_when_the_strict_level_states_the_same_settled_verdicts(looks: list[Look], stop: bool,
                                                                                 why: str) -> None:
    decided, reason = settled(looks)
    assert decided is stop and why in reason


@pytest.mark.parametrize(("flags", "message"), [
    (("2", None, None), "--rounds 2: at least 3"),
    (("5", "8", None), "--rounds 5: --max-rounds and --budget go with adaptive rounds"),
    (("auto", "2", None), "--max-rounds 2"),
    (("auto", None, "soon"), "--budget 'soon': expected a duration such as 20m"),
    (("auto", None, "0"), "--budget '0'"),
    (("4", None, "20m"), "--rounds 4: --max-rounds and --budget go with adaptive rounds"),
])
def test_bad_rounds_flags_are_one_line_errors_naming_the_flag(flags: tuple, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        check_rounds_flags(*flags)


def test_rounds_flags_and_durations() -> None:
    default = check_rounds_flags(None, None, None)
    assert default.rounds is None and default.auto  # adaptive, up to the device's rounds
    assert check_rounds_flags(None, "6", "20m") == check_rounds_flags("auto", "6", "20m")
    assert check_rounds_flags("auto", None, None).auto
    assert check_rounds_flags("auto", "12", "20m").max_rounds == 12
    assert check_rounds_flags("auto", None, "20m").budget_s == 1200.0
    assert check_rounds_flags("7", None, None).rounds == 7
    assert (parse_duration("90"), parse_duration("90s"), parse_duration("1.5h")) == (90.0, 90.0, 5400.0)


def test_the_rounds_record_is_versioned_and_read_back(tmp_path: Path) -> None:
    used = RoundsUsed("kernels", 4, "settled: regressed", "auto", 10, 0.001, 0.999)
    path = write_rounds_used(tmp_path, used)
    assert json.loads(path.read_text())["format_version"] == 2
    assert read_rounds_used(tmp_path) == used
    assert used.describe() == ("kernels: 4 of at most 10 round(s), settled: regressed; stated at alpha 0.001, "
                               "99.9 % intervals")
    assert used.stated(NOMINAL) == VerdictSettings(alpha=0.001, confidence=0.999)
    # A version 1 record (no level): the run's level.
    path.write_text(json.dumps({"format_version": 1, "kind": "kernels", "rounds": 4, "reason": "fixed",
                                "mode": "fixed", "max_rounds": 4}))
    assert read_rounds_used(tmp_path).stated(NOMINAL) == NOMINAL  # type: ignore[union-attr]
    path.write_text(json.dumps({"kind": "kernels", "rounds": 4, "reason": "x", "mode": "auto", "max_rounds": 9,
                                "alpha": 2}))
    with pytest.raises(UserError, match="alpha: expected a number between 0 and 1"):
        read_rounds_used(tmp_path)
    assert read_rounds_used(tmp_path / "none") is None
    path.write_text(json.dumps({"kind": "kernels", "rounds": 0}))
    with pytest.raises(UserError, match="rounds"):
        read_rounds_used(tmp_path)


def test_open_findings_are_inconclusive_items_beyond_the_threshold_that_hold_enough_of_the_step() -> None:
    from analysis.stats.sequential import open_findings

    verdicts = ["inconclusive", "inconclusive", "inconclusive", "regressed", "inconclusive"]
    speedups = [0.95, 0.99, 0.95, 0.90, 1.06]  # 5 % slower, 1 % (within ±2 %), 5 % but tiny, decided, 6 % faster
    shares = [0.2, 0.3, 0.001, 0.2, 0.1]
    assert open_findings(verdicts, speedups, shares, NOMINAL) == 2
    assert open_findings(verdicts, speedups, None, NOMINAL) == 3  # models: every model counts
