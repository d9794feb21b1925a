"""``invoke compare --modes A,B``: each mode a comparison of its own inside one run, then one verdict per mode.

The run directory holds ``modes/<mode>/`` (`foundation.formats.run_layout.RunLayout.mode`), each a whole run made
by `prbench.compare.driver.run_compare` with the mode's settings (`foundation.formats.modes`) over the request's:
its own suite, rounds, kernels and report, sharded and resumed exactly as a run of one mode (a second invocation
finds every finished stage in that mode's manifest and redoes nothing). The run's own manifest records the modes
(``settings.modes``) and one stage per mode (``mode/<dir>``, for ``invoke status``); its ``report/`` is the matrix
(`prbench.stages.modes_report`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rich.console import Console

from analysis.report.modes import ModesPaths
from foundation.errors import UserError
from foundation.formats.modes import Mode, check_platform
from prbench import __version__
from prbench.compare.driver import CompareRequest, check_sources, plan, run_compare
from prbench.runs.run_store import Run, RunStore
from prbench.stages.modes_report import MODES_SETTING, render_modes_report


def mode_request(request: CompareRequest, mode: Mode, run: Run) -> CompareRequest:
    """The comparison of one mode: the request with the mode's settings over it, as the run ``<run>/modes/<dir>``."""
    return replace(request, suite=mode.suite_request(request.suite),
                   inductor_config={**request.inductor_config, **mode.inductor_config},
                   env={**request.env, **mode.env}, runs_dir=run.layout.modes, run_id=mode.dir_name)


def check_modes(request: CompareRequest, modes: list[Mode]) -> None:
    """Everything a mode could get wrong, before any mode runs: the platform, the suite it asks for, and a setting
    that ``--inductor-config`` or ``--env`` (or the recipe's ``[suite.env]``) give another value."""
    check_platform(modes, request.recipe.platform)
    for mode in modes:
        if request.suite.source == "upstream" and (mode.inductor_config or mode.env):
            raise UserError(f"--modes {mode.name}: the upstream harness takes no Inductor or environment settings; "
                            "with --suite-source upstream use modes of the suite's mode and dtype only")
        for flag, given, wanted in (("--inductor-config", request.inductor_config, mode.inductor_config),
                                    ("--env", request.env, mode.env)):
            for key, value in wanted.items():
                if key in given and given[key] != value:
                    raise UserError(f"{flag} {key}={given[key]}: mode {mode.name} sets {key}={value}; drop one")
        mode.suite_request(request.suite).validate()


def run_modes(request: CompareRequest, modes: list[Mode], console: Console | None = None) -> tuple[Run, ModesPaths]:
    """Run (or resume) every mode in turn, then write the run's report; return the run and the report's paths."""
    console = console or Console()
    check_modes(request, modes)
    check_sources(request)
    plan(request)  # the refs and the patch, as each mode's compare checks them, before the run's directory exists
    settings: dict[str, Any] = {MODES_SETTING: [m.describe() for m in modes], "recipe": request.recipe.name,
                                "base": request.base, "pr": request.pr}
    with RunStore(request.runs_dir).create_or_open(request.run_id, settings, __version__) as run:
        run.retire_report()
        console.print(f"run [bold]{run.run_id}[/] in {run.root}: {len(modes)} modes, each a run under "
                      f"{run.relative(run.layout.modes)}/")
        for number, mode in enumerate(modes, start=1):
            console.rule(f"mode {number}/{len(modes)}: {mode.name}")
            with run.stage(f"mode/{mode.dir_name}", mode.describe()) as record:
                _, paths = run_compare(mode_request(request, mode, run), console)
                record.outputs = [run.relative(paths.summary_json)]
                record.summary = {"verdict": paths.verdict}
        return run, render_modes_report(run)
