"""SIGTERM and SIGHUP end a task as Ctrl-C does: a host process running a slow stage is told to end (``timeout``, a
cancelled CI job, a closed terminal), and the stage's process or container is gone, the run's lock released, the
stage recorded as interrupted, and the user reads one line and an exit status that says which signal it was."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundation.formats.run_layout import MANIFEST
from prbench.runners import OWNER_LABEL, RUN_LABEL
from prbench.runs.run_lock import RunLock
from prbench.termination import Terminated, handlers_kept, terminate_as_interrupt

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "tests" / "support" / "termination_host.py"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
BASE_IMAGE = "prbench-test/bookworm:base"


@pytest.fixture
def sigterm_raises() -> Iterator[None]:
    """Handlers of the test process as they were, whatever a test does to them."""
    with handlers_kept():
        yield


def test_sigterm_raises_terminated_once_and_a_second_one_lets_the_stop_finish(sigterm_raises: None) -> None:
    stopped = []
    with pytest.raises(Terminated) as caught, terminate_as_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the signal interrupts this
        except KeyboardInterrupt:  # the Ctrl-C path of a runner: stop the stage, then let the interrupt go on
            os.kill(os.getpid(), signal.SIGTERM)  # the CI runner says it again while the stage is being stopped
            time.sleep(0.2)
            stopped.append(True)
            raise
    assert stopped == [True]  # the stop was not cut short
    assert caught.value.signum == signal.SIGTERM and caught.value.exit_code == 143


def test_a_library_that_turns_the_signal_into_a_plain_interrupt_does_not_hide_it(sigterm_raises: None) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # a terminal's process (pytest may run under nohup: SIGHUP ignored)
    def wait_as_ray_does() -> None:  # Ray's wait() and get() raise KeyboardInterrupt() for whatever interrupted them
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)
        except KeyboardInterrupt:
            raise KeyboardInterrupt from None

    with pytest.raises(Terminated) as caught, terminate_as_interrupt():
        wait_as_ray_does()
    assert caught.value.exit_code == 129
    with pytest.raises(KeyboardInterrupt) as plain, terminate_as_interrupt():
        raise KeyboardInterrupt  # Ctrl-C stays Ctrl-C
    assert not isinstance(plain.value, Terminated)


def test_the_handlers_are_back_after_the_task_and_an_ignored_sighup_stays_ignored(sigterm_raises: None) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # started under nohup
    before = signal.getsignal(signal.SIGTERM)
    with terminate_as_interrupt():
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is not before
        os.kill(os.getpid(), signal.SIGHUP)  # nothing happens
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_task_started_with_ctrl_c_ignored_still_stops_on_it(sigterm_raises: None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job of a script (`pytest &` in a CI runner)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # and a starter's thread that blocked SIGTERM
    try:
        with pytest.raises(KeyboardInterrupt) as caught, terminate_as_interrupt():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the signal interrupts this
        assert not isinstance(caught.value, Terminated)
        with pytest.raises(Terminated), terminate_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # as inherited, after the task
        assert signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


@pytest.fixture
def hosts() -> Iterator[list[subprocess.Popen]]:
    """The host processes a test starts; one a failed test left running is ended as a user would (SIGTERM)."""
    started: list[subprocess.Popen] = []
    yield started
    for host in started:
        if host.poll() is None:
            host.terminate()
            try:
                host.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                host.kill()
                host.communicate()


def _as_from_a_terminal() -> None:
    """A host started from a terminal: SIGHUP and SIGINT at their defaults, even when pytest runs under nohup or
    as a background job (which ignore them, and a child inherits that)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_host(hosts: list[subprocess.Popen], tmp_path: Path, *extra: str) -> tuple[subprocess.Popen,
                                                                                      dict[str, Path]]:
    files = {name: tmp_path / name for name in ("marker", "beat", "out")}
    host = subprocess.Popen([sys.executable, str(HOST), "hold", "--runs", str(tmp_path / "runs"),
                             *(f"--{name}={path}" for name, path in files.items()), *extra],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_as_from_a_terminal)
    hosts.append(host)
    deadline = time.monotonic() + 60
    while not files["marker"].exists():
        assert host.poll() is None, host.communicate()
        assert time.monotonic() < deadline, "the stand-in stage did not start"
        time.sleep(0.1)
    return host, files


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def lock_is_free(run: Path) -> bool:
    with RunLock(run):
        return True


