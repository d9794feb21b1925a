"""Adaptive rounds: when a comparison has measured enough, and at which level its verdicts are then stated.

With ``--rounds auto`` the paired timing rounds of a kind (models, then kernels) stop as soon as the verdicts are
settled instead of always running ``--max-rounds``. Looking at the data after every round and stopping when it
looks decisive is *optional stopping*: tested each time at the nominal level, an A/A gets several chances to
produce a false claim. The rule here keeps every claim valid whatever the stopping time (a Haybittle–Peto
design, bounded by the union over looks rather than by a computed boundary, which needs no model of how the
looks correlate):

* an *early* look (after rounds ``min_rounds`` … ``max_rounds − 1``) may stop only when the comparison at the
  strict level ``early_alpha`` (claims at alpha = ``early_alpha``, intervals at 1 − ``early_alpha``) reaches
  exactly the verdicts the report states at the run level: the same family verdicts, the same verdict for every
  item of the effect family that ``--fail-on regression`` counts (every model; a kernel holding ``fail_share`` of
  the step: `kernel_look`), the same control results, and none of them inconclusive. Every claim reported after
  an early stop is then one the strict test made (a lighter kernel is stated at the strict level too);
* the run level is the nominal one minus what the early looks spent: alpha − L·``early_alpha`` and confidence +
  L·``early_alpha`` for L possible early looks (the CPU's defaults: 13 looks, 0.001 each, so alpha 0.037 and
  96.3 % intervals instead of 0.05 and 95 %). The report always states its verdicts at that level, whether it stopped
  early or at ``max_rounds``.

A false claim needs a false claim at some look: at most L × ``early_alpha`` + the run level's alpha = alpha in
all (likewise for the equivalence tests' error).

The *intervals* follow the same rule (repeated confidence intervals): a kind that stopped early states its
verdicts and intervals at the strict level of the look that stopped it (99.9 % intervals, verdicts unchanged: the
strict comparison reached the same ones), a kind that ran to ``max_rounds`` (or ran out of ``--budget``, a stop
the data did not choose) at the run level. An interval then misses the truth only if some look's interval at its
own level did: at most alpha in all, whenever the rounds stopped. Stated at the run level instead, the interval
after an early stop is taken at a time chosen because the data looked settled: in the simulation with 20 kernels
3 % slower it held the truth in 87.5 % of runs (10 fixed rounds: 91 %). ``benchmarks/verdict_sim.py --rounds auto``
measures coverage, false positives and the rounds used under this stopping; adaptive rounds are the default.

``--resolution 2%`` adds a target: an early look may stop only when, besides the above, the family's resolution
(``detectable_pct``, `analysis.stats.verdict.detectable_effect`: the smallest change told apart from none with 80 %
power, whatever ``--threshold``) at the strict level, the level a stop states it at, is at most the target. The
target only takes stops away: every early stop is still one at which the strict comparison reached the run level's
verdicts, and the union bound above holds for any rule that stops only then, so neither false claims nor missed
intervals become likelier. ``pair/<kind>/rounds.json`` says
whether the target was reached, at the level the kind's verdicts are stated at.

Defaults (`DEFAULT_ROUNDS`, by device kind and kind of item): on the CPU a kind stops only once its verdicts are
settled *and* its resolution is at most the issue's goal, kernels 2 %, models 3 %, within its own most rounds
(kernels 24, models 10: a kernel round costs less than half a model round, and with the measured noise the power
issue 55 asks needs about that many; docs/cost-model.md); ``--resolution X%`` sets one target for both kinds,
``--resolution none`` none, ``--max-rounds N`` one limit for both. A GPU keeps 5 rounds and no target: its noise
levels rest on 3–5 rounds of fixtures, too few to simulate a target against, and a GPU round costs a model's
compile. Every kind's
early looks are spent over the looks of the kind that may run most (`RoundsPolicy.run_max_rounds`), so the run
states one run level.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from analysis.stats.verdict_settings import MIN_ROUNDS, VerdictSettings, check_rounds
from foundation.atomic_io import write_json
from foundation.errors import UserError
from foundation.flag_values import whole_number
from foundation.records import check_format_version, expect_int, expect_object, expect_str, read_json

if TYPE_CHECKING:  # pandas behind these: only the compare that looks imports them
    from analysis.kernels.compare import KernelComparison
    from analysis.models.compare import ModelComparison

EARLY_ALPHA = 0.001  # spent at each early look (Haybittle–Peto's customary level)
AUTO = "auto"
NO_TARGET: Final = "none"  # --resolution none: a kind stops once its verdicts are settled, whatever its resolution
SETTLED = ("improved", "regressed", "mixed", "equivalent", "identical")  # family verdicts that end the rounds
KINDS = ("models", "kernels")  # the kinds of paired rounds, in the order a comparison runs them
Resolution = float | Literal["none"] | None  # --resolution: a target (percent), none, or the defaults (None)


@dataclass(frozen=True)
class KindRounds:
    """A kind's adaptive rounds by default: at most ``max_rounds``, and the resolution (percent) a stop needs."""

    max_rounds: int
    resolution_pct: float | None


