"""``invoke repro``: one kernel pair of a finished comparison as a folder that runs with torch alone.

The folder's layout is `analysis.kernels.repro`'s. Each side's launch is recorded by ``stages.repro_launch`` in
that side's environment as the run made it (its stage environment from ``env.json``, the PR's Python overlay on
``PYTHONPATH``; local-runner runs only). The timers are not rewritten for the folder: ``prbench_timer.py`` is
generated from the kernel stage's own source (`TIMER_SOURCES`), the definitions copied as they are, so the
folder times exactly as the stage that produced the report's numbers, without importing prbench.

The folder is built next to ``--out`` and moved into place only when it is complete.
"""

from __future__ import annotations

import ast
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from analysis.kernels.repro import (
    ENVIRONMENT_FILE,
    RUN_SCRIPT,
    SIDES,
    TIMER_MODULE,
    ReproPair,
    environment_facts,
    find_pair,
    readme_text,
)
from analysis.rendering import finite
from foundation.atomic_io import write_json, write_text
from foundation.errors import UserError
from foundation.formats.run_layout import RunLayout
from foundation.records import read_json
from prbench.commands.cli import holds_run, resolve_path, task, user_facing
from prbench.commands.flags import runs_dir_from
from prbench.runners import StageCommand
from prbench.stages.command_lines import repro_launch_command, run_stage

CODE_ROOT = Path(__file__).resolve().parents[1].parent
# (stage source, the top-level names taken from it): the kernel stage's timers, its C++ launch replay, and the
# timing module's silencer of the profiler's start/stop lines.
TIMER_SOURCES = (
    ("stages/kernels.py", ("L2_FLUSH_BYTES", "DeviceEventTimer", "WallTimer", "cuda_event_timer")),
    ("stages/support/cpp_replay.py", ("PROFILER_EVENT", "Launch", "_op_recording_switch", "unrecorded",
                                      "PLACEMENT_SPAN", "placed", "time_launches", "kernel_samples")),
    ("stages/support/timing.py", ("_quiet_stderr",)),
)
TIMER_IMPORTS = ("from __future__ import annotations\n\nimport contextlib\nimport functools\nimport os\nimport re\n"
                 "import time\n"
                 "from collections.abc import Callable, Iterable, Iterator\nfrom dataclasses import dataclass, field\n"
                 "from typing import Any\n")


def _defined_name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def _segment(source: str, node: ast.stmt) -> str:
    """The node's source lines, its decorators included (``ast.get_source_segment`` starts after them)."""
    decorators = node.decorator_list if isinstance(node, ast.FunctionDef | ast.ClassDef) else []
    first = min([d.lineno for d in decorators] + [node.lineno])
    return "\n".join(source.splitlines()[first - 1:node.end_lineno])


def timer_module_text(root: Path = CODE_ROOT) -> str:
    """``prbench_timer.py``: the named definitions of `TIMER_SOURCES`, copied from the stages' source."""
    parts = ['"""The timers of prbench\'s kernel stage, copied from its source when this folder was made '
             f'({", ".join(path for path, _ in TIMER_SOURCES)})."""\n', TIMER_IMPORTS]
    for rel, names in TIMER_SOURCES:
        source = (root / rel).read_text(encoding="utf-8")
        found = {_defined_name(node): node for node in ast.parse(source).body}
        for name in names:
            if name not in found:
                raise RuntimeError(f"{rel} no longer defines {name}: update prbench.commands.repro.TIMER_SOURCES")
            parts.append(f"\n# from {rel}\n{_segment(source, found[name])}\n")
    return "\n".join(parts)


def in_side_environment(run_dir: Path, side: str, command: StageCommand) -> StageCommand:
    """The command run in the side's environment as the run made it: its stage environment (``env.json``), its
    compile's Inductor cache, the PR's Python overlay first on ``PYTHONPATH``; local-runner runs only."""
    variant = RunLayout(run_dir).variant(side)
    env_json = read_json(variant.env_json, "a JSON object") if variant.env_json.is_file() else {}
    if not isinstance(env_json, dict):
        raise UserError(f"{variant.env_json}: expected a JSON object")
    if env_json.get("runner", "local") != "local":
        raise UserError(f"--run: its {side} side ran in {env_json.get('runner')}; this command runs stages with the "
                        "local runner only (runs made without Docker)")
    env = {k: str(v) for k, v in (env_json.get("stage_env") or {}).items() if k != "TMPDIR"}
    if variant.extracted_cache.is_dir():
        env["TORCHINDUCTOR_CACHE_DIR"] = str(variant.extracted_cache)  # the compile's kernels: no rebuild
    overlay = variant.overlay_shadow
    return replace(command, env={**env, **command.env},
                   python_path=[overlay] if (overlay / "torch").is_dir() else [])


def _measured(run_dir: Path, pair: ReproPair) -> dict[str, str]:
    """The run's median time of each side's kernel (kernels.csv), for the README."""
    from analysis.kernels.compare import read_kernels_csv  # pandas: not at the start of every ``invoke`` command

    times = {}
    for side in SIDES:
        frame = read_kernels_csv(RunLayout(run_dir).variant(side).kernels_csv)
        median = frame.loc[frame["path"] == pair.side(side).path, "median_ms"]
        times[side] = f"{float(median.iloc[0]):.4g} ms" if len(median) and finite(median.iloc[0]) else "not timed"
    return times


def write_repro(run_dir: Path, kernel: str, out: Path) -> Path:
    """Make the repro folder of ``kernel``'s pair at ``out``; returns it."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: already exists and is not an empty directory")
    pair = find_pair(run_dir, kernel)
    if pair.base.backend != pair.pr.backend:
        raise UserError(f"--kernel {kernel}: base is a {pair.base.backend} kernel, the PR a {pair.pr.backend} one")
    facts = environment_facts(run_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        for side in SIDES:
            kernel_of = pair.side(side)
            organized = RunLayout(run_dir).variant(side).organized
            run_stage(in_side_environment(run_dir, side, repro_launch_command(
                organized, kernel_of.name, kernel_of.path, kernel_of.graph, staging / side)))
            source = organized / pair.side(side).path
            shutil.copy2(source, staging / side / source.name)
        write_text(staging / TIMER_MODULE, timer_module_text())
        write_text(staging / RUN_SCRIPT, (CODE_ROOT / "analysis" / "templates" / "repro_run.py").read_text(
            encoding="utf-8"))
        write_json(staging / ENVIRONMENT_FILE, facts)
        write_text(staging / "README.md", readme_text(pair, facts, _measured(run_dir, pair)))
        if out.exists():
            out.rmdir()
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


@task(help={"run": "Run id of a finished comparison under the runs directory",
            "kernel": "The kernel (base or PR name) whose base/PR pair the folder holds",
            "out": "The folder to write (must not exist, or be empty)",
            "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)"})
@user_facing
@holds_run(runs_dir_from)
def repro(ctx, run, kernel, out, runs_dir=None):
    """Write one kernel pair of a run as a folder that times base vs PR and checks outputs with torch alone."""
    from prbench.runs.run_store import RunStore

    with RunStore(runs_dir_from(ctx, runs_dir)).open(run, write=True) as target:
        folder = write_repro(target.root, kernel, resolve_path(out))
    print(f"repro: {folder} (run it: cd {folder} && python run.py)")
