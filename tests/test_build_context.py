"""A build takes every input from the store: the user's clones are archived into it once, a rebuild from the lock
needs neither the clones nor the network, a corrupt item is named in one line, and the wheelhouse lists every
wheel with its sha256."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from foundation.errors import UserError
from prbench.images.build import plan_build
from prbench.images.build_context import build_requirements, fill_context
from prbench.images.build_plan import UsedItem, read_used_items
from prbench.images.content_store import Store, StoreError, StoreItem, WheelTarget
from prbench.images.image_lock import compare, plan_from_lock
from prbench.images.wheels import hashed_requirements
from prbench.sides.pins import SourceTree
from prbench.sides.recipes import load_recipe
from tests.support.docker_support import ZERO_DIGEST, make_standins, write_recipe
from tests.support.store_support import write_wheel
from tests.support.triton_trees import triton_tree

TARGET = WheelTarget("3.11", ("manylinux_2_36_x86_64", "linux_x86_64"), abi="cp311")


def no_wheels_needed() -> WheelTarget:
    raise AssertionError("the image's interpreter was asked for, but this build installs no wheel")


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def standin_plan(tmp_path: Path):
    standins = make_standins(tmp_path)
    recipe = write_recipe("bookworm-cpu.toml", tmp_path, digest=ZERO_DIGEST, pytorch_commit=standins.pytorch_commit)
    return standins, plan_build(load_recipe(str(recipe), tmp_path))


def test_a_source_build_archives_the_exact_commits_into_the_store_and_unpacks_them(tmp_path: Path,
                                                                                   standin_plan) -> None:
    standins, plan = standin_plan
    store = Store(tmp_path / "store")
    context = tmp_path / "context"

    used = fill_context(plan, store, context, no_wheels_needed, emit=lambda _: None)

    assert [(u.used_as, u.item.kind, u.item.name) for u in used] == [
        ("src/triton", "source-archive", f"triton-{standins.triton_commit}.tar"),
        ("src/pytorch", "source-archive", f"pytorch-{standins.pytorch_commit}.tar"),
    ]
    assert all(u.item.origin.startswith(("git " + standins.triton_commit, "git " + standins.pytorch_commit))
               for u in used)
    assert (context / "src" / "pytorch" / "setup.py").is_file()
    assert (context / "src" / "triton" / "pyproject.toml").is_file()
    # every wheel group exists, each with a requirements file that pins nothing (the stand-ins need no wheel)
    for group in ("triton-build", "pytorch-build", "extra"):
        lines = (context / "wheels" / group / "requirements.txt").read_text().splitlines()
        assert [line for line in lines if not line.startswith("#")] == []
    # a Triton tree without setup.py downloads nothing: the scripts exist and do nothing
    assert "export" not in (context / "downloads" / "env.sh").read_text()


def test_a_rebuild_from_the_lock_needs_no_clone_and_fills_the_same_context(tmp_path: Path, standin_plan) -> None:
    standins, plan = standin_plan
    store = Store(tmp_path / "store")
    used = fill_context(plan, store, tmp_path / "first", no_wheels_needed, emit=lambda _: None)
    entries = json.loads(json.dumps([u.to_json() for u in used]))  # as the label and the lock carry them
    for clone in (standins.pytorch, standins.triton):
        clone.rename(clone.with_name(clone.name + "-moved-away"))
    trees = (SourceTree("pytorch", None, standins.pytorch_commit), SourceTree("triton", None, standins.triton_commit))
    locked = plan_build(plan.recipe, trees=trees, pin=plan.triton_pin, locked=tuple(read_used_items(entries, "lock")))

    again = fill_context(locked, store, tmp_path / "second", no_wheels_needed, emit=lambda _: None)

    assert again == used
    assert _files(tmp_path / "second") == _files(tmp_path / "first")
    assert locked.tag == plan.tag  # the same inputs: the rebuilt image gets the same tag


def test_a_corrupted_store_item_is_one_line_naming_it(tmp_path: Path, standin_plan) -> None:
    _, plan = standin_plan
    store = Store(tmp_path / "store")
    used = fill_context(plan, store, tmp_path / "first", no_wheels_needed, emit=lambda _: None)
    victim = store.object_path(used[1].item.sha256)
    victim.chmod(0o644)
    victim.write_bytes(b"not the archive any more")
    locked = plan_build(plan.recipe, trees=(plan.pytorch, plan.triton), pin=plan.triton_pin, locked=tuple(used))

    with pytest.raises(StoreError) as refused:
        fill_context(locked, Store(store.root), tmp_path / "second", no_wheels_needed, emit=lambda _: None)

    message = str(refused.value)
    assert "\n" not in message and used[1].item.label() in message and "corrupt" in message


def test_a_source_build_without_a_clone_or_a_lock_says_which_flag_gives_it(tmp_path: Path, standin_plan) -> None:
    _, plan = standin_plan
    trees = (SourceTree("pytorch", None, plan.pytorch.commit), SourceTree("triton", None, plan.triton.commit))
    homeless = plan_build(plan.recipe, trees=trees, pin=plan.triton_pin)

    with pytest.raises(UserError, match=r"^triton source: no clone to archive commit [0-9a-f]{12} from \(give "
                                        r"--triton-src\)$"):
        fill_context(homeless, Store(tmp_path / "store"), tmp_path / "ctx", no_wheels_needed, emit=lambda _: None)


# --- wheel recipes -------------------------------------------------------------------------------------------


def _wheel_recipe(tmp_path: Path, sha256: str) -> Path:
    path = tmp_path / "wheels-test.toml"
    path.write_text(f'platform = "cpu"\nrunner = "docker"\n[base_image]\nname = "prbench-test/bookworm:base"\n'
                    f'digest = "{ZERO_DIGEST}"\n[pytorch]\nwheel = "torch==2.13.0+cpu"\nsha256 = "{sha256}"\n')
    return path


def _fake_torch_wheel(tmp_path: Path, store: Store) -> StoreItem:
    wheel = write_wheel(tmp_path / "house", "torch", "2.13.0+cpu", tag="cp311-cp311-manylinux_2_28_x86_64")
    return store.add_file(wheel, kind="wheel", name=wheel.name, origin="pip download torch==2.13.0+cpu")


def test_a_wheel_recipe_installs_its_pinned_wheel_with_its_hash(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    torch = _fake_torch_wheel(tmp_path, store)
    plan = plan_build(load_recipe(str(_wheel_recipe(tmp_path, torch.sha256)), tmp_path))
    context = tmp_path / "context"

    used = fill_context(plan, store, context, lambda: TARGET, emit=lambda _: None)

    assert [(u.used_as, u.item.name) for u in used] == [("wheels/pytorch", torch.name)]
    assert (context / "wheels" / "pytorch" / torch.name).is_file()
    assert (context / "wheels" / "pytorch" / "requirements.txt").read_text().splitlines()[1:] == [
        f"torch==2.13.0+cpu --hash=sha256:{torch.sha256}"]
    assert not (context / "src").exists()
    assert plan.sources() == {"pytorch": {"wheel": "torch==2.13.0+cpu", "sha256": torch.sha256}}


def test_a_wheel_whose_bytes_differ_from_the_pin_is_refused_naming_both_checksums(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    torch = _fake_torch_wheel(tmp_path, store)
    pinned = "ef" * 32
    plan = plan_build(load_recipe(str(_wheel_recipe(tmp_path, pinned)), tmp_path))

    with pytest.raises(UserError) as refused:
        fill_context(plan, store, tmp_path / "context", lambda: TARGET, emit=lambda _: None)

    assert str(refused.value) == (f"wheel torch==2.13.0+cpu: the recipe pins sha256 {pinned}, but pip download gave "
                                  f"{torch.name} with sha256 {torch.sha256}")


def test_an_overlay_that_does_not_apply_to_the_wheel_fails_before_docker(tmp_path: Path) -> None:
    from prbench.sides.overlay import PythonOverlay

    store = Store(tmp_path / "store")
    torch = _fake_torch_wheel(tmp_path, store)
    good = PythonOverlay.from_text("--- a/torch/__init__.py\n+++ b/torch/__init__.py\n@@ -1,2 +1,3 @@\n"
                                   " VERSION = '2.13.0+cpu'\n+PR = True\n BUILD = ''\n", origin="good.patch",
                                   flag="--pr")
    stale = PythonOverlay.from_text("--- a/torch/__init__.py\n+++ b/torch/__init__.py\n@@ -1,2 +1,2 @@\n"
                                    "-VERSION = '2.12.0'\n+VERSION = '2.12.1'\n BUILD = ''\n", origin="stale.patch",
                                    flag="--pr")

    good.check_applies_to_wheel(store.path(torch), "the wheel torch==2.13.0+cpu")
    with pytest.raises(UserError) as refused:
        stale.check_applies_to_wheel(store.path(torch), "the wheel torch==2.13.0+cpu")

    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("overlay stale.patch: does not apply to the wheel torch==2.13.0+cpu (")


def test_a_lock_of_a_wheel_side_rebuilds_that_sides_wheel_not_the_recipes(tmp_path: Path) -> None:
    recipe_path = _wheel_recipe(tmp_path, "ab" * 32)
    side = load_recipe(str(recipe_path), tmp_path)
    assert side.pytorch_wheel is not None
    other = type(side.pytorch_wheel)("torch==2.14.0.dev20261101+cpu", "cd" * 32)
    plan = plan_build(side.with_wheels(other, None))
    lock = {**plan.inputs(), "store": [], "contents": {},
            "provenance": {"recipe_toml": recipe_path.read_text(), "recipe_path": str(recipe_path)}}

    rebuilt, drift = plan_from_lock(lock)

    assert rebuilt.recipe.pytorch_wheel == other and rebuilt.tag == plan.tag and drift == []


# --- the pieces ----------------------------------------------------------------------------------------------


def _item(name: str, sha: str) -> StoreItem:
    return StoreItem("wheel", name, sha * 32, 1, "pip download")


def test_the_wheelhouse_requirements_pin_every_wheel_by_version_and_hash() -> None:
    text = hashed_requirements([_item("sympy-1.14.0-py3-none-any.whl", "b1"),
                                _item("filelock-3.20.0-py3-none-any.whl", "a1")])

    assert text.splitlines()[1:] == [f"filelock==3.20.0 --hash=sha256:{'a1' * 32}",
                                     f"sympy==1.14.0 --hash=sha256:{'b1' * 32}"]


def test_two_versions_of_one_wheel_in_a_group_are_refused() -> None:
    with pytest.raises(UserError, match="holds filelock at several versions"):
        hashed_requirements([_item("filelock-3.20.0-py3-none-any.whl", "a1"),
                             _item("filelock-3.19.0-py3-none-any.whl", "a2")])


def test_build_requirements_follow_includes_and_drop_options(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("# build\n-r requirements-build.txt\nsympy>=1.13  # symbolic\n"
                                               "--extra-index-url https://example.com\n-e .\n\n")
    (tmp_path / "requirements-build.txt").write_text("setuptools>=70\nninja\n-r ../../outside.txt\n")

    assert build_requirements(tmp_path, ("requirements.txt", "requirements-build.txt")) == [
        "setuptools>=70", "ninja", "sympy>=1.13"]


def test_verify_names_a_changed_wheel_but_not_a_saved_base() -> None:
    item = _item("filelock-3.20.0-py3-none-any.whl", "a1")
    base = StoreItem("image", "base-0123456789ab.tar", "c3" * 32, 10, "docker save")
    locked = {"store": [UsedItem(item, "wheels/extra").to_json()]}

    saved_since = {"store": [*locked["store"], UsedItem(base, "base").to_json()]}
    other_wheel = {"store": [UsedItem(_item("filelock-3.20.0-py3-none-any.whl", "a2"), "wheels/extra").to_json()]}

    assert compare(locked, saved_since) == []
    assert [d.line() for d in compare(locked, other_wheel)] == [
        f"store.wheels/extra/filelock-3.20.0-py3-none-any.whl: lock has {'a1' * 32}, image has {'a2' * 32}"]


def test_a_lock_entry_used_somewhere_unknown_is_refused() -> None:
    entry = {**_item("x-1.0-py3-none-any.whl", "a1").to_json(), "used_as": "../../etc"}

    with pytest.raises(UserError, match=r"lock\[0\]\.used_as: expected base, src/<tree>"):
        read_used_items([entry], "lock")


def test_moving_the_clone_keeps_the_archive_usable(tmp_path: Path, standin_plan) -> None:
    standins, plan = standin_plan
    store = Store(tmp_path / "store")
    first = fill_context(plan, store, tmp_path / "a", no_wheels_needed, emit=lambda _: None)
    shutil.rmtree(standins.pytorch / ".git")

    # the archive of that commit is already in the store: the clone is not read again
    assert fill_context(plan, store, tmp_path / "b", no_wheels_needed, emit=lambda _: None) == first


def test_a_runs_lock_holds_both_images_and_a_local_run_has_none(tmp_path: Path) -> None:
    from prbench.images.image_lock import COMPARED, LOCK_VERSION, read_locks

    image_lock = {"lock_version": LOCK_VERSION, **{key: {} for key in COMPARED}, "store": [],
                  "recipe": {"name": "bookworm"}, "base": {"digest": ZERO_DIGEST},
                  "provenance": {"recipe_path": "", "recipe_toml": "", "image": {"tag": "prbench/bookworm:x"}}}
    run_lock = tmp_path / "lock.json"
    run_lock.write_text(json.dumps({"base": image_lock, "pr": image_lock}))
    local = tmp_path / "local.json"
    local.write_text(json.dumps({"base": {"runner": "local"}, "pr": {"runner": "local"}}))

    assert [side for side, _ in read_locks(run_lock)] == ["base", "pr"]
    with pytest.raises(UserError, match=r"local runner .*no image to rebuild"):
        read_locks(local)


def test_a_rocm_build_takes_llvm_from_the_store_and_records_its_url_and_checksum(tmp_path: Path) -> None:
    import git

    from tests.support.docker_support import commit_all, make_pytorch

    # A Triton tree whose setup.py downloads LLVM as Triton 3.4 does (the stand-in of tests/support/triton_trees.py).
    triton = triton_tree(tmp_path / "triton", "3.4")
    repo = git.Repo.init(triton)
    triton_commit = commit_all(repo, "triton with an LLVM download")
    _, pytorch_commit = make_pytorch(tmp_path / "pytorch", triton_commit)
    recipe = write_recipe("bookworm-rocm-path.toml", tmp_path, digest=ZERO_DIGEST, pytorch_commit=pytorch_commit)
    plan = plan_build(load_recipe(str(recipe), tmp_path), pytorch_src=tmp_path / "pytorch", triton_src=triton)
    url = "https://oaitriton.blob.core.windows.net/public/llvm-builds/llvm-b5cc222d-ubuntu-x64.tar.gz"
    store = Store(tmp_path / "store")
    tarball = tmp_path / "llvm.tar.gz"
    tarball.write_bytes(b"an LLVM build, fetched once")
    llvm = store.add_file(tarball, kind="download", name="llvm-b5cc222d-ubuntu-x64.tar.gz", origin=url)

    used = fill_context(plan, store, tmp_path / "context", lambda: TARGET, emit=lambda _: None)

    [entry] = [u.to_json() for u in used if u.used_as == "downloads/llvm"]
    assert (entry["origin"], entry["sha256"]) == (url, llvm.sha256)  # what the lock's store section lists
    env = (tmp_path / "context" / "downloads" / "env.sh").read_text()
    assert "export LLVM_SYSPATH=/opt/prbench/downloads/llvm/llvm-b5cc222d-ubuntu-x64" in env
    assert "export TRITON_OFFLINE_BUILD=1" in env and "export TRITON_BUILD_PROTON=OFF" in env
    place = (tmp_path / "context" / "downloads" / "place.sh").read_text()
    assert "tar -xf /opt/prbench/downloads/llvm/llvm-b5cc222d-ubuntu-x64.tar.gz -C /opt/prbench/downloads/llvm" in place
    assert (tmp_path / "context" / "downloads" / "llvm" / llvm.name).read_bytes() == b"an LLVM build, fetched once"
