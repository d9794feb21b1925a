"""Stage ``suite``: time the builtin HF suite eager vs ``torch.compile`` and write ``suite.csv``.

    python -m stages.suite --out DIR [--models A,B|all|tiny-default|harness-gpu|harness-cpu] [--size tiny|small|full]
        [--mode inference|training] [--dtype float32|bfloat16|float16|amp] [--warmup 10] [--iterations 30]
        [--device cpu|cuda|GPU index] [--cpu-backend cpp|triton] [--cache-archive PATH]
        [--platform cuda|rocm --node NAME --shard-record PATH]

Per model, as the dynamo harness does: a warm-up of each side (the first eager and first compiled calls are
timed: ``compilation_latency`` = first compiled − first eager, ``first_run_s`` = first compiled call, with the
FX-graph cache hits and misses of that compile: ``fxgraph_cache_hits``/``_misses``), then
``--iterations`` timed calls with eager and compiled interleaved (so load changes hit both sides alike). What is
compiled is the whole step function, as the runner compiles its ``model_iter_fn`` (``timed_step``): in training
the optimizer's zero grad and update are inside it (``stages.support.training``).
Outputs in ``--out``: ``suite.csv`` (docs/architecture.md columns), ``samples.json`` (raw ms per iteration) and
``outputs/<model>.npz`` (the model's eager, compiled and float64 outputs on the seeded inputs, for the numerical
A/B: ``stages.support.numerics``, ``analysis.models.numerics``). All are rewritten atomically after every model, so the
stage is resumable: models that already have an ``ok`` row with the same settings are skipped, everything else is
(re)measured. A fresh run (no row to keep yet) starts from an empty Inductor cache, and an empty Triton cache where
TRITON_CACHE_DIR is the side's own: every compile it times is cold. At the end the Inductor cache is archived to
``--cache-archive``. A model that fails gets a ``fail`` row and the others go on; the stage exits
non-zero only when none ran.

As one shard of a suite spread over an executor's devices (``prbench.stages.suite_shards``) the stage is told the
device it was placed on (``--device 0``: CUDA on that GPU only, made the one visible GPU the ``--platform`` way) and the
node's name, and writes ``--shard-record`` (``foundation.formats.suite_shard_records``) once every model was tried: then
it exits 0 even when no model ran, since the host judges the whole suite.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation import atomic_io
from foundation.errors import UserError
from foundation.formats.cache_archive import archive_cache, is_graph_module
from foundation.formats.dynamo_csv import (
    CACHE_COLUMNS,
    STATUS_FAIL,
    STATUS_OK,
    Row,
    fmt_float,
    read_graph_models,
    read_kept,
    read_suite_csv,
    read_suite_samples,
    write_suite_csv,
)
from foundation.formats.run_layout import GRAPH_MODELS, SUITE_CSV, SUITE_SAMPLES, VariantLayout
from foundation.formats.suite_options import (
    CPU_BACKENDS,
    DTYPES,
    MODES,
    SIZES,
    SuiteInputError,
    UnknownModelError,
    check_numbers,
    resolve_models,
)
from foundation.formats.suite_shard_records import ShardRecord, write_shard_record
from stages.entry import StageArgumentParser, raise_if_stopped, run_as_script
from stages.support.progress import progress

STAGE = "suite"  # the name in its progress lines
PREFIX = f"[{STAGE}]"
# Settings a kept row must match to count as done (a different setting means a different measurement).
_MATCH_COLUMNS = ("dev", "mode", "dtype", "size", "n", "warmup")


@dataclass(frozen=True)
class SuiteSettings:
    out: Path
    models: tuple[str, ...]
    size: str
    mode: str
    dtype: str
    warmup: int
    iterations: int
    device: str
    cpu_backend: str
    backend: str
    cache_archive: Path | None

    def matches(self, row: Row) -> bool:
        wanted = {"dev": self.device, "mode": self.mode, "dtype": self.dtype, "size": self.size,
                  "n": str(self.iterations), "warmup": str(self.warmup)}
        return row.get("status") == STATUS_OK and all(row.get(c) == wanted[c] for c in _MATCH_COLUMNS)


@dataclass
class ModelResult:
    row: Row
    samples: dict[str, list[float]]


def build_parser() -> argparse.ArgumentParser:
    p = StageArgumentParser(prog="python -m stages.suite", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path, help="directory for suite.csv and samples.json")
    p.add_argument("--models", default="tiny-default", help="A,B,... or a group (all, tiny-default, ...)")
    p.add_argument("--size", default="tiny", choices=SIZES)
    p.add_argument("--mode", default="inference", choices=MODES)
    p.add_argument("--dtype", default="float32", choices=DTYPES)
    p.add_argument("--warmup", type=int, default=10, help="warm-up calls per side (at least 3)")
    p.add_argument("--iterations", type=int, default=30, help="timed calls per side (at least 10)")
    p.add_argument("--device", default="cpu", type=_device_flag,
                   help="cpu, cuda, or a GPU index (an executor's placement: CUDA on that GPU only)")
    p.add_argument("--cpu-backend", default="cpp", choices=CPU_BACKENDS,
                   help="Inductor CPU codegen: C++ (default) or Triton through the interpreter (correctness only)")
    p.add_argument("--backend", default="inductor", help="torch.compile backend (aot_eager for quick debugging)")
    p.add_argument("--cache-archive", type=Path, default=None, help="tar.gz to write the Inductor cache to")
    p.add_argument("--platform", default="cuda", choices=("cuda", "rocm"),
                   help="how a GPU index given to --device is made the only visible GPU")
    p.add_argument("--node", default="", help="the node's name, recorded in --shard-record")
    p.add_argument("--shard-record", type=Path, default=None,
                   help="one shard of a spread suite: write where it ran here, last, and exit 0 once every model "
                        "was tried")
    return p


def _device_flag(text: str) -> str:
    if text in ("cpu", "cuda") or text.isdigit():
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: expected cpu, cuda or a GPU index")


def pin_device(device: str, platform: str) -> str:
    """The device the suite runs on: a GPU index is made the only visible GPU (before torch is imported), which
    CUDA then calls ``cuda``, so the rows say ``cuda`` wherever the shard ran."""
    if not device.isdigit():
        return device
    from foundation.formats.stage_records import device_env

    pinned = device_env(device, platform, dict(os.environ))
    for gone in set(os.environ) - set(pinned):
        del os.environ[gone]
    os.environ.update(pinned)
    return "cuda"


def hub_offline() -> None:
    """Never the Hub: models are built from config classes (set before transformers is imported)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def prepare_environment(args: argparse.Namespace) -> Path:
    """Environment that must be in place before torch / triton / transformers are imported."""
    hub_offline()
    if args.cpu_backend == "triton":
        os.environ["TRITON_INTERPRET"] = "1"  # read when triton is imported
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not cache:
        # Never fall back to the shared /tmp/torchinductor_$USER: a fresh run empties the cache directory.
        cache = str(VariantLayout(args.out.resolve().parent).inductor_cache)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    tmp = os.environ.get("TMPDIR")
    if tmp:
        Path(tmp).mkdir(parents=True, exist_ok=True)
    return Path(cache)