# The defaults by device kind (module docstring). CPU targets: issue 55's goals. Kernels' 24 rounds: with the kernel
# noise measured on README command 1 after the identical-code fix (docs/cost-model.md, "Default targets and the
# kernels' most rounds"), one kernel 3 % slower holding 5 % of the step is called regressed in at least 80 % of
# simulated runs only when an inconclusive kernel of weight holds the rounds open (`open_findings`) and they may run
# past 16 (at most 16: 72.5 % of 40). A kernel round costs 15–20 s, a model round 40 s or more. GPU: no target
# (module docstring).
DEFAULT_ROUNDS: dict[str, dict[str, KindRounds]] = {
    "cpu": {"models": KindRounds(10, 3.0), "kernels": KindRounds(24, 2.0)},
    "gpu": {"models": KindRounds(5, None), "kernels": KindRounds(5, None)},
}


def device_kind(device: str) -> str:
    """``cpu`` or ``gpu``: the key of the device's defaults (any accelerator is a GPU here)."""
    return "cpu" if device == "cpu" else "gpu"


def most_rounds(kind_of_device: str) -> int:
    """The most rounds any kind runs by default on a device kind."""
    return max(d.max_rounds for d in DEFAULT_ROUNDS[kind_of_device].values())


@dataclass(frozen=True)
class RoundsPolicy:
    """How many paired rounds a comparison runs: ``max_rounds`` fixed, or adaptively between ``min_rounds`` and
    ``max_rounds`` (``auto``), within ``budget_s`` seconds of the comparison's start where given."""

    max_rounds: int
    auto: bool = False
    min_rounds: int = MIN_ROUNDS
    budget_s: float | None = None
    resolution_pct: float | None = None  # a stop also needs this detectable change (percent; None: no target)
    # The most rounds any kind of the run may run: the early looks' levels are spent over its looks, so that every
    # kind keeps one run level (None: this kind's max_rounds).
    run_max_rounds: int | None = None

    @property
    def early_looks(self) -> int:
        return max(self.max_rounds, self.run_max_rounds or 0) - self.min_rounds if self.auto else 0

    def early_level(self, settings: VerdictSettings) -> float:
        """What one early look spends: `EARLY_ALPHA`, or less so that the run level keeps half its alpha."""
        looks = self.early_looks
        if not looks:
            return 0.0
        return min(EARLY_ALPHA, settings.alpha / (2 * looks), (1 - settings.confidence) / (2 * looks))

    def run_settings(self, settings: VerdictSettings) -> VerdictSettings:
        """The level the report states its verdicts at (see the module docstring)."""
        spent = self.early_level(settings) * self.early_looks
        if not spent:
            return settings
        return replace(settings, alpha=settings.alpha - spent, confidence=settings.confidence + spent)

    def strict_settings(self, settings: VerdictSettings) -> VerdictSettings:
        """The level an early look must reach the same verdicts at."""
        level = self.early_level(settings)
        return replace(settings, alpha=level, confidence=1 - level)

    def stated_strictly(self, rounds: int, settled_early: bool) -> bool:
        """Whether a kind's verdicts are stated at the strict level after ``rounds`` rounds: when its looks
        stopped it before ``max_rounds`` (see the module docstring)."""
        return self.auto and settled_early and rounds < self.max_rounds

    def stated_settings(self, settings: VerdictSettings, rounds: int, settled_early: bool) -> VerdictSettings:
        """The level a kind's verdicts and intervals are stated at after ``rounds`` rounds: the strict level when
        its looks stopped it before ``max_rounds``, else the run level (see the module docstring)."""
        if self.stated_strictly(rounds, settled_early):
            return self.strict_settings(settings)
        return self.run_settings(settings)

    def after_look(self, look: Look, rounds: int, spent_s: float) -> Stop:
        """Whether a kind's rounds end after ``rounds`` rounds (``spent_s`` seconds into the comparison), given its
        look: settled (and fine enough for the target), ``max_rounds`` reached or ``--budget`` spent."""
        stopped, why = settled([look], self.resolution_pct)
        if stopped:
            return Stop(True, True, why)
        out_of_budget = self.budget_s is not None and spent_s >= self.budget_s
        if rounds < self.max_rounds and not out_of_budget:
            return Stop(False, False, why)
        why = settled([look])[1]  # the target is said on its own, at the level the verdicts end up stated at
        return Stop(True, False, f"--max-rounds reached ({why})" if rounds >= self.max_rounds
                    else f"--budget {self.budget_s:g} s spent after {spent_s:.0f} s ({why})")


