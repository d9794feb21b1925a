"""``invoke doctor``: in seconds, before hours of build, whether a recipe can build and run on this machine.

Contract:

- Each check is one function of a ``Session`` returning a ``CheckResult`` (name, status, one-line detail). Status is
  ``ok``, ``warn`` (it will work, with a cost the line names), ``fail`` (it will not; the line says what to do) or
  ``skip`` (it needs what an earlier check found missing). A missing input (no ``--pytorch-src`` where the recipe
  needs a clone, an engine that does not answer) is a ``fail`` line, never a traceback.
- ``CHECKS`` lists, once, the checks of each kind of recipe (``kind_of``: ``source`` and ``wheel`` Docker recipes,
  ``venv`` and ``local`` ones) in the order they run; later checks reuse what earlier ones found (the engine's
  client, the base image, its interpreter, the resolved commits), kept on the ``Session``.
- ``run_doctor`` runs them, handing each result to ``emit`` as it comes; ``summary`` is the last line.
  ``invoke doctor`` exits 1 when any check failed. ``invoke compare`` calls ``preflight`` first: the same checks,
  stopping with a one-line error before any run directory exists; on a local recipe only the ``cheap`` ones (no
  torch import, no git), so the quick start stays as fast as it was.
- The machine is read through ``Machine`` (the ``/dev`` and ``/proc`` roots, our own pid, how to find a tool, how to
  reach Docker), so tests give fake roots.
- The disk each kind of build needs is ``DISK_ESTIMATES``, with the basis of each number; for a wheel recipe the
  ``image contents`` check also weighs what the wheels in the store take (``prbench.images.wheels.WheelContents``),
  and warns when the Docker data root or the build context has less free space.
- What the store must hold is what the build context takes (``prbench.images.build_context.downloads_at``: the
  files ``DOWNLOAD_INPUTS`` names, read from the clones at the commits; the pinned wheel sets through
  ``Store.wheels_at_hand``): a download the build learns to take appears here with no change to this module.
- A Triton A/B (``triton_pr``, with ``triton_base``) is checked as compare plans it: one PyTorch on both sides, the
  base's Triton (``--triton-base`` or the pinned one) and the PR's (``--triton-pr``'s commit, or a patch that must
  apply to the base's Triton), each resolved in the Triton clone and its downloads (its LLVM) looked for in the store.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundation.errors import UserError
from prbench.sides.recipes import Recipe

if TYPE_CHECKING:
    import git
    from rich.console import Console

    from foundation.formats.suite_request import SuiteRequest
    from prbench.images.content_store import Store, WheelTarget

STATUSES = ("ok", "warn", "fail", "skip")
MIN_IMAGE_PYTHON = (3, 10)  # what stages/ and the code it imports run on (the ROCm images ship 3.10)
TOOL_TIMEOUT_S = 5.0  # an smi tool that hangs (a wedged driver) must not hold the doctor up
GB = 10**9


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # one of STATUSES
    detail: str  # one line

    def line(self) -> str:
        return f"{self.status:<4}  {self.name:<15} {self.detail}"


@dataclass(frozen=True)
class DiskEstimate:
    """Free space one comparison (two sides) needs where the engine keeps images and in the store, and why."""

    docker_gb: float
    store_gb: float
    context_gb: float  # the build context, unpacked in the temp directory while an image builds
    basis: str


# Per (platform, kind): what a comparison of two sides needs. Not measured by this project for the GPU builds
# (no ROCm or CUDA build ran here); each basis says what the number is made of, so a user can judge it.
DISK_ESTIMATES: dict[tuple[str, str], DiskEstimate] = {
    ("rocm", "source"): DiskEstimate(
        60, 8, 5, "estimate: per side the unpacked PyTorch tree with submodules (~3 GB) plus its hipified copy, the "
        "CMake build tree of a ROCm build (~20 GB; PyTorch installs editable, so it stays in the image), Triton and "
        "its LLVM (~5 GB, shared when both sides pin the same Triton)"),
    ("cuda", "source"): DiskEstimate(
        50, 6, 5, "estimate: per side the unpacked PyTorch tree with submodules (~3 GB), the CMake build tree of a "
        "CUDA build (~20 GB, kept: editable install), Triton with its LLVM and NVIDIA tools (~5 GB, shared)"),
    ("cpu", "source"): DiskEstimate(
        30, 4, 5, "estimate: per side the unpacked PyTorch tree (~3 GB) and a CPU build tree (~10 GB, kept)"),
    ("rocm", "wheel"): DiskEstimate(30, 10, 5, "estimate: per side the ROCm torch and Triton wheels (~5 GB) "
                                               "unpacked"),
    ("cuda", "wheel"): DiskEstimate(20, 8, 4, "estimate: per side the CUDA torch wheel and its nvidia-* wheels "
                                              "(~4 GB) unpacked"),
    ("cpu", "wheel"): DiskEstimate(2, 0.5, 0.5, "measured here: a cpu-docker compare adds 1.4 GB of images to "
                                                "the engine (the base's torch layer and the PR's overlay) and "
                                                "0.24 GB of wheels to the store"),
    ("rocm", "local"): DiskEstimate(0, 0, 0, "the run directory only"),
    ("cuda", "local"): DiskEstimate(0, 0, 0, "the run directory only"),
    ("cpu", "local"): DiskEstimate(0, 0, 0, "the run directory only"),
    # venv recipes: docker_gb is the two venvs, kept under the runs directory (<runs>/venvs).
    ("rocm", "venv"): DiskEstimate(20, 10, 0, "estimate: per side the ROCm torch and Triton wheels (~5 GB) "
                                             "installed in a venv"),
    ("cuda", "venv"): DiskEstimate(15, 7, 0, "measured here: a venv of PyPI's torch 2.14.1 with its nvidia-* wheels, "
                                             "Triton and transformers takes 5.6 GB, and its 3.1 GB of wheels are "
                                             "copied in while it builds"),
    ("cpu", "venv"): DiskEstimate(3, 0.5, 0, "measured here: a venv of the CPU torch 2.13.0 wheel and "
                                             "transformers takes 1.2 GB; its wheels 0.24 GB in the store"),
}
# A run directory by model size. Measured at tiny size: README command 1 (the quick start) leaves 46 MB, a
# cpu-docker compare 0.29 GB (each side keeps Inductor's precompiled header, 141 MB). Not measured at larger sizes
# (graphs, traces and compiled kernels grow with the models): 2 GB leaves room for full-size model lists.
RUN_DIR_GB = {"tiny": 0.5, "small": 1.0, "full": 2.0}


@dataclass(frozen=True)
class DoctorInputs:
    """What the user gave ``invoke doctor`` (or ``invoke compare``)."""

    recipe: Recipe
    runs_dir: Path
    pytorch_src: Path | None = None
    triton_src: Path | None = None
    triton_ref: str | None = None  # a Triton commit to build instead of the recipe's or the PyTorch pin
    # A Triton A/B: the PR side's Triton commit or a patch on the base's, and the base's commit (None: the pinned)
    triton_pr: str | None = None
    triton_base: str | None = None
    base: str | None = None  # a ref in --pytorch-src, "installed", a wheel pin or None (the recipe's commit)
    pr: str | None = None  # the same, or a patch file
    store: Path | None = None
    devices: tuple[str, ...] = ()
    pull: bool = False
    python: str = sys.executable
    # What the compare would run: its suite request and the environment and Inductor config its flags add.
    suite: SuiteRequest | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    inductor_config: Mapping[str, Any] = field(default_factory=dict)


def _docker_client() -> Any:
    from prbench.images.docker_engine import docker_client

    return docker_client()


def _free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


@dataclass(frozen=True)
class Machine:
    """How the checks see this machine."""

    dev: Path = Path("/dev")
    proc: Path = Path("/proc")
    own_pid: int = field(default_factory=os.getpid)
    which: Callable[[str], str | None] = shutil.which
    docker: Callable[[], Any] = _docker_client  # raises UserError when no engine answers
    free_bytes: Callable[[Path], int] = _free_bytes


def this_machine() -> Machine:
    return Machine()


class Session:
    """One doctor run: the inputs, the machine, and what the checks found so far (each found once)."""

    def __init__(self, inputs: DoctorInputs, machine: Machine) -> None:
        self.inputs = inputs
        self.machine = machine
        self.client: Any = None  # the engine's client, once it answered
        self.base_image: Any = None  # the base image, once found locally
        self.target: WheelTarget | None = None  # the base image's interpreter
        self.pytorch_commits: dict[str, str] = {}  # side → full commit
        self.pytorch_repo: git.Repo | None = None
        self.triton_commits: dict[str, str] = {}  # side → full commit (as PyTorch pins it, or the recipe names it)
        self.triton_repo: git.Repo | None = None
        self.triton_ok = False
        self.gpus_found = False
        self._store: Store | None = None

    @property
    def recipe(self) -> Recipe:
        return self.inputs.recipe

    def store(self) -> Store:
        """One instance for every check: it remembers the wheels it hashed (a CUDA wheel set is gigabytes)."""
        from prbench.images.content_store import Store

        if self._store is None:
            self._store = Store.at(self.inputs.store)
        return self._store


def _ok(name: str, detail: str) -> CheckResult:
    return CheckResult(name, "ok", detail)


def _fail(name: str, detail: str) -> CheckResult:
    return CheckResult(name, "fail", detail)


def _skip(name: str, needs: str) -> CheckResult:
    return CheckResult(name, "skip", f"needs {needs} (see above)")


# --- Docker -------------------------------------------------------------------------------------------------------


def check_engine(s: Session) -> CheckResult:
    try:
        s.client = s.machine.docker()
    except UserError as exc:
        return _fail("docker engine", str(exc))
    version = s.client.version().get("Version", "?")
    return _ok("docker engine", f"answers (version {version})")


def check_base_image(s: Session) -> CheckResult:
    from prbench.images.docker_engine import find_base

    name = "base image"
    base = s.recipe.base_image
    assert base is not None, "a Docker recipe has a base image (the recipe check)"
    if s.client is None:
        return _skip(name, "the Docker engine")
    image, _ = find_base(s.client, base)
    if image is not None:
        s.base_image = image
        return _ok(name, f"{base.name} present ({image.short_id})")
    if s.inputs.pull:
        return CheckResult(name, "warn", f"{base.name} is not present; the build will pull {base.reference} "
                                         "(--pull, by digest)")
    return _fail(name, f"{base.reference} ({base.name}) is not present; pass --pull, or run: docker pull "
                       f"{base.reference}")


def check_base_python(s: Session) -> CheckResult:
    from prbench.images.wheels import image_wheel_target

    name = "base python"
    if s.base_image is None:
        return _skip(name, "the base image")
    if "python3" in s.recipe.apt_packages:
        return _ok(name, "the recipe installs python3 with apt (build.apt); its version is the distribution's")
    try:
        s.target = image_wheel_target(s.client, s.base_image.id)
    except UserError as exc:
        return _fail(name, str(exc))
    if needed := _stages_need(s.target.python_version):
        return _fail(name, f"python3 {s.target.python_version} in the base image; the stages need {needed} or newer")
    return _ok(name, f"python3 {s.target.python_version} ({s.target.describe()})")


def check_venv_python(s: Session) -> CheckResult:
    """A venv recipe's sides are venvs of ``--python``: its version and wheel tags pick the wheels."""
    from prbench.images.wheels import python_wheel_target

    name = "venv python"
    try:
        s.target = python_wheel_target(s.inputs.python)
    except UserError as exc:
        return _fail(name, str(exc))
    if needed := _stages_need(s.target.python_version):
        return _fail(name, f"{s.inputs.python} is Python {s.target.python_version}; the stages need {needed} or newer")
    return _ok(name, f"{s.inputs.python}: Python {s.target.python_version} ({s.target.describe()}), the venvs' base")


