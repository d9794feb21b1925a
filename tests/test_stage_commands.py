"""The host's stage adapters: every command line it builds is one the stage's own parser accepts; every stage
ends through one wrapper (``stages.entry``) and prints one progress format (``stages.support.progress``); a stage's own
``error:`` line is the one line the user sees."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from foundation.errors import UserError
from foundation.formats.suite_request import SuiteRequest
from prbench.runners import StageCommand
from prbench.runs.pipeline import StageProgress
from prbench.stages.command_lines import (
    ProfileSettings,
    kernels_command,
    launch_cost_command,
    organize_command,
    paired_command,
    profile_command,
    repro_launch_command,
    suite_command,
    triton_ir_command,
    upstream_command,
    variant_organize_command,
    variant_profile_command,
)
from stages import entry
from stages.support.progress import progress_line

ROOT = Path(__file__).resolve().parents[1]


def parse(command: StageCommand) -> argparse.Namespace:
    """The built args through the stage's own ``build_parser()`` (a mistake raises, it does not exit)."""
    module = __import__(command.module, fromlist=["build_parser"])
    return module.build_parser().parse_args(command.args)


def test_suite_command_is_what_the_suite_stage_parses(tmp_path: Path) -> None:
    settings = SuiteRequest(models="BertForMaskedLM", warmup=5, iterations=12, cpu_backend="triton")
    args = parse(suite_command(tmp_path / "base", settings))
    assert (args.out, args.models, args.warmup, args.iterations, args.cpu_backend) == (
        tmp_path / "base" / "suite", "BertForMaskedLM", 5, 12, "triton")
    assert args.cache_archive == tmp_path / "base" / "inductor-cache.tar.gz"


def test_upstream_command_is_what_the_upstream_stage_parses(tmp_path: Path) -> None:
    settings = SuiteRequest(source="upstream", models="all", device="cuda", dtype="amp")
    args = parse(upstream_command(tmp_path / "pr", settings, tmp_path / "pytorch"))
    assert (args.pytorch_src, args.out, args.device, args.dtype) == (tmp_path / "pytorch", tmp_path / "pr" / "suite",
                                                                     "cuda", "amp")


def test_repro_and_ir_commands_are_what_their_stages_parse(tmp_path: Path) -> None:
    args = parse(repro_launch_command(tmp_path / "org", "cpp_fused_0", "cpp/cpp_fused_0.cpp", "graphs/g.py",
                                      tmp_path / "out"))
    assert (args.organized, args.kernel, args.path, args.graph, args.out) == (
        tmp_path / "org", "cpp_fused_0", "cpp/cpp_fused_0.cpp", "graphs/g.py", tmp_path / "out")
    triton = repro_launch_command(tmp_path, "triton_poi_0", "pointwise/triton_poi_0.py", "", tmp_path)
    assert parse(triton).graph is None
    args = parse(triton_ir_command(tmp_path / "org", "hip:gfx942", tmp_path / "ir", ["a", "b"]))
    assert (args.organized, args.target, args.out, args.kernel) == (tmp_path / "org", "hip:gfx942", tmp_path / "ir",
                                                                    ["a", "b"])


def test_organize_commands_are_what_the_organize_stage_parses(tmp_path: Path) -> None:
    args = parse(organize_command(tmp_path / "cache", tmp_path / "out", rep=7, warmup=2))
    assert (args.cache, args.out, args.rep, args.warmup, args.extract_to) == (tmp_path / "cache", tmp_path / "out",
                                                                              7, 2, None)
    variant = parse(variant_organize_command(tmp_path / "base"))
    assert variant.cache == tmp_path / "base" / "inductor-cache.tar.gz"
    assert variant.graph_models == tmp_path / "base" / "suite" / "graph_models.json"
    assert variant.extract_to == tmp_path / "base" / "work" / "extracted-cache"


def test_launch_cost_command_is_what_the_launch_cost_stage_parses(tmp_path: Path) -> None:
    args = parse(launch_cost_command(tmp_path / "base"))
    assert (args.dir, args.out) == (tmp_path / "base" / "organized", tmp_path / "base" / "launch_cost.json")


def test_kernels_command_is_what_the_kernels_stage_parses(tmp_path: Path) -> None:
    args = parse(kernels_command(tmp_path / "organized", tmp_path, devices="0,1", warmup=1, iterations=3,
                                 timeout_s=9.5, cache_dir=tmp_path / "c", filter_regex="triton_.*"))
    assert (args.dir, args.out, args.devices, args.warmup, args.iterations, args.timeout) == (
        tmp_path / "organized", tmp_path, "0,1", 1, 3, 9.5)
    assert (args.cache_dir, args.filter, args.work_dir) == (tmp_path / "c", "triton_.*", None)