@dataclass(frozen=True)
class Stop:
    """What a look decided: whether the rounds end, whether because the verdicts settled (a stop the data chose,
    stated at the strict level before ``max_rounds``), and why (or why not)."""

    stop: bool
    settled: bool
    reason: str


def rounds_policies(device: str, rounds: int | None, auto: bool, max_rounds: int | None = None,
                    budget_s: float | None = None, resolution: Resolution = None) -> dict[str, RoundsPolicy]:
    """Each kind's rounds: ``rounds`` fixed for both; or adaptive, at most ``max_rounds`` (default: the kind's on
    this device, `DEFAULT_ROUNDS`), with ``resolution`` as the target of both kinds (``none``: none; None: the
    kind's default), the levels spent over the kind that may run most."""
    defaults = DEFAULT_ROUNDS[device_kind(device)]
    if not auto:
        fixed = rounds if rounds is not None else max_rounds if max_rounds is not None else most_rounds(
            device_kind(device))
        return {kind: RoundsPolicy(max_rounds=fixed) for kind in KINDS}
    tops = {kind: max_rounds if max_rounds is not None else defaults[kind].max_rounds for kind in KINDS}
    targets = {kind: defaults[kind].resolution_pct if resolution is None else None if resolution == NO_TARGET
               else float(resolution) for kind in KINDS}
    return {kind: RoundsPolicy(max_rounds=tops[kind], auto=True, budget_s=budget_s, resolution_pct=targets[kind],
                               run_max_rounds=max(tops.values())) for kind in KINDS}


def policy_line(policies: dict[str, RoundsPolicy]) -> str:
    """The rounds each kind will run, in words (what ``invoke compare`` prints before its rounds)."""
    first = next(iter(policies.values()))
    if not first.auto:
        return f"rounds: {first.max_rounds} of each kind, fixed"
    kinds = "; ".join(f"{kind} at most {p.max_rounds}" + (f", until detectable ≤ {p.resolution_pct:g} %"
                                                           if p.resolution_pct is not None else "")
                      for kind, p in policies.items())
    budget = f", within --budget {first.budget_s:g} s" if first.budget_s is not None else ""
    return f"rounds: adaptive from {first.min_rounds}, each kind until its verdicts are settled{budget}: {kinds}"


def describe_policies(policies: dict[str, RoundsPolicy]) -> dict[str, object]:
    """The run's rounds policy as the manifest records it: what the kinds share, and each kind's limit and
    target."""
    first = next(iter(policies.values()))
    return {"mode": AUTO if first.auto else "fixed", "min_rounds": first.min_rounds,
            "max_rounds": max(p.max_rounds for p in policies.values()), "budget_s": first.budget_s,
            "kinds": {kind: {"max_rounds": p.max_rounds, "resolution_pct": p.resolution_pct}
                      for kind, p in policies.items()}}


@dataclass(frozen=True)
class RoundsFlags:
    """``--rounds auto|N``, ``--max-rounds N``, ``--budget 20m`` and ``--resolution 2%|none`` checked (the
    device's defaults, `DEFAULT_ROUNDS`, fill the rest)."""

    rounds: int | None  # fixed rounds; None with ``auto``: at most ``max_rounds`` (default: each kind's)
    auto: bool
    max_rounds: int | None
    budget_s: float | None
    resolution_pct: Resolution = None  # a target for both kinds, `NO_TARGET`, or None: each kind's default


