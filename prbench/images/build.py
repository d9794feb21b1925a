"""Images: render a recipe's Dockerfile, hash every input into the tag, and build it with docker-py.

The tag is ``prbench/<recipe>:<hash12>`` where the hash covers the templates, the rendered Dockerfile,
the build args, the recipe (its wheel pins included), the patches, the source commits, the overlay and our own
code. An image with that tag is therefore exactly what these inputs produce, and a present tag means there is
nothing to build.

What the build consumes comes from the store (``prbench.images.build_context``): source archives of the exact commits,
a wheelhouse for every ``pip install`` (``--no-index --require-hashes``), Triton's downloads. The store items
used are recorded in the image's ``dev.prbench.store`` label, from which the lock lists them; they are not part
of the tag, because resolving them (``pip download``) is work a present image must not need.

Pitfalls of docker-py this module works around (research note §2): the classic builder only (no BuildKit
syntax in the templates), ``rm=False`` by default (we pass ``rm=True, forcerm=True``), proxy build args
injected from ``~/.docker/config.json`` (``use_config_proxy=False``) and silent pulls (the base must be
present locally by digest; only ``--pull`` fetches it, by digest, or a rebuild loads it from the store).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import git
import jinja2

from foundation.errors import UserError
from prbench.images.build_plan import (
    LABEL_STORE,
    ROOT_IN_IMAGE,
    BuildPlan,
    PatchFile,
    SourceTree,
    UsedItem,
    sha256_file,
)
from prbench.images.docker_engine import Emit, image_present, resolve_base
from prbench.images.dockerfile_quote import UnsafeValue, dockerfile_value
from prbench.images.pytorch_setup import build_env, host_build_jobs, image_rocm_version
from prbench.sides.pins import TRITON_REF, TritonPin, llvm_pin, open_repo, resolve_commit, triton_pin
from prbench.sides.recipes import Recipe, resolve_patch_entry

if TYPE_CHECKING:
    from prbench.images.content_store import Store, StoreItem

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TEMPLATES_DIR = PROJECT_ROOT / "docker"
CHECK_SCRIPT = TEMPLATES_DIR / "check_environment.py"
TOOL_PACKAGES = ("stages", "analysis", "foundation")
# The oldest Python an image runs: the ROCm base images' 3.10 (the host needs 3.11). Everything a build copies from
# this project into an image (IMAGE_CODE) must work there: tests/test_image_python.py checks it, and ruff's
# per-file-target-version (pyproject.toml) names the same files.
IMAGE_PYTHON = (3, 10)
IMAGE_CODE = (CHECK_SCRIPT, *(PROJECT_ROOT / package for package in TOOL_PACKAGES))
# Every name a bundled Triton has shipped under, plus the packages ABI-tied to the bundled torch.
TRITON_PACKAGES = ("triton", "pytorch-triton", "pytorch-triton-rocm", "triton-rocm")
REMOVED_PACKAGES = ("torch", "torchvision", "torchaudio", *TRITON_PACKAGES)



@dataclass
class BuildResult:
    tag: str
    image_id: str
    built: bool
    log_path: Path | None = None
    steps: list[str] = field(default_factory=list)


class BuildFailed(UserError):
    """The Docker build stopped; the message names the step and the log file."""


# --- planning --------------------------------------------------------------------------------------------


def plan_build(
    recipe: Recipe,
    *,
    pytorch_src: Path | None = None,
    triton_src: Path | None = None,
    pytorch_ref: str | None = None,
    triton_ref: str | None = None,
    pin: TritonPin | None = None,
    overlay: Path | None = None,
    merge_base: str | None = None,
    max_jobs: int | None = None,
    recipe_text: str | None = None,
    trees: tuple[SourceTree, SourceTree] | None = None,
    locked: tuple[UsedItem, ...] | None = None,
    base_item: StoreItem | None = None,
    pytorch_first: bool = False,
    triton_patch: Path | None = None,
) -> BuildPlan:
    """Resolve a recipe (plus a variant's ref and overlay) into a BuildPlan; reads git, never Docker.

    A wheel recipe needs no clone. ``trees`` (PyTorch, Triton), with ``pin``, ``locked`` and ``base_item``, come
    from a lock: then nothing is read from a clone either. ``triton_ref`` (``--triton-ref``) is a commit or ref in
    the Triton clone built instead of the recipe's commit or PyTorch's pin; ``pin`` (a lock's, or a comparison's
    side as `triton_source` resolved it) is the Triton commit itself. ``pytorch_first`` (a Triton A/B) renders
    PyTorch's layers below Triton's; ``triton_patch`` is applied to the Triton tree in the build context.
    """
    if not recipe.is_docker or recipe.base_image is None or (
            not recipe.is_wheel and (recipe.pytorch is None or recipe.triton is None)):
        raise UserError(f"--recipe {recipe.name}: not a docker recipe (runner = '{recipe.runner}'); nothing to build")
    if overlay is not None and not overlay.is_file():
        raise UserError(f"--overlay: {overlay} does not exist")
    pytorch: SourceTree | None = None
    triton: SourceTree | None = None
    tp: TritonPin | None = None
    if recipe.is_wheel:
        check_source_flags(recipe, None, triton_src, triton_ref)
        if pytorch_ref is not None or merge_base is not None:
            flag = "--pytorch-ref" if pytorch_ref is not None else "--merge-base"
            raise UserError(f"{flag}: recipe {recipe.name} installs the wheel {recipe.wheel_pins[0].requirement}; "
                            "it builds no PyTorch commit")
    elif trees is not None:
        pytorch, triton = trees
        tp = pin
    else:
        pytorch, triton, tp, merge_base = _source_trees(recipe, pytorch_src, triton_src, pytorch_ref, triton_ref,
                                                        pin, merge_base)
    jobs = max_jobs or recipe.max_jobs
    build_args = {"MAX_JOBS": str(jobs)} if jobs else {}
    patches = tuple(_patch_file(entry, f"{recipe.path}: key 'patches'") for entry in recipe.patches)
    dockerfile = render_dockerfile(recipe, pytorch, triton, overlay=overlay is not None,
                                   overlay_strip=_overlay_strip(overlay), pytorch_first=pytorch_first)
    return BuildPlan(
        recipe=recipe,
        recipe_text=recipe_text if recipe_text is not None else recipe.path.read_text(encoding="utf-8"),
        base=recipe.base_image,
        pytorch=pytorch,
        triton=triton,
        triton_pin=tp,
        patches=patches,
        overlay=overlay,
        merge_base=merge_base,
        build_args=build_args,
        dockerfile=dockerfile,
        # Everything else comes from the store through the build context; only Debian packages need a mirror.
        network_mode="host" if recipe.apt_packages else "none",
        code_sha256=_tree_sha256([PROJECT_ROOT / p for p in TOOL_PACKAGES]),
        templates_sha256=_tree_sha256([TEMPLATES_DIR]),
        locked=locked,
        base_item=base_item,
        pytorch_first=pytorch_first,
        triton_patch=triton_patch,
    )


def _source_trees(
    recipe: Recipe, pytorch_src: Path | None, triton_src: Path | None, pytorch_ref: str | None,
    triton_ref: str | None, pin: TritonPin | None, merge_base: str | None,
) -> tuple[SourceTree, SourceTree, TritonPin, str | None]:
    """The PyTorch and Triton trees of a source recipe, their commits resolved in local clones."""
    assert recipe.pytorch is not None and recipe.triton is not None
    pt_repo = open_repo(clone_path(recipe, "pytorch", pytorch_src), "--pytorch-src")
    pt_commit = resolve_commit(pt_repo, pytorch_ref or recipe.pytorch.commit, "--pytorch-ref")
    tr_repo, tp = triton_source(recipe, pt_repo, pt_commit, triton_src, triton_ref, pin)
    pytorch = SourceTree("pytorch", Path(pt_repo.working_dir), pt_commit,
                         requirements=_present(pt_repo, pt_commit, ["requirements.txt", "requirements-build.txt"]))
    if merge_base is not None:
        merge_base = resolve_commit(pt_repo, merge_base, "--merge-base")
    return pytorch, _triton_tree(tr_repo, tp.commit), tp, merge_base


def triton_source(recipe: Recipe, pytorch_repo: git.Repo, pytorch_commit: str, triton_src: Path | None,
                  triton_ref: str | None = None, pin: TritonPin | None = None) -> tuple[git.Repo, TritonPin]:
    """The Triton clone and the Triton commit built with PyTorch ``pytorch_commit``: ``pin`` when given (a lock's,
    or one resolved before), else ``--triton-ref`` resolved in the clone, else the recipe's commit or the one
    PyTorch pins at that commit. The commit must be in the clone (builds never fetch): else one line naming
    ``--triton-src``, the commit, where it came from, and the command that fetches it."""
    assert recipe.triton is not None
    repo = open_repo(clone_path(recipe, "triton", triton_src), "--triton-src")
    if pin is None and triton_ref is not None:
        return repo, TritonPin(resolve_commit(repo, triton_ref, "--triton-ref"), TRITON_REF)
    chosen = pin or triton_pin(recipe.triton.commit, pytorch_repo, pytorch_commit, recipe.platform)
    try:
        commit = repo.commit(chosen.commit).hexsha
    except (git.BadName, git.BadObject, ValueError):
        other = "" if pin is not None else ", or build another commit with --triton-ref"
        raise UserError(
            f"--triton-src: Triton commit {chosen.commit} ({chosen.origin(pytorch_commit)}) is not in the clone "
            f"{repo.working_dir}; fetch it there (git -C {repo.working_dir} fetch origin {chosen.commit}){other}"
        ) from None
    return repo, TritonPin(commit, chosen.source)


def check_triton_flags(recipe: Recipe, triton_src: Path | None, triton_ref: str | None, triton_pr: str | None,
                       triton_base: str | None) -> bool:
    """The Triton flags together, nothing read (one line naming the flag): none where the recipe builds no Triton
    but a local recipe's --triton-pr patch file (an overlay on the installed Triton), --triton-base only with
    --triton-pr, --triton-ref not with it. True when the recipe builds from source."""
    flags = (("--triton-src", triton_src), ("--triton-ref", triton_ref), ("--triton-pr", triton_pr),
             ("--triton-base", triton_base))
    if recipe.runner == "local" and triton_pr is not None:
        if not Path(triton_pr).is_file():
            raise UserError(f"--triton-pr {triton_pr}: recipe {recipe.name} runs the installed torch and Triton; "
                            "there a Triton A/B takes a Python-only patch file on the installed Triton (a Triton "
                            "commit needs a docker recipe that builds from source)")
        given = [flag for flag, value in flags if value is not None and flag != "--triton-pr"]
        if given:
            raise UserError(f"{given[0]}: recipe {recipe.name} runs the installed Triton, the base of its Triton A/B "
                            f"(leave {given[0]} out)")
        return False
    if not recipe.is_docker or recipe.is_wheel or recipe.pytorch is None or recipe.triton is None:
        what = "installs wheels" if recipe.is_docker else "runs an installed torch"
        for flag, value in flags:
            if value is not None:
                raise UserError(f"{flag}: recipe {recipe.name} {what}; it builds no Triton (leave {flag} out, or "
                                "give a docker recipe that builds from source)")
        return False
    if triton_base is not None and triton_pr is None:
        raise UserError("--triton-base: a Triton A/B also needs --triton-pr (the PR side's Triton commit)")
    if triton_pr is not None and triton_ref is not None:
        raise UserError("--triton-ref: builds one Triton on both sides; a Triton A/B (--triton-pr) names each "
                        "side's (--triton-base, default the pinned one): leave --triton-ref out")
    return True


def check_one_pytorch(base: str | None, pr: str | None, triton_pr: str | None) -> None:
    """A Triton A/B (``triton_pr``) keeps PyTorch the same on both sides: ``--pr``, when given, is ``--base``'s
    (``installed`` when ``--base`` is not given)."""
    if triton_pr is not None and pr is not None and pr != (base or "installed"):
        raise UserError(f"--pr {pr}: a Triton A/B (--triton-pr) keeps PyTorch the same on both sides; leave --pr "
                        "out (or give the --base commit), and compare PyTorch changes in a run of their own")


def check_source_flags(recipe: Recipe, pytorch_src: Path | None, triton_src: Path | None,
                       triton_ref: str | None, triton_pr: str | None = None,
                       triton_base: str | None = None) -> tuple[Path, Path] | None:
    """At the door of a task that builds (compare, bisect): Triton flags where the recipe builds no Triton are
    refused, and a recipe that builds from source needs both clones, given or local in the recipe, and
    ``--triton-ref`` (or a Triton A/B's ``--triton-base``/``--triton-pr``) in the Triton clone (one line naming
    the flag otherwise); returns the clones (None: nothing is built from source)."""
    if not check_triton_flags(recipe, triton_src, triton_ref, triton_pr, triton_base):
        return None
    assert recipe.triton is not None, "a recipe built from source names its Triton"
    if triton_pr is not None and triton_src is None:
        try:
            clone_path(recipe, "triton", None)
        except UserError:
            raise UserError(f"--triton-pr: a Triton A/B builds both Triton commits from a local clone; give it "
                            f"with --triton-src (recipe {recipe.name} builds Triton from "
                            f"{recipe.triton.source})") from None
    clones = (clone_path(recipe, "pytorch", pytorch_src), clone_path(recipe, "triton", triton_src))
    open_repo(clones[0], "--pytorch-src")
    triton = open_repo(clones[1], "--triton-src")
    for flag, value in (("--triton-ref", triton_ref), ("--triton-pr", triton_pr), ("--triton-base", triton_base)):
        if value is not None and not (flag == "--triton-pr" and Path(value).is_file()):  # a patch: checked when
            resolve_commit(triton, value, flag)  # the base's Triton commit is known (variant_plan)
    return clones


def _overlay_strip(overlay: Path | None) -> int:
    if overlay is None:
        return 1
    from prbench.sides.overlay import strip_level

    return strip_level(overlay.read_text(encoding="utf-8"))


def render_dockerfile(recipe: Recipe, pytorch: SourceTree | None = None, triton: SourceTree | None = None,
                      overlay: bool = False, from_ref: str | None = None, overlay_strip: int = 1,
                      pytorch_first: bool = False) -> str:
    """The Dockerfile for a recipe. ``from_ref`` replaces ``repo@digest`` for a base known only by image id.

    Every value reaches the text through the ``dockerfile(kind)`` filter (``prbench.images.dockerfile_quote``), so a
    recipe that slipped past validation still cannot add an instruction or a shell command; a value no
    quoting can carry (a newline in a package name) is a one-line error naming the recipe.
    """
    assert recipe.base_image is not None
    assert recipe.is_wheel or (pytorch is not None and triton is not None), "a source recipe renders with its trees"
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        undefined=jinja2.StrictUndefined,  # a typo in a template is an error, not an empty string
        keep_trailing_newline=True,
        autoescape=False,  # Dockerfiles are not HTML
    )
    env.filters["dockerfile"] = dockerfile_value
    template = env.get_template("Dockerfile.j2")
    from prbench.images.wheels import BROUGHT_BY

    try:
        return template.render(
            recipe_name=recipe.name,
            platform=recipe.platform,
            arch=list(recipe.arch),
            base_name=recipe.base_image.name,
            from_ref=from_ref or recipe.base_image.reference,
            root=ROOT_IN_IMAGE,
            removed_packages=REMOVED_PACKAGES,
            brought_by=BROUGHT_BY,
            triton=triton,
            pytorch=pytorch,
            pytorch_first=pytorch_first,
            wheels=list(recipe.wheel_pins),
            pip_extra=list(recipe.pip_extra),
            overlay=overlay,
            overlay_strip=overlay_strip,
            env=sorted(recipe.env.items()),
            apt_packages=list(recipe.apt_packages),
            pytorch_build_env=sorted(build_env(recipe).items()),
            triton_build_env=sorted(recipe.build_env.items()),
        )
    except UnsafeValue as exc:
        raise UserError(f"{recipe.path}: cannot render the Dockerfile: {exc}") from None


def clone_path(recipe: Recipe, key: str, explicit: Path | None) -> Path:
    """The local clone of ``key`` (pytorch or triton): the ``--<key>-src`` flag, else the recipe's source when it
    is a directory; else one line naming the flag, where the recipe builds from, and how to get a clone."""
    if explicit is not None:
        return explicit
    pin = getattr(recipe, key)
    source = pin.source
    candidate = Path(source) if Path(source).is_absolute() else recipe.path.parent / source
    if "://" not in source and candidate.is_dir():
        return candidate
    if key == "pytorch":
        what = f"PyTorch from {source}"
    else:
        what = f"Triton from {source} " + ("at the PyTorch pin" if pin.from_pytorch_pin else f"at {pin.commit[:12]}")
    remote = "://" in source or source.startswith("git@")
    how = f"git clone {source}" if remote else f"{candidate} is not a directory here"
    raise UserError(f"--{key}-src: recipe {recipe.name} builds {what}; give a local clone of it "
                    f"({how}; builds never fetch sources)")


def _present(repo: git.Repo, commit: str, paths: list[str]) -> tuple[str, ...]:
    tree = repo.commit(commit).tree
    found = []
    for path in paths:
        try:
            tree / path
            found.append(path)
        except KeyError:
            continue
    return tuple(found)


def _triton_tree(repo: git.Repo, commit: str) -> SourceTree:
    # Old trees build from python/ (python/setup.py), new ones from the root (setup.py or pyproject.toml).
    if _present(repo, commit, ["python/setup.py"]) and not _present(repo, commit, ["setup.py"]):
        install_dir = "python"
    elif _present(repo, commit, ["setup.py", "pyproject.toml"]):
        install_dir = "."
    else:
        raise UserError(f"triton source: commit {commit[:12]} has neither setup.py/pyproject.toml nor python/setup.py")
    requirements = _present(repo, commit, ["python/requirements.txt"])
    return SourceTree("triton", Path(repo.working_dir), commit, install_dir=install_dir, requirements=requirements,
                      llvm=llvm_pin(repo, commit))


def _patch_file(entry: str, where: str) -> PatchFile:
    """A recipe ``patches`` entry ``"<tree>:<path in patches/>"``: the tree it applies to (pytorch or triton)
    and the patch file, resolved by the same rule the recipe was validated with (inside patches/ only)."""
    target, path = resolve_patch_entry(entry, where)
    return PatchFile(name=entry, path=path, target=target, sha256=sha256_file(path))


def _tree_sha256(roots: list[Path]) -> str:
    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(_tool_files(root)):
            digest.update(str(path.relative_to(root.parent)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _tool_files(root: Path) -> Iterator[Path]:
    for path in root.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path


def build_image(
    plan: BuildPlan,
    client,
    *,
    store: Store | None = None,
    log_path: Path | None = None,
    pull: bool = False,
    nocache: bool = False,
    force: bool = False,
    emit: Emit = print,
    stream: IO[str] | None = None,
) -> BuildResult:
    """Build the plan's image unless its tag is present (then say so and return it).

    The build context is filled from ``store`` (default: ``Store.at()``); the items used go into the image's
    ``dev.prbench.store`` label.
    """
    from prbench.images.content_store import Store

    existing = image_present(client, plan.tag)
    if existing is not None and not force:
        emit(f"image {plan.tag} is present ({existing.short_id}); nothing to build")
        return BuildResult(tag=plan.tag, image_id=existing.id, built=False)
    store = store or Store.at()
    # Two processes after the same tag on one engine (two compares of one base) build it once: the second waits
    # for the first's build and then finds its image. Other engines (other nodes of a shared store) do not wait.
    engine = str(client.info().get("ID", "")).replace(":", "")[:12] or "engine"
    with store.held(f"build-{engine}-{plan.tag.replace('/', '-').replace(':', '-')}",
                    f"waiting for another process building {plan.tag} on this Docker engine", emit):
        existing = image_present(client, plan.tag)
        if existing is not None and not force:
            emit(f"image {plan.tag} was built meanwhile by another process ({existing.short_id}); nothing to build")
            return BuildResult(tag=plan.tag, image_id=existing.id, built=False)
        return _build_in_context(plan, client, store, log_path, pull, nocache, emit, stream)


def _build_in_context(plan: BuildPlan, client, store: Store, log_path: Path | None, pull: bool, nocache: bool,
                      emit: Emit, stream: IO[str] | None) -> BuildResult:
    base = resolve_base(client, plan.base, pull, emit, store=store, saved=plan.base_item)
    dockerfile = plan.dockerfile
    if base.from_ref != plan.base.reference:
        dockerfile = render_dockerfile(plan.recipe, plan.pytorch, plan.triton, overlay=plan.overlay is not None,
                                       from_ref=base.from_ref, overlay_strip=_overlay_strip(plan.overlay),
                                       pytorch_first=plan.pytorch_first)
    targets: list[Any] = []

    def target() -> Any:  # the base image's interpreter, read by a container once
        if not targets:
            targets.append(_wheel_target(client, base.image_id))
        return targets[0]

    if plan.recipe.is_wheel:
        _say_contents(plan, store, target(), emit)
    emit(f"building {plan.tag} from {plan.base.name} ({plan.base.digest[:19]}…)")
    with tempfile.TemporaryDirectory(prefix="prbench-build-") as tmp:
        context = Path(tmp)
        used = prepare_context(plan, context, dockerfile, store, target, emit,
                               rocm_version=partial(image_rocm_version, client, base.image_id))
        label = {LABEL_STORE: json.dumps([u.to_json() for u in used], sort_keys=True)}
        image_id, steps = _stream_build(plan, client, context, log_path, nocache, stream or sys.stdout, label)
    emit(f"built {plan.tag} ({image_id[:19]})" + (f"; log: {log_path}" if log_path else ""))
    return BuildResult(tag=plan.tag, image_id=image_id, built=True, log_path=log_path, steps=steps)


def _say_contents(plan: BuildPlan, store: Store, target: Any, emit: Emit) -> None:
    """Before a wheel image builds: what it will contain, read from the store's wheels' metadata."""
    from prbench.images.wheels import contents_block, recipe_contents

    for line in contents_block(f"image {plan.tag}", recipe_contents(store, plan.recipe, target)):
        emit(line)


def _wheel_target(client, image_id: str):
    from prbench.images.wheels import image_wheel_target

    return image_wheel_target(client, image_id)


def prepare_context(plan: BuildPlan, context: Path, dockerfile: str, store: Store, target: Callable[[], Any],
                    emit: Emit = print, rocm_version: Callable[[], str] | None = None) -> list[UsedItem]:
    """The build context: Dockerfile, what the build consumes (from the store), the overlay and our code.
    ``rocm_version`` reads the base image's ROCm version (AOTriton's runtime is picked by it)."""
    from prbench.images.build_context import fill_context

    (context / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    shutil.copy2(CHECK_SCRIPT, context / CHECK_SCRIPT.name)
    used = fill_context(plan, store, context, target, emit, rocm_version=rocm_version)
    _apply_patches(plan, context)
    if plan.triton_patch is not None:
        from prbench.sides import patches as patch_tool

        patch_tool.apply_patch(plan.triton_patch, context / "src" / "triton")
    if plan.overlay is not None:
        shutil.copy2(plan.overlay, context / "overlay.patch")
        if not plan.recipe.is_wheel:
            _check_overlay(context)
        else:
            _check_wheel_overlay(plan, store, used)
    code = context / "code"
    for package in TOOL_PACKAGES:
        shutil.copytree(PROJECT_ROOT / package, code / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return used


def _check_wheel_overlay(plan: BuildPlan, store: Store, used: list[UsedItem]) -> None:
    """The overlay must apply to the pinned torch wheel's files, checked on the host before Docker starts."""
    from prbench.sides.overlay import PythonOverlay

    assert plan.overlay is not None and plan.recipe.pytorch_wheel is not None
    pin = plan.recipe.pytorch_wheel
    wheel = next((u.item for u in used if u.item.sha256 == pin.sha256), None)
    if wheel is None:
        raise UserError(f"wheel {pin.requirement}: its sha256 {pin.sha256[:12]} is not among the wheels of the build")
    overlay = PythonOverlay.from_patch_file(plan.overlay)
    overlay.check_applies_to_wheel(store.path(wheel), f"the wheel {pin.requirement}")