def stage_status(run: Path) -> str:
    return str(json.loads((run / MANIFEST).read_text())["stages"]["base/slow"]["status"])


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
@pytest.mark.integration
def test_a_host_told_to_end_stops_its_stage_releases_the_run_and_says_so_in_one_line(
        tmp_path: Path, hosts: list[subprocess.Popen], signum: int, code: int) -> None:
    host, files = start_host(hosts, tmp_path)
    stage_pid = int(files["marker"].read_text().split()[0])
    assert running(stage_pid)

    host.send_signal(signum)
    stdout, stderr = host.communicate(timeout=60)

    assert host.returncode == code
    assert stderr.strip().splitlines() == [f"terminated ({signal.Signals(signum).name}): running stages stopped, "
                                           "finished work is kept; run the same command again to resume"]
    assert "Traceback" not in stdout
    assert not running(stage_pid)
    run = tmp_path / "runs" / "held"
    assert lock_is_free(run)
    assert stage_status(run) == "interrupted"  # resumed, not thrown away, by the next invocation
    assert not files["out"].exists()


@pytest.mark.integration
def test_a_host_killed_outright_takes_its_local_stage_along(tmp_path: Path, hosts: list[subprocess.Popen]) -> None:
    host, files = start_host(hosts, tmp_path)
    stage_pid = int(files["marker"].read_text().split()[0])

    host.kill()  # SIGKILL: no handler runs; the kernel ends the stage with its parent
    host.communicate(timeout=60)

    deadline = time.monotonic() + 10
    while running(stage_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(stage_pid)
    assert lock_is_free(tmp_path / "runs" / "held")


def run_a_stage_per_device(runner: Any, tmp_path: Path) -> dict[int, BaseException | None]:
    """``--devices cpu,cpu``: one runner, two stages at once (one per device thread); then Ctrl-C or SIGTERM on the
    host: the pool calls ``interrupt()``. How each device's ``run`` ended."""
    import threading

    from prbench.runners import StageCommand

    ended: dict[int, BaseException | None] = {}
    markers = [tmp_path / f"marker-{device}" for device in (0, 1)]

    def device(index: int) -> None:
        files = [f"--marker={markers[index]}", f"--beat={tmp_path / f'beat-{index}'}", f"--out={tmp_path / 'out'}"]
        try:
            runner.run(StageCommand("tests.support.slow_stage", files))
            ended[index] = None
        except BaseException as exc:
            ended[index] = exc

    threads = [threading.Thread(target=device, args=(index,)) for index in (0, 1)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while not all(marker.exists() for marker in markers) and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [int(marker.read_text().split()[0]) for marker in markers]

    assert len(pids) == 2
    runner.interrupt()
    for thread in threads:
        thread.join(timeout=60)
    return ended


@pytest.mark.integration
def test_a_runner_running_a_stage_per_device_stops_them_all(tmp_path: Path) -> None:
    from prbench.runners.local import LocalRunner

    markers = [tmp_path / f"marker-{device}" for device in (0, 1)]
    ended = run_a_stage_per_device(LocalRunner(stream_output=False), tmp_path)

    assert [type(ended.get(index)) for index in (0, 1)] == [KeyboardInterrupt, KeyboardInterrupt]
    assert not [pid for pid in (int(marker.read_text().split()[0]) for marker in markers) if running(pid)]


@pytest.mark.docker
def test_a_docker_runner_running_a_stage_per_device_stops_them_all(tmp_path: Path) -> None:
    from prbench.runners.docker import DockerRunner, run_labels
    from tests.support.docker_support import require_engine

    client = require_engine()
    runner = DockerRunner(BASE_IMAGE, "cpu", writable=[tmp_path], stream_output=False, labels=run_labels(tmp_path))
    of_the_run = {"label": f"{RUN_LABEL}={tmp_path.resolve()}"}
    try:
        run_a_stage_per_device(runner, tmp_path)
        assert client.containers.list(all=True, filters=of_the_run) == []
    finally:
        for container in client.containers.list(all=True, filters=of_the_run):
            container.remove(force=True)


@pytest.mark.docker
def test_a_host_told_to_end_leaves_no_container_of_the_run(tmp_path: Path, hosts: list[subprocess.Popen]) -> None:
    from tests.support.docker_support import require_engine

    client = require_engine()
    run = tmp_path / "runs" / "held"
    of_the_run = {"label": f"{RUN_LABEL}={run}"}
    host, _ = start_host(hosts, tmp_path, f"--image={BASE_IMAGE}")
    (container,) = client.containers.list(filters=of_the_run)  # the stage runs in a container of the run
    assert container.labels["dev.prbench.side"] == "base"

    host.send_signal(signal.SIGTERM)
    _, stderr = host.communicate(timeout=60)

    assert host.returncode == 143, stderr
    assert stderr.strip().startswith("terminated (SIGTERM): ") and len(stderr.strip().splitlines()) == 1
    assert client.containers.list(all=True, filters=of_the_run) == []
    assert lock_is_free(run)
    assert stage_status(run) == "interrupted"


@pytest.mark.docker
def test_what_a_killed_host_left_is_found_by_its_run_and_removed_and_other_runs_keep_theirs(tmp_path: Path) -> None:
    from prbench.runners.docker import remove_containers, run_labels
    from tests.support.docker_support import require_engine

    client = require_engine()
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    started = [client.containers.run(BASE_IMAGE, ["sleep", "300"], detach=True, network_mode="none",
                                     labels={**run_labels(run), OWNER_LABEL: "gone:1"})
               for run in (ours, ours, theirs)]
    try:
        removed = remove_containers(client, run_labels(ours))

        assert sorted(removed) == sorted(c.short_id for c in started[:2])
        assert [c.id for c in client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={theirs}"})] == [
            started[2].id]
        with pytest.raises(ValueError, match="must name the run"):
            remove_containers(client, {OWNER_LABEL: "gone:1"})
    finally:
        for container in started:
            if _exists(client, container.id):
                container.remove(force=True)


def _exists(client, container_id: str) -> bool:
    import docker

    try:
        client.containers.get(container_id)
    except docker.errors.NotFound:
        return False
    return True


@pytest.mark.docker
def test_compare_removes_what_a_killed_invocation_of_its_run_left_and_leaves_none_itself(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from rich.console import Console

    from prbench.compare.driver import _no_containers_left
    from prbench.runners.docker import run_labels
    from tests.support.docker_support import require_engine

    client = require_engine()
    run = SimpleNamespace(root=tmp_path / "runs" / "r", run_id="r")
    request = SimpleNamespace(recipe=SimpleNamespace(is_docker=True))
    of_the_run = {"label": f"{RUN_LABEL}={run.root}"}

    def container_of_the_run():  # a stage container whose owner was killed outright (SIGKILL): nothing removes it
        return client.containers.run(BASE_IMAGE, ["sleep", "300"], detach=True, network_mode="none",
                                     labels={**run_labels(run.root), OWNER_LABEL: "gone:1"})

    left = container_of_the_run()
    console = Console(record=True, width=200)
    try:
        with _no_containers_left(run, request, console):  # type: ignore[arg-type]
            assert client.containers.list(all=True, filters=of_the_run) == []
            container_of_the_run()  # one the run itself leaves (a signal between create and start)
        assert client.containers.list(all=True, filters=of_the_run) == []
    finally:
        for container in client.containers.list(all=True, filters=of_the_run):
            container.remove(force=True)
    said = console.export_text()
    assert f"removed 1 container(s) an earlier invocation of run r left running: {left.short_id}" in said


def test_a_wheel_download_in_progress_ends_with_the_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM (or ``kill -INT``) reaches the host alone, not the pip it runs; the download must not outlive it,
    nor hold the host until it ends (300 s here)."""
    from prbench.images import content_store

    pip = tmp_path / "pip"
    pip.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'pid'}\necho Collecting torch==2.13.0\nexec sleep 300\n")
    pip.chmod(0o755)
    monkeypatch.setattr(content_store.sys, "executable", str(pip))  # the command is [sys.executable, -m, pip, ...]

    def signalled_on_the_first_line(line: str) -> None:
        if "Collecting" in line:  # the download is under way: the signal comes
            raise Terminated(signal.SIGTERM)

    begun = time.monotonic()
    with pytest.raises(Terminated):
        content_store._pip_download(["torch==2.13.0"], content_store.WheelTarget("3.11", ("linux_x86_64",)),
                                    tmp_path / "dest", [], signalled_on_the_first_line)

    assert time.monotonic() - begun < 30  # not the 300 s of the download (30 s: a busy machine's margin)
    assert not running(int((tmp_path / "pid").read_text()))
