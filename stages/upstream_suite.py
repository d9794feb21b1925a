"""Stage ``upstream_suite``: run PyTorch's own ``benchmarks/dynamo`` HF harness and ingest its CSV.

    python -m stages.upstream_suite --pytorch-src DIR --out SUITE_DIR --cache-archive PATH
        [--models A,B|all|tiny-default] [--mode inference|training] [--dtype float32|bfloat16|float16|amp]
        [--device cuda|cpu] [--use-runner] [--timeout S]

Where an environment has a PyTorch source tree (the Docker images build one), the seed workflow runs
``benchmarks/dynamo/huggingface.py --performance ...`` per model, or ``runner.py --suites huggingface ...``
as its run_hf.sh does (``--use-runner``). This stage builds those command lines exactly and runs them with
cwd = the source tree and the environment the runner gave the stage (the variant's caches and knobs). The
harness's CSV is kept in ``<out>/upstream/`` and ingested into ``<out>/suite.csv`` (``foundation.formats.dynamo_csv``)
after every model, with ``samples.json`` = ``{}`` (the harness keeps no per-iteration samples) and
``graph_models.json`` = the compiled graph modules that appeared in the Inductor cache while each model ran
(``{}`` for ``--use-runner``, which runs the whole suite in one go). A model the harness wrote no row for
(crash, timeout) gets a ``fail`` row too. The Inductor cache is then archived to ``--cache-archive``.

Like ``stages.suite`` it resumes: models with an ``ok`` row in the kept harness CSV are not run again, and a
fresh run (nothing to keep) starts from an empty Inductor cache. It exits non-zero when every model failed.

Importing ``huggingface.py`` evaluates ``AutoConfig.from_pretrained`` for its extra models (t5-small,
distilgpt2, ...): before the first command the stage writes those configs from the environment's transformers
into ``<variant>/work/hf-home`` and runs the harness against it offline (``stages.harness_configs``), so no
command needs the Hub. The variant's Inductor config overrides (``PRBENCH_INDUCTOR_CONFIG``) are read by our
stages only, not by the harness.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from foundation import atomic_io
from foundation.errors import UserError
from foundation.formats.cache_archive import archive_cache, is_graph_module
from foundation.formats.dynamo_csv import (
    DYNAMO_COLUMNS,
    STATUS_OK,
    DynamoCsvError,
    Row,
    ingest_dynamo_rows,
    parse_dynamo_csv,
    read_graph_models,
    read_kept,
    write_suite_csv,
)
from foundation.formats.run_layout import GRAPH_MODELS, SUITE_CSV, SUITE_SAMPLES, WORK_DIR, VariantLayout
from foundation.formats.suite_options import TINY_DEFAULT
from foundation.formats.suite_request import HF_SCRIPT, split_models
from stages.entry import StageArgumentParser, run_as_script
from stages.harness_configs import prepare_offline_hub
from stages.suite import empty_directory
from stages.support.environment import INDUCTOR_CONFIG_ENV
from stages.support.progress import progress

RUNNER_SCRIPT = Path("benchmarks/dynamo/runner.py")
MODEL_LIST = Path("benchmarks/dynamo/huggingface_models_list.txt")  # "Name,batch_size" lines
COMPILER = "inductor_no_cudagraphs"  # the seed's choice: Inductor without CUDA graphs
DTYPE_FLAGS = {"float32": "--float32", "bfloat16": "--bfloat16", "float16": "--float16", "amp": "--amp"}
MODES = ("inference", "training")
DEVICES = ("cuda", "cpu")
STAGE = "upstream"  # the name in its progress lines
PREFIX = f"[{STAGE}]"
RUNNER_LABEL = "runner.py (the whole HF suite)"


@dataclass(frozen=True)
class UpstreamCommand:
    argv: list[str]
    cwd: Path
    model: str | None  # the ``--only`` model; None for runner.py


@dataclass(frozen=True)
class UpstreamPlan:
    commands: list[UpstreamCommand]
    output_csv: Path  # the performance CSV the commands write
    mode: str
    dtype: str
    device: str


# --- the exact command lines -----------------------------------------------------------------------------


def _check(mode: str, dtype: str) -> None:
    if mode not in MODES:
        raise UserError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    if dtype not in DTYPE_FLAGS:
        raise UserError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPE_FLAGS)}")


def huggingface_argv(model: str, *, mode: str, dtype: str, device: str, output_csv: Path,
                     python: str = "python") -> list[str]:
    """One model through ``huggingface.py --performance`` (appends its row to ``output_csv``)."""
    _check(mode, dtype)
    return [
        python, str(HF_SCRIPT), "--performance", f"--{mode}", DTYPE_FLAGS[dtype], "--inductor",
        "--disable-cudagraphs", "-d", device, f"--output={output_csv}", "--only", model,
    ]


def runner_csv_name(mode: str, dtype: str, device: str) -> str:
    """runner.py's ``{compiler}_{suite}_{dtype}_{mode}_{device}_{testing}.csv``."""
    return f"{COMPILER}_huggingface_{dtype}_{mode}_{device}_performance.csv"