def _apply_patches(plan: BuildPlan, context: Path) -> None:
    if not plan.patches:
        return
    from prbench.sides import patches as patch_tool

    for patch in plan.patches:
        tree = context / "src" / patch.target
        source = plan.pytorch if patch.target == "pytorch" else plan.triton
        assert source is not None, "a wheel recipe has no patches (the recipe check refuses them)"
        try:
            patch_tool.apply_patch(patch.path, tree)
        except UserError as exc:
            # The build context is a temp dir that is gone by the time the user reads the message.
            raise UserError(str(exc).replace(str(tree), f"{patch.target} {source.commit[:12]}")) from None


def _check_overlay(context: Path) -> None:
    """Fail on the host, in one line, before Docker spends minutes reaching the overlay layer."""
    import subprocess

    result = subprocess.run(
        ["git", "apply", "--check", str(context / "overlay.patch")],
        cwd=context / "src" / "pytorch", capture_output=True, text=True,
    )
    if result.returncode != 0:
        first = (result.stderr.strip().splitlines() or ["does not apply"])[0]
        raise UserError(f"--overlay: the overlay does not apply to the PyTorch tree: {first}")


def docker_build_args(plan: BuildPlan) -> dict[str, str]:
    """The build's ARG values: the plan's, and without a job count in the recipe or --max-jobs, this machine's
    (``pytorch_setup.build_jobs``), which is not among the hashed inputs: one recipe gives one tag whatever machine
    builds it, and a rebuild from a lock on a smaller machine is not given a larger machine's count."""
    if plan.recipe.is_wheel or "MAX_JOBS" in plan.build_args:
        return dict(plan.build_args)
    return {"MAX_JOBS": str(host_build_jobs()), **plan.build_args}


