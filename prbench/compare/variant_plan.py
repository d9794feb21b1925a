"""Choose the cheapest faithful environment for each side of a comparison.

``--base``/``--pr`` accept ``installed`` (the installed torch as is), a patch file (applied on top of the
base), or a git ref in ``--pytorch-src``. On the local runner a ref becomes the installed torch plus a Python
overlay of the diff from the installed torch's commit to that ref — refused, with the reason, when the diff
touches compiled code (that side then needs a Docker recipe, which rebuilds PyTorch at the ref).

With a wheel-pinned Docker recipe a side is ``installed`` (the recipe's pinned wheel), a wheel pin
(``torch==2.14.0.dev20261101+cpu``: pip downloads it into the store, and its sha256 pins it from then on) or,
for the PR, a patch file applied to the wheel's torch package in the image (an overlay layer). A venv recipe's sides
are planned the same way, for the interpreter whose venvs they will be (the PR's patch: an overlay as on the local
runner, on the base's venv).

A Triton A/B (`TritonAB`) keeps PyTorch the same on both sides and builds two Tritons, PyTorch's layers first so
that both images share them: asked for with ``--triton-base``/``--triton-pr``, or found in a PyTorch PR that only
moves PyTorch's Triton pin (`prbench.sides.pins.only_moves_triton_pin`; PyTorch is then built at the base
commit on both sides, so its layers are one build).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundation.errors import UserError
from foundation.formats.triton_ab import FLAGS, INSTALLED_OVERLAY, PIN_BUMP, TritonAB
from prbench.images.image_lock import cpu_facts, cpu_model
from prbench.sides import pins
from prbench.sides.overlay import PythonOverlay, installed_package_dir
from prbench.sides.recipes import UNPINNED, Recipe, WheelPin
from prbench.sides.triton_overlay import patch_label, triton_overlay

if TYPE_CHECKING:
    import git

    from prbench.images.content_store import Store, WheelTarget
    from prbench.sides.pins import TritonPin

INSTALLED = "installed"


@dataclass(frozen=True)
class VariantPlan:
    name: str
    pytorch_ref: str  # full SHA, or "installed"
    overlay: PythonOverlay | None
    how: str  # one line for the report: how this side's environment was made
    wheel: WheelPin | None = None  # a wheel recipe: the torch wheel this side installs
    triton: TritonPin | None = None  # a source recipe: the Triton commit this side's image builds, and its origin
    triton_patch: Path | None = None  # a Triton A/B's --triton-pr patch, applied to that Triton commit


@dataclass(frozen=True)
class LocalEnvironment:
    """The interpreter whose torch both sides of a local comparison run on, as it describes itself: Python, torch
    and its commit, Triton, CUDA/HIP, the GPU and the host (what a local side's lock records)."""

    facts: dict[str, Any]

    @property
    def torch_version(self) -> str:
        return str(self.facts["torch"])

    @property
    def torch_commit(self) -> str | None:
        return self.facts.get("torch_git") or None


@dataclass(frozen=True)
class ComparePlan:
    base: VariantPlan
    pr: VariantPlan
    installed_commit: str | None
    merge_base: str | None
    local: LocalEnvironment | None = None  # the local runner's interpreter (None for Docker recipes)
    triton_ab: TritonAB | None = None  # one PyTorch, two Tritons (built PyTorch-first)


_NO_TORCH = 3  # the describing process's exit status when torch does not import
_DESCRIBE = f"""\
import json, platform, sys
try:
    import torch
except Exception:
    sys.exit({_NO_TORCH})
try:
    import triton; tv = triton.__version__
except ImportError:
    tv = None
print(json.dumps({{'python': sys.version.split()[0], 'executable': sys.executable, 'torch': torch.__version__,
                  'torch_git': getattr(torch.version, 'git_version', None), 'triton': tv,
                  'cuda': torch.version.cuda, 'hip': torch.version.hip, 'machine': platform.machine(),
                  'gpu': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                  'kernel': platform.release()}}))
"""


def describe_local_environment(python: str) -> LocalEnvironment:
    """``python`` describes its torch environment, once per comparison: importing torch takes seconds, and both
    sides and the plan ask the same interpreter."""
    proc = subprocess.run([python, "-c", _DESCRIBE], capture_output=True, text=True)
    if proc.returncode == _NO_TORCH:
        raise UserError(f"--python {python}: cannot import torch")
    if proc.returncode != 0:
        raise UserError(f"--python {python}: cannot describe its torch environment")
    return LocalEnvironment(json.loads(proc.stdout))


def plan_local(base: str, pr: str, pytorch_src: Path | None, python: str,
               triton_pr: str | None = None) -> ComparePlan:
    """Plan both sides for the local runner (installed torch + overlays); ``triton_pr``, a Python-only Triton patch:
    a Triton A/B of the installed Triton, the PR side that Triton with the patch as an overlay."""
    if triton_pr is not None:
        return _plan_local_triton(base, Path(triton_pr), python)
    repo = pins.open_repo(pytorch_src) if pytorch_src else None
    for name, spec in (("base", base), ("pr", pr)):
        _refuse_what_needs_no_torch(name, spec, repo)
    local = describe_local_environment(python)
    version, installed_commit = local.torch_version, local.torch_commit
    base_plan = _plan_side("base", base, None, repo, installed_commit, version)
    pr_plan = _plan_side("pr", pr, base_plan, repo, installed_commit, version)
    package = None
    for side in (base_plan, pr_plan):
        if side.overlay is not None:  # a PR that does not apply is found now, not after the base side's work
            package = package or installed_package_dir(python)
            side.overlay.check_applies(package)
    merge_base = None
    if repo is not None and _is_sha(base_plan.pytorch_ref) and _is_sha(pr_plan.pytorch_ref):
        merge_base = pins.merge_base(repo, base_plan.pytorch_ref, pr_plan.pytorch_ref)
    return ComparePlan(base=base_plan, pr=pr_plan, installed_commit=installed_commit, merge_base=merge_base,
                       local=local)


def _plan_local_triton(base: str, patch: Path, python: str) -> ComparePlan:
    """One installed torch and Triton on both sides; the PR's Triton is the installed one with ``patch`` as an
    overlay (a shadow ``triton`` package first on the PR side's PYTHONPATH), seen to apply before any work."""
    if base != INSTALLED:
        raise UserError(f"--base {base}: a Triton A/B on a local recipe runs the installed torch as is on both sides; "
                        "leave --base out (or give 'installed')")
    overlay = triton_overlay(patch)
    overlay.check_applies(installed_package_dir(python, overlay.package))  # found without importing torch
    local = describe_local_environment(python)
    version = local.facts.get("triton") or "installed"  # found above; None: it did not import with torch
    base_plan = VariantPlan("base", INSTALLED, None, f"installed torch {local.torch_version}, Triton {version} as is")
    pr_plan = VariantPlan("pr", INSTALLED, overlay, f"installed torch {local.torch_version}, Triton {version} + "
                          f"Python overlay {patch.name} ({len(overlay.files)} files)")
    record = TritonAB(version, version, None, None, INSTALLED_OVERLAY, pytorch=local.torch_commit,
                      pr_patch=patch_label(patch))
    return ComparePlan(base_plan, pr_plan, local.torch_commit, None, local=local, triton_ab=record)


def plan_docker(base: str, pr: str, recipe: Recipe, pytorch_src: Path | None,
                store: Store | None = None, *, triton_src: Path | None = None,
                triton_ref: str | None = None, triton_base: str | None = None,
                triton_pr: str | None = None) -> ComparePlan:
    """Plan both sides for a Docker recipe: PyTorch is built at each side's commit (a patch PR: base + overlay),
    with the Triton commit ``--triton-ref`` names or else the one the recipe or that PyTorch commit pins, found in
    the Triton clone now (before anything is built); or, for a wheel recipe, installed from each side's wheel.
    ``triton_pr`` (with ``triton_base``, default the base's Triton) makes it a Triton A/B of the base PyTorch, as a
    PR that only moves the Triton pin does."""
    from prbench.sides.patches import check_patch_at_commit

    clones = pins.check_source_flags(recipe, pytorch_src, triton_src, triton_ref, triton_pr)
    if clones is None:
        from prbench.images.content_store import Store

        return _plan_wheels(base, pr, recipe, store or Store.at())
    repo = pins.open_repo(clones[0])
    base_ref = recipe.pytorch.commit if base == INSTALLED and recipe.pytorch else base
    base_sha = pins.resolve(repo, base_ref, "--base")

    def side(name: str, sha: str, overlay: PythonOverlay | None = None, layer: str = "",
             pin: TritonPin | None = None) -> VariantPlan:
        _, pin = pins.triton_source(recipe, repo, sha, clones[1], triton_ref, pin)
        how = f"image of {recipe.name} at PyTorch {sha[:12]}, Triton {pin.commit[:12]} ({pin.source}){layer}"
        return VariantPlan(name, sha, overlay, how, triton=pin)

    if triton_pr is not None:
        triton_repo = pins.open_repo(clones[1], "--triton-src")
        base_pin = (pins.TritonPin(pins.resolve_commit(triton_repo, triton_base, pins.TRITON_BASE), pins.TRITON_BASE)
                    if triton_base is not None else None)
        base_side = side("base", base_sha, pin=base_pin)
        if Path(triton_pr).is_file():  # a patch on the base's Triton
            assert base_side.triton is not None
            patch = Path(triton_pr).resolve()
            check_patch_at_commit(patch, clones[1], base_side.triton.commit, "--triton-pr", "Triton")
            patched = dataclasses.replace(side("pr", base_sha, pin=base_side.triton,
                                               layer=f" + patch {patch.name}"), triton_patch=patch)
            return _triton_ab(base_side, patched, clones[1], FLAGS,
                              pr_patch=patch_label(patch))
        pr_pin = pins.TritonPin(pins.resolve_commit(triton_repo, triton_pr, pins.TRITON_PR), pins.TRITON_PR)
        return _triton_ab(base_side, side("pr", base_sha, pin=pr_pin), clones[1], FLAGS)
    base_plan = side("base", base_sha)
    if Path(pr).is_file():
        overlay = PythonOverlay.from_patch_file(Path(pr), flag="--pr")
        overlay.check_applies_to_commit(Path(repo.working_dir), base_sha)
        return ComparePlan(base_plan, side("pr", base_sha, overlay,
                                           f" + overlay layer {Path(pr).name} ({len(overlay.files)} files)"),
                           None, None)
    pr_sha = pins.resolve(repo, pr, "--pr")
    # Only where the pin decides what is built (neither the recipe nor --triton-ref names the Triton commit).
    pinned = recipe.triton is not None and recipe.triton.from_pytorch_pin and triton_ref is None
    pin_file = (pins.only_moves_triton_pin(repo, base_sha, pr_sha, recipe.platform)
                if pinned and pr_sha != base_sha else None)
    if pin_file is not None:  # the PR's PyTorch is the base's but for the pin: build the base's once
        moved = side("pr", pr_sha).triton
        return _triton_ab(base_plan, side("pr", base_sha, pin=moved), clones[1], PIN_BUMP, pin_file)
    return ComparePlan(base_plan, side("pr", pr_sha), None, pins.merge_base(repo, base_sha, pr_sha))


def _triton_ab(base: VariantPlan, pr: VariantPlan, triton_clone: Path, reason: str,
               pin_file: str | None = None, pr_patch: str | None = None) -> ComparePlan:
    """Both sides of one PyTorch with two Tritons, and the record of it (each Triton's LLVM read from its tree)."""
    assert base.triton is not None and pr.triton is not None
    if base.triton.commit == pr.triton.commit and pr.triton_patch is None:
        raise UserError(f"--triton-pr: Triton {pr.triton.commit[:12]} is also the base's ({base.triton.source}); "
                        "a Triton A/B needs two commits")
    repo = pins.open_repo(triton_clone, "--triton-src")
    record = TritonAB(base.triton.commit, pr.triton.commit, pins.llvm_pin(repo, base.triton.commit),
                      pins.llvm_pin(repo, pr.triton.commit), reason, pin_file, base.pytorch_ref, pr_patch)
    return ComparePlan(base, pr, None, None, triton_ab=record)


def plan_venv(base: str, pr: str, recipe: Recipe, store: Store, python: str) -> ComparePlan:
    """Plan both sides for a venv recipe: each a venv of ``python`` with its wheel (as a wheel-pinned Docker
    recipe's images), a patch PR an overlay on the base's venv."""
    from prbench.images.wheels import python_wheel_target

    found: list[WheelTarget] = []

    def target() -> WheelTarget:  # read once, when a wheel is resolved
        if not found:
            found.append(python_wheel_target(python))
        return found[0]

    return _plan_wheels(base, pr, recipe, store, target)


def _plan_wheels(base: str, pr: str, recipe: Recipe, store: Store,
                 target: Callable[[], WheelTarget] | None = None) -> ComparePlan:
    from prbench.images.wheels import base_image_target

    target = target or base_image_target(recipe, store)
    base_plan = _wheel_side("base", base, recipe, store, target)
    if Path(pr).is_file():
        overlay = PythonOverlay.from_patch_file(Path(pr), flag="--pr")
        assert base_plan.wheel is not None
        wheel = store.find(base_plan.wheel.sha256)
        if wheel is not None:  # else the build checks it, before Docker starts
            overlay.check_applies_to_wheel(store.path(wheel), f"the wheel {base_plan.wheel.requirement}")
        layer = "Python overlay" if recipe.is_venv else "overlay layer"  # a venv's: a shadow package, no layer
        how = f"{base_plan.how} + {layer} {Path(pr).name} ({len(overlay.files)} files)"
        return ComparePlan(base_plan, VariantPlan("pr", base_plan.pytorch_ref, overlay, how, base_plan.wheel),
                           None, None)
    return ComparePlan(base_plan, _wheel_side("pr", pr, recipe, store, target), None, None)


def _wheel_side(name: str, spec: str, recipe: Recipe, store: Store, target) -> VariantPlan:
    from prbench.images.wheels import is_wheel_spec, resolve_wheel_spec

    assert recipe.pytorch_wheel is not None
    if spec == INSTALLED and recipe.pytorch_wheel.sha256 == UNPINNED:  # pinned by what the store fetches
        pin = resolve_wheel_spec(recipe.pytorch_wheel.requirement, f"--{name}", "pytorch", store, target)
    elif spec == INSTALLED:
        pin = recipe.pytorch_wheel
    elif is_wheel_spec(spec):
        pin = resolve_wheel_spec(spec, f"--{name}", "pytorch", store, target)
    else:
        raise UserError(f"--{name}={spec}: recipe {recipe.name} installs torch wheels; give 'installed' (its "
                        f"{recipe.pytorch_wheel.requirement}), a wheel pin like torch==2.13.0+cpu, or a patch "
                        "file as --pr")
    ref = f"{pin.requirement} sha256:{pin.sha256}"
    what = "venv" if recipe.is_venv else "image"
    return VariantPlan(name, ref, None, f"{what} of {recipe.name} with wheel {pin.requirement} "
                       f"(sha256 {pin.sha256[:12]})", pin)


def local_lock(side: VariantPlan, local: LocalEnvironment) -> dict[str, object]:
    """What identifies a local environment: the interpreter, torch, Triton, the overlay (and the package it shadows)
    and the host."""
    return {
        "runner": "local",
        "pytorch_ref": side.pytorch_ref,
        "overlay_sha256": side.overlay.sha256 if side.overlay else None,
        # the package the overlay shadows: torch, or a Triton A/B's triton (the patch and its files, by name)
        **({"overlay": {"package": side.overlay.package, "origin": Path(side.overlay.origin).name,
                        "files": [f.path for f in side.overlay.files]}} if side.overlay else {}),
        "environment": {**local.facts, "cpu": cpu_model(), **cpu_facts()},
    }


def _refuse_what_needs_no_torch(name: str, spec: str, repo: git.Repo | None) -> None:
    """A side that cannot be planned whatever torch is installed stops before torch is imported (seconds)."""
    flag = f"--{name}"
    if spec == INSTALLED:
        return
    if Path(spec).is_file():
        if name == "base":
            raise UserError(f"{flag}={spec}: a patch file describes a PR; give it as --pr and a ref as --base")
        PythonOverlay.from_patch_file(Path(spec), flag=flag)  # a file the local runner cannot overlay is named
    elif repo is None:
        raise UserError(f"{flag}={spec}: not 'installed' nor an existing patch file; a git ref needs --pytorch-src")


def _plan_side(name, spec, base_plan, repo, installed_commit, version) -> VariantPlan:
    flag = f"--{name}"
    if spec == INSTALLED:
        return VariantPlan(name, INSTALLED, None, f"installed torch {version} as is")
    path = Path(spec)
    if path.is_file():
        patch = PythonOverlay.from_patch_file(path, flag=flag)
        combined = patch if base_plan.overlay is None else PythonOverlay.from_text(
            base_plan.overlay.patch_text + patch.patch_text, origin=f"{base_plan.overlay.origin} + {path}", flag=flag
        )
        how = f"{base_plan.how} + Python overlay {path.name} ({len(patch.files)} files)"
        return VariantPlan(name, base_plan.pytorch_ref, combined, how)
    assert repo is not None, "refused before planning"
    sha = pins.resolve(repo, spec, flag)
    if installed_commit is None:
        raise UserError(f"{flag}={spec}: the installed torch records no git commit, so no overlay can be made")
    if sha == installed_commit:
        return VariantPlan(name, sha, None, f"installed torch {version} (it is {sha[:12]})")
    try:
        repo.commit(installed_commit)
    except ValueError:
        raise UserError(
            f"--pytorch-src: the installed torch's commit {installed_commit[:12]} is not in "
            f"{repo.working_dir}; fetch it"
        ) from None
    diff = pins.diff(repo, installed_commit, sha)
    try:
        overlay = PythonOverlay.from_text(diff, origin=f"{installed_commit[:12]}..{sha[:12]}", flag=flag)
    except UserError as exc:
        raise UserError(f"{exc} (no Docker recipe given: the local runner can only overlay Python)") from None
    how = f"installed torch {version} + Python overlay {installed_commit[:12]}..{sha[:12]} ({len(overlay.files)} files)"
    return VariantPlan(name, sha, overlay, how)


def _is_sha(ref: str) -> bool:
    return len(ref) == 40 and all(c in "0123456789abcdef" for c in ref)