def _stages_need(version: str) -> str | None:
    """The oldest Python the stages run on, when ``version`` ("3.10.12") is older than it; None when it will do."""
    if tuple(int(part) for part in version.split(".")) < MIN_IMAGE_PYTHON:
        return ".".join(map(str, MIN_IMAGE_PYTHON))
    return None


# --- disk ---------------------------------------------------------------------------------------------------------


def check_disk(s: Session) -> CheckResult:
    name = "disk"
    estimate = DISK_ESTIMATES[(s.recipe.platform, kind_of(s.recipe))]
    size = s.inputs.suite.size if s.inputs.suite is not None else "full"
    wanted: list[tuple[str, Path, float]] = [("run directory", s.inputs.runs_dir, RUN_DIR_GB[size])]
    if s.recipe.is_venv:
        wanted += [("venvs", s.inputs.runs_dir, estimate.docker_gb), ("store", s.store().root, estimate.store_gb)]
    if s.recipe.is_docker:
        wanted.append(("store", s.store().root, estimate.store_gb))
        wanted.append(("build context", Path(tempfile.gettempdir()), estimate.context_gb))
        if s.client is not None:
            wanted.append(("docker data root", _docker_root(s), estimate.docker_gb))
    short, parts = _free_space([(what, path, gb * GB) for what, path, gb in wanted], s.machine.free_bytes)
    if short:
        return _fail(name, "; ".join(short) + f" ({estimate.basis})")
    unseen = "" if s.client is not None or not s.recipe.is_docker else "; the docker data root is unknown"
    return _ok(name, "; ".join(parts) + unseen)