def runner_argv(*, mode: str, dtype: str, device: str, output_dir: Path, python: str = "python") -> list[str]:
    """The whole HF suite through ``runner.py`` (performance and accuracy passes), as run_hf.sh does."""
    _check(mode, dtype)
    return [
        python, str(RUNNER_SCRIPT), "--suites", "huggingface", f"--{mode}", "--compilers", COMPILER,
        "--dtypes", dtype, "--devices", device, "--no-gh-comment", "--output-dir", str(output_dir),
    ]


# --- which models --------------------------------------------------------------------------------------


def tree_models(pytorch_src: Path) -> list[str] | None:
    """The models the tree's harness knows (its huggingface_models_list.txt), or None when it has no list."""
    path = pytorch_src / MODEL_LIST
    if not path.is_file():
        return None
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.split(",", 1)[0].strip() for line in lines if line.strip() and not line.startswith("#")]


def resolve_models(selection: str, pytorch_src: Path, use_runner: bool) -> list[str]:
    """The models to run, checked against the tree's list (the harness silently runs nothing for a typo)."""
    names = split_models(selection)
    known = tree_models(pytorch_src)
    if use_runner:
        if names != ["all"]:
            raise UserError("--use-runner: runner.py runs the whole HF suite; give --models all "
                            "(or drop --use-runner to run named models)")
        return known or []
    if names == ["all"]:
        if known is None:
            raise UserError(f"--models all: no {MODEL_LIST} in --pytorch-src {pytorch_src}; name the models")
        return known
    if names == ["tiny-default"]:
        # The builtin suite's default selection, by the same class-style names, at the harness's full size.
        names = list(TINY_DEFAULT)
    unknown = [n for n in names if known is not None and n not in known]
    if unknown:
        raise UserError(f"--models: unknown model '{unknown[0]}' (not in {MODEL_LIST} of --pytorch-src)")
    return names


def plan_upstream_suite(
    pytorch_src: Path,
    out_dir: Path,
    *,
    models: list[str],
    mode: str,
    dtype: str,
    device: str = "cuda",
    use_runner: bool = False,
    python: str = "python",
) -> UpstreamPlan:
    """The commands for one variant; ``out_dir/upstream`` receives the harness's CSV (and runner.py's logs)."""
    if not (pytorch_src / HF_SCRIPT).is_file():
        raise UserError(f"--pytorch-src {pytorch_src}: no {HF_SCRIPT} there (a PyTorch source tree is needed)")
    output_dir = out_dir / "upstream"
    output_csv = output_dir / runner_csv_name(mode, dtype, device)  # one name for both forms
    if use_runner:
        if not (pytorch_src / RUNNER_SCRIPT).is_file():
            raise UserError(f"--use-runner: no {RUNNER_SCRIPT} in --pytorch-src {pytorch_src}")
        argv = runner_argv(mode=mode, dtype=dtype, device=device, output_dir=output_dir, python=python)
        return UpstreamPlan([UpstreamCommand(argv, pytorch_src, None)], output_csv, mode, dtype, device)
    if not models:
        raise UserError("--models: the huggingface.py form runs named models; give at least one")
    commands = [
        UpstreamCommand(huggingface_argv(m, mode=mode, dtype=dtype, device=device, output_csv=output_csv,
                                         python=python), pytorch_src, m)
        for m in models
    ]
    return UpstreamPlan(commands, output_csv, mode, dtype, device)


# --- running and ingesting -----------------------------------------------------------------------------


def say(text: str) -> None:
    print(f"{PREFIX} {text}", flush=True)


def harness_rows(plan: UpstreamPlan) -> dict[str, Row]:
    """What the harness wrote so far, in our schema, by model name (empty before its first row)."""
    if not plan.output_csv.exists():
        return {}
    text = plan.output_csv.read_text(encoding="utf-8")
    try:
        raw = parse_dynamo_csv(text, origin=str(plan.output_csv))
    except DynamoCsvError as exc:
        raise UserError(str(exc)) from None
    rows = ingest_dynamo_rows(raw, mode=plan.mode, dtype=plan.dtype, size="full")
    return {row["name"]: row for row in rows if row["dev"] == plan.device}


