"""When a side's timing counts as noisy: two different measures, each defined here once.

They are not the same rule written twice, so they keep distinct names:

* **within one run** (``stages.suite``'s ``noisy_eager``/``noisy_compiled`` flags, the seeds' rule): the sample
  standard deviation of a side's per-iteration latencies above a fraction of their mean, i.e. its coefficient
  of variation. It sees a single process, so it catches jitter but not drift between processes.
* **across rounds** (the comparison's ``noisy`` column and ``--noise``): the robust relative spread of a side's
  round medians (`analysis.stats.verdict.robust_spread`, 1.4826 × MAD of their logs) at or above a limit. The round
  is the unit of replication, so this is what says the verdict itself rests on unstable numbers.

Both limits happen to default to 10 %. Stdlib only: the suite stage imports this inside the environment.
"""

from __future__ import annotations

from typing import Any

ITERATION_CV_LIMIT = 0.10  # per-iteration std above this fraction of the mean flags a suite side
ROUND_SPREAD_LIMIT = 0.10  # default of --noise: robust spread of round medians that flags a compared side


def iterations_are_noisy(mean_ms: float, std_ms: float, limit: float = ITERATION_CV_LIMIT) -> bool:
    """The suite's within-run rule: std strictly above ``limit`` × mean (a zero mean is never noisy)."""
    return mean_ms > 0 and std_ms > limit * mean_ms


def rounds_are_noisy(spread: Any, limit: float = ROUND_SPREAD_LIMIT) -> Any:
    """The comparison's across-rounds rule: a robust spread at or above ``limit`` (NaN, too few rounds: no).

    ``spread`` is a number or a numpy/pandas array of them (then the answer is elementwise)."""
    return spread >= limit
