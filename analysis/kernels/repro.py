"""The layout of an ``invoke repro`` folder, and what it is made from (torch-free).

A repro folder holds one kernel pair of a finished comparison so it runs anywhere torch runs, outside prbench::

    README.md             the one command, the pair, the environment it was measured in
    run.py                times base and PR interleaved (A B B A) and checks their outputs against each other
    prbench_timer.py      the kernel stage's own timers, generated from its source (``prbench.commands.repro``)
    environment.json      the run's environment facts (lock.json's sides, the manifest's settings)
    base/, pr/            per side: kernel.py (the module run.py imports), the organized kernel file as it was,
                          launch.pt (the recorded arguments, ``torch.load``-able) and launch.json (what they are)

The pair is found as the report finds it: both sides' ``kernels.csv`` paired by identity
(`analysis.kernels.compare.pair_kernels`), the name matched on either side.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.rendering import md_code, md_text
from foundation.errors import UserError
from foundation.formats.run_layout import SIDES, RunLayout
from foundation.records import read_json

FORMAT_VERSION = 1
MODULE_FILE = "kernel.py"
LAUNCH_PT = "launch.pt"
LAUNCH_JSON = "launch.json"
TIMER_MODULE = "prbench_timer.py"
RUN_SCRIPT = "run.py"
ENVIRONMENT_FILE = "environment.json"


@dataclass(frozen=True)
class SideKernel:
    name: str
    path: str  # relative to the side's organized/
    graph: str  # C++: the graph module that launches it, relative to organized/ ("" for Triton)
    backend: str


@dataclass(frozen=True)
class ReproPair:
    base: SideKernel
    pr: SideKernel
    matched_by: str

    def side(self, name: str) -> SideKernel:
        return self.base if name == "base" else self.pr


def launch_record(kernel: str, backend: str, args: list[dict[str, Any]], written: list[int]) -> dict[str, Any]:
    """``launch.json``: the kernel's arguments (shape, stride, dtype, offset; scalars by value) and which it writes."""
    return {"format_version": FORMAT_VERSION, "kernel": kernel, "backend": backend, "args": args, "written": written}


def _side_kernel(row: dict[str, Any]) -> SideKernel:
    path = str(row["path"])
    backend = "cpp" if path.endswith(".cpp") else "triton"
    graph = ""
    if backend == "cpp":
        graphs = str(row.get("graphs") or "")
        if not graphs:
            raise UserError(f"kernels.csv: the C++ kernel {row['kernel_name']} names no graph module that launches it")
        graph = f"graphs/{graphs.split(';')[0].rsplit('/', 1)[-1]}.py"  # as the kernel stage's plan_jobs picks it
    return SideKernel(str(row["kernel_name"]), path, graph, backend)


def find_pair(run_dir: Path, name: str) -> ReproPair:
    """The base/PR pair a kernel of this name (on either side) belongs to in the run."""
    # pandas, imported here: ``invoke`` loads this module with its commands, and every command would pay for it.
    from analysis.kernels.compare import pair_kernels, read_kernels_csv

    frames = []
    for side in SIDES:
        path = RunLayout(run_dir).variant(side).kernels_csv
        if not path.is_file():
            raise UserError(f"{path}: not found (--run must name a finished comparison run)")
        frames.append(read_kernels_csv(path))
    base, pr = frames
    pairing = pair_kernels(base, pr)
    for b, p, how in pairing.pairs.itertuples(index=False):
        if name in (base.at[b, "kernel_name"], pr.at[p, "kernel_name"]):
            return ReproPair(_side_kernel(base.loc[b].to_dict()), _side_kernel(pr.loc[p].to_dict()), str(how))
    if (base["kernel_name"] == name).any() or (pr["kernel_name"] == name).any():
        raise UserError(f"--kernel {name}: the kernel is on one side only (no partner to time it against)")
    raise UserError(f"--kernel {name}: no kernel of this name in the run (see report/kernels_compare.csv)")


