"""``invoke store ACTION``: list, verify, export, import and fetch into the content-addressed store
(``prbench.images.content_store``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from analysis.errors import UserError
from prbench.images.content_store import Store, StoreError, StoreItem, WheelTarget, items_in_lock
from prbench.images.wheels import size_text
from prbench.recipes import Recipe

ACTIONS = ("list", "verify", "export", "import", "fetch")


@dataclass(frozen=True)
class SourceSides:
    """What a source build's downloads depend on: the clones, the PyTorch refs of the sides (none: the recipe's
    commit; ``installed`` is the recipe's commit too, as ``invoke compare`` takes it) and a Triton override."""

    pytorch_src: Path | None = None
    triton_src: Path | None = None
    refs: tuple[str, ...] = ()
    triton_ref: str | None = None


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
        raise UserError(f"store {action}: --pytorch-src, --triton-src, --triton-ref, --base and --pr are for fetch "
                        "only")
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
    from prbench.images.build import check_source_flags
    from prbench.images.wheels import base_image_target, python_wheel_target, wheels_for

    if recipe.is_venv:  # its venvs are this interpreter's (compare's default --python)
        if sides != SourceSides():
            raise UserError(f"store fetch: recipe {recipe.name} installs wheels; --pytorch-src, --triton-src, "
                            "--triton-ref, --base and --pr are for recipes that build from source")
        python = partial(python_wheel_target, sys.executable)
        items = wheels_for(store, [pin.requirement for pin in recipe.wheel_pins], python, pins=recipe.wheel_pins)
        items += wheels_for(store, list(recipe.pip_extra), python)
        print(f"store {store.root}: {len({item.sha256 for item in items})} wheel(s) for recipe {recipe.name} "
              f"(venvs of {sys.executable})")
        return
    if not recipe.is_docker or recipe.base_image is None:
        raise UserError(f"store fetch: recipe {recipe.name} runs locally; fetch is for Docker and venv recipes "
                        "(their images and venvs install wheels from the store)")
    clones = check_source_flags(recipe, sides.pytorch_src, sides.triton_src, sides.triton_ref)
    if clones is None and (sides.pytorch_src is not None or sides.refs):
        raise UserError(f"store fetch: recipe {recipe.name} installs wheels; --pytorch-src, --base and --pr are for "
                        "recipes that build from source")
    target = base_image_target(recipe, store)
    items = wheels_for(store, [pin.requirement for pin in recipe.wheel_pins], target, pins=recipe.wheel_pins)
    items += wheels_for(store, list(recipe.pip_extra), target)
    sources = "" if recipe.is_wheel else " (a source build's own build requirements are fetched when it is built)"
    print(f"store {store.root}: {len({item.sha256 for item in items})} wheel(s) for recipe {recipe.name}{sources}")
    if clones is not None:
        fetch_source_downloads(store, recipe, clones, sides, target)


def fetch_source_downloads(store: Store, recipe: Recipe, clones: tuple[Path, Path], sides: SourceSides,
                           target: Callable[[], WheelTarget]) -> None:
    """Every file the recipe's PyTorch and Triton builds would download (``build_context.downloads_at``), for each
    side's PyTorch commit and the Triton commit it builds with, into the store with its sha256."""
    from prbench.images.build import triton_source
    from prbench.images.build_context import downloads_at, fetch_download
    from prbench.images.pins import open_repo, resolve_commit

    assert recipe.pytorch is not None
    repo = open_repo(clones[0], "--pytorch-src")
    refs = [recipe.pytorch.commit if ref == "installed" else ref for ref in sides.refs] or [recipe.pytorch.commit]
    fetched: dict[str, StoreItem] = {}
    for ref in dict.fromkeys(refs):
        commit = resolve_commit(repo, ref, "--base/--pr")
        triton_repo, pin = triton_source(recipe, repo, commit, clones[1], sides.triton_ref)
        for download in downloads_at(recipe, (repo, commit), (triton_repo, pin.commit), target,
                                     partial(_base_rocm_version, recipe, store)):
            if download.url not in fetched:
                fetched[download.url] = fetch_download(store, download, print)
    print(f"store {store.root}: {len(fetched)} build download(s) for recipe {recipe.name} at "
          f"{len(dict.fromkeys(refs))} PyTorch commit(s)")


def _base_rocm_version(recipe: Recipe, store: Store) -> str:
    from prbench.docker_engine import docker_client, resolve_base
    from prbench.images.pytorch_setup import image_rocm_version

    assert recipe.base_image is not None
    client = docker_client()
    base = resolve_base(client, recipe.base_image, pull=False, emit=print, store=store)
    return image_rocm_version(client, base.image_id)
