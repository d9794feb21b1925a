"""benchmarks/testsuite_cost.py: a group's cost is what the whole machine spent while it ran, quoted in compares."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import testsuite_cost  # noqa: E402
from testsuite_cost import Cost, busy_seconds, in_compares, measure  # noqa: E402

# The first line of /proc/stat on a 2-core machine (user nice system idle iowait irq softirq steal guest guest_nice).
STAT = "cpu  801 99 300 5000 70 20 10 40 0 0"


def test_busy_time_counts_user_nice_system_and_interrupts_not_idle_iowait_or_steal() -> None:
    assert busy_seconds(STAT, 100) == pytest.approx((801 + 99 + 300 + 20 + 10) / 100)


def test_a_line_other_than_the_total_is_refused() -> None:
    with pytest.raises(ValueError, match="not the total cpu line"):
        busy_seconds("cpu0 1 2 3 4 5 6 7", 100)


def test_the_cpu_outside_pytest_is_what_the_machine_spent_beyond_its_tree() -> None:
    readings = iter([1000.0, 1272.0])  # the machine: 272 s busy while the group ran
    cost = measure(["true"], busy=lambda: next(readings))
    assert cost.machine_s == 272.0 and 0.0 <= cost.tree_s < 1.0  # `true` spends next to nothing itself
    assert cost.outside_s == pytest.approx(272.0 - cost.tree_s)


def test_a_failing_group_is_not_quoted_and_its_last_line_is_said() -> None:
    with pytest.raises(SystemExit, match="failed: 1 failed, 2 passed"):
        measure(["sh", "-c", "echo '1 failed, 2 passed'; exit 1"], busy=lambda: 0.0)


def test_a_group_is_quoted_in_compares_of_its_own_round_and_beyond_the_compare_it_reads() -> None:
    baseline = [Cost(70, 100, 90), Cost(90, 125, 110)]
    alone = [Cost(170, 272, 36), Cost(190, 300, 40)]
    reads_it = [Cost(110, 150, 100), Cost(130, 175, 120)]
    assert in_compares(alone, baseline, includes_baseline=False) == pytest.approx((2.72 + 2.4) / 2)
    assert in_compares(reads_it, baseline, includes_baseline=True) == pytest.approx((0.5 + 0.4) / 2)


def test_every_group_names_test_modules_that_exist() -> None:
    for files in testsuite_cost.GROUPS.values():
        for file in files:
            assert (ROOT / file).is_file(), file
