"""`invoke doctor`: before hours of build, a user learns in seconds what would stop it, one line per check.

The machine is faked where a test needs another one: a `/dev` without (or with) an AMD GPU, a `/proc` where another
process holds it, a Docker engine that answers with a given base image and Python. Only the last test talks to the
real engine (`docker` mark).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import docker
from foundation.errors import UserError
from prbench.compare import doctor
from prbench.compare.doctor import CheckResult, DoctorInputs, Machine, run_doctor, summary
from prbench.images.content_store import Store
from prbench.sides.recipes import load_recipe
from tests.support.cli_support import invoke_in_process
from tests.support.docker_support import base_image_id, commit_all, make_pytorch, make_triton, require_engine
from tests.support.recipe_support import DIGEST, docker_recipe, to_toml
from tests.test_triton_downloads import triton_tree

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def engine_down() -> None:
    raise UserError("docker: cannot reach the Docker engine (stand-in); start dockerd or set DOCKER_HOST")


class FakeImage:
    def __init__(self) -> None:
        self.id = "sha256:" + "cd" * 32
        self.short_id = "sha256:cdcdcdcd"
        self.attrs = {"RepoDigests": ["rocm/pytorch@" + DIGEST]}


class FakeEngine:
    """An engine holding the recipe's base image, whose python3 is ``python``."""

    def __init__(self, root: Path, python: str = "3.10") -> None:
        self.root = root
        self.python = python
        self.images = self
        self.containers = self

    def get(self, ref: str) -> FakeImage:
        if ref == "rocm/pytorch@" + DIGEST:
            return FakeImage()
        raise docker.errors.ImageNotFound(ref)

    def run(self, image: str, command: list[str], **options: object) -> bytes:
        assert options["network_mode"] == "none", "the base image's interpreter is read without network"
        return json.dumps({"python_version": self.python, "platforms": ["manylinux_2_35_x86_64"],
                           "implementation": "cpython", "abi": "cp" + self.python.replace(".", "")}).encode()

    def version(self) -> dict[str, str]:
        return {"Version": "stand-in"}

    def info(self) -> dict[str, str]:
        return {"DockerRootDir": str(self.root)}


def rocm_recipe(tmp_path: Path, **pytorch: str) -> Path:
    data = docker_recipe()
    data["pytorch"] = {**data["pytorch"], **pytorch}
    path = tmp_path / "mi300.toml"
    path.write_text(to_toml(data), encoding="utf-8")
    return path


def amd_machine(tmp_path: Path, *, gpu: bool, docker=engine_down) -> Machine:
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    (dev / "dri").mkdir(parents=True, exist_ok=True)
    proc.mkdir(exist_ok=True)
    (dev / "dri" / "renderD128").touch()  # a render node alone may be another vendor's GPU
    if gpu:
        (dev / "kfd").touch()
    return Machine(dev=dev, proc=proc, own_pid=os.getpid(), which=lambda tool: None, docker=docker)


def inputs(recipe: Path, tmp_path: Path, **given) -> DoctorInputs:
    return DoctorInputs(recipe=load_recipe(str(recipe), recipe.parent), runs_dir=tmp_path / "runs",
                        store=tmp_path / "store", **given)


def by_name(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.name: r for r in results}


def test_a_rocm_recipe_on_a_machine_without_dev_kfd_fails_naming_the_amd_gpu(tmp_path):
    printed: list[str] = []
    results = run_doctor(inputs(rocm_recipe(tmp_path), tmp_path), amd_machine(tmp_path, gpu=False),
                         emit=lambda r: printed.append(r.line()))

    gpus = by_name(results)["gpus"]
    assert gpus.status == "fail"
    assert "no AMD GPU" in gpus.detail and f"{tmp_path}/dev/kfd is missing" in gpus.detail
    assert len(printed) == len(results) and all("\n" not in line for line in printed), "one line per check"
    assert by_name(results)["docker engine"].status == "fail", "no engine answers: a line, not a traceback"
    assert "gpus" in summary(load_recipe(str(tmp_path / "mi300.toml"), tmp_path), results)


def test_a_gpu_held_by_another_process_is_named_with_its_pid_and_command(tmp_path):
    machine = amd_machine(tmp_path, gpu=True)
    for pid, command in ((4242, b"python\0train.py\0"), (machine.own_pid, b"invoke\0doctor\0")):
        fds = machine.proc / str(pid) / "fd"
        fds.mkdir(parents=True)
        (fds / "3").symlink_to(machine.dev / "kfd")
        (fds / "4").symlink_to("/dev/null")
        (machine.proc / str(pid) / "cmdline").write_bytes(command)

    found = by_name(run_doctor(inputs(rocm_recipe(tmp_path), tmp_path), machine))

    assert found["gpus"].status == "ok"
    idle = found["gpus idle"]
    assert idle.status == "fail"
    assert "pid 4242 (python train.py)" in idle.detail and "doctor" not in idle.detail, "our own pid is skipped"