def test_profile_commands_are_what_the_profile_stage_parses(tmp_path: Path) -> None:
    settings = ProfileSettings(steps=2, warmup=4, device="cpu", models="A,B", timeout_s=60)
    command = profile_command(tmp_path / "suite.csv", tmp_path / "out", settings, graphs=tmp_path / "g")
    args = parse(command)
    assert (args.steps, args.warmup, args.device, args.models, args.graphs) == (2, 4, "cpu", "A,B", tmp_path / "g")
    assert command.timeout_s == 60
    # The comparison's profile: the variant's own files, -p with a few calls only.
    variant = parse(variant_profile_command(tmp_path / "pr", "cpu", tmp_path / "cache"))
    assert (variant.suite_csv, variant.out, variant.graphs) == (tmp_path / "pr" / "suite" / "suite.csv",
                                                                tmp_path / "pr" / "profiles",
                                                                tmp_path / "pr" / "organized" / "graphs")
    assert (variant.times, variant.repeat, variant.inductor_cache) == (3, 3, tmp_path / "cache")


def test_paired_command_is_what_the_paired_stage_parses(tmp_path: Path) -> None:
    args = parse(paired_command(tmp_path / "plan.json", 2, tmp_path / "round-002.json", "base"))
    assert (args.plan, args.round, args.out, args.sides) == (tmp_path / "plan.json", 2, tmp_path / "round-002.json",
                                                             "base")


# --- the entry wrapper -----------------------------------------------------------------------------------------


