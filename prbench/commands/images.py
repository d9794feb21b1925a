"""``invoke store ACTION``: list, verify, export, import and fetch into the content-addressed store
(``prbench.images.content_store``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.errors import UserError
from prbench.commands.cli import config_value, resolve_path, task, user_facing
from prbench.commands.flags import (
    BUILD_HELP,
    SAVE_BASE_HELP,
    TRITON_BASE_HELP,
    TRITON_PR_HELP,
    TRITON_REF_HELP,
    optional_path,
    recipe_from,
    runs_dir_from,
)
from prbench.images.content_store import Store, StoreError, StoreItem, WheelTarget, items_in_lock
from prbench.images.wheels import size_text
from prbench.sides.recipes import INSTALLED, WHEEL_NAMES, Recipe, WheelPin, wheel_problem

if TYPE_CHECKING:
    from prbench.sides.pins import TritonPin

ACTIONS = ("list", "verify", "export", "import", "fetch")


@dataclass(frozen=True)
class SourceSides:
    """What a source build's downloads depend on: the clones, the PyTorch refs of the sides (none: the recipe's
    commit; ``installed`` is the recipe's commit too, as ``invoke compare`` takes it), a Triton override, or a
    Triton A/B's two Tritons on one PyTorch (``triton_pr``, with ``triton_base``; as ``invoke compare`` takes
    them)."""

    pytorch_src: Path | None = None
    triton_src: Path | None = None
    refs: tuple[str, ...] = ()
    triton_ref: str | None = None
    triton_base: str | None = None
    triton_pr: str | None = None


def run_store_action(action: str, *, store_dir: str | None, file: Path | None, lock: Path | None,
                     recipe: Recipe | None = None, sides: SourceSides | None = None) -> None:
    """Check the flags for ``action`` first, then do it, printing what happened."""
    if action not in ACTIONS:
        raise UserError(f"store {action}: expected one of {', '.join(ACTIONS)}")
    if (recipe is not None) != (action == "fetch"):
        raise UserError(f"store {action}: --recipe is " + ("needed (the recipe whose wheels to fetch)"
                                                           if action == "fetch" else "for fetch only"))
    if action in ("export", "import") and file is None:
        raise UserError(f"store {action}: --file is needed (the tar to {'write' if action == 'export' else 'read'})")
    if action not in ("export", "import") and file is not None:
        raise UserError(f"store {action}: --file is for export and import only")
    if lock is not None and action != "export":
        raise UserError(f"store {action}: --lock is for export only")
    if sides is not None and sides != SourceSides() and action != "fetch":
        raise UserError(f"store {action}: --pytorch-src, --triton-src, --triton-ref, --triton-base, --triton-pr, "
                        "--base and --pr are for fetch only")
    store = Store.at(store_dir)
    if action == "list":
        list_items(store)
    elif action == "verify":
        verify_items(store)
    elif action == "fetch":
        assert recipe is not None
        fetch_recipe(store, recipe, sides or SourceSides())
    elif action == "export":
        assert file is not None
        items = items_in_lock(lock) if lock is not None else None
        count = store.export(file, items)
        print(f"exported {count} item(s) from {store.root} to {file}")
    else:
        assert file is not None
        store.import_tar(file)


def list_items(store: Store) -> None:
    items = store.items()
    if not items:
        print(f"store {store.root}: empty")
        return
    width = max(len(item.name) for item in items)
    for item in items:
        print(f"{item.kind:<14} {item.name:<{width}} {item.sha256[:12]} {size_text(item.size):>9}  {item.origin}")
    print(f"store {store.root}: {len(items)} item(s), {size_text(sum(item.size for item in items))}")


def verify_items(store: Store) -> None:
    items = store.items()
    problems = store.verify()
    for problem in problems:
        print(f"bad: {problem}")
    if problems:
        raise StoreError(f"store {store.root}: {len(problems)} of {len(items)} item(s) missing or corrupt (listed "
                         "above)")
    print(f"store {store.root}: all {len(items)} item(s) hash to their names")


def fetch_recipe(store: Store, recipe: Recipe, sides: SourceSides) -> None:
    """Everything a build of ``recipe`` takes from the store that can be known before it builds, for its base
    image (a venv recipe: for this interpreter): the wheels of its wheel pins and ``[pip] extra`` (dependencies
    included) and, for a source recipe, every file its PyTorch and Triton builds would download at the sides'
    commits. Later builds then run offline."""
    from prbench.images.wheels import base_image_target, python_wheel_target, wheels_for
    from prbench.sides.pins import check_source_flags

    if recipe.is_venv:  # its venvs are this interpreter's (compare's default --python)
        if replace(sides, refs=()) != SourceSides():
            raise UserError(f"store fetch: recipe {recipe.name} installs wheels; --pytorch-src, --triton-src, "
                            "--triton-ref, --triton-base and --triton-pr are for recipes that build from source")
        specs = _wheel_specs(recipe, sides.refs)
        python = partial(python_wheel_target, sys.executable)
        items = wheels_for(store, [pin.requirement for pin in recipe.wheel_pins], python, pins=recipe.wheel_pins)
        items += wheels_for(store, list(recipe.pip_extra), python)
        side_pins, side_items = _side_wheels(store, recipe, specs, python)
        print(f"store {store.root}: {len({item.sha256 for item in items + side_items})} wheel(s) for recipe "
              f"{recipe.name}{_and_pins(side_pins)} (venvs of {sys.executable})")
        return
    if not recipe.is_docker or recipe.base_image is None:
        raise UserError(f"store fetch: recipe {recipe.name} runs locally; fetch is for Docker and venv recipes "
                        "(their images and venvs install wheels from the store)")
    clones = check_source_flags(recipe, sides.pytorch_src, sides.triton_src, sides.triton_ref, sides.triton_pr,
                                sides.triton_base)
    if clones is None and (sides.pytorch_src is not None or (sides.refs and not recipe.is_wheel)):
        raise UserError(f"store fetch: recipe {recipe.name} installs wheels; --pytorch-src is for recipes that build "
                        "from source")
    # Every side's commits (and a Triton A/B's patch) or wheel pins are checked before anything is fetched.
    builds = _source_builds(store, recipe, clones, sides) if clones is not None else []
    specs = _wheel_specs(recipe, sides.refs) if clones is None else []
    target = base_image_target(recipe, store)
    items = wheels_for(store, [pin.requirement for pin in recipe.wheel_pins], target, pins=recipe.wheel_pins)
    items += wheels_for(store, list(recipe.pip_extra), target)
    side_pins, side_items = _side_wheels(store, recipe, specs, target)
    sources = "" if recipe.is_wheel else " (a source build's own build requirements are fetched when it is built)"
    print(f"store {store.root}: {len({item.sha256 for item in items + side_items})} wheel(s) for recipe "
          f"{recipe.name}{_and_pins(side_pins)}{sources}")
    if clones is not None:
        fetch_source_downloads(store, recipe, clones, builds, sides.triton_ref, target)


def _wheel_specs(recipe: Recipe, refs: tuple[str, ...]) -> list[str]:
    """A wheel recipe's ``--base``/``--pr`` as wheel pins (``torch==2.14.1``), each checked at the door; ``installed``
    is the recipe's own wheel, fetched with the recipe."""
    specs = [spec for spec in refs if spec != INSTALLED]
    for spec in specs:
        problem = wheel_problem(spec, WHEEL_NAMES["pytorch"])
        if problem:
            raise UserError(f"store fetch: --base/--pr {spec}: recipe {recipe.name} installs torch wheels; "
                            f"{problem}, 'installed' or a patch file")
    return specs