def environment_facts(run_dir: Path) -> dict[str, Any]:
    """What the run was measured on and with: lock.json's sides and nodes, the manifest's run id and settings."""
    layout = RunLayout(run_dir)
    lock = read_json(layout.lock, "a JSON object") if layout.lock.is_file() else {}
    manifest = read_json(layout.manifest, "a JSON object") if layout.manifest.is_file() else {}
    if not isinstance(lock, dict) or not isinstance(manifest, dict):
        raise UserError(f"{run_dir}: lock.json and manifest.json must each be a JSON object")
    settings = manifest.get("settings")
    settings = settings if isinstance(settings, dict) else {}
    return {"format_version": FORMAT_VERSION, "run_id": manifest.get("run_id", run_dir.name),
            "settings": {k: settings.get(k) for k in ("base", "pr", "recipe", "installed_commit", "suite")},
            "lock": lock, "omp_num_threads": _threads(run_dir)}


def _threads(run_dir: Path) -> str | None:
    """The OpenMP threads the kernel stage ran with (base's stage environment): run.py runs with the same."""
    path = RunLayout(run_dir).variant("base").env_json
    env = read_json(path, "a JSON object") if path.is_file() else {}
    stage_env = env.get("stage_env") if isinstance(env, dict) else None
    threads = stage_env.get("OMP_NUM_THREADS") if isinstance(stage_env, dict) else None
    return str(threads) if threads is not None else None


def _environment_lines(facts: dict[str, Any]) -> list[str]:
    lines = []
    for side in SIDES:
        entry = facts["lock"].get(side) if isinstance(facts.get("lock"), dict) else None
        env = entry.get("environment") if isinstance(entry, dict) else None
        if isinstance(env, dict):
            shown = ", ".join(f"{k} {env[k]}" for k in ("torch", "torch_git", "triton", "python", "cpu", "gpu")
                              if env.get(k))
            lines.append(f"- {side}: {md_text(shown)}")
    return lines or ["- (the run has no lock.json)"]


def readme_text(pair: ReproPair, facts: dict[str, Any], kernel_times: dict[str, str]) -> str:
    """The folder's README: the command first, then what it is and where it came from."""
    needs = ("torch with a C++ compiler (as `torch.compile` on a CPU needs)" if pair.base.backend == "cpp"
             else "torch and Triton, on a GPU")
    title = md_text(pair.base.name if pair.base.name == pair.pr.name else f"{pair.base.name} → {pair.pr.name}")
    settings = facts.get("settings", {})
    return "\n".join([
        f"# Kernel repro: {title}",
        "",
        "```bash",
        "python run.py",
        "```",
        "",
        "Times the base and the PR kernel interleaved (A B B A, then B A A B; `--rounds` blocks, one warm-up visit "
        "first) with the same timer prbench's kernel stage used, then runs both once on base's recorded launch "
        "(each on its own when their arguments differ) and checks the tensors they write against each other. "
        f"Needs only {needs}; `python run.py --help` lists the options.",
        "",
        f"From run {md_code(facts.get('run_id'))} (PR {md_code(settings.get('pr'))} against "
        f"{md_code(settings.get('base'))}, recipe {md_code(settings.get('recipe'))}); paired by "
        f"{md_code(pair.matched_by)}. The run measured: "
        + "; ".join(f"{side} {time}" for side, time in kernel_times.items()) + ".",
        "",
        "Measured in:",
        "",
        *_environment_lines(facts),
        "",
        "| file | what it is |",
        "|---|---|",
        "| `base/kernel.py`, `pr/kernel.py` | the module run.py imports: "
        + ("the C++ source the graph module embeds, compiled by torch's own `cpp_pybinding`"
           if pair.base.backend == "cpp" else "Inductor's kernel file (`get_args()`, `call()`)") + " |",
        f"| {md_code('base/' + Path(pair.base.path).name)}, {md_code('pr/' + Path(pair.pr.path).name)} | the organized "
        "kernel file as the run "
        "kept it |",
        "| `*/launch.pt`, `*/launch.json` | the recorded arguments (seeded values); their shapes, strides, dtypes |",
        "| `prbench_timer.py` | the kernel stage's timers, copied from prbench's source when this folder was made |",
        "| `environment.json` | the run's lock (both sides' torch, Triton, Python, machine) and settings |",
        "",
    ])