def check_rounds_flags(rounds: object, max_rounds: object, budget: object, resolution: object = None
                       ) -> RoundsFlags:
    """The four flags at the door, with one-line errors naming the flag. Without ``--rounds`` the rounds are
    adaptive (``auto``), at most ``--max-rounds`` (default: the device's number of rounds)."""
    if rounds is None or rounds == AUTO:
        top = None if max_rounds is None else whole_number("--max-rounds", max_rounds, minimum=MIN_ROUNDS)
        target = None if resolution is None else parse_resolution(resolution)
        if isinstance(target, float) and top == MIN_ROUNDS:
            raise UserError(f"--resolution {resolution}: --max-rounds {top} is the minimum, which leaves no round "
                            "to go on for it; expected --max-rounds above it")
        return RoundsFlags(None, True, top, None if budget is None else parse_duration(budget), target)
    if max_rounds is not None or budget is not None or resolution is not None:
        raise UserError(f"--rounds {rounds}: --max-rounds, --budget and --resolution go with adaptive rounds "
                        "(--rounds auto, the default); a number of rounds is fixed")
    return RoundsFlags(check_rounds(rounds), False, None, None)


_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%?")


def parse_resolution(value: object) -> float | Literal["none"]:
    """``2%``, ``2`` or ``0.5%`` as a percentage (``--resolution``): a target for the family's resolution
    (`analysis.stats.verdict.detectable_effect`), which does not depend on ``--threshold``, so any positive
    target can be reached with enough rounds; or ``none`` (`NO_TARGET`): stop once settled."""
    text = str(value).strip()
    if text.lower() == NO_TARGET:
        return NO_TARGET
    match = _PERCENT.fullmatch(text)
    target = float(match[1]) if match else math.nan
    if not (math.isfinite(target) and 0 < target < 100):
        raise UserError(f"--resolution {value!r}: expected a percentage such as 2% or 0.5% (above 0, below 100), "
                        f"or {NO_TARGET}")
    return target


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(s|m|h)?")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: object) -> float:
    """``90``, ``90s``, ``20m`` or ``1.5h`` as seconds (``--budget``)."""
    match = _DURATION.fullmatch(str(value).strip())
    seconds = float(match[1]) * _UNIT_S[match[2]] if match else math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= 7 * 86400):
        raise UserError(f"--budget {value!r}: expected a duration such as 20m, 90s or 1.5h (at most 7 days)")
    return seconds


@dataclass(frozen=True)
class Look:
    """One family's state after a round, at the run level and at the strict level."""

    verdict: str  # the family verdict at the run level
    strict_verdict: str
    items: tuple[str, ...]  # the effect family's item verdicts at the run level
    strict_items: tuple[str, ...]
    controls_passed: bool
    strict_controls_passed: bool
    open_items: int = 0  # inconclusive items that may still be a finding (see `open_findings`)
    detectable_pct: float = math.nan  # the family's resolution at the run level, percent (`detectable_effect`)
    strict_detectable_pct: float = math.nan  # the same at the strict level (what an early stop would state)

    def stated_detectable(self, strict: bool) -> float | None:
        """The smallest detectable change at the level the verdicts are stated at (None: none measured)."""
        value = self.strict_detectable_pct if strict else self.detectable_pct
        return value if math.isfinite(value) else None


def settled(looks: list[Look], resolution_pct: float | None = None) -> tuple[bool, str]:
    """Whether an early look may stop, and why (or why not), for the families measured in these rounds; with a
    target (``--resolution``, percent), also each family's smallest detectable change at the strict level."""
    decided, why = _verdicts_settled(looks)
    # The target is checked only after the verdicts settled, and at the strict level: it can only hold back a stop
    # the strict test already allows, so the levels the early looks spend stay as they are (module docstring).
    if not decided or resolution_pct is None:
        return decided, why
    for look in looks:
        # A family where no code changed has no effect to resolve (and no detectable change): the target is moot.
        if look.verdict != "identical" and not look.strict_detectable_pct <= resolution_pct:
            shown = (f"{look.strict_detectable_pct:.2g} %" if math.isfinite(look.strict_detectable_pct)
                     else "not measured")
            return False, (f"verdict {look.verdict}, but detectable {shown} at the strict level, above the "
                           f"{resolution_pct:g} % target")
    return True, why