def _docker_root(s: Session) -> Path:
    """Where the engine keeps its images."""
    return Path(s.client.info().get("DockerRootDir", "/var/lib/docker"))


def _free_space(wanted: list[tuple[str, Path, float]],
                free_bytes: Callable[[Path], int]) -> tuple[list[str], list[str]]:
    """(what is short, what is fine) of each file system the ``(what, path, bytes needed)`` land on: places that
    share one file system add their needs up."""
    seen: dict[int, list[str]] = {}  # st_dev → what shares that file system
    needs: dict[int, float] = {}
    free: dict[int, int] = {}
    for what, path, size in wanted:
        existing = _existing(path)
        if existing is None:
            continue
        device = existing.stat().st_dev
        seen.setdefault(device, []).append(f"{what} {path}")
        needs[device] = needs.get(device, 0.0) + size
        free[device] = free_bytes(existing)
    short = [f"{' + '.join(seen[d])}: {free[d] / GB:.1f} GB free, needs ~{_gb(needs[d])} GB"
             for d in seen if free[d] < needs[d]]
    fine = [f"{' + '.join(seen[d])}: {free[d] / GB:.0f} GB free (needs ~{_gb(needs[d])})"
            for d in seen if free[d] >= needs[d]]
    return short, fine


def _gb(size: float) -> str:
    """Whole gigabytes, or one decimal under ten (a wheel image of 1.4 GB is not "~1")."""
    return f"{size / GB:.1f}" if size < 10 * GB else f"{size / GB:.0f}"


