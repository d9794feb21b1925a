"""Shared test setup: GPU tests are skipped where no GPU is visible; builds use a store of the session's own; the
real compare that several modules read runs once per session; a unit-tier test that starts Python fails."""

from __future__ import annotations

import compileall
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundation.formats.stage_records import HEADER_DIR_ENV
from prbench.images.content_store import STORE_ENV
from tests.support.docker_support import VEC_ISA_OK
from tests.support.electra_compare import run_electra_compare

_PROJECT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    _skip_the_inductor_isa_probe()
    # pytest keeps the test modules it has rewritten for its assertions only where Python may write bytecode;
    # under PYTHONDONTWRITEBYTECODE (as on these machines) every worker rewrote all of them in every run (~2 s).
    sys.dont_write_bytecode = False
    if not hasattr(config, "workerinput"):  # the controller, before the xdist workers start
        _compile_the_projects_bytecode()


def _skip_the_inductor_isa_probe() -> None:
    """Inductor's ISA probe compiles and loads one test program per candidate vector ISA (about 8 s) in every process
    that compiles with an empty cache: every suite, profile and replay stage the tests start. Skipped, Inductor takes
    the ISAs the CPU's flags list, which is the probe's choice wherever the compiler builds all of them (g++ 12 here
    and in CI). ``TORCHINDUCTOR_VEC_ISA_OK=`` (empty) in the environment brings the probe back; ``0`` would turn
    vectorization off."""
    os.environ.setdefault(VEC_ISA_OK, "1")


def _compile_the_projects_bytecode() -> None:
    """Every Python process the tests start (workers, ``invoke`` and stage subprocesses, hundreds of them) imports
    the project's modules, and where PYTHONDONTWRITEBYTECODE is set (as on these machines) each would compile them
    again and keep nothing. The bytecode lands in the ``__pycache__`` folders git ignores; installed packages
    already have theirs."""
    for package in ("prbench", "analysis", "foundation", "stages", "tests"):
        compileall.compile_dir(_PROJECT / package, quiet=2)
    compileall.compile_file(_PROJECT / "tasks.py", quiet=2)


@pytest.fixture(scope="session", autouse=True)
def _a_store_of_the_sessions_own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Image builds take their inputs from the store (``$PRBENCH_STORE``): the tests' builds, and the CLI they
    start, use one made for this session, never the user's ``~/.cache/prbench/store``."""
    previous = os.environ.get(STORE_ENV)
    os.environ[STORE_ENV] = str(tmp_path_factory.mktemp("store"))
    yield
    if previous is None:
        os.environ.pop(STORE_ENV, None)
    else:
        os.environ[STORE_ENV] = previous