def _verdicts_settled(looks: list[Look]) -> tuple[bool, str]:
    for look in looks:
        if look.verdict not in SETTLED:
            return False, f"verdict {look.verdict}"
        if not look.controls_passed:
            return False, "a control failed"
        if look.open_items:
            return False, (f"verdict {look.verdict}, but {look.open_items} item(s) of weight still inconclusive "
                           "(neither shown changed nor shown within the threshold)")
        if (look.verdict, look.items, look.controls_passed) != (look.strict_verdict, look.strict_items,
                                                                look.strict_controls_passed):
            changed = sum(a != b for a, b in zip(look.items, look.strict_items, strict=True))
            return False, (f"verdict {look.verdict}, not yet at the strict level ({look.strict_verdict}"
                           + (f"; {changed} item(s) differ" if changed else "") + ")")
    return True, "settled: " + ", ".join(look.verdict for look in looks)


def open_findings(verdicts: list[str], shares: list[float] | None, settings: VerdictSettings) -> int:
    """Items a stop now would leave undecided although they may be findings: inconclusive (neither shown changed
    beyond the threshold nor shown within it) and (kernels) holding at least ``fail_share`` of the step, as
    ``--fail-on regression`` counts them; every model counts.

    Stopping on the family verdict alone lost them: in the simulation with 20 of 100 kernels 3 % slower,
    ``--fail-on regression`` fired in 10 % of adaptive runs against 75 % with 10 fixed rounds. Holding only those
    whose *estimate* lay beyond the threshold still lost some: a kernel truly 3 % slower whose estimate dipped
    under 2 % at a look was left inconclusive, and with the kernels' noise measured after the identical-code fix
    one such kernel holding 5 % of the step was called regressed in 65 % of simulated runs (40, at most 16 rounds)
    and in more when every inconclusive one holds (docs/cost-model.md)."""
    weights: list[float | None] = list(shares) if shares is not None else [None] * len(verdicts)
    return sum(1 for verdict, share in zip(verdicts, weights, strict=True)
               if verdict == "inconclusive" and weighty(share, settings))


def weighty(share: float | None, settings: VerdictSettings) -> bool:
    """Whether an item may hold the rounds open: a model (no share), or a kernel holding at least ``fail_share``
    of the step, as ``--fail-on regression`` counts them."""
    return share is None or (math.isfinite(share) and share >= settings.fail_share)


def kernel_look(run: KernelComparison, strict: KernelComparison) -> Look:
    """The kernel family's look: its items are the changed pairs of the summary holding at least ``fail_share``
    of the step at the run level (`weighty`), in path order.

    A lighter kernel does not hold the rounds open when its verdict differs between the levels, as it does not
    when it is inconclusive (`open_findings`): ``--fail-on regression`` does not count it either. After a stop it
    is stated at the strict level, as every item is, so no claim is made that the strict test did not make. Held,
    one changed kernel of 0.12 µs (0.03 % of the step, 1.045× [1.026, 1.064]) regressed at the run level and not
    at the strict one kept README command 1's kernels to the 24-round cap, 4.19× its suites' time."""
    changed = run.table[run.table["code_changed"] & run.table["in_summary"]]
    held = [path for path, share in zip(changed["base_path"], changed["step_share"], strict=True)
            if weighty(share, run.settings)]
    return Look(run.summary.verdict, strict.summary.verdict, _kernel_items(run, held), _kernel_items(strict, held),
                all(c.passed(run.settings) for c in run.controls),
                all(c.passed(strict.settings) for c in strict.controls),
                open_findings(changed["verdict"].tolist(), changed["step_share"].tolist(), run.settings),
                run.summary.detectable_pct, strict.summary.detectable_pct)


def _kernel_items(kc: KernelComparison, paths: list[str]) -> tuple[str, ...]:
    """The verdicts of the kernels at ``paths`` (base paths), in path order."""
    verdicts = dict(zip(kc.table["base_path"], kc.table["verdict"], strict=True))
    return tuple(verdicts[path] for path in sorted(paths))


def model_look(run: ModelComparison, strict: ModelComparison) -> Look:
    """The model family's look: every model compared, by name."""
    return Look(run.summary.verdict, strict.summary.verdict, _model_items(run), _model_items(strict),
                all(c.passed(run.settings) for c in run.controls),
                all(c.passed(strict.settings) for c in strict.controls),
                open_findings(run.table["verdict"].tolist(), None, run.settings),
                run.summary.detectable_pct, strict.summary.detectable_pct)


