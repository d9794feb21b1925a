"""Host adapters of the stages: one builder per ``stages/<name>.py``, and where each stage writes.

Every ``StageCommand`` the host runs is built here, so a stage's command line is spelled once — the tasks and the
comparison pipeline call the same builder (``tests/test_stage_commands.py`` parses each built command with the
stage's own ``build_parser()``). ``run_stage`` runs a command for a task: a failed stage's own ``error:`` line is
the one-line message the user sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.formats.run_layout import GRAPHS_DIR, VariantLayout
from foundation.formats.stage_records import visible_devices_env
from prbench.runners import StageCommand, StageFailed

if TYPE_CHECKING:
    from foundation.formats.suite_request import SuiteRequest
    from prbench.sides.variants import Variant



# --- suite -----------------------------------------------------------------------------------------------------


def suite_command(variant_dir: Path, settings: SuiteRequest, variant: Variant | None = None) -> StageCommand:
    """``python -m stages.suite`` for one variant directory, with the variant's stage environment."""
    files = VariantLayout(variant_dir)
    args = [*_suite_args(files.suite, settings, settings.models, settings.device),
            "--cache-archive", str(files.cache_archive)]
    env = variant.stage_environment(variant_dir) if variant is not None else {}
    return StageCommand(module="stages.suite", args=args, env=env)


def suite_shard_command(out: Path, settings: SuiteRequest, models: tuple[str, ...], record: Path,
                        platform: str) -> StageCommand:
    """One shard of a spread suite (``prbench.stages.suite_shards``): ``models`` into ``out``, its record last. The
    executor adds ``--device`` (where it placed the shard) and ``--node``; the host archives the merged cache."""
    args = [*_suite_args(out, settings, ",".join(models), None), "--shard-record", str(record)]
    if platform == "rocm":
        args += ["--platform", "rocm"]
    return StageCommand(module="stages.suite", args=args)


def _suite_args(out: Path, settings: SuiteRequest, models: str, device: str | None) -> list[str]:
    args = [
        "--out", str(out),
        "--models", models,
        "--size", settings.size,
        "--mode", settings.mode,
        "--dtype", settings.dtype,
        "--warmup", str(settings.warmup),
        "--iterations", str(settings.iterations),
    ]
    if device is not None:
        args += ["--device", device]
    return [*args, "--cpu-backend", settings.cpu_backend]


def upstream_command(variant_dir: Path, settings: SuiteRequest, pytorch_src: Path) -> StageCommand:
    """``python -m stages.upstream_suite`` for one variant; ``pytorch_src`` is the tree as the stage sees it.

    The variant's stage environment (caches, knobs) is added by the pipeline, as for ``suite_command``.
    """
    args = [
        "--pytorch-src", str(pytorch_src),
        "--out", str(VariantLayout(variant_dir).suite),
        "--models", settings.models,
        "--mode", settings.mode,
        "--dtype", settings.dtype,
        "--device", settings.device,
        "--cache-archive", str(VariantLayout(variant_dir).cache_archive),
    ]
    if settings.use_runner:
        args.append("--use-runner")
    return StageCommand(module="stages.upstream_suite", args=args)


def suite_source_command(variant_dir: Path, settings: SuiteRequest, upstream_src: Path | None) -> StageCommand:
    """The suite stage's command for the settings' source (builtin or upstream)."""
    if settings.source == "upstream":
        assert upstream_src is not None, "upstream_tree() resolves the tree before any stage runs"
        return upstream_command(variant_dir, settings, upstream_src)
    return suite_command(variant_dir, settings)


# --- kernels ---------------------------------------------------------------------------------------------------


def organize_command(cache: Path, out: Path, *, rep: int = 100, warmup: int = 10, extract_to: Path | None = None,
                     graph_models: Path | None = None, env: dict[str, str] | None = None,
                     log_path: Path | None = None) -> StageCommand:
    args = ["--cache", str(cache), "--out", str(out), "--rep", str(rep), "--warmup", str(warmup)]
    args += _optional(("--extract-to", extract_to), ("--graph-models", graph_models))
    return StageCommand(module="stages.organize", args=args, env=dict(env or {}), log_path=log_path)


def variant_organize_command(variant_dir: Path) -> StageCommand:
    """organize for a variant of a run: its suite's cache archive into its ``organized/``."""
    files = VariantLayout(variant_dir)
    return organize_command(files.cache_archive, files.organized, extract_to=files.extracted_cache,
                            graph_models=files.graph_models)


def launch_cost_command(variant_dir: Path) -> StageCommand:
    """``python -m stages.launch_cost`` on a variant's organized graphs (its stage environment, so its torch)."""
    files = VariantLayout(variant_dir)
    return StageCommand(module="stages.launch_cost", args=["--dir", str(files.organized),
                                                           "--out", str(files.launch_cost)])


def kernels_command(organized: Path, out: Path | None = None, *, devices: str = "cpu", warmup: int = 10,
                    iterations: int = 30, timeout_s: float = 300.0, cache_dir: Path | None = None,
                    work_dir: Path | None = None, filter_regex: str | None = None, platform: str = "auto",
                    env: dict[str, str] | None = None, log_path: Path | None = None) -> StageCommand:
    args = ["--dir", str(organized), "--devices", devices, "--warmup", str(warmup), "--iterations", str(iterations),
            "--timeout", str(timeout_s), "--platform", platform]
    args += _optional(("--out", out), ("--cache-dir", cache_dir), ("--work-dir", work_dir),
                      ("--filter", filter_regex))
    return StageCommand(module="stages.kernels", args=args, env=dict(env or {}), log_path=log_path)


