"""A base image kept in the store: saved once by id, loaded back as the same image, refused when its bytes changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from prbench.images.content_store import Store, StoreError, StoreItem
from tests.support.docker_support import BASE_IMAGE, require_engine

# Under ``pytest -n``, the docker tests that build stand-in images share one worker: they build (and remove) images
# of the same tags.
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker-standins")]


@pytest.fixture(scope="module")
def client():
    return require_engine()


@pytest.fixture(scope="module")
def saved(client, tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, StoreItem, list[str]]:
    """The base image saved once into a store (a docker save of it takes a while): the store, the item, the lines."""
    store = Store(tmp_path_factory.mktemp("store") / "store")
    lines: list[str] = []
    return store, store.add_image(client, BASE_IMAGE, emit=lines.append), lines


def test_a_saved_base_image_loads_back_as_the_same_image(client, saved) -> None:
    store, item, lines = saved
    image_id = client.images.get(BASE_IMAGE).id

    again = Store(store.root).add_image(client, image_id, emit=lines.append)

    assert item.kind == "image" and item.name == f"image-{image_id.split(':')[1][:12]}.tar"
    assert item.origin == f"docker save {BASE_IMAGE} ({image_id})"
    assert again == item and len([line for line in lines if line.startswith("saving image")]) == 1
    assert store.load_image(client, item) == image_id


def test_a_corrupted_image_item_is_refused_before_docker_load(client, saved, tmp_path: Path) -> None:
    original, item, _ = saved
    store = Store(tmp_path / "store")
    store.add_file(original.path(item), kind=item.kind, name=item.name, origin=item.origin)
    victim = store.object_path(item.sha256)
    victim.chmod(0o644)
    with open(victim, "r+b") as data:
        data.seek(item.size // 2)
        data.write(b"\0\1\2\3")

    with pytest.raises(StoreError, match=rf"image {item.name} \(sha256 {item.sha256[:12]}\) is corrupt"):
        Store(store.root).load_image(client, item)


def test_an_image_that_is_not_there_is_one_line(client, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="image prbench-test/absent:none: not present in the Docker engine"):
        Store(tmp_path / "store").add_image(client, "prbench-test/absent:none", emit=lambda _: None)
