"""One process per run: a second invocation on a busy run is refused at once, naming who holds it; a lock left by
a process that died is no lock; Ctrl-C or an error lets go of it; reading a run never waits for it."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from foundation.formats.run_layout import MANIFEST
from prbench.runs.run_lock import LOCK_FILE, RunInUse, RunLock
from prbench.runs.run_store import RunStore

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}

# A process that holds a run the way `invoke compare` does, until it is told to stop (or killed).
HOLDER = textwrap.dedent("""
    import signal, sys, time
    from pathlib import Path
    from prbench.runs.run_lock import RunLock, command_label

    # Ctrl-C must reach us as KeyboardInterrupt even when the tests run in a job that ignores SIGINT.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    command_label.set("invoke compare")
    try:
        with RunLock(Path(sys.argv[1])):
            print("held", flush=True)
            sys.stdin.readline()  # until the test closes our stdin
    except KeyboardInterrupt:
        print("interrupted", flush=True)  # the lock is released: the process lives on without it
        sys.stdin.readline()
""")

# Tries the run once: prints "free" (it took and released the lock) or the refusal.
PROBE = textwrap.dedent("""
    import sys
    from pathlib import Path
    from prbench.runs.run_lock import RunInUse, RunLock

    try:
        with RunLock(Path(sys.argv[1])):
            print("free")
    except RunInUse as exc:
        print(exc)
