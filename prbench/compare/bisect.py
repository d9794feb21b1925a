"""The bisect behind ``invoke bisect`` (`prbench.commands.bisect`): find the commit between a good and a bad
PyTorch commit that made a model or kernel slower,
or (``--triton-good``/``--triton-bad``) the Triton commit, PyTorch fixed.

The search is `analysis.bisect.search`; each step is an ``invoke compare`` of the chosen commit (PR side) against
the good endpoint (base side), run by `prbench.compare.driver.run_compare` with the suite cut to the models that hold
the target; a kernel's step compiles them but times no model round (`CompareRequest.time_models`: its verdict is
the kernel's, and its report says the models were not timed). The environment of a step is the one compare plans:
the installed torch plus a Python overlay of the diff from its commit (seconds) with a local recipe, or images
built at both commits with a Docker recipe.
With a local recipe and ``docker_recipe`` given, a commit the overlay cannot make (compiled code changed) is
built with the Docker recipe instead; without one it is skipped and the step says why. The compare request's
Triton clone and ``--triton-ref`` go to every step; a Docker recipe built from source without its clones is
refused before the bisect's directory exists.

A Triton range walks the first-parent line of the Triton clone instead: every step is a Triton A/B of one PyTorch
(the compare request's ``base``, the recipe's commit by default) whose base side builds the good Triton commit and
whose PR side the step's, so the steps are the same comparisons ``invoke compare --triton-base --triton-pr`` plans
(`prbench.compare.variant_plan.plan_docker`), with a Docker recipe built from source (or ``docker_recipe``).

A step whose target stays inconclusive gets more rounds (the run is resumed with twice the rounds, up to
``max_rounds``: the rounds already timed are kept), then is undecided and stepped around. Every step is a run of
its own under the runs directory, named by the good commit, the commit and the target (`step_run_id`); the base
side is the good endpoint in every step, so a new step's run starts with the base side of the last step that ran
(`_good_side_from_earlier_steps`): the good commit is compiled and organized once per bisect, not once per step;
``<runs>/<bisect id>/`` holds ``bisect.json`` and
``bisect.md`` (`analysis.bisect.report`), rewritten after every step. The same command again resumes: the steps
recorded with the same settings are taken as they are, and a step interrupted midway resumes its run.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from analysis.bisect.report import (
    BISECT_JSON,
    BISECT_MD,
    KERNEL,
    MODEL,
    TRITON_RANGE,
    BisectRecord,
    BisectTarget,
    Commit,
    Step,
    headline,
    outcome_of,
    read_record,
    read_target_verdict,
    render_markdown,
)
from analysis.bisect.search import SKIPPED, UNDECIDED, Conclusion, conclude, interval, next_position
from analysis.kernels.compare import read_table
from foundation import atomic_io
from foundation.errors import UserError
from foundation.formats.kernel_index import graph_entries
from foundation.formats.run_layout import MANIFEST, SIDES
from foundation.formats.suite_options import UnknownModelError, resolve_models
from foundation.io_errors import NoSpaceLeft
from prbench import __version__
from prbench.compare.driver import CompareRequest, check_sources, plan, run_compare
from prbench.compare.variant_plan import INSTALLED
from prbench.runners import StageFailed
from prbench.runs.run_lock import RunLock
from prbench.runs.run_store import REPORT_DIR, RunStore, check_run_id
from prbench.sides import pins
from prbench.sides.recipes import Recipe

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class BisectRequest:
    pytorch_src: Path | None  # a Triton range: optional (the recipe's local clone)
    good: str
    bad: str
    compare: CompareRequest  # every step's settings (recipe, suite, kernels, statistics, rounds, runs directory)
    model: str | None = None
    kernel: str | None = None
    from_run: str | None = None
    max_rounds: int = 0  # an inconclusive step is resumed with twice the rounds up to this many (0: no more)
    bisect_id: str | None = None
    docker_recipe: Recipe | None = None  # local recipe: the commits an overlay cannot make are built with this
    triton: bool = False  # good and bad are Triton commits, PyTorch fixed (compare.base on both sides)

    @property
    def flags(self) -> tuple[str, str]:
        """The flags that gave the endpoints, as errors name them."""
        return ("--triton-good", "--triton-bad") if self.triton else ("--good", "--bad")


@dataclass(frozen=True)
class BisectResult:
    directory: Path
    record: BisectRecord
    conclusion: Conclusion
    headline: str


def first_parent_commits(clone: Path, good: str, bad: str,
                         flags: tuple[str, str] = ("--good", "--bad")) -> list[Commit]:
    """The good commit, then every first-parent commit after it up to the bad one (one-line errors naming
    ``flags``, the good and the bad endpoint's)."""
    good_flag, bad_flag = flags
    repo = pins.open_repo(clone)
    good_sha, bad_sha = pins.resolve(repo, good, good_flag), pins.resolve(repo, bad, bad_flag)
    if good_sha == bad_sha:
        raise UserError(f"{bad_flag}={bad}: the same commit as {good_flag}; give a later commit")
    if repo.git.merge_base(good_sha, bad_sha) != good_sha:
        raise UserError(f"{good_flag}={good}: not an ancestor of {bad_flag}={bad}; give the older, good commit as "
                        f"{good_flag}")
    lines = repo.git.log("--first-parent", "--reverse", "--format=%H %s", f"{good_sha}..{bad_sha}").splitlines()
    after = [Commit(*line.partition(" ")[::2]) for line in lines if line.strip()]
    if not after or after[-1].sha != bad_sha:
        raise UserError(f"{bad_flag}={bad}: not on the first-parent line after {good_flag}={good}")
    return [Commit(good_sha, repo.git.log("-1", "--format=%s", good_sha)), *after]


def check_range_flags(good: str | None, bad: str | None, triton_good: str | None, triton_bad: str | None,
                      pytorch_ref: str | None, triton_ref: str | None) -> bool:
    """One range to walk: PyTorch's (--good/--bad) or Triton's (--triton-good/--triton-bad, PyTorch fixed at
    --pytorch-ref); True for a Triton range (one-line errors, nothing read)."""
    if triton_good is None and triton_bad is None:
        if pytorch_ref is not None:
            raise UserError(f"--pytorch-ref {pytorch_ref}: fixes PyTorch for a Triton range; give "
                            "--triton-good/--triton-bad, or walk PyTorch with --good/--bad")
        return False
    if good is not None or bad is not None:
        raise UserError("--good/--bad: a bisect walks one range; with --triton-good/--triton-bad PyTorch stays fixed "
                        "(--pytorch-ref, default the recipe's commit): leave --good/--bad out")
    for flag, value in (("--triton-good", triton_good), ("--triton-bad", triton_bad)):
        if not value:
            raise UserError(f"{flag}: required with a Triton range (the last good and the first bad Triton commit "
                            "in --triton-src)")
    if triton_ref is not None:
        raise UserError("--triton-ref: builds one Triton on every step; a Triton range builds each step's own: "
                        "leave --triton-ref out")
    return True


def check_target_flags(model: str | None, kernel: str | None, from_run: str | None) -> None:
    """--model, --kernel and --from-run name one thing that regressed (one-line errors, nothing read)."""
    if not model and not kernel:
        raise UserError("--model or --kernel: name what regressed (a model, or a kernel by its name on the good "
                        "side; --from-run RUN --kernel NAME takes the kernel from a finished compare)")
    if from_run and not kernel:
        raise UserError(f"--from-run {from_run}: give --kernel NAME, the regressed kernel of that run")
    if from_run:
        check_run_id(from_run)
    if model:
        try:
            resolve_models(model)
        except UnknownModelError as exc:
            raise UserError(f"--model: {exc}") from None
        if "," in model:
            raise UserError(f"--model {model}: one model (the one that regressed)")


def resolve_target(request: BisectRequest) -> BisectTarget:
    """The model or kernel the steps judge, and the models they compile."""
    check_target_flags(request.model, request.kernel, request.from_run)
    if request.kernel is None:
        return BisectTarget(MODEL, str(request.model), models=(str(request.model),))
    models = (request.model,) if request.model else ()
    if request.from_run is None:
        return BisectTarget(KERNEL, request.kernel, models=models)
    return _kernel_from_run(request, models)


def _kernel_from_run(request: BisectRequest, models: tuple[str, ...]) -> BisectTarget:
    """The kernel's identity (base name, body hash, shapes) and the models that launch it, from a finished run."""
    assert request.from_run is not None and request.kernel is not None
    store = RunStore(request.compare.runs_dir)
    table = store.root / request.from_run / REPORT_DIR / "kernels_compare.csv"
    if not table.is_file():
        raise UserError(f"--from-run {request.from_run}: no {table} (a finished invoke compare run is expected)")
    frame = read_table(table, ("base_name", "pr_name", "body_hash", "shape_key", "base_graphs"),
                       "a kernels_compare.csv", dtype=str, keep_default_na=False)
    rows = frame[(frame["base_name"] == request.kernel) | (frame["pr_name"] == request.kernel)]
    if rows.empty:
        raise UserError(f"--kernel {request.kernel}: not a paired kernel of run {request.from_run} "
                        f"(see {table}: base_name, pr_name)")
    row = rows.iloc[0]
    held = tuple(dict.fromkeys(entry.partition("/")[0] for entry in graph_entries(row["base_graphs"])
                               if "/" in entry))
    return BisectTarget(KERNEL, str(row["base_name"]), body_hash=str(row["body_hash"]),
                        shape_key=str(row["shape_key"]), models=models or held)


def default_bisect_id(good: str, bad: str, target: BisectTarget, triton: bool = False) -> str:
    return f"bisect-{'triton-' if triton else ''}{good[:10]}-{bad[:10]}-" + _UNSAFE.sub("_", target.name)[:60]


def step_run_id(good: str, commit: str, target: BisectTarget, triton: bool = False) -> str:
    """A step's run: named by what it compares, not by the bisect, so another bisect from the same good commit
    that measures the same commit (a narrower range, say) resumes the same run instead of timing it again."""
    return f"step-{'triton-' if triton else ''}{good[:10]}-{commit[:12]}-" + _UNSAFE.sub("_", target.name)[:60]


def _settings(request: BisectRequest, target: BisectTarget, commits: list[Commit]) -> dict[str, Any]:
    """What makes two invocations the same bisect: a recorded step is reused only under the same settings."""
    compare = request.compare
    return {"good": commits[0].sha, "bad": commits[-1].sha, "target": target.describe(),
            "body_hash": target.body_hash, "models": list(target.models), "recipe": compare.recipe.name,
            "docker_recipe": request.docker_recipe.name if request.docker_recipe else None,
            "suite": compare.suite.inputs(), "rounds": compare.rounds, "max_rounds": request.max_rounds,
            "passes": compare.passes, "stats": compare.stats.describe(), "env": dict(compare.env),
            "inductor_config": dict(compare.inductor_config),
            # only when given, so a bisect recorded without the flag resumes as it was
            **({"triton_ref": compare.triton_ref} if compare.triton_ref else {}),
            **({TRITON_RANGE: _fixed_pytorch(request)} if request.triton else {})}


def _fixed_pytorch(request: BisectRequest) -> str:
    """A Triton range's PyTorch, as the steps build it on both sides: --pytorch-ref, or the recipe's commit."""
    recipe = _builder(request)
    if request.compare.base == INSTALLED and recipe.pytorch is not None:
        return recipe.pytorch.commit
    return request.compare.base


def run_bisect(request: BisectRequest, console: Console | None = None) -> BisectResult:
    """Run (or resume) a bisect; every step's record is written as soon as it is known."""
    console = console or Console()
    if not request.pytorch_src and not request.triton:
        raise UserError("--pytorch-src: required (the PyTorch clone holding --good and --bad)")
    target = resolve_target(request)
    commits = _range(request)
    bisect_id = request.bisect_id or default_bisect_id(commits[0].sha, commits[-1].sha, target, request.triton)
    check_run_id(bisect_id)
    directory = Path(request.compare.runs_dir) / bisect_id
    directory.mkdir(parents=True, exist_ok=True)
    lock = RunLock(directory, flag="--bisect").acquire()  # one invocation per bisect
    try:
        record = _start_record(directory, _settings(request, target, commits), target, commits, console)
        return _search(request, record, directory, console)
    finally:
        lock.release()


def _range(request: BisectRequest) -> list[Commit]:
    """The commits the bisect walks, after the clones and the Triton flags are checked at the door (every step
    builds with them)."""
    sources = replace(request.compare, recipe=_builder(request), pytorch_src=request.pytorch_src)
    if not request.triton:
        assert request.pytorch_src is not None, "checked by run_bisect"
        commits = first_parent_commits(request.pytorch_src, request.good, request.bad)
        check_sources(sources)
        return commits
    if not sources.recipe.is_docker or sources.recipe.is_wheel:
        raise UserError(f"--triton-good/--triton-bad: recipe {sources.recipe.name} builds no Triton; give a Docker "
                        "recipe that builds from source (--recipe, or --docker-recipe with a local one)")
    clones = check_sources(sources)
    assert clones is not None, "a Docker recipe built from source has both clones"
    commits = first_parent_commits(clones[1], request.good, request.bad, request.flags)
    pins.resolve(pins.open_repo(clones[0]), _fixed_pytorch(request), "--pytorch-ref")  # every step's
    return commits


def _start_record(directory: Path, settings: dict[str, Any], target: BisectTarget, commits: list[Commit],
                  console: Console) -> BisectRecord:
    fresh = BisectRecord(settings=settings, target=target, commits=commits)
    path = directory / BISECT_JSON
    if not path.is_file():
        return fresh
    earlier = read_record(path)
    if earlier.settings != settings or [c.sha for c in earlier.commits] != [c.sha for c in commits]:
        console.print(f"{path}: recorded with other settings; its steps are not reused (their runs resume)",
                      markup=False, highlight=False)
        return fresh
    if earlier.steps:
        console.print(f"resuming: {len(earlier.steps)} step(s) recorded in {path}", markup=False, highlight=False)
    fresh.steps = list(earlier.steps)
    return fresh


def _search(request: BisectRequest, record: BisectRecord, directory: Path, console: Console) -> BisectResult:
    count = len(record.commits)
    _write(directory, record)
    while (position := next_position(count, record.outcomes())) is not None:
        span = interval(count, record.outcomes())
        commit = record.commits[position]
        left = span.bad - span.good
        to_go = math.ceil(math.log2(left)) + (position == count - 1)  # the endpoint is checked before halving
        console.rule(f"bisect step {len(record.steps) + 1}: {commit.sha[:12]} ({position}/{count - 1}; {left} "
                     f"commit(s) left, about {to_go} step(s) to go without skips)")
        run_id = step_run_id(record.commits[0].sha, commit.sha, record.target, request.triton)
        step = _measure(request, record, position, run_id, console)
        after = interval(count, {**record.outcomes(), position: step.outcome})
        record.steps.append(replace(step, good=after.good, bad=after.bad))
        console.print(f"{commit.sha[:12]}: {step.outcome}" + (f" ({step.note})" if step.note else "")
                      + f" in {step.seconds:.0f} s", markup=False, highlight=False)
        _write(directory, record)
    conclusion = conclude(count, record.outcomes())
    return BisectResult(directory, record, conclusion, headline(record, conclusion))


def _write(directory: Path, record: BisectRecord) -> None:
    conclusion = conclude(len(record.commits), record.outcomes())
    atomic_io.write_json(directory / BISECT_JSON, record.to_dict(conclusion))
    atomic_io.write_text(directory / BISECT_MD, render_markdown(record, conclusion))


def _measure(request: BisectRequest, record: BisectRecord, position: int, run_id: str, console: Console) -> Step:
    """One step: compare the commit against the good endpoint, more rounds while the target is inconclusive."""
    sha, good = record.commits[position].sha, record.commits[0].sha
    started = time.monotonic()
    target = record.target
    suite = replace(request.compare.suite, models=",".join(target.models)) if target.models else request.compare.suite
    # A kernel's verdict comes from the kernel rounds alone: the models are compiled (the kernels come from there),
    # not timed, and the step's report says so.
    common = replace(request.compare, run_id=run_id, suite=suite, pytorch_src=request.pytorch_src,
                     time_models=target.kind != KERNEL)
    if request.triton:  # one PyTorch (compare.base), the good Triton against the step's
        compare = replace(common, recipe=_builder(request), triton_base=good, triton_pr=sha)
    else:
        compare = replace(common, base=good, pr=sha)
    try:
        compare = _buildable(compare, request.docker_recipe, console)
    except NoSpaceLeft:
        raise
    except UserError as exc:
        return Step(position, sha, SKIPPED, note=f"cannot be built: {exc}", seconds=time.monotonic() - started)
    _good_side_from_earlier_steps(request.compare.runs_dir, run_id, record, console)
    rounds = compare.rounds
    while True:
        try:
            _, paths = run_compare(replace(compare, rounds=rounds), console)
        except StageFailed as exc:  # e.g. the suite cannot compile at this commit; not a full disk (NoSpaceLeft):
            # that is the machine's, and stops the bisect (which resumes once there is room)
            return Step(position, sha, SKIPPED, note=f"did not run: {exc}", run=run_id,
                        seconds=time.monotonic() - started)
        found = read_target_verdict(Path(paths.out_dir), target)
        if found is None:
            return Step(position, sha, SKIPPED, note=f"{target.describe()} is not in the step's report", run=run_id,
                        seconds=time.monotonic() - started)
        outcome = outcome_of(found.verdict)
        if outcome is None:
            return Step(position, sha, SKIPPED, note=f"{target.describe()}: {found.verdict}", run=run_id,
                        seconds=time.monotonic() - started)
        more = _more_rounds(rounds, found.rounds, request.max_rounds)
        if outcome != UNDECIDED or more is None:
            break
        console.print(f"{target.describe()} inconclusive after {found.rounds} round(s): resumed with {more}",
                      markup=False, highlight=False)
        rounds = more
    note = (f"inconclusive after {found.rounds} round(s) (--max-rounds {request.max_rounds})"
            if outcome == UNDECIDED else "")
    return Step(position, sha, outcome, verdict=found.verdict, speedup=found.speedup, ci_low=found.ci_low,
                ci_high=found.ci_high, rounds=found.rounds, seconds=time.monotonic() - started, run=run_id,
                note=note)


def _good_side_from_earlier_steps(runs_dir: Path, run_id: str, record: BisectRecord, console: Console) -> None:
    """A step's new run starts with the base side (the good endpoint, the same in every step) of the last step
    whose run is there: its finished stages are skipped as done when this step gives them the same inputs, as
    the same settings do, and run again when it does not (a step built with the Docker recipe instead)."""
    store = RunStore(runs_dir)
    earlier = [step.run for step in reversed(record.steps) if step.run and (store.root / step.run / MANIFEST).is_file()]
    if not earlier:
        return
    taken = store.seed_side(run_id, SIDES[0], store.open(earlier[0]), __version__)
    if taken:
        console.print(f"{SIDES[0]}: {len(taken)} finished stage(s) taken from run {earlier[0]} (the same good "
                      "commit); those given the same inputs here are skipped", markup=False, highlight=False)


def _more_rounds(asked: int | None, ran: int, most: int) -> int | None:
    """The rounds of the next attempt at an inconclusive step (twice those that ran, at most ``most``), or None."""
    done = max(asked or 0, ran)
    return min(2 * done, most) if done < most else None


def _builder(request: BisectRequest) -> Recipe:
    """The recipe whose images the steps build: the request's own, or the Docker recipe for what an overlay of a
    local recipe cannot make (`_buildable`)."""
    if request.compare.recipe.is_docker or request.docker_recipe is None:
        return request.compare.recipe
    return request.docker_recipe


def _buildable(compare: CompareRequest, docker_recipe: Recipe | None, console: Console) -> CompareRequest:
    """The step's request with the cheapest recipe that can make both commits: the request's own, or (a local
    recipe whose overlay is refused, e.g. compiled code changed) the Docker recipe. Raises what planning says."""
    # The Triton flags are the Docker recipe's: the installed torch brings its own Triton.
    own = compare if compare.recipe.is_docker else replace(compare, triton_src=None, triton_ref=None)
    try:
        plan(own)
        return own
    except NoSpaceLeft:
        raise
    except UserError as exc:
        if docker_recipe is None or compare.recipe.is_docker:
            raise
        console.print(f"{compare.pr[:12]}: {exc}; built with recipe {docker_recipe.name}", markup=False,
                      highlight=False)
    with_docker = replace(compare, recipe=docker_recipe)
    plan(with_docker)
    return with_docker