def resolve_settings(args: argparse.Namespace) -> SuiteSettings:
    try:
        models = tuple(resolve_models(args.models))
    except UnknownModelError as exc:
        raise SuiteInputError(f"--models: {exc}") from None
    return SuiteSettings(
        out=args.out, models=models, size=args.size, mode=args.mode, dtype=args.dtype, warmup=args.warmup,
        iterations=args.iterations, device=args.device, cpu_backend=args.cpu_backend, backend=args.backend,
        cache_archive=args.cache_archive,
    )


def own_triton_cache(settings: SuiteSettings) -> tuple[Path, ...]:
    """The side's own Triton cache (its variant's, `VariantLayout.triton_cache`) when TRITON_CACHE_DIR names it; a
    Triton cache of the user's elsewhere is not this stage's to empty."""
    named = os.environ.get("TRITON_CACHE_DIR")
    own = VariantLayout(settings.out.resolve().parent).triton_cache
    return (own,) if named and Path(named).resolve() == own.resolve() else ()


def empty_directory(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)


# --- measuring one model ---------------------------------------------------------------------------------


def dtype_and_autocast(dtype: str, device: str) -> tuple[Any, Callable[[], Any]]:
    """Weights dtype and the autocast context for each call (amp = fp32 weights under autocast)."""
    import contextlib

    import torch

    if dtype == "amp":
        amp_dtype = torch.bfloat16 if device == "cpu" else torch.float16
        return torch.float32, lambda: torch.autocast(device, dtype=amp_dtype)
    return getattr(torch, dtype), contextlib.nullcontext