@pytest.fixture(scope="session", autouse=True)
def _precompiled_headers_of_the_sessions_own(request: pytest.FixtureRequest,
                                             tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Inductor's precompiled C++ headers (``$PRBENCH_INDUCTOR_HEADERS``): the stages the tests start share one
    directory made for this run, never the user's ``~/.cache/prbench/inductor-headers``. Under ``pytest -n`` it is
    the run's, beside the workers' own directories: every worker would build the same header (~6 s of g++)."""
    base = tmp_path_factory.getbasetemp()
    directory = (base.parent if hasattr(request.config, "workerinput") else base) / "inductor-headers"
    directory.mkdir(exist_ok=True)
    previous = os.environ.get(HEADER_DIR_ENV)
    os.environ[HEADER_DIR_ENV] = str(directory)
    yield
    if previous is None:
        os.environ.pop(HEADER_DIR_ENV, None)
    else:
        os.environ[HEADER_DIR_ENV] = previous


_SLOW_TIERS = ("integration", "docker", "gpu")
_PYTHON = re.compile(r"python[0-9.]*$")


@pytest.fixture(autouse=True)
def _the_unit_tier_starts_no_python(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit tier (``-m "not integration and not docker and not gpu"``) is what runs inside the test process:
    a Python process costs a fraction of a second to start and import, and tests that start stages, workers,
    pip or ``invoke`` made the tier slower than an edit-test loop can wait for. Such a test is marked
    ``integration``; one that is not fails here, naming the mark it needs. Other programs (git) stay allowed."""
    if any(request.node.get_closest_marker(tier) for tier in _SLOW_TIERS):
        return
    start = subprocess.Popen.__init__

    def refuse_python(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
        program = _program(args, kwargs.get("executable"))
        if _PYTHON.search(os.path.basename(program)) and (os.path.exists(program) or shutil.which(program)):
            pytest.fail(f"{request.node.nodeid} starts {program}: mark it @pytest.mark.integration "
                        f"(the unit tier runs in the test process)", pytrace=False)
        start(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse_python)


def _program(args: Any, executable: Any) -> str:
    """The program a Popen starts: ``executable=``, else the first word of a command line (a shell one too)."""
    if executable is not None:
        return os.fsdecode(executable)
    if isinstance(args, (str, bytes)):
        return os.fsdecode(args).split()[0]
    return os.fsdecode(args if isinstance(args, os.PathLike) else args[0])


@pytest.fixture(scope="session")
def electra_compare(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """``invoke compare`` of the README's example PR on one tiny model (``tests/support/electra_compare.py``): the run
    directory and the process. Its readers redo no stage of it (a test that does works on a ``copy_run``); a compare
    of another PR on the same base side starts with this run's (``seed_base``). All of them are in its xdist group."""
    return run_electra_compare(tmp_path_factory.mktemp("electra"))


class _SharedRayCluster:
    """One one-node Ray cluster (two fake GPUs) for a run of consecutive tests that ask for it: the tests of one
    xdist group (``ray-executor``) span three modules, and a start and a stop cost some 10 s on two busy cores."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self.address: str | None = None

    def start(self) -> str:
        if self.address is None:
            from tests.support.ray_support import local_cluster

            self.address = self._stack.enter_context(local_cluster(gpus=2))
        return self.address

    def stop(self) -> None:
        self.address = None
        self._stack.close()


_RAY_CLUSTER = _SharedRayCluster()


@pytest.fixture
def ray_cluster() -> str:
    """The address of a one-node Ray cluster on this machine with two fake GPUs, started for the first test that
    asks for it and stopped after the last of those that follow it; a test that asks for it is skipped without
    the ray extra (its module may hold tests that need no Ray)."""
    pytest.importorskip("ray")
    return _RAY_CLUSTER.start()


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down: none uses the cluster any more
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if nextitem is None or "ray_cluster" not in getattr(nextitem, "fixturenames", ()):
        _RAY_CLUSTER.stop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    _RAY_CLUSTER.stop()  # a session stopped early (-x, Ctrl-C) leaves no cluster running


@pytest.fixture
def python_handles_ctrl_c() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt here, also when pytest runs as a background job: there SIGINT is ignored,
    and ``_thread.interrupt_main`` (a test's simulated Ctrl-C) would do nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.hookimpl(trylast=True)  # after pytest-xdist has put each test in its group
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _warn_if_groups_are_ignored(config, items)
    if hasattr(config, "workerinput"):
        _longest_first(items)
    gpu_items = [item for item in items if "gpu" in item.keywords]
    # Asking torch costs its import (seconds per xdist worker): only when a gpu test is still selected.
    if not gpu_items or _gpu_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a GPU (none visible to torch)")
    for item in gpu_items:
        item.add_marker(skip_gpu)


# The longest work units of the README's test command (an xdist group, else a test module), longest first, from
# its --durations. Under ``pytest -n`` (``--dist loadgroup``) an idle worker takes the next unit in collection
# order: these start first, then the rest of the slow tiers, and the many short unit tests come last and fill in
# until both workers end together. Collected last, the bisect or a group of compares could start when the other
# worker has nothing left to do.
_LONGEST_FIRST = ("electra-compare", "docker-compare", "tests/test_bisect_integration.py",
                  "tests/test_triton_ab_compare.py", "torch-in-process",
                  "docker-standins", "suite-shards", "kernels-integration", "ray-executor",
                  "tests/test_numerics_example.py", "tests/test_image_python.py")


def _longest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` (in place, the same on every worker): the units of `_LONGEST_FIRST` in its order, then
    the other docker and integration tests, then the unit tier; a module or group stays in its own order."""
    def rank(item: pytest.Item) -> tuple[int, int]:
        group = item.get_closest_marker("xdist_group")
        names = (group.args[0] if group and group.args else group.kwargs.get("name") if group else None,
                 item.nodeid.split("::", 1)[0])
        listed = next((_LONGEST_FIRST.index(name) for name in names if name in _LONGEST_FIRST), len(_LONGEST_FIRST))
        return listed, 0 if any(item.get_closest_marker(tier) for tier in _SLOW_TIERS) else 1

    items.sort(key=rank)


def _warn_if_groups_are_ignored(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``pytest -n`` (``--dist loadgroup``), pytest-xdist marks a grouped test by its node id; a pytest that
    ignores that (9.2, pytest-xdist issue #1386) spreads a group over the workers: shared fixtures run once per
    worker, and tests that must not overlap may."""
    grouped = [item for item in items if item.get_closest_marker("xdist_group")]
    if getattr(config.option, "loadgroup", False) and grouped and "@" not in grouped[0].nodeid:
        warnings.warn(pytest.PytestWarning(
            f"pytest {pytest.__version__} ignores xdist_group: grouped tests may run on several workers at once "
            f"(install the dev extra's pytest, below 9.2)"), stacklevel=1)

