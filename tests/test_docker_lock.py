"""Months later: rebuild an image from its lock and the store alone (the clones moved away, the build without
network) and prove it equal; a changed pin is named exactly; a corrupted store item is named in one line."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from pathlib import Path

import git
import pytest

from tests.support.docker_support import base_image_id, commit_all, invoke, make_standins, require_engine, write_recipe

# Under ``pytest -n``, the docker tests that build stand-in images share one worker: they build (and remove) images
# of the same tags.
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker-standins")]


@pytest.fixture(scope="module")
def client():
    return require_engine()


def _built(result) -> tuple[str, Path]:
    assert result.returncode == 0, result.stderr
    match = re.search(r"image (\S+) \(sha256:[0-9a-f]+\); lock (\S+)", result.stdout)
    return match.group(1), Path(match.group(2))


def test_lock_rebuild_verify_then_a_changed_pin_is_named(client, tmp_path: Path) -> None:
    standins = make_standins(tmp_path)
    recipe = write_recipe("bookworm-cpu.toml", tmp_path, digest=base_image_id(client),
                          pytorch_commit=standins.pytorch_commit, name="lockdemo.toml")
    runs = str(tmp_path / "runs")
    store = tmp_path / "store"
    tag, lock_path = _built(invoke("build", "--recipe", str(recipe), "--runs-dir", runs, "--store", str(store)))
    lock = json.loads(lock_path.read_text())
    assert lock["base"]["digest"] == base_image_id(client)
    assert lock["sources"]["triton"] == {"source": "standin-triton", "commit": standins.triton_commit,
                                         "install_dir": ".",
                                         "pin_source": ".ci/docker/ci_commit_pins/triton.txt"}
    assert lock["contents"]["pip"]["torch"] == "2.9.0a0+standin"
    assert lock["contents"]["dpkg"]["python3"]  # read from inside the image
    # every input the build consumed is a store item: the two source archives of the exact commits
    assert [(e["used_as"], e["kind"], e["name"]) for e in lock["store"]] == [
        ("src/triton", "source-archive", f"triton-{standins.triton_commit}.tar"),
        ("src/pytorch", "source-archive", f"pytorch-{standins.pytorch_commit}.tar")]
    assert lock["build"]["network_mode"] == "none"
    old_id = lock["provenance"]["image"]["id"]

    # The image and the recipe file are gone, and the clones are renamed away: only the lock and the store remain.
    client.images.remove(tag)
    recipe.unlink()
    moved = [clone.rename(clone.with_name(clone.name + ".away")) for clone in (standins.pytorch, standins.triton)]
    rebuilt = invoke("rebuild", "--lock", str(lock_path), "--runs-dir", runs, "--store", str(store), "--lock-out",
                     str(tmp_path / "rebuilt.lock.json"))
    rebuilt_tag, _ = _built(rebuilt)
    assert rebuilt_tag == tag and "Step 1/" in rebuilt.stdout
    assert not [line for line in rebuilt.stdout.splitlines() if line.startswith("warning:")]  # no input drifted
    assert json.loads(client.images.get(tag).labels["dev.prbench.inputs"])["build"]["network_mode"] == "none"

    verified = invoke("verify", "--lock", str(lock_path))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "differs:" not in verified.stdout and "the image matches" in verified.stdout
    if client.images.get(tag).id != old_id:
        assert "note: image id" in verified.stdout  # shown, not a difference
    for away, clone in zip(moved, (standins.pytorch, standins.triton), strict=True):
        away.rename(clone)

    # One pin changes: the same recipe builds PyTorch at a new commit (same Triton pin, same version).
    repo = git.Repo(standins.pytorch)
    (standins.pytorch / "NOTES.md").write_text("a docs-only commit\n")
    new_commit = commit_all(repo, "docs")
    write_recipe("bookworm-cpu.toml", tmp_path, digest=base_image_id(client), pytorch_commit=standins.pytorch_commit,
                 name="lockdemo.toml")
    new_tag, _ = _built(invoke("build", "--recipe", str(recipe), "--runs-dir", runs, "--pytorch-ref", new_commit))
    assert new_tag != tag
    changed = invoke("verify", "--lock", str(lock_path), "--image", new_tag)
    assert changed.returncode == 1
    differences = [line for line in changed.stdout.splitlines() if line.startswith("differs:")]
    assert differences == [f"differs: sources.pytorch.commit: lock has {standins.pytorch_commit}, "
                           f"image has {new_commit}"]
    assert changed.stderr.strip().startswith("verify: 1 field(s) differ")


def test_a_corrupted_store_item_stops_the_rebuild_in_one_line_naming_it(client, tmp_path: Path) -> None:
    standins = make_standins(tmp_path)
    recipe = write_recipe("bookworm-cpu.toml", tmp_path, digest=base_image_id(client),
                          pytorch_commit=standins.pytorch_commit, name="corruptdemo.toml")
    runs, store = str(tmp_path / "runs"), tmp_path / "store"
    tag, lock_path = _built(invoke("build", "--recipe", str(recipe), "--runs-dir", runs, "--store", str(store)))
    archive = next(e for e in json.loads(lock_path.read_text())["store"] if e["used_as"] == "src/pytorch")
    client.images.remove(tag)
    victim = store / "objects" / archive["sha256"][:2] / archive["sha256"]
    victim.chmod(0o644)
    victim.write_bytes(b"bit rot")

    result = invoke("rebuild", "--lock", str(lock_path), "--runs-dir", runs, "--store", str(store))

    assert result.returncode == 2 and "Traceback" not in result.stdout + result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("error: ") and archive["name"] in line and archive["sha256"][:12] in line
    assert str(victim) in line


def test_a_base_saved_into_the_store_is_loaded_back_when_the_engine_lacks_it(client, tmp_path: Path) -> None:
    # A local base of the test's own (a label on the CI base), so removing it disturbs no other test. The label is
    # unique to this test's run: one the same in every session (the tmp_path's name is) would make the same
    # Dockerfile, which the engine's build cache answers with the same image, and a session removing it would remove
    # the base of another session's test running meanwhile on the same engine.
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "Dockerfile").write_text(f"FROM {base_image_id(client)}\nLABEL prbench.test={uuid.uuid4()}\n")
    own_base, _ = client.images.build(path=str(tmp_path / "base"), rm=True, network_mode="none")
    standins = make_standins(tmp_path)
    recipe = write_recipe("bookworm-cpu.toml", tmp_path, digest=own_base.id, pytorch_commit=standins.pytorch_commit,
                          name="savedbase.toml")
    runs, store = str(tmp_path / "runs"), tmp_path / "store"
    tag, lock_path = _built(invoke("build", "--recipe", str(recipe), "--runs-dir", runs, "--store", str(store),
                                   "--save-base"))
    [saved] = [e for e in json.loads(lock_path.read_text())["store"] if e["used_as"] == "base"]
    assert saved["kind"] == "image" and own_base.id in saved["origin"]

    _gone(client, tag, own_base.id)
    rebuilt = invoke("rebuild", "--lock", str(lock_path), "--runs-dir", runs, "--store", str(store))

    _built(rebuilt)
    assert f"loading base image prbench-test/bookworm:base from the store (image {saved['name']}" in rebuilt.stdout
    assert client.images.get(own_base.id).id == own_base.id  # docker load keeps the image id
    verified = invoke("verify", "--lock", str(lock_path))
    assert verified.returncode == 0 and "differs:" not in verified.stdout, verified.stdout + verified.stderr
    _gone(client, tag, own_base.id)


def _gone(client, *refs: str) -> None:
    """Remove images, children first; an untagged parent may already have gone with its last child."""
    import docker

    for ref in refs:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(ref)
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(ref)