def make_step(mode: str, autocast: Callable[[], Any], trainer: Any = None) -> Callable[[Any, dict[str, Any]], Any]:
    """Inference = a no-grad forward; training = ``stages.support.training``'s step (zero grad, forward, loss, backward,
    optimizer step) with ``trainer``'s optimizer."""
    import torch

    if mode == "inference":
        def infer(module: Any, inputs: dict[str, Any]) -> Any:
            with torch.no_grad(), autocast():
                return module(**inputs)
        return infer
    if trainer is None:
        raise ValueError("a training step needs a trainer (stages.support.training.new_trainer)")
    from stages.support.training import train_step

    def train(module: Any, inputs: dict[str, Any]) -> Any:
        return train_step(module, inputs, trainer, autocast)
    return train


def step_factory(mode: str, dtype: str, device: str) -> Callable[..., Callable[[Any, dict[str, Any]], Any]]:
    """``new_step(module, reference=False)``: an eager step with its own optimizer over ``module`` (training); the
    float64 reference runs without autocast or grad scaler."""
    import contextlib

    _, autocast = dtype_and_autocast(dtype, device)

    def new_step(module: Any, reference: bool = False) -> Callable[[Any, dict[str, Any]], Any]:
        trainer = _trainer(module, mode, dtype, device, reference)
        return make_step(mode, contextlib.nullcontext if reference else autocast, trainer)
    return new_step


def _trainer(module: Any, mode: str, dtype: str, device: str, reference: bool = False) -> Any:
    from stages.support.training import new_trainer

    float16_amp = dtype == "amp" and device != "cpu" and not reference
    return new_trainer(module, device, float16_amp) if mode == "training" else None


@dataclass(frozen=True)
class TimedStep:
    """One model's step as the suite times it: ``eager`` and ``compiled`` are the same step function, the second
    under ``torch.compile``; both take ``(module, inputs)`` and step ``trainer`` (training; None in inference)."""

    eager: Callable[[Any, dict[str, Any]], Any]
    compiled: Callable[[Any, dict[str, Any]], Any]
    trainer: Any

    def restart(self) -> None:
        """Training: the optimizer as fresh, in place (``stages.support.training.Trainer.restart``)."""
        if self.trainer is not None:
            self.trainer.restart()


def timed_step(module: Any, mode: str, dtype: str, device: str, backend: Any) -> TimedStep:
    """The whole step compiled, as PyTorch's runner compiles its ``model_iter_fn`` rather than the model: in
    training the optimizer's zero grad and update run inside the compiled function, so Inductor compiles the
    update too and the compiled latency includes it. One optimizer for both, as the runner's."""
    import torch

    _, autocast = dtype_and_autocast(dtype, device)
    trainer = _trainer(module, mode, dtype, device)
    step = make_step(mode, autocast, trainer)
    return TimedStep(eager=step, compiled=torch.compile(step, backend=backend), trainer=trainer)


def dynamo_stats() -> dict[str, int]:
    from torch._dynamo.utils import counters

    breaks = counters["graph_break"]
    return {
        "calls_captured": int(counters["stats"]["calls_captured"]),
        "unique_graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(breaks.values())),
        "unique_graph_breaks": len(breaks),
    }


def graph_cache_counts() -> Row:
    """Inductor's FX-graph cache hits and misses since the counters were cleared (`CACHE_COLUMNS`): a hit loads a
    compiled graph from the cache, so a compile time is cold only where every lookup missed."""
    from torch._dynamo.utils import counters

    lookups = counters["inductor"]
    return dict(zip(CACHE_COLUMNS, (str(lookups["fxgraph_cache_hit"]), str(lookups["fxgraph_cache_miss"])),
                    strict=True))