def _side_wheels(store: Store, recipe: Recipe, specs: list[str],
                 target: Callable[[], WheelTarget]) -> tuple[list[WheelPin], list[StoreItem]]:
    """Each side's torch wheel, pinned as ``invoke compare`` pins it (`prbench.images.wheels.resolve_wheel_spec`) and
    fetched with all it requires and the recipe's Triton pin, so that a compare of those releases builds offline."""
    from prbench.images.wheels import resolve_wheel_spec, wheels_for

    triton = (recipe.triton_wheel,) if recipe.triton_wheel is not None else ()
    pins: list[WheelPin] = []
    items: list[StoreItem] = []
    for spec in specs:
        pin = resolve_wheel_spec(spec, "--base/--pr", "pytorch", store, target)
        pins.append(pin)
        items += wheels_for(store, [pin.requirement, *(p.requirement for p in triton)], target, pins=(pin, *triton))
    return pins, items


def _and_pins(pins: list[WheelPin]) -> str:
    return "".join(f" and {pin.requirement}" for pin in pins)


def fetch_source_downloads(store: Store, recipe: Recipe, clones: tuple[Path, Path],
                           builds: list[tuple[str, TritonPin | None]], triton_ref: str | None,
                           target: Callable[[], WheelTarget]) -> None:
    """Every file the recipe's PyTorch and Triton builds would download (``build_context.downloads_at``), for each
    side's PyTorch commit and the Triton commit it builds with (``_source_builds``), into the store with its
    sha256."""
    from prbench.images.build_context import downloads_at, fetch_download
    from prbench.sides.pins import open_repo, triton_source

    repo = open_repo(clones[0], "--pytorch-src")
    fetched: dict[str, StoreItem] = {}
    tritons: set[str] = set()
    for commit, pin in builds:
        triton_repo, chosen = triton_source(recipe, repo, commit, clones[1], triton_ref, pin)
        tritons.add(chosen.commit)
        for download in downloads_at(recipe, (repo, commit), (triton_repo, chosen.commit), target,
                                     partial(_base_rocm_version, recipe, store)):
            if download.url not in fetched:
                fetched[download.url] = fetch_download(store, download, print)
    print(f"store {store.root}: {len(fetched)} build download(s) for recipe {recipe.name} at "
          f"{len({commit for commit, _ in builds})} PyTorch commit(s) and {len(tritons)} Triton commit(s)")