def test_devices_that_this_machine_lacks_are_named(tmp_path):
    found = by_name(run_doctor(inputs(rocm_recipe(tmp_path), tmp_path, devices=("0", "3")),
                               amd_machine(tmp_path, gpu=True)))
    assert found["gpus"].status == "fail" and "no GPU 3 here" in found["gpus"].detail


def test_commits_missing_from_the_clones_are_named(tmp_path):
    _, triton_commit = make_triton(tmp_path / "triton")
    _, pytorch_commit = make_pytorch(tmp_path / "pytorch", triton_commit)
    recipe = rocm_recipe(tmp_path, commit=pytorch_commit)

    found = by_name(run_doctor(inputs(recipe, tmp_path, pytorch_src=tmp_path / "pytorch", pr="feature-branch"),
                               amd_machine(tmp_path, gpu=True)))

    assert found["pytorch commits"].status == "fail"
    assert "--pr: commit feature-branch is not in the clone" in found["pytorch commits"].detail
    assert found["triton pin"].status == "skip"

    found = by_name(run_doctor(inputs(recipe, tmp_path, pytorch_src=tmp_path / "pytorch",
                                      triton_src=tmp_path / "pytorch"), amd_machine(tmp_path, gpu=True)))
    assert found["pytorch commits"].status == "ok" and found["triton pin"].status == "ok"
    assert found["triton commits"].status == "fail"
    assert f"commit {triton_commit} is not in the clone" in found["triton commits"].detail


def standin_trees(tmp_path: Path) -> tuple[Path, str]:
    """A Triton 3.4 clone (its setup.py fetches LLVM; nlohmann/json only for Proton, which prbench builds without)
    pinned by a PyTorch clone."""
    triton, _ = make_triton(tmp_path / "triton")
    triton_tree(tmp_path / "triton", "3.4")
    triton_commit = commit_all(triton, "triton 3.4 layout")
    _, pytorch_commit = make_pytorch(tmp_path / "pytorch", triton_commit)
    return rocm_recipe(tmp_path, commit=pytorch_commit), triton_commit


def test_every_download_the_build_needs_and_the_store_lacks_is_listed_with_the_fix(tmp_path):
    recipe, _ = standin_trees(tmp_path)
    machine = amd_machine(tmp_path, gpu=True, docker=lambda: FakeEngine(tmp_path))
    given = inputs(recipe, tmp_path, pytorch_src=tmp_path / "pytorch", triton_src=tmp_path / "triton")

    store = by_name(run_doctor(given, machine))["store"]

    assert store.status == "fail"
    assert "llvm (https://oaitriton.blob.core.windows.net/public/llvm-builds/llvm-b5cc222d-ubuntu-x64.tar.gz)" \
        in store.detail, "the LLVM build follows the base image's glibc (2.35: ubuntu)"
    assert "json (" not in store.detail, "Proton is off: the build fetches no nlohmann/json"
    assert "invoke store fetch --recipe mi300" in store.detail

    llvm = tmp_path / "llvm.tar.gz"
    llvm.write_bytes(b"stand-in llvm")
    Store.at(tmp_path / "store").add_file(llvm, kind="download", name=llvm.name, origin=(
        "https://oaitriton.blob.core.windows.net/public/llvm-builds/llvm-b5cc222d-ubuntu-x64.tar.gz"))
    store = by_name(run_doctor(given, machine))["store"]
    assert "llvm (" not in store.detail, "a stored download is no longer missing"


def test_a_tiny_cpu_docker_compare_asks_for_the_disk_one_took_here_and_a_full_size_one_for_more(tmp_path):
    """Measured here: a tiny cpu-docker compare added 1.4 GB of images to the engine, 0.24 GB to the store and
    0.29 GB of run directory. With 4 GB free, that compare goes ahead (the doctor once asked 8 GB of it and refused
    a machine with 6.2 GB free); full-size models need a larger run directory and are refused."""
    from foundation.formats.suite_request import SuiteRequest

    machine = Machine(free_bytes=lambda path: 4 * doctor.GB)
    found = {}
    for size in ("tiny", "full"):
        session = doctor.Session(inputs(RECIPES / "cpu-docker.toml", tmp_path, suite=SuiteRequest(size=size)),
                                 machine)
        session.client = FakeEngine(tmp_path)
        found[size] = doctor.check_disk(session)

    assert found["tiny"].status == "ok", found["tiny"].detail
    assert f"docker data root {tmp_path}" in found["tiny"].detail
    assert found["full"].status == "fail"
    assert "4.0 GB free, needs ~" in found["full"].detail and "measured here" in found["full"].detail


def test_a_base_image_python_older_than_3_10_fails(tmp_path):
    machine = amd_machine(tmp_path, gpu=True, docker=lambda: FakeEngine(tmp_path, python="3.8"))
    found = by_name(run_doctor(inputs(rocm_recipe(tmp_path), tmp_path), machine))
    assert found["base image"].status == "ok"
    assert found["base python"].status == "fail" and "python3 3.8" in found["base python"].detail


