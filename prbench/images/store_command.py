"""``invoke store ACTION``: list, verify, export, import and fetch into the content-addressed store
(``prbench.images.content_store``)."""

from __future__ import annotations

from pathlib import Path

from analysis.errors import UserError
from prbench.images.content_store import Store, StoreError, items_in_lock
from prbench.recipes import Recipe

ACTIONS = ("list", "verify", "export", "import", "fetch")


def run_store_action(action: str, *, store_dir: str | None, file: Path | None, lock: Path | None,
                     recipe: Recipe | None = None) -> None:
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
    store = Store.at(store_dir)
    if action == "list":
        list_items(store)
    elif action == "verify":
        verify_items(store)
    elif action == "fetch":
        assert recipe is not None
        fetch_recipe_wheels(store, recipe)
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
        print(f"{item.kind:<14} {item.name:<{width}} {item.sha256[:12]} {_size(item.size):>9}  {item.origin}")
    print(f"store {store.root}: {len(items)} item(s), {_size(sum(item.size for item in items))}")


def verify_items(store: Store) -> None:
    items = store.items()
    problems = store.verify()
    for problem in problems:
        print(f"bad: {problem}")
    if problems:
        raise StoreError(f"store {store.root}: {len(problems)} of {len(items)} item(s) missing or corrupt (listed "
                         "above)")
    print(f"store {store.root}: all {len(items)} item(s) hash to their names")


def fetch_recipe_wheels(store: Store, recipe: Recipe) -> None:
    """Every wheel a build of ``recipe`` installs that is known before any source is read (its wheel pins and
    ``[pip] extra``, dependencies included) for its base image's Python: later builds of it then run offline."""
    from prbench.images.wheels import base_image_target, wheels_for

    if not recipe.is_docker or recipe.base_image is None:
        raise UserError(f"store fetch: recipe {recipe.name} runs locally; fetch is for Docker recipes (their "
                        "images install wheels from the store)")
    target = base_image_target(recipe, store)
    items = wheels_for(store, [pin.requirement for pin in recipe.wheel_pins], target, pins=recipe.wheel_pins)
    items += wheels_for(store, list(recipe.pip_extra), target)
    sources = "" if recipe.is_wheel else " (a source build's own build requirements are fetched when it is built)"
    print(f"store {store.root}: {len({item.sha256 for item in items})} wheel(s) for recipe {recipe.name}{sources}")


def _size(size: int) -> str:
    if size < 1000:
        return f"{size} B"
    scaled = float(size)
    for unit in ("kB", "MB", "GB"):
        scaled /= 1000
        if scaled < 1000 or unit == "GB":
            break
    return f"{scaled:.1f} {unit}"