def missing_row(plan: UpstreamPlan, name: str, why: str) -> Row:
    """A model the harness wrote no row for: upstream's failure row (``dev,name,0,0.0,0.0`` padded) + why."""
    raw = dict.fromkeys(DYNAMO_COLUMNS, "0") | {"dev": plan.device, "name": name, "speedup": "0.0",
                                                  "abs_latency": "0.0"}
    row = ingest_dynamo_rows([raw], mode=plan.mode, dtype=plan.dtype, size="full")[0]
    row["error"] = why
    return row


def run_command(command: UpstreamCommand, timeout_s: float | None) -> str | None:
    """Run one harness command; return why it produced no result (None when it exited 0).

    Not a new session: an interrupt of the stage's process group reaches the harness too, and the runner's
    clean-up of that group takes the harness's workers with it.
    """
    try:
        code = subprocess.run(command.argv, cwd=command.cwd, check=False, timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout_s:g} s (the harness was stopped; see the stage log)"
    except OSError as exc:
        raise UserError(f"cannot start {command.argv[0]} in {command.cwd} ({exc.strerror})") from None
    return None if code == 0 else f"the harness exited with code {code} and wrote no row; see the stage log"


def python_files(cache_dir: Path) -> set[Path]:
    return set(cache_dir.rglob("*.py")) if cache_dir.is_dir() else set()


def new_graph_modules(cache_dir: Path, before: set[Path]) -> list[str]:
    """Stems of compiled graph modules written since ``before`` (a model's graphs, cache hits excepted)."""
    return sorted(p.stem for p in python_files(cache_dir) - before if is_graph_module(p))


def describe(row: Row) -> str:
    if row["status"] != STATUS_OK:
        return f"fail {row['error']}"
    # Older harnesses write fewer columns: say only what the row has.
    parts = [f"{label} {float(row[col]):{spec}}{unit}" for label, col, spec, unit in (
        ("speedup", "speedup", ".2f", "x"), ("latency", "abs_latency", ".3f", " ms"),
        ("compile", "compilation_latency", ".1f", " s")) if row[col]]
    return "ok " + ", ".join(parts)


class SuiteFiles:
    """suite.csv, samples.json and graph_models.json in ``out``, rewritten (atomically) after every model."""

    def __init__(self, out: Path, graph_models: dict[str, list[str]]) -> None:
        self.out = out
        self.graph_models = graph_models

    def write(self, rows: list[Row]) -> None:
        atomic_io.write_json(self.out / SUITE_SAMPLES, {})  # the harness keeps no per-iteration samples
        atomic_io.write_json(self.out / GRAPH_MODELS, self.graph_models)
        write_suite_csv(self.out / SUITE_CSV, rows)

    def add_graphs(self, model: str, stems: list[str]) -> None:
        for stem in stems:
            self.graph_models.setdefault(stem, [])
            if model not in self.graph_models[stem]:
                self.graph_models[stem].append(model)


def start(plan: UpstreamPlan, out: Path, models: list[str], cache_dir: Path) -> tuple[set[str], SuiteFiles]:
    """Keep the models the harness already ran ok; a fresh run empties the cache and the old harness CSV."""
    kept = {name for name, row in harness_rows(plan).items() if name in models and row["status"] == STATUS_OK}
    graphs_path = out / GRAPH_MODELS
    graph_models = (read_kept(graphs_path, read_graph_models) or {}) if kept else {}
    if not kept:
        plan.output_csv.unlink(missing_ok=True)  # stale failure rows would otherwise outlive this run
        empty_directory(cache_dir)
    plan.output_csv.parent.mkdir(parents=True, exist_ok=True)
    return kept, SuiteFiles(out, graph_models)


def run_models(plan: UpstreamPlan, out: Path, models: list[str], cache_dir: Path,
               timeout_s: float | None) -> list[Row]:
    """The huggingface.py form: one ``--only`` command per model, suite.csv rewritten after each."""
    kept, files = start(plan, out, models, cache_dir)
    problems: dict[str, str] = {}
    total = len(plan.commands)

    def current() -> list[Row]:
        found = harness_rows(plan)
        return [found.get(m) or missing_row(plan, m, problems.get(m, "not run")) for m in models
                if m in found or m in problems]

    for index, command in enumerate(plan.commands, 1):
        name = command.model or ""
        if name in kept:
            progress(STAGE, index, total, f"{name}: done earlier, kept")
            continue
        progress(STAGE, index, total, f"{name}: start")
        before = python_files(cache_dir)
        why = run_command(command, timeout_s)
        problems[name] = why or "the harness exited 0 but wrote no row for it"
        files.add_graphs(name, new_graph_modules(cache_dir, before))
        rows = current()
        files.write(rows)
        progress(STAGE, index, total, f"{name}: {describe(next(r for r in rows if r['name'] == name))}")
    return current()


