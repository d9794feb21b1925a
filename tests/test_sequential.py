"""Adaptive rounds: the levels the early looks spend and the run keeps, when a look may stop, and the flags."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from analysis.kernels.compare import compare_kernels
from analysis.report.sequential import (
    Look,
    RoundsPolicy,
    RoundsUsed,
    check_rounds_flags,
    kernel_look,
    parse_duration,
    read_rounds_used,
    rounds_policies,
    settled,
    write_rounds_used,
)
from analysis.stats.verdict_settings import VerdictSettings
from foundation.errors import UserError
from tests.support.compare_data import kernel_specs, kernels_frame

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
         strict_items: tuple[str, ...] | None = None, passed: bool = True, open_items: int = 0,
         detectable: float = math.nan, strict_detectable: float = math.nan) -> Look:
    return Look(verdict, strict or verdict, items, strict_items or items, passed, passed, open_items, detectable,
                strict_detectable)


@pytest.mark.parametrize(("looks", "stop", "why"), [
    ([look()], True, "settled: regressed"),
    ([look("identical", items=())], True, "settled: identical"),
    ([look("inconclusive")], False, "verdict inconclusive"),
    # The strict test does not yet reach the verdict the report would state: one more round.
    ([look("regressed", strict="inconclusive")], False, "not yet at the strict level (inconclusive)"),
    ([look(items=("regressed", "regressed"), strict_items=("regressed", "inconclusive"))], False, "1 item(s) differ"),
    ([look(passed=False)], False, "a control failed"),
    # The family is settled but a kernel that may be a finding is not decided yet: stopping would hide it.
    ([look("equivalent", items=("inconclusive",), open_items=1)], False, "1 item(s) of weight still inconclusive"),
    ([look(), look("inconclusive")], False, "verdict inconclusive"),
])
def test_a_look_stops_only_when_the_strict_level_states_the_same_settled_verdicts(looks: list[Look], stop: bool,
                                                                                 why: str) -> None:
    decided, reason = settled(looks)
    assert decided is stop and why in reason


@pytest.mark.parametrize(("looks", "stop", "why"), [
    # --resolution 3: regressed at both levels, but the strict level (what an early stop states) cannot yet tell
    # a change under 4.2 %: one more round, and the line says why.
    ([look(detectable=2.5, strict_detectable=4.2)], False,
     "verdict regressed, but detectable 4.2 % at the strict level, above the 3 % target"),
    ([look(detectable=1.4, strict_detectable=2.9)], True, "settled: regressed"),
    ([look(detectable=1.4)], False, "detectable not measured at the strict level"),  # no interval yet
    ([look("identical", items=())], True, "settled: identical"),  # no code changed: nothing to resolve
    ([look("inconclusive", detectable=1.0, strict_detectable=1.0)], False, "verdict inconclusive"),  # fine, unsettled
])
def test_with_a_resolution_a_settled_look_stops_only_once_the_strict_level_detects_the_target(
        looks: list[Look], stop: bool, why: str) -> None:
    decided, reason = settled(looks, resolution_pct=3.0)
    assert decided is stop and why in reason
    # Without a target the same looks stop as soon as they are settled, as before.
    assert settled(looks)[0] is (looks[0].verdict in ("regressed", "identical"))


@pytest.mark.parametrize(("flags", "message"), [
    (("2", None, None), "--rounds 2: at least 3"),
    (("5", "8", None), "--rounds 5: --max-rounds, --budget and --resolution go with adaptive rounds"),
    (("auto", "2", None), "--max-rounds 2"),
    (("auto", None, "soon"), "--budget 'soon': expected a duration such as 20m"),
    (("auto", None, "0"), "--budget '0'"),
    (("4", None, "20m"), "--rounds 4: --max-rounds, --budget and --resolution go with adaptive rounds"),
    (("7", None, None, "3%"), "--rounds 7: --max-rounds, --budget and --resolution go with adaptive rounds"),
    (("auto", None, None, "fine"), "--resolution 'fine': expected a percentage such as 2% or 0.5% (above 0, "
                                   "below 100), or none"),
    (("5", None, None, "none"), "--rounds 5: --max-rounds, --budget and --resolution go with adaptive rounds"),
    (("auto", None, None, "3%%"), "--resolution '3%%': expected a percentage"),
    (("auto", None, None, "0"), "--resolution '0': expected a percentage"),
    (("auto", None, None, "100%"), "--resolution '100%': expected a percentage"),
    (("auto", None, None, "-2%"), "--resolution '-2%': expected a percentage"),
    (("auto", "3", None, "3%"), "--resolution 3%: --max-rounds 3 is the minimum"),
])
def test_bad_rounds_flags_are_one_line_errors_naming_the_flag(flags: tuple, message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        check_rounds_flags(*flags)


def test_rounds_flags_and_durations() -> None:
    default = check_rounds_flags(None, None, None)
    assert default.rounds is None and default.auto  # adaptive, up to the device's rounds
    assert check_rounds_flags(None, "6", "20m") == check_rounds_flags("auto", "6", "20m")
    assert check_rounds_flags("auto", None, None).auto
    assert check_rounds_flags("auto", "12", "20m").max_rounds == 12
    assert check_rounds_flags("auto", None, "20m").budget_s == 1200.0
    assert check_rounds_flags("7", None, None).rounds == 7
    assert check_rounds_flags(None, None, None).resolution_pct is None  # the device's default targets
    assert [check_rounds_flags("auto", "10", None, value).resolution_pct for value in ("3%", "3", " 2.5 % ")] == [
        3.0, 3.0, 2.5]
    # The resolution does not depend on --threshold: a target at or below the default 2 % threshold is valid.
    assert [check_rounds_flags(None, None, "20m", value).resolution_pct for value in ("2%", "0.5%", "0.02")] == [
        2.0, 0.5, 0.02]
    assert (parse_duration("90"), parse_duration("90s"), parse_duration("1.5h")) == (90.0, 90.0, 5400.0)


def test_the_rounds_record_is_versioned_and_read_back(tmp_path: Path) -> None:
    used = RoundsUsed("kernels", 4, "settled: regressed", "auto", 10, 0.001, 0.999)
    path = write_rounds_used(tmp_path, used)
    assert json.loads(path.read_text())["format_version"] == 3
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


def test_the_rounds_record_says_whether_the_resolution_target_was_reached(tmp_path: Path) -> None:
    reached = RoundsUsed("kernels", 7, "settled: regressed", "auto", 10, 0.001, 0.999, 2.5, 1.8)
    write_rounds_used(tmp_path, reached)
    assert read_rounds_used(tmp_path) == reached
    assert json.loads((tmp_path / "rounds.json").read_text())["resolution_pct"] == 2.5
    assert reached.describe() == ("kernels: 7 of at most 10 round(s), settled: regressed; detectable 1.8 % ≤ 2.5 % "
                                  "target after 7 round(s); stated at alpha 0.001, 99.9 % intervals")
    short = RoundsUsed("models", 10, "--max-rounds reached (settled: improved)", "auto", 10, resolution_pct=2.5,
                       detectable_pct=3.1)
    assert short.target() == "2.5 % target not reached: detectable 3.1 % after 10 round(s)"
    moot = RoundsUsed("kernels", 3, "settled: identical", "auto", 10, resolution_pct=2.5)
    assert moot.target().startswith("2.5 % target: no detectable change to hold to it (nothing changed")
    assert RoundsUsed("kernels", 4, "settled", "auto", 10).target() == ""  # no --resolution, no words
    (tmp_path / "rounds.json").write_text(json.dumps({**json.loads((tmp_path / "rounds.json").read_text()),
                                                      "detectable_pct": "1.8"}))
    with pytest.raises(UserError, match="detectable_pct: expected a percentage"):
        read_rounds_used(tmp_path)


def test_open_findings_are_inconclusive_items_that_hold_enough_of_the_step() -> None:
    """A kernel truly 3 % slower whose estimate dips under the 2 % threshold at a look is still undecided: it holds
    the rounds open as long as it is inconclusive, whatever its estimate."""
    from analysis.report.sequential import open_findings

    verdicts = ["inconclusive", "inconclusive", "inconclusive", "regressed", "inconclusive", "equivalent"]
    shares = [0.2, 0.3, 0.001, 0.2, 0.1, 0.4]  # 20 %, 30 % (its estimate within ±2 %), tiny, decided, 10 %, decided
    assert open_findings(verdicts, shares, NOMINAL) == 3
    assert open_findings(verdicts, None, NOMINAL) == 4  # models: every model counts


def test_resolution_none_stops_each_kind_once_settled_and_a_number_holds_both_kinds_to_it() -> None:
    # `invoke compare --resolution none` on the CPU: neither kind waits for a resolution.
    none = check_rounds_flags(None, None, None, "none")
    assert [check_rounds_flags(None, None, None, v).resolution_pct for v in ("none", " None ")] == ["none", "none"]
    policies = rounds_policies("cpu", none.rounds, none.auto, none.max_rounds, none.budget_s, none.resolution_pct)
    assert {kind: p.resolution_pct for kind, p in policies.items()} == {"models": None, "kernels": None}
    assert settled([look(detectable=4.0, strict_detectable=9.0)], policies["kernels"].resolution_pct)[0]
    # --resolution none with --max-rounds 3: nothing to hold back, so no error (a target would have no round).
    assert check_rounds_flags(None, "3", None, "none").resolution_pct == "none"
    # --resolution 1.5% sets both kinds; --max-rounds 12 both kinds' limit.
    both = rounds_policies("cpu", None, True, 12, None, 1.5)
    assert {kind: (p.max_rounds, p.resolution_pct) for kind, p in both.items()} == {"models": (12, 1.5),
                                                                                   "kernels": (12, 1.5)}
    # Fixed rounds: no looks, no target, whatever the device's defaults.
    fixed = rounds_policies("cpu", 7, False)
    assert {kind: (p.max_rounds, p.auto, p.resolution_pct) for kind, p in fixed.items()} == {
        "models": (7, False, None), "kernels": (7, False, None)}


def test_a_light_kernel_whose_verdict_differs_between_the_levels_does_not_hold_the_rounds() -> None:
    """A PR slows a heavy kernel 30 % and a kernel holding 0.001 % of the step 4 %: after 8 rounds the light one is
    regressed at the run level and inconclusive at the strict level. ``--fail-on regression`` would not count it,
    so it does not keep the rounds going (README command 1 once ran to the 24-round cap for such a kernel); with
    ``--fail-share 0`` every kernel counts, and it does."""
    specs = kernel_specs(40, seed=21)
    specs[0] = replace(specs[0], true_ms=1.5, calls=2)
    specs[1] = replace(specs[1], true_ms=0.0005, calls=1)
    base, base_samples = kernels_frame(specs, seed=100, cv=0.02, round_cv=0.01, rounds=8)
    pr, pr_samples = kernels_frame(specs, seed=200, cv=0.02, round_cv=0.01, rounds=8, factor={0: 1.3, 1: 1.04})
    policy = rounds_policies("cpu", None, True)["kernels"]

    def look_with(settings: VerdictSettings) -> Look:
        run, strict = (compare_kernels(base, pr, base_samples, pr_samples, level) for level in
                       (policy.run_settings(settings), policy.strict_settings(settings)))
        light = base.at[1, "kernel_name"]
        assert [c.table.set_index("base_name").at[light, "verdict"] for c in (run, strict)] == ["regressed",
                                                                                                "inconclusive"]
        return kernel_look(run, strict)

    assert settled([look_with(NOMINAL)], policy.resolution_pct) == (True, "settled: regressed")
    held, why = settled([look_with(replace(NOMINAL, fail_share=0.0))], policy.resolution_pct)
    assert not held and "not yet at the strict level (regressed; 1 item(s) differ)" in why