def measure_model(name: str, settings: SuiteSettings) -> ModelResult:
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    from stages.support import timing
    from stages.support.hf_models import build
    from stages.support.numerics import record_outputs, snapshot

    torch._dynamo.reset()  # no guards or graphs carried over from the previous model
    counters.clear()
    weights_dtype, _ = dtype_and_autocast(settings.dtype, settings.device)
    built = build(name, size=settings.size, mode=settings.mode, dtype=weights_dtype, device=settings.device)
    # The optimizer moves the weights every training step: the numerics record starts again from the built ones.
    initial = snapshot(built.model) if settings.mode == "training" else None
    step = timed_step(built.model, settings.mode, settings.dtype, settings.device, settings.backend)
    dev = settings.device

    def run_eager() -> Any:
        return step.eager(built.model, built.inputs)

    def run_compiled() -> Any:
        return step.compiled(built.model, built.inputs)

    first_eager_s = timing.time_call_s(run_eager, dev)
    timing.gpu_peak_reset(dev)
    for _ in range(settings.warmup - 1):
        run_eager()
    eager_peak = timing.gpu_peak_gb(dev) if timing.is_gpu(dev) else 0.0
    first_compiled_s = timing.time_call_s(run_compiled, dev)  # compiles
    cache = graph_cache_counts()  # the cold compile's (counters were cleared for this model)
    timing.gpu_peak_reset(dev)
    for _ in range(settings.warmup - 1):
        run_compiled()
    dynamo_peak = timing.gpu_peak_gb(dev) if timing.is_gpu(dev) else 0.0
    stats = dynamo_stats()
    if not timing.is_gpu(dev):
        start_bytes = timing.resident_bytes(built.model, built.inputs)
        eager_peak = timing.cpu_peak_gb(run_eager, start_bytes)
        dynamo_peak = timing.cpu_peak_gb(run_compiled, start_bytes)

    eager_ms: list[float] = []
    compiled_ms: list[float] = []
    for _ in range(settings.iterations):  # interleaved, as the dynamo harness does
        eager_ms.append(timing.time_call_ms(run_eager, dev))
        compiled_ms.append(timing.time_call_ms(run_compiled, dev))
    record_outputs(settings.out, name, built, step, settings.mode, settings.dtype,
                   step_factory(settings.mode, settings.dtype, dev), initial)
    eager = timing.summarize(eager_ms)
    comp = timing.summarize(compiled_ms)
    flags = [f for f, noisy in (("noisy_eager", eager.noisy), ("noisy_compiled", comp.noisy)) if noisy]
    if settings.cpu_backend == "triton" and dev == "cpu":
        flags.append("triton_interpreter")  # kernels ran in the Triton interpreter: compiled timings are meaningless
    row: Row = {
        "dev": dev, "name": name, "batch_size": str(built.batch_size),
        "speedup": fmt_float(eager.median_ms / comp.median_ms),
        "abs_latency": fmt_float(comp.median_ms),
        "compilation_latency": fmt_float(first_compiled_s - first_eager_s),
        "compression_ratio": fmt_float(eager_peak / dynamo_peak if dynamo_peak else 0.0),
        "eager_peak_mem": fmt_float(eager_peak), "dynamo_peak_mem": fmt_float(dynamo_peak),
        **{k: str(v) for k, v in stats.items()},
        **_setting_cells(settings),
        "eager_median_ms": fmt_float(eager.median_ms), "eager_mean_ms": fmt_float(eager.mean_ms),
        "eager_std_ms": fmt_float(eager.std_ms),
        "compiled_median_ms": fmt_float(comp.median_ms), "compiled_mean_ms": fmt_float(comp.mean_ms),
        "compiled_std_ms": fmt_float(comp.std_ms),
        "first_run_s": fmt_float(first_compiled_s), **cache,
        "flags": ";".join(flags), "status": STATUS_OK, "error": "",
    }
    return ModelResult(row=row, samples={"eager": eager_ms, "compiled": compiled_ms})


def _setting_cells(settings: SuiteSettings) -> Row:
    return {"mode": settings.mode, "dtype": settings.dtype, "size": settings.size,
            "n": str(settings.iterations), "warmup": str(settings.warmup)}