def _source_builds(store: Store, recipe: Recipe, clones: tuple[Path, Path],
                   sides: SourceSides) -> list[tuple[str, TritonPin | None]]:
    """Each side's PyTorch commit and the Triton pin it builds with (None: the recipe's, the one PyTorch pins, or
    ``--triton-ref``'s); a Triton A/B's as ``invoke compare`` plans them (one PyTorch; the base's Triton and the
    PR's, whose patch builds the base's commit once it is seen to apply)."""
    from prbench.sides.pins import open_repo, resolve_commit

    assert recipe.pytorch is not None
    if sides.triton_pr is None:
        repo = open_repo(clones[0], "--pytorch-src")
        refs = [recipe.pytorch.commit if ref == "installed" else ref for ref in sides.refs] or [recipe.pytorch.commit]
        return [(commit, None) for commit in dict.fromkeys(resolve_commit(repo, ref, "--base/--pr") for ref in refs)]
    from prbench.compare.variant_plan import plan_docker

    base = sides.refs[0] if sides.refs else "installed"  # check_one_pytorch: --pr, if given, is --base
    plan = plan_docker(base, base, recipe, clones[0], store, triton_src=clones[1],
                       triton_base=sides.triton_base, triton_pr=sides.triton_pr)
    return [(side.pytorch_ref, side.triton) for side in (plan.base, plan.pr)]


def _base_rocm_version(recipe: Recipe, store: Store) -> str:
    from prbench.images.docker_engine import docker_client, resolve_base
    from prbench.images.pytorch_setup import image_rocm_version

    assert recipe.base_image is not None
    client = docker_client()
    base = resolve_base(client, recipe.base_image, pull=False, emit=print, store=store)
    return image_rocm_version(client, base.image_id)


def _images_dir(ctx, runs_dir):
    return runs_dir_from(ctx, runs_dir) / "images"


@task(help={
    "recipe": "Recipe name under recipes/ or a path to a .toml file (default from invoke.yaml)",
    "pytorch_ref": "PyTorch commit or ref to build instead of the recipe's commit",
    "triton_ref": TRITON_REF_HELP,
    "overlay": "Python-only diff applied on top of the built torch, in its own layer",
    "merge_base": "PyTorch merge-base commit to record in the lock (a PR's base)",
    "max_jobs": "Parallel compile jobs (default: the recipe's build.max_jobs, else the build's default)",
    "lock": "Where to write lock.json (default: <runs_dir>/images/<recipe>-<hash>/lock.json)",
    "force": "Build even when an image with the same inputs is present",
    "save_base": SAVE_BASE_HELP,
    **BUILD_HELP,
})
@user_facing
def build(ctx, recipe=None, pytorch_src=None, triton_src=None, pytorch_ref=None, triton_ref=None, overlay=None,
          merge_base=None, max_jobs=None, pull=False, no_cache=False, lock=None, force=False, runs_dir=None,
          store=None, save_base=False):
    """Build the Docker image of a recipe, or a venv recipe's venv (nothing to do when present), and write its
    lock."""
    from foundation.errors import UserError
    from foundation.flag_values import whole_number
    from prbench.images.build import plan_build
    from prbench.images.content_store import Store
    from prbench.images.docker_engine import docker_client
    from prbench.images.image_lock import build_and_lock
    from prbench.sides.recipes import load_recipe

    jobs = whole_number("--max-jobs", max_jobs, minimum=1) if max_jobs is not None else None

    recipes_dir = resolve_path(config_value(ctx, "recipes_dir", "recipes"))
    loaded = load_recipe(recipe or config_value(ctx, "recipe", "cpu-local"), recipes_dir)
    if loaded.is_venv:
        docker_only = {"--pytorch-src": pytorch_src, "--triton-src": triton_src, "--pytorch-ref": pytorch_ref,
                       "--triton-ref": triton_ref, "--overlay": overlay, "--merge-base": merge_base,
                       "--max-jobs": max_jobs, "--pull": pull, "--no-cache": no_cache, "--force": force,
                       "--save-base": save_base}
        given = [flag for flag, value in docker_only.items() if value]
        if given:
            raise UserError(f"{given[0]}: recipe {loaded.name} is a venv of pinned wheels; {given[0]} is for Docker "
                            "images")
        _build_venv(ctx, loaded, runs_dir, store, lock)
        return
    plan = plan_build(loaded, pytorch_src=optional_path(pytorch_src), triton_src=optional_path(triton_src),
                      pytorch_ref=pytorch_ref, triton_ref=triton_ref, overlay=optional_path(overlay),
                      merge_base=merge_base, max_jobs=jobs)
    outcome = build_and_lock(plan, docker_client(), _images_dir(ctx, runs_dir), lock_path=optional_path(lock),
                             store=Store.at(optional_path(store)), save_base=save_base, pull=pull,
                             nocache=no_cache, force=force)
    print(f"image {outcome.result.tag} ({outcome.result.image_id[:19]}); lock {outcome.lock_path}")


