"""The local runner: a stage runs as `python -m <module>` with the variant's environment, logged, and stoppable."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from foundation.errors import UserError
from foundation.formats.stage_records import HEADER_DIR_ENV
from prbench.runners import CODE_ROOT, StageCommand, StageFailed
from prbench.runners.local import LocalRunner, keeps_bytecode, python_keeps_bytecode
from prbench.runs import pipeline
from prbench.runs.pipeline import Pipeline
from prbench.runs.run_store import RunStore
from prbench.sides.local_torch import InstalledTorch, installed_torch
from prbench.sides.overlay import installed_package_dir
from prbench.sides.recipes import load_recipe
from prbench.sides.variants import Variant
from prbench.termination import STOP_GRACE_S

STAGE = "prbench_test_tiny_stage"

STAGE_SOURCE = textwrap.dedent('''
    """A throwaway stage: `python -m prbench_test_tiny_stage MODE OUT_DIR`."""
    import json, os, signal, subprocess, sys, time

    mode, out = sys.argv[1], sys.argv[2]
    if mode == "report":
        print("hello from the stage", flush=True)
        print("a warning on stderr", file=sys.stderr, flush=True)
        with open(os.path.join(out, "seen.json"), "w") as f:
            json.dump({"env": dict(os.environ), "sys_path": sys.path, "cwd": os.getcwd()}, f)
    elif mode == "usererror":
        print("[tiny] 1/2 first: ok", flush=True)
        print("error: --models Foo: unknown model", file=sys.stderr, flush=True)
        sys.exit(2)
    elif mode == "fail":
        print("loading kernels...", flush=True)
        print("Traceback: something broke", file=sys.stderr, flush=True)
        sys.exit(3)
    elif mode == "hang":
        # A helper that ignores Ctrl-C, like a compile worker pool, in the stage's process group.
        helper = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        with open(os.path.join(out, "pids.json"), "w") as f:
            json.dump({"pgid": os.getpgrp(), "stage": os.getpid(), "helper": helper.pid}, f)
        print("started", flush=True)
        time.sleep(60)
    elif mode == "chatty":
        with open(os.path.join(out, "pids.json"), "w") as f:
            json.dump({"pgid": os.getpgrp()}, f)
        i = 0
        while True:
            print("progress line", i, flush=True)
            i += 1
''')


@pytest.fixture
def stage_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "stage_code"
    directory.mkdir()
    (directory / f"{STAGE}.py").write_text(STAGE_SOURCE)
    return directory


def command(stage_dir: Path, mode: str, out: Path, **kwargs) -> StageCommand:
    return StageCommand(module=STAGE, args=[mode, str(out)], python_path=[stage_dir], **kwargs)


def live_members(pgid: int) -> list[int]:
    """Processes of a process group that are still alive (zombies are dead, only not yet reaped)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            alive.append(int(stat.parent.name))
    return alive