def failure_row(name: str, settings: SuiteSettings, exc: BaseException) -> Row:
    """As the dynamo harness: ``dev,name,0,0.0,0.0`` and zero-padded stats, plus our status and error."""
    text = str(exc).strip().splitlines()
    zeros = dict.fromkeys(("calls_captured", "unique_graphs", "graph_breaks", "unique_graph_breaks"), "0")
    return {
        "dev": settings.device, "name": name, "batch_size": "0", "speedup": fmt_float(0.0),
        "abs_latency": fmt_float(0.0), "compilation_latency": fmt_float(0.0),
        "compression_ratio": fmt_float(0.0), "eager_peak_mem": fmt_float(0.0), "dynamo_peak_mem": fmt_float(0.0),
        **zeros, **_setting_cells(settings), "status": STATUS_FAIL,
        "error": f"{type(exc).__name__}: {text[0] if text else ''}"[:300],
    }


# --- the cache archive -----------------------------------------------------------------------------------


def graph_modules_loaded_since(mark: int) -> list[str]:
    """File stems of the compiled graph modules Inductor loaded after ``mark`` (a PyCodeCache.modules length).

    Inductor appends every graph module it loads, cache hits included, so this names a model's graphs even
    when an identical graph was compiled for an earlier model.
    """
    from torch._inductor.codecache import PyCodeCache

    stems = []
    for module in PyCodeCache.modules[mark:]:
        path = Path(getattr(module, "__file__", "") or "")
        if is_graph_module(path) and path.stem not in stems:
            stems.append(path.stem)
    return stems


def loaded_module_count() -> int:
    from torch._inductor.codecache import PyCodeCache

    return len(PyCodeCache.modules)


# --- the loop --------------------------------------------------------------------------------------------


def say(text: str) -> None:
    print(f"{PREFIX} {text}", flush=True)


def _describe(row: Row) -> str:
    if row["status"] != STATUS_OK:
        return f"fail {row['error']}"
    noisy = f" [{row['flags']}]" if row["flags"] else ""
    hits, misses = (row.get(col, "") for col in CACHE_COLUMNS)  # empty in a row kept from an older file
    cache = f" (graph cache {hits} hit(s), {misses} miss(es))" if hits and misses else ""
    return (f"ok eager {float(row['eager_median_ms']):.3f} ms, compiled {float(row['compiled_median_ms']):.3f} ms, "
            f"speedup {float(row['speedup']):.2f}x, compile {float(row['compilation_latency']):.1f} s{cache}{noisy}")


def run_suite(settings: SuiteSettings, cache_dir: Path) -> list[Row]:
    csv_path = settings.out / SUITE_CSV
    samples_path = settings.out / SUITE_SAMPLES
    rows: dict[str, Row] = {row["name"]: row for row in read_suite_csv(csv_path)}
    # What an earlier attempt left is validated before anything is measured: a damaged file is one error line.
    samples: dict[str, Any] = dict(read_kept(samples_path, read_suite_samples) or {})
    graphs_path = settings.out / GRAPH_MODELS
    graph_models: dict[str, list[str]] = read_kept(graphs_path, read_graph_models) or {}
    if not any(settings.matches(row) for row in rows.values()):
        # A fresh run (nothing to keep) measures cold compiles: no kernels, graphs or Triton binaries from an earlier
        # attempt. A stopped attempt's Triton binaries made a resumed compile warm without a word: on an H200
        # (2026-11-30) the PR side's BertForMaskedLM, resumed, compiled in 106 s, the base side's cold one in 126 s.
        for directory in (cache_dir, *own_triton_cache(settings)):
            empty_directory(directory)
        graph_models = {}
    total = len(settings.models)
    for index, name in enumerate(settings.models, 1):
        if name in rows and settings.matches(rows[name]):
            progress(STAGE, index, total, f"{name}: done earlier, kept")
            continue
        progress(STAGE, index, total, f"{name}: start")
        mark = loaded_module_count()
        try:
            result = measure_model(name, settings)
        except Exception as exc:  # one model's failure must not stop the suite
            traceback.print_exc(file=sys.stdout)
            result = ModelResult(row=failure_row(name, settings, exc), samples={})
        raise_if_stopped()  # a model measured (or failed) after a stop was asked for is not kept
        rows[name] = result.row
        samples[name] = result.samples
        for stem in graph_modules_loaded_since(mark):
            graph_models.setdefault(stem, [])
            if name not in graph_models[stem]:
                graph_models[stem].append(name)
        # samples first: an interrupt between the writes then only causes a re-measure, never a lost sample.
        atomic_io.write_json(samples_path, samples)
        atomic_io.write_json(graphs_path, graph_models)
        write_suite_csv(csv_path, rows.values())
        progress(STAGE, index, total, f"{name}: {_describe(result.row)}")
    return [rows[name] for name in settings.models]