def _model_items(mc: ModelComparison) -> tuple[str, ...]:
    return tuple(mc.table.sort_values(["model", "mode", "dtype"], kind="stable")["verdict"])


# --- what a kind's rounds did: <run>/pair/<kind>/rounds.json ----------------------------------------------

STOP_FILE = "rounds.json"
# 2: the level the kind's verdicts are stated at (alpha, confidence). Added keys keep the version (readers ignore
# what they do not know): resolution_pct and detectable_pct (--resolution) change no verdict an older reader states.
# 3: detectable_pct is the resolution (the smallest change told apart from none), no longer threshold + that.
STOP_FORMAT_VERSION = 3


@dataclass(frozen=True)
class RoundsUsed:
    """How many rounds of a kind ran, and why no more: written when the kind's rounds end, read by the report."""

    kind: str
    rounds: int
    reason: str
    mode: str  # "auto" or "fixed"
    max_rounds: int
    alpha: float | None = None  # the level the kind's verdicts are stated at (None: the run's, as in version 1)
    confidence: float | None = None
    resolution_pct: float | None = None  # --resolution: the target (None: none set)
    detectable_pct: float | None = None  # the resolution at that level when the rounds ended (version 2: + threshold)

    def describe(self) -> str:
        if self.mode != AUTO:
            return f"{self.kind}: {self.rounds} round(s), fixed"
        level = (f"; stated at alpha {self.alpha:.3g}, {100 * self.confidence:.4g} % intervals"
                 if self.alpha is not None and self.confidence is not None else "")
        target = f"; {self.target()}" if self.resolution_pct is not None else ""
        return f"{self.kind}: {self.rounds} of at most {self.max_rounds} round(s), {self.reason}{target}{level}"

    def target(self) -> str:
        """Whether the ``--resolution`` target was reached, in words ("" without one)."""
        if self.resolution_pct is None:
            return ""
        goal, rounds = f"{self.resolution_pct:g} % target", f"after {self.rounds} round(s)"
        if self.detectable_pct is None:
            return f"{goal}: no detectable change to hold to it (nothing changed, or no interval) {rounds}"
        if self.detectable_pct <= self.resolution_pct:
            return f"detectable {self.detectable_pct:.2g} % ≤ {goal} {rounds}"
        return f"{goal} not reached: detectable {self.detectable_pct:.2g} % {rounds}"

    def stated(self, settings: VerdictSettings) -> VerdictSettings:
        """``settings`` at the level this kind's verdicts are stated at."""
        if self.alpha is None or self.confidence is None:
            return settings
        return replace(settings, alpha=self.alpha, confidence=self.confidence)


def write_rounds_used(directory: Path, used: RoundsUsed) -> Path:
    path = Path(directory) / STOP_FILE
    write_json(path, {"format_version": STOP_FORMAT_VERSION, **asdict(used)})
    return path


def read_rounds_used(directory: Path) -> RoundsUsed | None:
    """A kind's rounds record (None where the run has none: fixed rounds before adaptive ones existed)."""
    path = Path(directory) / STOP_FILE
    if not path.is_file():
        return None
    data = expect_object(read_json(path, "a rounds record"), str(path))
    check_format_version(data, str(path), STOP_FORMAT_VERSION)
    where = f"{path}:"
    return RoundsUsed(kind=expect_str(data.get("kind"), f"{where} kind"),
                      rounds=expect_int(data.get("rounds"), f"{where} rounds", minimum=1),
                      reason=expect_str(data.get("reason"), f"{where} reason"),
                      mode=expect_str(data.get("mode"), f"{where} mode"),
                      max_rounds=expect_int(data.get("max_rounds"), f"{where} max_rounds", minimum=1),
                      alpha=_level(data.get("alpha"), f"{where} alpha"),
                      confidence=_level(data.get("confidence"), f"{where} confidence"),
                      resolution_pct=_percent(data.get("resolution_pct"), f"{where} resolution_pct"),
                      detectable_pct=_percent(data.get("detectable_pct"), f"{where} detectable_pct"))


def _level(value: object, where: str) -> float | None:
    """An optional probability strictly between 0 and 1 (absent in version 1 records)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise UserError(f"{where}: expected a number between 0 and 1, got {value!r}")
    return float(value)


def _percent(value: object, where: str) -> float | None:
    """An optional percentage (absent without --resolution, or where none was measured)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise UserError(f"{where}: expected a percentage (a finite number of at least 0), got {value!r}")
    return float(value)