def test_a_missing_base_image_is_a_warning_with_pull(tmp_path):
    class Empty(FakeEngine):
        def get(self, ref: str) -> FakeImage:
            raise docker.errors.ImageNotFound(ref)

    machine = amd_machine(tmp_path, gpu=True, docker=lambda: Empty(tmp_path))
    assert by_name(run_doctor(inputs(rocm_recipe(tmp_path), tmp_path), machine))["base image"].status == "fail"
    pulled = by_name(run_doctor(inputs(rocm_recipe(tmp_path), tmp_path, pull=True), machine))["base image"]
    assert pulled.status == "warn" and "will pull" in pulled.detail


def test_doctor_exits_1_on_a_failed_check_with_the_summary_last():
    done = invoke_in_process("doctor", "--recipe", "rocm7-mi300", env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("fail  docker engine")
    assert any(line.startswith(("fail  gpus", "ok    gpus")) for line in lines)
    # last, what a compare with the recipe would run: the seed's experiment, from its [suite]
    assert lines[-1] == ("ok    experiment      54 models (all) at full size, training, amp, on cuda (recipe "
                         "rocm7-mi300); Inductor: cudagraphs off, max-autotune-pointwise on, buffer ops on")
    assert done.stderr.strip().startswith("doctor: ") and "failed for recipe rocm7-mi300" in done.stderr


@pytest.mark.integration
def test_doctor_passes_on_the_local_cpu_recipe_and_exits_0():
    done = invoke_in_process("doctor", "--recipe", "cpu-local")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith("ok    torch")
    assert done.stdout.splitlines()[-1].startswith("doctor: recipe cpu-local passed")


@pytest.mark.integration  # planning the local side asks the interpreter what its torch is
def test_compare_stops_at_a_failing_check_before_any_run_directory(tmp_path, monkeypatch):
    from prbench.compare.driver import CompareRequest, run_compare

    machine = amd_machine(tmp_path, gpu=False)
    monkeypatch.setattr(doctor, "this_machine", lambda: machine)
    request = CompareRequest(base="installed", pr="installed", recipe=load_recipe("cuda-local", RECIPES),
                             runs_dir=tmp_path / "runs")

    with pytest.raises(UserError) as info:
        run_compare(request)

    assert "gpus" in str(info.value) and "invoke doctor" in str(info.value)
    assert not (tmp_path / "runs").exists(), "nothing was written"


def test_compare_on_the_cpu_recipe_runs_only_the_cheap_checks():
    names = [c.name for c in doctor.checks_for(load_recipe("cpu-local", RECIPES), cheap_only=True)]
    assert names == ["disk"], "no torch import, no GPU check: the quick start stays as fast as it was"


@pytest.mark.docker
def test_the_real_engine_and_the_local_base_image_pass(tmp_path):
    client = require_engine()
    text = (RECIPES / "cpu-docker.toml").read_text(encoding="utf-8")
    digest = "sha256:eb6e3a090768b2b9e10d08a659955541af2dde55fa0ae63b0b91a43b0f93ffd3"
    recipe = tmp_path / "cpu-docker.toml"
    recipe.write_text(text.replace(digest, base_image_id(client)), encoding="utf-8")

    found = by_name(run_doctor(inputs(recipe, tmp_path), Machine(which=shutil.which)))

    assert found["docker engine"].status == "ok"
    assert found["base image"].status == "ok"
    assert found["base python"].status == "ok" and "python3 3.11" in found["base python"].detail
    assert found["store"].status == "fail" and "invoke store fetch --recipe cpu-docker" in found["store"].detail



def test_a_gpu_monitor_sampling_the_gpu_does_not_make_it_busy(tmp_path):
    """The H200 lease of 2026-11-30: gpu_check.sh samples `nvidia-smi --query-gpu ... -lms 200` through the whole
    compare, and the compare refused to start because that sampler held /dev/nvidia0."""
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    dev.mkdir()
    proc.mkdir()
    (dev / "nvidia0").touch()
    machine = Machine(dev=dev, proc=proc, own_pid=os.getpid(), which=lambda tool: None, docker=engine_down)
    holders = {621: b"nvidia-smi\0--query-gpu=timestamp,utilization.gpu,memory.used\0-lms\0200\0"}
    recipe = inputs(RECIPES / "cuda-local.toml", tmp_path)

    def hold(pid: int, command: bytes) -> None:
        fds = proc / str(pid) / "fd"
        fds.mkdir(parents=True)
        (fds / "3").symlink_to(dev / "nvidia0")
        (proc / str(pid) / "cmdline").write_bytes(command)

    for pid, command in holders.items():
        hold(pid, command)
    # cheap_only: the checks a local compare runs before its first stage.
    assert by_name(run_doctor(recipe, machine, cheap_only=True))["gpus idle"].status == "ok"

    hold(4242, b"/usr/bin/python3\0train.py\0")
    idle = by_name(run_doctor(recipe, machine, cheap_only=True))["gpus idle"]
    assert idle.status == "fail" and "pid 4242 (/usr/bin/python3 train.py)" in idle.detail
    assert "nvidia-smi" not in idle.detail