def _build_venv(ctx, recipe, runs_dir, store, lock):
    """``invoke build`` of a venv recipe: its venv with the recipe's own wheels, for this Python."""
    import sys

    from prbench.images import venv
    from prbench.images.content_store import Store

    the_store = Store.at(optional_path(store))
    venvs = runs_dir_from(ctx, runs_dir) / venv.VENVS_DIR
    outcome = venv.build_and_lock(venv.plan(venv.pinned(recipe, the_store, sys.executable), sys.executable),
                                  the_store, venvs, lock_path=optional_path(lock))
    print(f"venv {outcome.directory} ({outcome.python}); lock {outcome.lock_path}")


@task(help={
    "lock": "lock.json to rebuild from (its base digest, commits or wheel pins, Triton pin, patches and store items "
            "are used as recorded; the sources come from the store, so the clones may be gone)",
    "lock_out": "Where to write the rebuilt image's lock (default: <runs_dir>/images/<recipe>-<hash>/lock.json)",
    **BUILD_HELP,
})
@user_facing
def rebuild(ctx, lock, pytorch_src=None, triton_src=None, pull=False, no_cache=False, lock_out=None,
            runs_dir=None, store=None):
    """Rebuild an image exactly from a lock file (a run's lock.json: both images) and the store."""
    import tempfile
    from pathlib import Path

    from foundation.errors import UserError
    from prbench.images.content_store import Store
    from prbench.images.docker_engine import docker_client
    from prbench.images.image_lock import build_and_lock, plan_from_lock, read_locks

    locks = read_locks(resolve_path(lock))
    if lock_out and len(locks) > 1:
        raise UserError(f"--lock-out: {lock} holds the locks of two images (base and pr); leave --lock-out out "
                        "and each rebuilt lock goes next to its build log")
    from prbench.images import venv

    the_store = Store.at(optional_path(store))
    client = None if all(venv.is_venv_lock(locked) for _, locked in locks) else docker_client()
    for side, locked in locks:
        prefix = f"{side}: " if side else ""
        if venv.is_venv_lock(locked):  # a venv side: recreated from the store's wheels, no Docker
            venv_plan, venv_drift = venv.plan_from_lock(locked)
            for field in venv_drift:
                print(f"warning: {prefix}{field} differs from the lock (prbench itself changed since)")
            made = venv.build_and_lock(venv_plan, the_store, runs_dir_from(ctx, runs_dir) / venv.VENVS_DIR,
                                       lock_path=optional_path(lock_out))
            print(f"{prefix}venv {made.directory} ({made.python}); lock {made.lock_path}")
            continue
        with tempfile.TemporaryDirectory(prefix="prbench-rebuild-") as tmp:
            plan, drift = plan_from_lock(locked, pytorch_src=optional_path(pytorch_src),
                                         triton_src=optional_path(triton_src), overlay_dir=Path(tmp))
            for field in drift:
                print(f"warning: {prefix}{field} differs from the lock (prbench itself changed since); "
                      "the rebuild may differ")
            outcome = build_and_lock(plan, client, _images_dir(ctx, runs_dir), lock_path=optional_path(lock_out),
                                     store=the_store, pull=pull, nocache=no_cache)
        print(f"{prefix}image {outcome.result.tag} ({outcome.result.image_id[:19]}); lock {outcome.lock_path}")