def print_summary(rows: list[Row]) -> None:
    header = f"{'model':34} {'status':6} {'eager ms':>10} {'compiled ms':>12} {'speedup':>8} {'compile s':>10}  flags"
    say("summary")
    print(header)
    for row in rows:
        if row["status"] == STATUS_OK:
            print(f"{row['name']:34} {'ok':6} {float(row['eager_median_ms']):10.3f} "
                  f"{float(row['compiled_median_ms']):12.3f} {float(row['speedup']):7.2f}x "
                  f"{float(row['compilation_latency']):10.1f}  {row['flags']}")
        else:
            print(f"{row['name']:34} {'fail':6} {row['error']}")
    ok = sum(1 for r in rows if r["status"] == STATUS_OK)
    say(f"{ok} ok, {len(rows) - ok} failed")


def finish_archive(settings: SuiteSettings, cache_dir: Path, rows: list[Row]) -> None:
    if settings.cache_archive is None:
        return
    files, modules = archive_cache(cache_dir, settings.cache_archive)
    say(f"inductor cache: {files} files, {modules} compiled graph modules -> {settings.cache_archive}")
    if modules == 0 and settings.backend == "inductor" and any(r["status"] == STATUS_OK for r in rows):
        say("warning: no compiled graph modules in the Inductor cache (was TORCHINDUCTOR_CACHE_DIR overridden?)")


def write_record(args: argparse.Namespace, placed: str, settings: SuiteSettings, started: dt.datetime,
                 wall_s: float) -> None:
    """Where this shard ran: written last, so its presence says every model of the shard was tried."""
    cpus = tuple(sorted(os.sched_getaffinity(0))) if placed == "cpu" else ()
    write_shard_record(args.shard_record, ShardRecord(
        models=settings.models, node=args.node, device=placed, cpus=cpus,
        started_at=started.isoformat(timespec="seconds"), wall_s=round(wall_s, 3)))
    say(f"shard record -> {args.shard_record}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = dt.datetime.now(dt.timezone.utc)
    placed = args.device
    args.device = pin_device(args.device, args.platform)
    try:
        check_numbers(args.warmup, args.iterations, args.cpu_backend, args.device)
        cache_dir = prepare_environment(args)
        settings = resolve_settings(args)  # imports torch (after the environment is set)
    except SuiteInputError as exc:
        raise UserError(str(exc)) from None
    from stages.support.environment import prepare_inductor

    prepare_inductor()
    if settings.cpu_backend == "triton":
        from stages.support import triton_cpu

        triton_cpu.install()
    import transformers

    transformers.logging.set_verbosity_error()  # per-model config notices would drown the progress lines
    say(f"{len(settings.models)} models, size {settings.size}, mode {settings.mode}, dtype {settings.dtype}, "
        f"device {settings.device}, backend {settings.backend} ({settings.cpu_backend} on cpu), "
        f"warmup {settings.warmup}, iterations {settings.iterations}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, cache {cache_dir}")
    try:
        rows = run_suite(settings, cache_dir)  # a damaged file from an earlier attempt is a UserError
    except KeyboardInterrupt:
        say("interrupted: finished models are kept in suite.csv; run again to resume")
        return 130
    print_summary(rows)
    finish_archive(settings, cache_dir, rows)
    if args.shard_record is not None:
        write_record(args, placed, settings, started, (dt.datetime.now(dt.timezone.utc) - started).total_seconds())
        return 0
    return 0 if any(r["status"] == STATUS_OK for r in rows) else 1


if __name__ == "__main__":
    run_as_script(main)
