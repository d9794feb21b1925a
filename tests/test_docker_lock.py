"""Months later: rebuild an image from its lock alone and prove it equal; a changed pin is named exactly."""

from __future__ import annotations

import json
import re
from pathlib import Path

import git
import pytest
from docker_support import base_image_id, commit_all, invoke, make_standins, require_engine, write_recipe

pytestmark = pytest.mark.docker


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
    tag, lock_path = _built(invoke("build", "--recipe", str(recipe), "--runs-dir", runs))
    lock = json.loads(lock_path.read_text())
    assert lock["base"]["digest"] == base_image_id(client)
    assert lock["sources"]["triton"] == {"source": "standin-triton", "commit": standins.triton_commit,
                                         "install_dir": ".",
                                         "pin_source": ".ci/docker/ci_commit_pins/triton.txt"}
    assert lock["contents"]["pip"]["torch"] == "2.9.0a0+standin"
    assert lock["contents"]["dpkg"]["python3"]  # read from inside the image
    old_id = lock["provenance"]["image"]["id"]

    # The image and the recipe file are gone; only the lock (and the clones) remain.
    client.images.remove(tag)
    recipe.unlink()
    rebuilt = invoke("rebuild", "--lock", str(lock_path), "--runs-dir", runs, "--lock-out",
                     str(tmp_path / "rebuilt.lock.json"))
    rebuilt_tag, _ = _built(rebuilt)
    assert rebuilt_tag == tag and "Step 1/" in rebuilt.stdout
    assert not [line for line in rebuilt.stdout.splitlines() if line.startswith("warning:")]  # no input drifted

    verified = invoke("verify", "--lock", str(lock_path))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "differs:" not in verified.stdout and "the image matches" in verified.stdout
    if client.images.get(tag).id != old_id:
        assert "note: image id" in verified.stdout  # shown, not a difference

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
