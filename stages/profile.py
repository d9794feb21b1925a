"""Stage ``profile``: torch.profiler traces of the suite models, and ``-p`` runs of the compiled graph modules.

    python -m stages.profile --suite-csv suite/suite.csv --out profiles/ [--models A,B] [--steps 3]
        [--warmup 3] [--device cpu|cuda] [--graphs organized/graphs --inductor-cache DIR]

For each model with status ``ok`` in the suite CSV (same size, mode and dtype as the suite ran it): build it
(``stages.support.hf_models``), compile it with Inductor, warm up *outside* the profiler (compilation and autotuning
must not be in the trace), then profile ``--steps`` steps, each closed by ``prof.step()`` so the trace has
``ProfilerStep#N`` windows, and export ``<out>/<model>.json.gz``. Profiling runs separately from the timed
suite because the profiler adds overhead.

On CPU ``cpp.enable_kernel_profile`` is turned on so every Inductor C++ kernel (``cpp_fused_*``) appears as a
named cpu_op in the trace; without it kernel time hides inside the compiled graph call.

With ``--graphs``, each compiled graph module ``<name>.py`` is run as ``python <name>.py -p``; its stdout goes
to ``<out>/graphs/<name>.profile.txt`` and the Chrome trace it writes to ``$TMPDIR`` to
``<out>/graphs/<name>.profile.json.gz``. ``<out>/profile_index.csv`` lists every item with its status.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from foundation.atomic_io import atomic_path, write_bytes, write_text
from foundation.errors import UserError
from foundation.formats.dynamo_csv import read_suite_csv
from foundation.formats.run_layout import GRAPHS_DIR, PROFILE_INDEX
from stages.entry import StageArgumentParser, run_as_script

GRAPH_TIMEOUT_S = 600
PROFILE_JSON = "compiled_module_profile.json"  # the fixed name Inductor's -p writes under $TMPDIR


@dataclass
class Item:
    kind: str  # model | graph
    name: str
    status: str
    path: str
    error: str = ""


@dataclass(frozen=True)
class SuiteRow:
    name: str
    size: str
    mode: str
    dtype: str


def read_suite_rows(path: Path, only: list[str] | None) -> list[SuiteRow]:
    """The ok models of a suite.csv (those in ``only`` when given); a bad file or name is a UserError."""
    picked = []
    for row in read_suite_csv(path):
        if row["status"] != "ok" or (only and row["name"] not in only):
            continue
        picked.append(SuiteRow(row["name"], row["size"] or "tiny", row["mode"] or "inference",
                               row["dtype"] or "float32"))
    missing = sorted(set(only or []) - {r.name for r in picked})
    if missing:
        raise UserError(f"--models: {', '.join(missing)} not ok in {path}")
    return picked


def profile_model(row: SuiteRow, out: Path, device: str, steps: int, warmup: int) -> Path:
    import torch

    from stages.suite import dtype_and_autocast, timed_step
    from stages.support import hf_models

    weights_dtype, _ = dtype_and_autocast(row.dtype, device)
    built = hf_models.build(row.name, size=row.size, mode=row.mode, dtype=weights_dtype, device=device)
    compiled = timed_step(built.model, row.mode, row.dtype, device, "inductor").compiled  # the step the suite timed

    def step() -> None:
        compiled(built.model, built.inputs)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    for _ in range(warmup):
        step()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    # A schedule is what makes prof.step() record ProfilerStep#N windows; its one warm-up step lets the
    # profiler itself settle before the recorded steps.
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=steps, repeat=1)
    with torch.profiler.profile(activities=activities, record_shapes=True, schedule=schedule) as prof:
        for _ in range(steps + 1):
            step()
            prof.step()
    target = out / f"{row.name}.json.gz"
    # export_chrome_trace gzips only when the name ends in .gz, so the temporary name keeps that suffix.
    tmp = out / f".{row.name}.{os.getpid()}.json.gz"
    try:
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def run_graph(graph: Path, out: Path, tmpdir: Path, cache: Path | None, times: int, repeat: int) -> Item:
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONUNBUFFERED="1")
    if cache is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    trace = tmpdir / PROFILE_JSON
    trace.unlink(missing_ok=True)
    text_path = out / f"{graph.stem}.profile.txt"
    try:
        proc = subprocess.run([sys.executable, str(graph), "-p", "--times", str(times), "--repeat", str(repeat)],
                              env=env, capture_output=True, text=True, errors="replace", timeout=GRAPH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Item("graph", graph.stem, "fail", "", f"timed out after {GRAPH_TIMEOUT_S}s")
    write_text(text_path, proc.stdout + (("\n# stderr\n" + proc.stderr) if proc.stderr.strip() else ""))
    if trace.exists():
        write_bytes(out / f"{graph.stem}.profile.json.gz", gzip.compress(trace.read_bytes()))
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Item("graph", graph.stem, "fail", text_path.name, f"exit {proc.returncode}: {last}")
    return Item("graph", graph.stem, "ok", f"{GRAPHS_DIR}/{text_path.name}")


def write_index(out: Path, items: list[Item]) -> None:
    with atomic_path(out / PROFILE_INDEX) as tmp, open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["kind", "name", "status", "path", "error"])
        for it in items:
            writer.writerow([it.kind, it.name, it.status, it.path, it.error])


def build_parser() -> argparse.ArgumentParser:
    parser = StageArgumentParser(prog="python -m stages.profile", description=__doc__.splitlines()[0])
    parser.add_argument("--suite-csv", required=True, type=Path, help="suite.csv: models with status ok")
    parser.add_argument("--out", required=True, type=Path, help="output directory for traces and -p output")
    parser.add_argument("--models", default="", help="comma list of models (default: all ok models)")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps per model")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up calls before profiling")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--graphs", type=Path, default=None, help="directory of compiled graph modules (*.py)")
    parser.add_argument("--inductor-cache", type=Path, default=None, help="TORCHINDUCTOR_CACHE_DIR for graphs")
    parser.add_argument("--times", type=int, default=10, help="-p: calls per repeat")
    parser.add_argument("--repeat", type=int, default=10, help="-p: repeats")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 1:
        parser.error("--steps and --warmup must be at least 1 (never profile the compiling call)")
    if not args.suite_csv.is_file():
        parser.error(f"--suite-csv {args.suite_csv}: no such file")
    if args.graphs is not None and not args.graphs.is_dir():
        parser.error(f"--graphs {args.graphs}: no such directory")

    only = [m.strip() for m in args.models.split(",") if m.strip()]
    rows = read_suite_rows(args.suite_csv, only)  # before anything is imported or written

    from stages.support.environment import lend_precompiled_headers, prepare_inductor

    prepare_inductor()
    import torch
    import torch._inductor.config as inductor_config

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        inductor_config.cpp.enable_kernel_profile = True
    args.out.mkdir(parents=True, exist_ok=True)
    items: list[Item] = []
    for row in rows:
        print(f"profile: {row.name} ({row.size}, {row.mode}, {row.dtype}, {device})", flush=True)
        try:
            path = profile_model(row, args.out, device, args.steps, args.warmup)
            items.append(Item("model", row.name, "ok", path.name))
        except Exception as exc:  # one failing model must not lose the others' profiles
            message = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            print(f"profile: {row.name} failed: {message}", flush=True)
            items.append(Item("model", row.name, "fail", "", message))
    if args.graphs is not None:
        graphs_out = args.out / GRAPHS_DIR
        graphs_out.mkdir(parents=True, exist_ok=True)
        tmpdir = Path(tempfile.mkdtemp(prefix=".tmp-", dir=graphs_out))
        try:
            lend_precompiled_headers(tmpdir)  # else every stage's first -p run builds one again (~6 s)
            for graph in sorted(args.graphs.glob("*.py")):
                print(f"profile: graph {graph.name} -p", flush=True)
                item = run_graph(graph, graphs_out, tmpdir, args.inductor_cache, args.times, args.repeat)
                if item.status != "ok":
                    print(f"profile: graph {graph.name} failed: {item.error}", flush=True)
                items.append(item)
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
    write_index(args.out, items)
    failed = [it for it in items if it.status != "ok"]
    print(f"profile: {len(items) - len(failed)} ok, {len(failed)} failed → {args.out}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    run_as_script(main)