def _stream_build(plan: BuildPlan, client, context: Path, log_path: Path | None, nocache: bool,
                  stream: IO[str], extra_labels: dict[str, str]) -> tuple[str, list[str]]:
    """Low-level streaming build: live logs to the console and the log file; the id from ``aux``."""
    import docker

    log = _open_log(log_path)
    image_id = ""
    steps: list[str] = []
    last_step = "before the first step"
    try:
        chunks = client.api.build(
            path=str(context), tag=plan.tag, decode=True, rm=True, forcerm=True, pull=False, nocache=nocache,
            buildargs=docker_build_args(plan), labels={**plan.labels(), **extra_labels}, network_mode=plan.network_mode,
            use_config_proxy=False,
        )
        for chunk in chunks:
            text = chunk.get("stream", "")
            if text:
                _write(stream, log, text)
                if text.startswith("Step "):
                    last_step = text.strip()
                    steps.append(last_step)
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
            if "error" in chunk:
                error = " ".join(str(chunk["error"]).split())
                _write(stream, log, f"ERROR: {error}\n")
                where = f"; log: {log_path}" if log_path else ""
                raise BuildFailed(f"build of {plan.tag} failed at {last_step}: {error}{where}")
    except docker.errors.APIError as exc:
        raise BuildFailed(f"build of {plan.tag}: {' '.join(str(exc).split())}") from None
    finally:
        if log:
            log.close()
    if not image_id:
        image = image_present(client, plan.tag)
        if image is None:
            raise BuildFailed(f"build of {plan.tag} ended without an image")
        image_id = image.id
    return image_id, steps


def _open_log(path: Path | None) -> IO[str] | None:
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "a", encoding="utf-8")


def _write(stream: IO[str], log: IO[str] | None, text: str) -> None:
    stream.write(text)
    stream.flush()
    if log:
        log.write(text)
        log.flush()