""")


def start_holder(run_dir: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def busy(runs: Path) -> Iterator[subprocess.Popen]:
    """Run 'same' exists and another process is writing it."""
    (runs / "same").mkdir(parents=True)
    (runs / "same" / MANIFEST).write_text(json.dumps({"run_id": "same", "created": "now", "stages": {}}))
    holder = start_holder(runs / "same")
    yield holder
    holder.kill()
    holder.wait()


def probe(run_dir: Path) -> str:
    return subprocess.run([sys.executable, "-c", PROBE, str(run_dir)], capture_output=True, text=True, env=ENV,
                          timeout=60).stdout.strip()


def invoke(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    """The finished command and the CPU seconds it took (its own and its children's). CPU, not wall, seconds: a
    busy machine (two cores under a two-process load) stretches the wall time of the same work several times, not
    its CPU time. Invoke with its tasks takes about 0.25 CPU seconds, the import of torch alone over 2: a bound of
    2 CPU seconds tells "refused at once" from "refused after the heavy imports" whatever else runs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          env=ENV, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def refusal(pid: int, flag: str = "--run") -> re.Pattern[str]:
    return re.compile(rf"error: run 'same' is in use by pid {pid} \(invoke compare, since \d\d:\d\d:\d\d\); "
                      rf"wait for it or pick another {flag}")


@pytest.mark.parametrize("task", [
    ["suite", "--models", "BertForMaskedLM"],
    ["compare", "--pr", "installed"],
    ["report"],
])
@pytest.mark.integration
def test_a_second_invocation_on_a_busy_run_is_refused_at_once_naming_the_holder(
        runs: Path, busy: subprocess.Popen, task: list[str]) -> None:
    before = sorted(p.name for p in (runs / "same").iterdir())

    proc, seconds = invoke(*task, "--run", "same", "--runs-dir", str(runs))

    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and refusal(busy.pid).fullmatch(lines[0]), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert seconds < 2.0, f"refused after {seconds:.2f} CPU seconds"
    assert sorted(p.name for p in (runs / "same").iterdir()) == before  # it did nothing in the run


@pytest.mark.integration
def test_a_task_writing_into_a_run_by_path_is_refused_too(runs: Path, busy: subprocess.Popen) -> None:
    proc, seconds = invoke("kernels", "--dir", str(runs / "same" / "base" / "organized"))

    assert proc.returncode == 2 and seconds < 2.0
    assert refusal(busy.pid, flag="--out").fullmatch(proc.stderr.strip()), proc.stderr


@pytest.mark.integration
def test_invoke_status_reads_a_busy_run_without_waiting(runs: Path, busy: subprocess.Popen) -> None:
    proc, seconds = invoke("status", "--run", "same", "--runs-dir", str(runs))

    assert proc.returncode == 0, proc.stderr
    assert "no stages recorded yet" in proc.stdout and seconds < 2.0


@pytest.mark.integration
def test_a_lock_left_by_a_killed_process_is_taken_over(runs: Path) -> None:
    RunStore(runs).create_or_open("same", {}, "0.1.0").close()
    holder = start_holder(runs / "same")
    holder.kill()  # kill -9: no chance to clean up
    holder.wait()
    assert json.loads((runs / "same" / LOCK_FILE).read_text())["pid"] == holder.pid  # the file says "held"...

    with RunStore(runs).create_or_open("same", {}, "0.1.0") as run:  # ...but it is no lock
        assert json.loads((run.root / LOCK_FILE).read_text())["pid"] == os.getpid()
        assert probe(run.root).startswith(f"run 'same' is in use by pid {os.getpid()} ")


@pytest.mark.integration
def test_of_many_processes_starting_the_same_run_at_once_exactly_one_gets_it(runs: Path) -> None:
    (runs / "same").mkdir(parents=True)
    go = runs / "go"
    racer = textwrap.dedent("""
        import os, sys, time
        from pathlib import Path
        from prbench.runs.run_lock import RunInUse, RunLock

        while not os.path.exists(sys.argv[2]):
            time.sleep(0.001)
        try:
            with RunLock(Path(sys.argv[1])):
                print("won", flush=True)
                sys.stdin.readline()
        except RunInUse:
            print("refused", flush=True)
    """)
    racers = [subprocess.Popen([sys.executable, "-c", racer, str(runs / "same"), str(go)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=ENV) for _ in range(6)]
    try:
        time.sleep(1.0)  # let them all start polling
        go.touch()
        outcomes = sorted(r.stdout.readline().strip() for r in racers if r.stdout is not None)
    finally:
        for r in racers:
            r.communicate(timeout=60)

    assert outcomes == ["refused"] * 5 + ["won"]


@pytest.mark.integration
def test_ctrl_c_in_the_holder_releases_the_run_while_the_process_lives_on(runs: Path) -> None:
    (runs / "same").mkdir(parents=True)
    holder = start_holder(runs / "same")
    try:
        holder.send_signal(signal.SIGINT)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "interrupted"
        assert holder.poll() is None
        assert probe(runs / "same") == "free"
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("failure", [KeyboardInterrupt, RuntimeError])
@pytest.mark.integration
def test_an_interrupt_or_an_error_inside_the_run_lets_go_of_it(runs: Path, failure: type[BaseException]) -> None:
    with pytest.raises(failure), RunStore(runs).create_or_open("same", {}, "0.1.0") as run, \
            run.stage("base/suite", {}):
        raise failure()

    assert probe(runs / "same") == "free"
    assert (runs / "same" / LOCK_FILE).read_text() == ""  # a clean release names nobody


@pytest.mark.integration
def test_one_process_may_open_its_own_run_twice_and_holds_it_until_both_close(runs: Path) -> None:
    store = RunStore(runs)
    first = store.create_or_open("same", {}, "0.1.0")
    second = store.open("same", write=True)

    first.close()
    assert probe(runs / "same").startswith(f"run 'same' is in use by pid {os.getpid()} ")
    second.close()
    assert probe(runs / "same") == "free"


def test_a_run_opened_to_be_read_cannot_be_written(runs: Path) -> None:
    RunStore(runs).create_or_open("same", {}, "0.1.0").close()
    run = RunStore(runs).open("same")

    with pytest.raises(RuntimeError, match="written without holding its lock"):
        run.save()


@pytest.mark.integration
def test_the_refusal_names_another_process_when_the_holder_wrote_nothing(runs: Path) -> None:
    (runs / "same").mkdir(parents=True)
    holder = start_holder(runs / "same")
    try:
        os.truncate(runs / "same" / LOCK_FILE, 0)  # a holder that could not write its line (a full disk)
        with pytest.raises(RunInUse, match=r"^run 'same' is in use by another process; wait for it or pick another"):
            RunLock(runs / "same").acquire()
    finally:
        holder.kill()
        holder.wait()