# --- profile ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProfileSettings:
    """What ``stages.profile`` measures; the defaults are the stage's own except where noted."""

    steps: int = 3
    warmup: int = 3
    device: str | None = None  # None: the stage picks cuda when available, else cpu
    models: str = ""  # comma list; empty: every ok model of the suite
    times: int = 10  # -p: calls per repeat of a compiled graph module
    repeat: int = 10  # -p: repeats
    timeout_s: float | None = None


# A comparison profiles after the timing is done: -p only needs enough calls for a trace, not a measurement.
COMPARE_GRAPH_CALLS = 3


def profile_command(suite_csv_path: Path, out: Path, settings: ProfileSettings, *, graphs: Path | None = None,
                    inductor_cache: Path | None = None, log_path: Path | None = None) -> StageCommand:
    args = ["--suite-csv", str(suite_csv_path), "--out", str(out), "--steps", str(settings.steps),
            "--warmup", str(settings.warmup), "--times", str(settings.times), "--repeat", str(settings.repeat)]
    args += _optional(("--models", settings.models or None), ("--device", settings.device), ("--graphs", graphs),
                      ("--inductor-cache", inductor_cache))
    return StageCommand(module="stages.profile", args=args, log_path=log_path, timeout_s=settings.timeout_s)


def variant_profile_command(variant_dir: Path, device: str, inductor_cache: Path) -> StageCommand:
    """profile for a variant of a comparison: its suite's models and its organized graphs into ``profiles/``."""
    settings = ProfileSettings(device=device, times=COMPARE_GRAPH_CALLS, repeat=COMPARE_GRAPH_CALLS)
    files = VariantLayout(variant_dir)
    return profile_command(files.suite_csv, files.profiles, settings, graphs=files.organized / GRAPHS_DIR,
                           inductor_cache=inductor_cache)


# --- paired rounds ---------------------------------------------------------------------------------------------


def paired_command(plan: Path, number: int, out: Path, sides: str) -> StageCommand:
    """One round of a paired timing plan (``sides``: ``base,pr`` in one process, or one side)."""
    return StageCommand(module="stages.paired", args=["--plan", str(plan), "--round", str(number),
                                                       "--out", str(out), "--sides", sides])


# --- node replay ---------------------------------------------------------------------------------------------


def node_replay_command(replay_set: Path, out: Path, *, warmup: int = 10, iterations: int = 100,
                        log_path: Path | None = None) -> StageCommand:
    """Replay the shapes of a ``perf-report -r`` replay set on this machine's GPU (``stages.node_replay``)."""
    return StageCommand(module="stages.node_replay", args=["--replay-set", str(replay_set), "--out", str(out),
                                                            "--warmup", str(warmup),
                                                            "--iterations", str(iterations)],
                        log_path=log_path)


def repro_launch_command(organized: Path, kernel: str, path: str, graph: str, out: Path) -> StageCommand:
    """One side's kernel module and recorded launch for ``invoke repro`` (``graph``: "" for a Triton kernel)."""
    args = ["--organized", str(organized), "--kernel", kernel, "--path", path, "--out", str(out)]
    return StageCommand(module="stages.repro_launch", args=args + (["--graph", graph] if graph else []))


def triton_ir_command(organized: Path, target: str, out: Path, kernels: list[str]) -> StageCommand:
    """Compile these Triton kernels of ``organized`` for ``target`` into ``out`` (``invoke ir``)."""
    args = ["--organized", str(organized), "--target", target, "--out", str(out)]
    for kernel in kernels:
        args += ["--kernel", kernel]
    return StageCommand(module="stages.triton_ir", args=args)


def on_device(command: StageCommand, device: str, platform: str) -> StageCommand:
    """``command`` pinned to GPU ``device`` (`foundation.formats.stage_records.visible_devices_env`; the pipeline and
    the local runner drop every other visible-devices variable when they merge it). A CPU stage is left as it is:
    it runs on the CPUs, and hiding a GPU it does not use changes nothing."""
    if device != "cpu":
        command.env.update(visible_devices_env(device, platform))
    return command


def _optional(*pairs: tuple[str, object | None]) -> list[str]:
    """``--flag value`` for each value given; a flag whose value is None is left to the stage's default."""
    args: list[str] = []
    for flag, value in pairs:
        if value is not None:
            args += [flag, str(value)]
    return args


# --- running one for a task ------------------------------------------------------------------------------------


def run_stage(command: StageCommand, runner: object | None = None, stream: bool = True) -> None:
    """Run a stage locally (a failure is a StageFailed carrying the stage's own one-line message).

    When the stage refuses its input with its own one-line error, the log this run started (and the directories
    made for it) are removed again: a user mistake must not leave an ``organize.log`` in an ``--out`` that holds
    nothing else. A crash keeps its log, since the message points there.
    """
    from prbench.runners.local import LocalRunner

    runner = runner or LocalRunner(stream_output=stream)
    created = _paths_to_create(command.log_path)
    try:
        runner.run(command)  # type: ignore[attr-defined]
    except StageFailed as exc:
        if command.log_path is not None and str(command.log_path) not in str(exc):
            _remove_created(created)
        raise


def _paths_to_create(log_path: Path | None) -> list[Path]:
    """The log file and every missing directory above it, deepest first (what running the stage will create)."""
    if log_path is None:
        return []
    missing = [log_path] if not log_path.exists() else []
    parent = log_path.parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    return missing


def _remove_created(paths: list[Path]) -> None:
    for path in paths:
        try:
            if path.is_dir():
                path.rmdir()  # only if empty: the stage may have written there after all
            else:
                path.unlink(missing_ok=True)
        except OSError:
            return