@task(help={
    "lock": "lock.json to check against (a run's lock.json: both of its images)",
    "image": "Image to check (default: the tag recorded in the lock)",
})
@user_facing
def verify(ctx, lock, image=None):
    """Compare a built image with a lock field by field; exit 1 when anything differs."""
    from invoke import Exit

    from foundation.errors import UserError
    from prbench.images.docker_engine import docker_client
    from prbench.images.image_lock import read_locks
    from prbench.images.image_lock import verify as verify_image

    locks = read_locks(resolve_path(lock))
    if image and len(locks) > 1:
        raise UserError(f"--image: {lock} holds the locks of two images (base and pr); verify them by their tags")
    from prbench.images import venv

    client = None if all(venv.is_venv_lock(locked) for _, locked in locks) else docker_client()
    differing = 0
    for side, locked in locks:
        prefix = f"{side}: " if side else ""
        if venv.is_venv_lock(locked) and image:
            raise UserError(f"--image: {lock} is the lock of a venv (it names its directory); leave --image out")
        differences, notes = venv.verify(locked) if venv.is_venv_lock(locked) else verify_image(client, locked,
                                                                                                  image)
        for note in notes:
            print(f"note: {prefix}{note}")
        for difference in differences:
            print(f"differs: {prefix}{difference.line('venv' if venv.is_venv_lock(locked) else 'image')}")
        differing += len(differences)
    if differing:
        raise Exit(f"verify: {differing} field(s) differ from {lock}", code=1)
    what = "environment" if all(venv.is_venv_lock(locked) for _, locked in locks) else "image"
    print(f"verify: the {what}{'s match' if len(locks) > 1 else ' matches'} {lock}")


@task(
    name="store",
    help={
        "action": "list (every item), verify (hash every item again), export (into --file), import (from --file), "
                  "fetch (the wheels --recipe's image or venvs install, for its base image's Python or this one, and "
                  "a source build's downloads: later builds run offline)",
        "file": "The tar that export writes and import reads (one file holding the objects and their index)",
        "lock": "export only the items this lock.json lists (an image's lock or a run's lock.json)",
        "store": "Store directory (default: $PRBENCH_STORE, else ~/.cache/prbench/store)",
        "recipe": "fetch only: the Docker or venv recipe (name in recipes/ or a .toml path) whose wheels to fetch",
        "pytorch_src": "fetch only, recipes built from source: the PyTorch clone; its build's downloads (AOTriton "
                       "on ROCm) and the Triton build's (LLVM, ...) are fetched too",
        "triton_src": "fetch only, recipes built from source: the Triton clone holding each side's Triton commit",
        "triton_ref": "fetch only: " + TRITON_REF_HELP,
        "triton_pr": "fetch only: " + TRITON_PR_HELP + "; both sides' Triton downloads are fetched (the PR's "
                     "Triton may pin another LLVM)",
        "triton_base": "fetch only: " + TRITON_BASE_HELP,
        "base": "fetch only: a base side's PyTorch ref in --pytorch-src (default: the recipe's commit), or with a "
                "wheel recipe a wheel pin like torch==2.13.0+cpu (fetched with what it requires)",
        "pr": "fetch only: a PR side's PyTorch ref in --pytorch-src (a patch file builds the base's commit), or with "
              "a wheel recipe a wheel pin like torch==2.14.1 (fetched with what it requires)",
    },
)
@user_facing
def store_task(ctx, action, file=None, lock=None, store=None, recipe=None, pytorch_src=None, triton_src=None,
               triton_ref=None, base=None, pr=None, triton_base=None, triton_pr=None):
    """The content-addressed store of build inputs: list, verify, fetch a recipe's wheels, or move it to another
    machine as one tar."""
    from prbench.sides.pins import check_one_pytorch

    check_one_pytorch(base, pr, triton_pr)
    refs = tuple(ref for ref in (base, pr) if ref and not Path(ref).is_file())
    sides = SourceSides(pytorch_src=optional_path(pytorch_src), triton_src=optional_path(triton_src), refs=refs,
                        triton_ref=triton_ref, triton_base=triton_base, triton_pr=triton_pr)
    run_store_action(action, store_dir=store, file=optional_path(file), lock=optional_path(lock),
                     recipe=recipe_from(ctx, recipe) if recipe else None, sides=sides)