def test_a_bad_command_line_is_one_error_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    def main(argv: list[str] | None) -> int:
        parser = entry.StageArgumentParser(prog="stage")
        parser.add_argument("--n", type=int, required=True)
        parser.parse_args(argv)
        return 0

    assert entry.stage_main(main, ["--n", "x"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == ["error: argument --n: invalid int value: 'x'"]


@pytest.mark.parametrize(("raised", "code", "line"), [
    (UserError("--suite-csv x: no rows"), 2, "error: --suite-csv x: no rows"),
    (FileNotFoundError(2, "No such file or directory", "/nowhere/in.csv"), 1, "error: /nowhere/in.csv"),
    (KeyboardInterrupt(), 130, None),
])
def test_how_a_stage_ends(raised: BaseException, code: int, line: str | None,
                          capsys: pytest.CaptureFixture[str]) -> None:
    def main(argv: list[str] | None) -> int:
        raise raised

    assert entry.stage_main(main, []) == code
    err = capsys.readouterr().err.splitlines()
    if line is None:
        assert err == []
    else:
        assert len(err) == 1 and err[0].startswith(line)


def test_a_stop_python_drops_where_it_lands_still_ends_the_stage_at_its_loops_next_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The user stops a compare while a model compiles: the stage's SIGINT may land in a weakref callback of Dynamo's,
    where Python prints the KeyboardInterrupt and drops it. The stage's loop then stops at its next check, and the
    stage ends as interrupted (exit 130), not with the model it went on to measure."""
    import signal
    import weakref

    dropped: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda hook: dropped.append(hook.exc_type))
    monkeypatch.setattr(entry, "_stop_requested", False)
    previous = signal.signal(signal.SIGINT, entry._interrupt)
    measured = []
    try:
        def main(argv: list[str] | None) -> int:
            for model in ("first", "second"):
                entry.raise_if_stopped()
                measured.append(model)
                if model == "first":  # a compile's object dies, and the stop arrives inside its callback
                    compiled = type("Graph", (), {})()
                    keep = weakref.ref(compiled, lambda _: signal.raise_signal(signal.SIGINT))
                    del compiled
                    assert keep() is None
            return 0

        assert entry.stage_main(main, []) == entry.INTERRUPTED_EXIT
    finally:
        signal.signal(signal.SIGINT, previous)
    assert dropped == [KeyboardInterrupt]
    assert measured == ["first"]


def test_a_bug_keeps_its_traceback() -> None:
    def main(argv: list[str] | None) -> int:
        raise ZeroDivisionError("a bug")

    with pytest.raises(ZeroDivisionError):
        entry.stage_main(main, [])


STAGE_THAT_ENDS = """
import atexit, pathlib, sys
from foundation.errors import UserError
from stages.entry import run_as_script

OUT = pathlib.Path(sys.argv[1])


class TornDown:
    def __del__(self):
        (OUT / "torn-down").write_text("the interpreter's teardown ran")


kept = TornDown()  # a module global: only the interpreter's teardown deletes it
atexit.register(lambda: (OUT / "exit-handlers").write_text("ran"))


def main(argv):
    print("the stage's last line")  # no flush: a pipe holds it in Python's buffer
    if sys.argv[2] == "user-error":
        raise UserError("--in x: not a suite CSV")
    return 3

run_as_script(main)
"""


@pytest.mark.integration
@pytest.mark.parametrize(("how", "code", "err"), [("returns-3", 3, ""),
                                                   ("user-error", 2, "error: --in x: not a suite CSV\n")])
def test_a_stage_ends_with_its_code_and_output_after_the_exit_handlers_but_without_the_teardown(
        tmp_path: Path, how: str, code: int, err: str) -> None:
    """The teardown of torch's modules costs a stage process about a second of CPU after its last line; a stage
    skips it, and loses nothing: its code, its buffered output and what the exit handlers do (Inductor stops its
    compile workers there) all remain."""
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.run([sys.executable, "-c", STAGE_THAT_ENDS, str(tmp_path), how], cwd=ROOT, env=buffered,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (code, "the stage's last line\n", err)
    assert (tmp_path / "exit-handlers").read_text() == "ran"
    assert not (tmp_path / "torn-down").exists()


@pytest.mark.parametrize("module", ["stages.suite", "stages.upstream_suite", "stages.organize", "stages.kernels",
                                    "stages.profile", "stages.paired", "stages.model_worker",
                                    "stages.launch_cost"])
def test_every_stage_goes_through_the_wrapper(module: str) -> None:
    source = (ROOT / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8")
    assert 'if __name__ == "__main__":\n    run_as_script(main)' in source
    assert "StageArgumentParser(" in source
    assert 'print(f"error: ' not in source  # the wrapper prints a stage's error line, nobody else


# --- progress --------------------------------------------------------------------------------------------------


def test_the_host_follows_the_one_progress_format() -> None:
    from rich.console import Console

    progress = StageProgress(Console(file=open("/dev/null", "w")), "base/kernels")  # noqa: SIM115
    task = progress._progress.tasks[0]
    progress.feed(progress_line("kernels", 2, 5, "worker0 k.py: ok"))
    assert (task.completed, task.total) == (2, 5)
    progress.feed(progress_line("suite", 4, 5, "BertForMaskedLM: start"))  # under way: 3 finished
    assert (task.completed, task.total) == (3, 5)
    progress.feed("kernels: [5/5] old format")  # no longer a progress line
    assert task.completed == 3


# --- the stage's own error line reaches the user ---------------------------------------------------------------


@pytest.mark.integration
def test_invoke_profile_shows_the_stage_s_own_error_line(tmp_path: Path) -> None:
    """The task does not read the suite CSV; the stage refuses it, and its words are the one line shown."""
    suite = tmp_path / "suite.csv"
    suite.write_text("not,a,suite\n1,2,3\n", encoding="utf-8")
    out = tmp_path / "profiles"
    stage = subprocess.run([sys.executable, "-m", "stages.profile", "--suite-csv", str(suite), "--out", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    [stage_line] = stage.stderr.splitlines()
    assert stage.returncode == 2 and stage_line.startswith("error: ") and str(suite) in stage_line
    task = subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(ROOT), "profile",
                           "--suite-csv", str(suite), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    seen = [line for line in (task.stdout + task.stderr).splitlines() if line.strip()]
    assert task.returncode == 2
    assert seen == [stage_line]
    assert not out.exists()  # the log this attempt started is removed with the directory made for it


STAGE_THAT_WAITS = """
import time
from stages.entry import run_as_script

def main(argv):
    print("ready", flush=True)
    time.sleep(300)
    return 0

run_as_script(main)
"""


@pytest.mark.integration
def test_a_stage_stops_on_sigint_even_when_its_host_ignored_sigint(tmp_path: Path) -> None:
    """prbench started from a background job (or nohup) hands SIGINT on as ignored; the runner still stops a
    stage with SIGINT first, and the stage ends as interrupted (exit 130) instead of waiting for SIGKILL."""
    import signal

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-c", STAGE_THAT_WAITS], cwd=root, stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130  # at once (30 s: a busy machine's margin), not after the 300 s sleep
