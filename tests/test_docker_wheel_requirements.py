"""A wheel image keeps the Triton its torch requires, built for real: a user builds a CPU wheel recipe whose (stand-in)
torch requires a (stand-in) Triton, out of the store's wheelhouse with no network. Before the build the output says
what the image will contain; the image's check keeps that Triton and names the requirement; the lock records every
installed distribution with what brought it; `invoke rebuild --lock` and `invoke verify` work as for any image."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from prbench.images.content_store import Store
from prbench.images.image_lock import FROM_BASE
from tests.support.docker_support import base_image_id, invoke, require_engine
from tests.support.store_support import write_wheel

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker-standins")]

TRITON_REQUIREMENT = 'triton==3.8.0; platform_system == "Linux"'


@pytest.fixture(scope="module")
def client():
    return require_engine()


def _built(result) -> tuple[str, Path]:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    match = re.search(r"image (\S+) \(sha256:[0-9a-f]+\); lock (\S+)", result.stdout)
    assert match is not None, result.stdout[-2000:]
    return match.group(1), Path(match.group(2))


def test_a_wheel_image_keeps_the_triton_its_torch_requires_and_locks_what_brought_each(client, tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    house = tmp_path / "house"
    wheels = [write_wheel(house, "torch", "2.14.1", requires=(TRITON_REQUIREMENT, 'macos_helper==1.0; sys_platform '
                                                                                 '== "darwin"')),
              write_wheel(house, "triton", "3.8.0"), write_wheel(house, "macos_helper", "1.0")]
    torch, _, _ = [store.add_file(w, kind="wheel", name=w.name, origin="stand-in") for w in wheels]
    recipe = tmp_path / "wheel-triton.toml"
    recipe.write_text(f'platform = "cpu"\nrunner = "docker"\n[base_image]\nname = "prbench-test/bookworm:base"\n'
                      f'digest = "{base_image_id(client)}"\n[pytorch]\nwheel = "torch==2.14.1"\n'
                      f'sha256 = "{torch.sha256}"\n')
    runs = tmp_path / "runs"

    built = invoke("build", "--recipe", str(recipe), "--runs-dir", str(runs), "--store", str(store.root))

    tag, lock_path = _built(built)
    said = built.stdout
    assert f"image {tag} will contain:\n  torch: torch 2.14.1 (pinned torch==2.14.1)\n  Triton: triton 3.8.0 " \
           f"(torch 2.14.1 requires {TRITON_REQUIREMENT})\n  2 wheels in the store: " in said
    assert said.index("will contain:") < said.index(f"building {tag}")
    assert f"prbench check: triton 3.8.0 kept: torch 2.14.1 requires {TRITON_REQUIREMENT}" in said
    lock = json.loads(lock_path.read_text())
    assert lock["lock_version"] == 2
    installed = lock["installed"]
    assert installed["torch"] == {"version": "2.14.1", "brought_by": "pinned torch==2.14.1 (wheels/pytorch)"}
    assert installed["triton"] == {"version": "3.8.0",
                                   "brought_by": f"torch 2.14.1 requires {TRITON_REQUIREMENT} (wheels/pytorch)"}
    assert "macos-helper" not in installed and "macos_helper" not in installed
    assert installed["pip"]["brought_by"] == FROM_BASE  # every other distribution is listed, from the base

    # Months later: the image is gone; the lock and the store rebuild it offline, and verify finds no difference.
    client.images.remove(tag)
    rebuilt_tag, rebuilt_lock = _built(invoke("rebuild", "--lock", str(lock_path), "--runs-dir", str(runs),
                                              "--store", str(store.root), "--lock-out",
                                              str(tmp_path / "rebuilt.json")))
    assert rebuilt_tag == tag
    assert json.loads(rebuilt_lock.read_text())["installed"] == installed
    verified = invoke("verify", "--lock", str(lock_path))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "differs:" not in verified.stdout and "the image matches" in verified.stdout