def _existing(path: Path) -> Path | None:
    """The path, or its nearest existing parent (a store or runs directory not made yet lands there)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return None


# --- GPUs ---------------------------------------------------------------------------------------------------------


def check_gpus(s: Session) -> CheckResult:
    name = "gpus"
    dev, platform = s.machine.dev, s.recipe.platform
    if platform == "rocm":
        renders = sorted(p.name for p in (dev / "dri").glob("renderD*"))
        if not (dev / "kfd").exists() or not renders:
            missing = f"{dev}/kfd" if not (dev / "kfd").exists() else f"{dev}/dri/renderD*"
            return _fail(name, f"no AMD GPU: {missing} is missing (recipe {s.recipe.name} runs on ROCm; is the "
                               "amdgpu driver loaded, and are /dev/kfd and /dev/dri passed to this machine?)")
        count = len(renders)
        found = f"/dev/kfd and {count} render node(s)"
    else:
        nodes = sorted((p.name for p in dev.glob("nvidia[0-9]*")), key=lambda n: int(n.removeprefix("nvidia")))
        if not nodes:
            return _fail(name, f"no NVIDIA GPU: no {dev}/nvidia0 (recipe {s.recipe.name} runs on CUDA; is the "
                               "nvidia driver loaded?)")
        count = len(nodes)
        found = ", ".join(nodes)
    s.gpus_found = True
    wanted = [d for d in s.inputs.devices if d != "cpu"]
    absent = [d for d in wanted if not d.isdigit() or int(d) >= count]
    if absent:
        return _fail(name, f"--devices {','.join(s.inputs.devices)}: no GPU {absent[0]} here ({found})")
    return _ok(name, f"{found}" + (f"; --devices {','.join(wanted)} present" if wanted else ""))


@dataclass(frozen=True)
class Holder:
    pid: int
    command: str
    device: str


def device_holders(proc: Path, pattern: re.Pattern[str], own_pid: int) -> tuple[list[Holder], int]:
    """Processes with an open file descriptor on a device path matching ``pattern`` (read from
    ``<proc>/<pid>/fd``), and how many processes could not be read (another user's, without root)."""
    holders: list[Holder] = []
    unreadable = 0
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == own_pid:
            continue
        try:
            links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except PermissionError:
            unreadable += 1
            continue
        except OSError:  # the process ended meanwhile
            continue
        device = next((link for link in links if pattern.fullmatch(link)), None)
        if device is not None:
            holders.append(Holder(int(entry.name), _command(entry), device))
    return sorted(holders, key=lambda h: h.pid), unreadable


def _command(entry: Path) -> str:
    try:
        raw = (entry / "cmdline").read_bytes()
    except OSError:
        return "?"
    words = raw.rstrip(b"\0").split(b"\0")
    text = " ".join(w.decode("utf-8", "replace") for w in words if w) or "?"
    return text[:80]


# nvidia-persistenced keeps every NVIDIA device open by design, to keep the driver loaded; it runs no work. The
# vendors' query tools open the device to read counters and launch nothing: benchmarks/gpu_check.sh samples
# `nvidia-smi --query-gpu=... -lms 200` through a whole compare (the H200 lease of 2026-11-30 was refused by this
# check because of it).
_IDLE_HOLDERS = ("nvidia-persistenced", "nvidia-smi", "rocm-smi", "amd-smi")


def check_gpus_idle(s: Session) -> CheckResult:
    name = "gpus idle"
    if not s.gpus_found:
        return _skip(name, "the GPUs")
    if s.recipe.platform == "rocm":
        pattern = re.compile(re.escape(str(s.machine.dev / "kfd")))
    else:
        wanted = [d for d in s.inputs.devices if d.isdigit()]
        numbers = "|".join(wanted) if wanted else "[0-9]+"
        pattern = re.compile(re.escape(str(s.machine.dev / "nvidia")) + f"(?:{numbers})")
    holders, unreadable = device_holders(s.machine.proc, pattern, s.machine.own_pid)
    busy = [h for h in holders if Path(h.command.split(" ", 1)[0]).name not in _IDLE_HOLDERS]
    hidden = f" ({unreadable} process(es) of other users not readable without root)" if unreadable else ""
    if busy:
        listed = ", ".join(f"pid {h.pid} ({h.command}) on {h.device}" for h in busy)
        return _fail(name, f"busy: {listed}; timings next to another GPU job are not comparable{hidden}")
    return _ok(name, "no other process holds " + ("/dev/kfd" if s.recipe.platform == "rocm" else "the NVIDIA devices")
               + hidden)


_SMI = {
    "rocm": (("amd-smi", ("amd-smi", "list")), ("rocm-smi", ("rocm-smi", "--showuse"))),
    "cuda": (("nvidia-smi", ("nvidia-smi", "--query-gpu=index,name,utilization.gpu,memory.used",
                             "--format=csv,noheader")),),
}


def check_gpu_tools(s: Session) -> CheckResult:
    """What the vendor's tool says about the GPUs, in one line (the first tool found)."""
    name = "gpu tool"
    tools = _SMI[s.recipe.platform]
    for tool, command in tools:
        path = s.machine.which(tool)
        if path is None:
            continue
        try:
            done = subprocess.run([path, *command[1:]], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return CheckResult(name, "warn", f"{tool} did not answer: {exc}")
        lines = [" ".join(line.split()) for line in (done.stdout or done.stderr).splitlines() if line.strip()]
        said = "; ".join(line for line in lines if not set(line) <= set("=-"))[:200] or "(nothing)"
        if done.returncode != 0:
            return CheckResult(name, "warn", f"{tool} exited {done.returncode}: {said}")
        return _ok(name, f"{tool}: {said}")
    return CheckResult(name, "skip", f"none of {', '.join(tool for tool, _ in tools)} is installed")


# --- sources ------------------------------------------------------------------------------------------------------


def _sides(s: Session) -> dict[str, tuple[str, str]]:
    """The PyTorch ref each side builds, and what names it: --base (``installed``: the recipe's commit), --pr unless
    it is a patch file (built on base's commit) or ``installed``; without either flag, the recipe's commit."""
    assert s.recipe.pytorch is not None
    base, pr = s.inputs.base, s.inputs.pr
    sides = {"base": (s.recipe.pytorch.commit, f"recipe {s.recipe.name}: pytorch.commit")
             if base in (None, "installed") else (str(base), "--base")}
    if pr and pr != "installed" and not Path(pr).is_file():
        sides["pr"] = (pr, "--pr")
    if s.inputs.triton_pr is not None:  # a Triton A/B: the PR side builds the base's PyTorch
        sides["pr"] = sides["base"]
    return sides


def check_pytorch_commits(s: Session) -> CheckResult:
    from prbench.sides.pins import clone_path, open_repo, resolve_commit

    name = "pytorch commits"
    try:
        s.pytorch_repo = open_repo(clone_path(s.recipe, "pytorch", s.inputs.pytorch_src), "--pytorch-src")
        for side, (ref, what) in _sides(s).items():
            s.pytorch_commits[side] = resolve_commit(s.pytorch_repo, ref, what)
    except UserError as exc:
        s.pytorch_commits.clear()  # the later checks need every side's commit
        return _fail(name, str(exc))
    return _ok(name, ", ".join(f"{side} {commit[:12]}" for side, commit in s.pytorch_commits.items())
               + f" in {s.pytorch_repo.working_dir}")


def check_triton_pin(s: Session) -> CheckResult:
    from prbench.sides.pins import TRITON_REF, triton_pin

    name = "triton pin"
    if s.pytorch_repo is None or not s.pytorch_commits:
        return _skip(name, "the PyTorch commits")
    assert s.recipe.triton is not None
    sources: dict[str, str] = {}
    if s.inputs.triton_ref is not None:  # resolved in the Triton clone by the next check
        for side in s.pytorch_commits:
            s.triton_commits[side], sources[side] = s.inputs.triton_ref, TRITON_REF
        return _ok(name, f"{s.inputs.triton_ref} ({TRITON_REF}) on every side")
    given = _triton_ab_commits(s.inputs)
    try:
        for side, commit in s.pytorch_commits.items():
            if side in given:  # resolved in the Triton clone by the next check
                s.triton_commits[side], sources[side] = given[side]
                continue
            pin = triton_pin(s.recipe.triton.commit, s.pytorch_repo, commit, s.recipe.platform)
            s.triton_commits[side] = pin.commit
            sources[side] = pin.source
    except UserError as exc:
        return _fail(name, str(exc))
    if s.inputs.triton_pr is not None and "pr" not in given:  # a patch: built on the base's Triton
        s.triton_commits["pr"], sources["pr"] = s.triton_commits["base"], f"{sources['base']} + --triton-pr patch"
    return _ok(name, ", ".join(f"{side} {s.triton_commits[side][:12]} ({sources[side]})" for side in sources))


def _triton_ab_commits(inputs: DoctorInputs) -> dict[str, tuple[str, str]]:
    """A Triton A/B's Triton commits as its flags name them: side → (commit or ref, flag); a patch as --triton-pr
    and a pinned base are left to the pin."""
    given: dict[str, tuple[str, str]] = {}
    if inputs.triton_pr is None:
        return given
    if inputs.triton_base is not None:
        given["base"] = (inputs.triton_base, "--triton-base")
    if not Path(inputs.triton_pr).is_file():
        given["pr"] = (inputs.triton_pr, "--triton-pr")
    return given


def check_triton_commits(s: Session) -> CheckResult:
    from prbench.sides.patches import check_patch_at_commit
    from prbench.sides.pins import clone_path, open_repo, resolve_commit

    name = "triton commits"
    if not s.triton_commits:
        return _skip(name, "the Triton pin")
    flags = {side: flag for side, (_, flag) in _triton_ab_commits(s.inputs).items()}
    patch = s.inputs.triton_pr if s.inputs.triton_pr is not None and Path(s.inputs.triton_pr).is_file() else None
    try:
        s.triton_repo = open_repo(clone_path(s.recipe, "triton", s.inputs.triton_src), "--triton-src")
        for side, commit in s.triton_commits.items():
            s.triton_commits[side] = resolve_commit(s.triton_repo, commit, flags.get(side, f"triton commit of {side}"))
        if patch is not None:  # a Triton A/B's patch must apply to the base's Triton, as the build applies it
            check_patch_at_commit(Path(patch), Path(s.triton_repo.working_dir), s.triton_commits["base"],
                                  "--triton-pr", "Triton")
    except UserError as exc:
        return _fail(name, str(exc))
    s.triton_ok = True
    commits = sorted(set(s.triton_commits.values()))
    applied = f"; {Path(patch).name} applies to the base's" if patch is not None else ""
    return _ok(name, f"{', '.join(c[:12] for c in commits)} in {s.triton_repo.working_dir}{applied}")


# --- the store ----------------------------------------------------------------------------------------------------


def check_store(s: Session) -> CheckResult:
    """Every download the build takes from the store, and the pinned wheel sets, are there."""
    name = "store"
    if s.target is None and "python3" in s.recipe.apt_packages and s.base_image is not None:
        return CheckResult(name, "skip", "the image's python3 comes from apt (build.apt): its wheels and downloads "
                                         "are resolved when it builds")
    if s.target is None:
        return _skip(name, "the base image's python3")
    store = s.store()
    fix = f"fetch them first: {_fetch_command(s.inputs)}"
    try:
        missing = _missing_downloads(s, store) + _missing_wheels(s, store)
    except UserError as exc:
        return _fail(name, str(exc))
    if missing:
        return _fail(name, f"missing {', '.join(missing)}; {fix}")
    unpinned = "" if s.recipe.is_wheel else ("; the source trees' build requirements are resolved by pip when the "
                                             "image builds (the package index must answer)")
    return _ok(name, f"holds every download and pinned wheel the build takes ({store.root}){unpinned}")


def _fetch_command(inputs: DoctorInputs) -> str:
    """The ``invoke store fetch`` that fills the store for what this doctor checked (the same clones and sides)."""
    words = ["invoke store fetch", f"--recipe {inputs.recipe.name}"]
    # A Triton A/B's one fetch takes both sides' Triton downloads (the PR's may pin another LLVM); its PyTorch is
    # --base's on both sides, so --pr is left out.
    pr = None if inputs.triton_pr is not None else inputs.pr
    for flag, value in (("--pytorch-src", inputs.pytorch_src), ("--triton-src", inputs.triton_src),
                        ("--triton-ref", inputs.triton_ref), ("--triton-base", inputs.triton_base),
                        ("--triton-pr", inputs.triton_pr), ("--base", inputs.base), ("--pr", pr),
                        ("--store", inputs.store)):
        if value is not None and not (flag == "--pr" and Path(str(value)).is_file()):
            words.append(f"{flag} {shlex.quote(str(value))}")
    return " ".join(words)


def _missing_downloads(s: Session, store: Store) -> list[str]:
    from prbench.images.build_context import downloads_at, stored_download

    if s.recipe.is_wheel:
        return []
    if not s.triton_ok:
        raise UserError("cannot list the build's downloads without the Triton commits (see above)")
    assert s.pytorch_repo is not None and s.triton_repo is not None and s.target is not None
    target = s.target
    client, base = s.client, s.base_image

    def rocm_version() -> str:
        from prbench.images.pytorch_setup import image_rocm_version

        return image_rocm_version(client, base.id)

    missing: list[str] = []
    for side in s.pytorch_commits:
        downloads = downloads_at(s.recipe, (s.pytorch_repo, s.pytorch_commits[side]),
                                 (s.triton_repo, s.triton_commits[side]), lambda: target, rocm_version)
        missing += [f"{d.key} ({d.url})" for d in downloads if stored_download(store, d) is None]
    return list(dict.fromkeys(missing))


def _missing_wheels(s: Session, store: Store) -> list[str]:
    assert s.target is not None
    missing = []
    for what, requirements in (("wheel pins", [pin.requirement for pin in s.recipe.wheel_pins]),
                               ("[pip] extra", list(s.recipe.pip_extra))):
        if requirements and store.wheels_at_hand(requirements, s.target) is None:
            missing.append(f"the wheels of {what} ({', '.join(requirements)}) for {s.target.describe()}")
    return missing


# --- what a wheel image will contain ---------------------------------------------------------------------------


def check_image_contents(s: Session) -> CheckResult:
    """What each side's image will contain (torch, the Triton its wheel requires, the CUDA/ROCm library wheels, the
    size), read from the store's wheels; a warning when the Docker data root, the store or the build context has
    less free space than those images take."""
    from prbench.images.wheels import wheel_contents

    name = "venv contents" if s.recipe.is_venv else "image contents"
    if s.target is None:
        return _skip(name, "the base image's python3")
    store = s.store()
    parts: list[str] = []
    image_bytes = context_bytes = 0
    for side, requirements in _wheel_sides(s).items():
        try:
            contents = wheel_contents(store, [(requirements, "pinned"), (list(s.recipe.pip_extra), "[pip] extra")],
                                      s.target)
        except UserError as exc:
            return _fail(name, str(exc))
        parts.append(f"{side}: {contents.line('the venv' if s.recipe.is_venv else 'the image')}")
        image_bytes += contents.image_bytes or 0
        context_bytes = max(context_bytes, contents.wheel_bytes)
    wanted = [("build context", Path(tempfile.gettempdir()), float(context_bytes))]
    if s.recipe.is_venv:  # the venvs, with their wheels copied in while each builds, in the runs directory
        wanted = [("venvs", s.inputs.runs_dir, float(image_bytes))]
    if s.client is not None:
        wanted.append(("docker data root", _docker_root(s), float(image_bytes)))
    short, _ = _free_space(wanted, s.machine.free_bytes)
    if short:
        return CheckResult(name, "warn", "; ".join(parts) + "; short of disk: " + "; ".join(short))
    return _ok(name, "; ".join(parts))


def _wheel_sides(s: Session) -> dict[str, list[str]]:
    """The wheel requirements of each image a compare would build: ``--base``/``--pr`` naming a wheel, else the
    recipe's pins (a patch as --pr is a layer on base's image, so no image of its own)."""
    from prbench.images.wheels import is_wheel_spec

    pins = [pin.requirement for pin in s.recipe.wheel_pins]
    triton = [pin.requirement for pin in s.recipe.wheel_pins[1:]]
    sides: dict[str, list[str]] = {}
    for side, spec in (("base", s.inputs.base), ("pr", s.inputs.pr)):
        wanted = [spec, *triton] if spec is not None and is_wheel_spec(spec) else pins
        if side == "base" or (spec is not None and is_wheel_spec(spec)):
            sides[side] = wanted
    return sides


# --- the experiment -----------------------------------------------------------------------------------------------


def check_experiment(s: Session) -> CheckResult:
    """Not a check but the answer to "what would this compare run": the report's Experiment line, from the settings
    its stages would get (the recipe's ``[suite]`` and Inductor settings under the flags)."""
    from analysis.report.sections.experiment import describe_experiment
    from prbench.sides.variants import Variant

    name = "experiment"
    if s.inputs.suite is None:
        return CheckResult(name, "skip", "no suite settings given")
    variant = Variant("base", s.recipe, env=dict(s.inputs.env), inductor_config=dict(s.inputs.inductor_config))
    line = describe_experiment(s.inputs.suite.inputs(), inductor_config=variant.merged_inductor_config(),
                               env=variant.stage_environment(s.inputs.runs_dir / "RUN" / "base"),
                               extra_env=dict(s.inputs.env), recipe=s.recipe.name)
    return _ok(name, line.removeprefix("Experiment: "))


# --- local recipes ------------------------------------------------------------------------------------------------


def check_local_torch(s: Session) -> CheckResult:
    from prbench.compare.variant_plan import describe_local_environment

    name = "torch"
    try:
        facts = describe_local_environment(s.inputs.python).facts
    except UserError as exc:
        return _fail(name, str(exc))
    device = facts.get("gpu") or "no GPU visible to torch"
    return _ok(name, f"torch {facts['torch']} on Python {facts['python']} ({s.inputs.python}); {device}")


def check_triton_patch(s: Session) -> CheckResult:
    """A local recipe's Triton A/B: the --triton-pr patch applies to the installed Triton (its overlay is built in a
    scratch directory, as compare builds it for the PR side)."""
    from prbench.sides.overlay import installed_package_dir
    from prbench.sides.triton_overlay import PACKAGE, triton_overlay

    name = "triton patch"
    if s.inputs.triton_pr is None:
        return CheckResult(name, "skip", "no --triton-pr (a Triton A/B of the installed Triton)")
    try:
        overlay = triton_overlay(Path(s.inputs.triton_pr))
        package = installed_package_dir(s.inputs.python, PACKAGE)
        overlay.check_applies(package)
    except UserError as exc:
        return _fail(name, str(exc))
    return _ok(name, f"{Path(s.inputs.triton_pr).name} applies to the installed Triton ({package}) as an overlay of "
                     f"{len(overlay.files)} file(s)")


# --- the list -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[Session], CheckResult]
    cheap: bool = False  # no container, no git, no torch import: runs before a local compare
    gpu: bool = False  # only for recipes that run on a GPU


_ENGINE = Check("docker engine", check_engine)
_BASE = Check("base image", check_base_image)
_PYTHON = Check("base python", check_base_python)
_DISK = Check("disk", check_disk, cheap=True)
_GPUS = (Check("gpus", check_gpus, cheap=True, gpu=True), Check("gpus idle", check_gpus_idle, cheap=True, gpu=True),
         Check("gpu tool", check_gpu_tools, gpu=True))
_SOURCES = (Check("pytorch commits", check_pytorch_commits), Check("triton pin", check_triton_pin),
            Check("triton commits", check_triton_commits))
_STORE = Check("store", check_store)
_CONTENTS = Check("image contents", check_image_contents)

_EXPERIMENT = Check("experiment", check_experiment)

# The checks of each kind of recipe, in order; last, what a compare with this recipe would run.
CHECKS: dict[str, tuple[Check, ...]] = {
    "source": (_ENGINE, _BASE, _PYTHON, _DISK, *_GPUS, *_SOURCES, _STORE, _EXPERIMENT),
    "wheel": (_ENGINE, _BASE, _PYTHON, _DISK, *_GPUS, _STORE, _CONTENTS, _EXPERIMENT),
    "local": (Check("torch", check_local_torch), Check("triton patch", check_triton_patch), *_GPUS, _DISK,
              _EXPERIMENT),
    "venv": (Check("venv python", check_venv_python), *_GPUS, _DISK, _CONTENTS, _EXPERIMENT),
}


def kind_of(recipe: Recipe) -> str:
    if recipe.is_venv:
        return "venv"
    if not recipe.is_docker:
        return "local"
    return "wheel" if recipe.is_wheel else "source"


def checks_for(recipe: Recipe, cheap_only: bool = False) -> list[Check]:
    on_gpu = recipe.platform != "cpu"
    return [c for c in CHECKS[kind_of(recipe)] if (on_gpu or not c.gpu) and (c.cheap or not cheap_only)]


def run_doctor(inputs: DoctorInputs, machine: Machine | None = None, emit: Callable[[CheckResult], None] | None = None,
               cheap_only: bool = False) -> list[CheckResult]:
    """Run the recipe's checks in order; each result goes to ``emit`` as soon as it is known."""
    session = Session(inputs, machine or this_machine())
    results = []
    for check in checks_for(inputs.recipe, cheap_only):
        result = check.run(session)
        assert result.status in STATUSES and "\n" not in result.detail, result
        results.append(result)
        if emit is not None:
            emit(result)
    return results


def summary(recipe: Recipe, results: list[CheckResult]) -> str:
    failed = [r.name for r in results if r.status == "fail"]
    warned = sum(r.status == "warn" for r in results)
    warnings = f"; {warned} warning(s)" if warned else ""
    if failed:
        return (f"doctor: {len(failed)} of {len(results)} checks failed for recipe {recipe.name} "
                f"({', '.join(failed)}){warnings}")
    return f"doctor: recipe {recipe.name} passed {len(results)} checks{warnings}"


def preflight(inputs: DoctorInputs, console: Console, machine: Machine | None = None) -> None:
    """``invoke compare``'s first step: the doctor's checks (on a local recipe the cheap ones); a failure stops the
    compare, with the failing lines printed and the summary as its one-line error, before anything is written."""
    local = not inputs.recipe.is_docker and not inputs.recipe.is_venv

    def emit(result: CheckResult) -> None:
        if not local or result.status in ("warn", "fail"):
            console.print(result.line(), markup=False, highlight=False)

    results = run_doctor(inputs, machine, emit, cheap_only=local)
    if any(r.status == "fail" for r in results):
        raise UserError(summary(inputs.recipe, results) + "; invoke doctor shows every check")
    if not local:
        console.print(summary(inputs.recipe, results), markup=False, highlight=False)