def survivors(pgid: int, grace_s: float = 3.0) -> list[int]:
    """Live members of the group once a killed process had a moment to die (SIGKILL is asynchronous)."""
    deadline = time.monotonic() + grace_s
    while (alive := live_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


@pytest.mark.integration
def test_a_stage_runs_with_its_env_and_python_path_first(tmp_path: Path, stage_dir: Path, monkeypatch) -> None:
    # Variables in the user's shell that would silently change what a stage measures are dropped.
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/shared-cache")
    shadow = tmp_path / "overlay"
    shadow.mkdir()
    cmd = command(stage_dir, "report", tmp_path, env={"OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)})
    cmd.python_path.append(shadow)

    LocalRunner(stream_output=False).run(cmd)

    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["env"]["OMP_NUM_THREADS"] == "1"
    assert seen["env"]["TMPDIR"] == str(tmp_path)
    assert seen["env"]["PYTHONPATH"] == os.pathsep.join([str(stage_dir), str(shadow), str(CODE_ROOT)])
    assert "TORCHINDUCTOR_CACHE_DIR" not in seen["env"]
    assert "/somewhere/else" not in seen["sys_path"]
    # The overlay entries shadow the code root and the installed site-packages.
    sys_path = seen["sys_path"]
    site = next(i for i, p in enumerate(sys_path) if p.endswith("site-packages"))
    assert sys_path.index(str(shadow)) < sys_path.index(str(CODE_ROOT), 1) < site
    assert seen["cwd"] == str(CODE_ROOT)


def torch_dir() -> str:
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.submodule_search_locations
    return spec.submodule_search_locations[0]


def _torch_like(root: Path, *pyc_names: str) -> Path:
    package = root / "torch"
    (package / "_inductor" / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")  # a regular package: found before the installed torch
    for name in pyc_names:
        (package / "_inductor" / "__pycache__" / name).write_bytes(b"")
    return package


def test_an_install_with_bytecode_for_this_python_keeps_it(tmp_path: Path) -> None:
    tag = sys.implementation.cache_tag
    package = _torch_like(tmp_path, f"config.{tag}.pyc")

    assert keeps_bytecode(package, tag, {"PYTHONDONTWRITEBYTECODE": "1"})


def test_an_install_without_bytecode_keeps_none_where_the_shell_forbids_writing_it(tmp_path: Path) -> None:
    # The GPU machine's image: a venv installed without .pyc files, and PYTHONDONTWRITEBYTECODE=1.
    package = _torch_like(tmp_path, "config.cpython-39.pyc")  # another interpreter's bytecode does not count

    assert not keeps_bytecode(package, "cpython-312", {"PYTHONDONTWRITEBYTECODE": "1"})
    assert keeps_bytecode(package, "cpython-39", {"PYTHONDONTWRITEBYTECODE": "1"})
    assert keeps_bytecode(package, "cpython-312", {})  # the first process writes it beside the sources
    assert keeps_bytecode(package, "cpython-312", {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/mine"})


def test_a_local_side_without_kept_bytecode_keeps_it_in_its_work_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(pipeline, "python_keeps_bytecode", lambda python: False)
    recipes = CODE_ROOT / "recipes"
    run = RunStore(tmp_path / "runs").create_or_open("r1", {}, "0.1.0")

    local = Pipeline(run, LocalRunner(stream_output=False)).prepare(
        Variant(name="base", recipe=load_recipe("cpu-local", recipes)), None, sys.executable).env
    docker = Variant(name="base", recipe=load_recipe("cpu-docker", recipes)).stage_environment(tmp_path / "base")

    assert local["PYTHONPYCACHEPREFIX"] == str(run.path("base") / "work" / "bytecode")
    assert local["PYTHONDONTWRITEBYTECODE"] == ""  # laid over the shell's: unset for the stage
    assert "PYTHONPYCACHEPREFIX" not in docker
    monkeypatch.setattr(pipeline, "python_keeps_bytecode", lambda python: True)
    assert "PYTHONPYCACHEPREFIX" not in Pipeline(run, LocalRunner(stream_output=False)).prepare(
        Variant(name="pr", recipe=load_recipe("cpu-local", recipes)), None, sys.executable).env


def test_local_sides_share_one_precompiled_header_directory_and_containers_keep_their_own(
        tmp_path: Path, monkeypatch) -> None:
    recipes = CODE_ROOT / "recipes"
    local, docker = load_recipe("cpu-local", recipes), load_recipe("cpu-docker", recipes)
    monkeypatch.delenv(HEADER_DIR_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))

    default = {Variant(name=side, recipe=local).stage_environment(tmp_path / side)[HEADER_DIR_ENV]
               for side in ("base", "pr")}
    assert default == {str(tmp_path / "home" / ".cache" / "prbench" / "inductor-headers")}
    # A container sees only the run directory: its side keeps the header under its TMPDIR.
    assert HEADER_DIR_ENV not in Variant(name="base", recipe=docker).stage_environment(tmp_path / "base")
    monkeypatch.setenv(HEADER_DIR_ENV, str(tmp_path / "mine"))
    assert Variant(name="base", recipe=local).stage_environment(tmp_path / "base")[HEADER_DIR_ENV] == str(
        tmp_path / "mine")
    monkeypatch.setenv(HEADER_DIR_ENV, "")  # empty: not shared
    assert HEADER_DIR_ENV not in Variant(name="base", recipe=local).stage_environment(tmp_path / "base")


@pytest.mark.integration
def test_the_stage_python_is_asked_about_its_own_torch(tmp_path: Path, monkeypatch) -> None:
    """``--python`` names another interpreter: its torch decides, not the one running prbench."""
    _torch_like(tmp_path / "site")  # a torch without bytecode, first on that interpreter's path
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path / "site"} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)

    assert not python_keeps_bytecode(str(wrapper))
    assert python_keeps_bytecode(sys.executable) == keeps_bytecode(
        Path(torch_dir()), sys.implementation.cache_tag, dict(os.environ))


@pytest.mark.integration
def test_the_torch_an_interpreter_imports_is_found_without_the_shells_pythonpath(tmp_path: Path, monkeypatch) -> None:
    """The overlay shadows, and the bytecode check looks at, the torch a stage imports: the calling shell's
    PYTHONPATH is not the stage's (the runner scrubs it)."""
    _torch_like(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    found = installed_torch(sys.executable)
    assert found == InstalledTorch(sys.implementation.cache_tag, Path(torch_dir()))
    assert installed_package_dir(sys.executable) == Path(torch_dir())

    bare = tmp_path / "python"  # an interpreter without site-packages: no torch there
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    bare.chmod(0o755)
    assert installed_torch(str(bare)) == InstalledTorch(sys.implementation.cache_tag, None)
    assert python_keeps_bytecode(str(bare))  # nothing to compile again: the stage says what is missing
    with pytest.raises(UserError, match=f"^--python {bare}: cannot import torch there$"):
        installed_package_dir(str(bare))
    assert installed_torch(str(tmp_path / "no-such-python")) is None


@pytest.mark.integration
def test_a_stage_given_a_bytecode_directory_writes_there_whatever_the_shell_says(tmp_path: Path, stage_dir: Path,
                                                                              monkeypatch) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    cache = tmp_path / "work" / "bytecode"
    cmd = command(stage_dir, "report", tmp_path, env={"PYTHONPYCACHEPREFIX": str(cache), "PYTHONDONTWRITEBYTECODE": ""})

    LocalRunner(stream_output=False).run(cmd)

    assert list(cache.rglob("json/*.pyc")), "the stage's imports left no bytecode in its directory"
    assert not list(stage_dir.rglob("*.pyc")), "bytecode was written beside the sources"


@pytest.mark.integration
def test_output_goes_to_the_log_and_the_console(tmp_path: Path, stage_dir: Path, capsys) -> None:
    log = tmp_path / "base" / "logs" / "suite.log"

    LocalRunner().run(command(stage_dir, "report", tmp_path, log_path=log))

    logged = log.read_text()
    assert "hello from the stage\n" in logged
    assert "a warning on stderr\n" in logged  # stderr is merged into the log
    assert "hello from the stage" in capsys.readouterr().out


@pytest.mark.integration
def test_a_failing_stage_raises_stage_failed_naming_the_log(tmp_path: Path, stage_dir: Path) -> None:
    log = tmp_path / "logs" / "kernels.log"

    with pytest.raises(StageFailed) as info:
        LocalRunner(stream_output=False).run(command(stage_dir, "fail", tmp_path, log_path=log))

    assert isinstance(info.value, UserError)  # the CLI turns it into one line, not a traceback
    assert str(info.value) == f"stage {STAGE} failed with exit code 3; log: {log}"
    assert "Traceback: something broke" in log.read_text()


@pytest.mark.integration
def test_a_python_that_does_not_exist_is_stage_failed(tmp_path: Path, stage_dir: Path) -> None:
    with pytest.raises(StageFailed, match="cannot start /no/such/python"):
        LocalRunner(python="/no/such/python", stream_output=False).run(command(stage_dir, "report", tmp_path))


@pytest.mark.integration
def test_a_timeout_stops_the_whole_process_group(tmp_path: Path, stage_dir: Path) -> None:
    log = tmp_path / "logs" / "suite.log"
    started = time.monotonic()

    # 5 s: the stage's start-up (a Python process, well under a second on an idle machine) must be over before the
    # timeout for pids.json to be there, and a busy two-core machine stretches it several times. The stop after
    # it is SIGINT, at most the runner's grace, then SIGKILL: 15 s in all is a third of the 60 s the stage would
    # sleep, so a passing test cannot have waited for the stage to end by itself.
    with pytest.raises(StageFailed, match=f"stage {STAGE}: timed out after"):
        LocalRunner(stream_output=False).run(command(stage_dir, "hang", tmp_path, log_path=log, timeout_s=5.0))

    assert time.monotonic() - started < 5.0 + STOP_GRACE_S + 5.0
    pids = json.loads((tmp_path / "pids.json").read_text())
    assert pids["pgid"] == pids["stage"]  # the stage leads its own group...
    assert survivors(pids["pgid"]) == []  # ...and nothing of it survives, not even the helper ignoring SIGINT
    assert "started" in log.read_text()


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.integration
def test_a_timeout_while_output_flows_logs_cleanly(tmp_path: Path, stage_dir: Path) -> None:
    log = tmp_path / "chatty.log"

    # 3 s: the stage's start-up (well under a second on an idle machine, a busy one stretches it) is over before
    # the timeout, so that output is flowing when the timeout comes.
    with pytest.raises(StageFailed, match="timed out"):
        LocalRunner(stream_output=False).run(command(stage_dir, "chatty", tmp_path, log_path=log, timeout_s=3.0))

    assert log.read_text().startswith("progress line 0\nprogress line 1\n")
    assert survivors(json.loads((tmp_path / "pids.json").read_text())["pgid"]) == []


@pytest.mark.integration
def test_a_stage_error_line_becomes_the_one_line_failure_and_lines_reach_the_host(tmp_path: Path,
                                                                                   stage_dir: Path) -> None:
    seen: list[str] = []
    with pytest.raises(StageFailed) as failure:
        LocalRunner(stream_output=False).run(command(stage_dir, "usererror", tmp_path, on_line=seen.append))
    assert str(failure.value) == "--models Foo: unknown model"
    assert seen == ["[tiny] 1/2 first: ok", "error: --models Foo: unknown model"]