def run_whole_suite(plan: UpstreamPlan, out: Path, cache_dir: Path, timeout_s: float | None) -> list[Row]:
    """The runner.py form: one command for the whole suite, then one line per model it reported."""
    _, files = start(plan, out, [], cache_dir)  # runner.py reruns everything: always a fresh run
    progress(STAGE, 1, 1, f"{RUNNER_LABEL}: start")
    why = run_command(plan.commands[0], timeout_s)
    rows = list(harness_rows(plan).values())
    if not rows:
        raise UserError(f"{plan.output_csv}: runner.py wrote no performance CSV ({why or 'exit code 0'})")
    files.write(rows)
    for index, row in enumerate(rows, 1):
        progress(STAGE, index, len(rows), f"{row['name']}: {describe(row)}")
    return rows


# --- the command line ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = StageArgumentParser(prog="python -m stages.upstream_suite", description=__doc__.split("\n")[0])
    p.add_argument("--pytorch-src", required=True, type=Path,
                   help="PyTorch source tree with benchmarks/dynamo (as this environment sees it)")
    p.add_argument("--out", required=True, type=Path, help="directory for suite.csv, samples.json, graph_models.json")
    p.add_argument("--models", default="all",
                   help="A,B,... (the harness's names) | all (its huggingface_models_list.txt) | tiny-default")
    p.add_argument("--mode", default="inference", choices=MODES)
    p.add_argument("--dtype", default="float32", choices=tuple(DTYPE_FLAGS))
    p.add_argument("--device", default="cuda", choices=DEVICES)
    p.add_argument("--use-runner", action="store_true",
                   help="run the whole suite through runner.py as run_hf.sh does (needs --models all)")
    p.add_argument("--cache-archive", required=True, type=Path, help="tar.gz to write the Inductor cache to")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds one harness command may run (per model; the whole suite with --use-runner)")
    return p


def cache_directory(out: Path) -> Path:
    """The harness inherits TORCHINDUCTOR_CACHE_DIR; never let it fall back to the shared /tmp default."""
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(VariantLayout(out.resolve().parent).inductor_cache)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    return Path(cache)


def offline_configs(out: Path, pytorch_src: Path) -> None:
    """The HF configs the harness loads at import, in the variant's work directory, and the harness offline."""
    hub = prepare_offline_hub(out.resolve().parent / WORK_DIR / "hf-home", pytorch_src / HF_SCRIPT)
    if hub is None:
        return
    say(f"HF configs for the harness (offline, transformers {hub.transformers_version}): "
        f"{', '.join(hub.written) or 'none'} -> {hub.hf_home}")
    if hub.unknown:
        say(f"note: no offline config for {', '.join(hub.unknown)}; the harness cannot load "
            f"{'it' if len(hub.unknown) == 1 else 'them'} without the Hub")


def run(args: argparse.Namespace) -> int:
    src = args.pytorch_src
    if args.timeout is not None and args.timeout <= 0:
        raise UserError(f"--timeout {args.timeout:g}: expected a positive number of seconds")
    if not (src / HF_SCRIPT).is_file():
        raise UserError(f"--pytorch-src {src}: no {HF_SCRIPT} there (a PyTorch source tree is needed)")
    models = resolve_models(args.models, src, args.use_runner)
    plan = plan_upstream_suite(src.resolve(), args.out.resolve(), models=models, mode=args.mode,
                               dtype=args.dtype, device=args.device, use_runner=args.use_runner,
                               python=sys.executable)
    cache_dir = cache_directory(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    what = RUNNER_LABEL if args.use_runner else f"{len(models)} models"
    say(f"{what}, mode {args.mode}, dtype {args.dtype}, device {args.device}, tree {src}, cache {cache_dir}")
    if os.environ.get(INDUCTOR_CONFIG_ENV):
        say(f"note: the harness does not read {INDUCTOR_CONFIG_ENV} ({os.environ[INDUCTOR_CONFIG_ENV]})")
    offline_configs(args.out, src)
    try:
        if args.use_runner:
            rows = run_whole_suite(plan, args.out, cache_dir, args.timeout)
        else:
            rows = run_models(plan, args.out, models, cache_dir, args.timeout)
    except KeyboardInterrupt:
        say("interrupted: finished models are kept; run again to resume")
        return 130
    files, modules = archive_cache(cache_dir, args.cache_archive)
    say(f"inductor cache: {files} files, {modules} compiled graph modules -> {args.cache_archive}")
    ok = sum(1 for r in rows if r["status"] == STATUS_OK)
    say(f"{ok} ok, {len(rows) - ok} failed")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    # No prepare_inductor() here: this process only launches the harness, which is where compiles happen.
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    run_as_script(main)
