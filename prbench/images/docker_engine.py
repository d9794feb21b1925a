"""The Docker engine as the host uses it: a client (or one line saying why there is none), images looked up without
pulling, and the base image of a build found by digest (loaded from the store, or pulled by digest only when asked).

Every host module that talks to Docker (images, wheels, the runners, the executors, the tasks) takes its client here.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from foundation.errors import UserError
from prbench.sides.recipes import BaseImage, is_pinned_reference

if TYPE_CHECKING:
    from prbench.images.content_store import Store, StoreItem

Emit = Callable[[str], None]


def docker_client():
    """A docker-py client, or a one-line error when no engine answers."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
        return client
    except docker.errors.DockerException as exc:
        reason = " ".join(str(exc).split())
        raise UserError(
            f"docker: cannot reach the Docker engine ({reason}); start dockerd or set DOCKER_HOST"
        ) from None


def image_present(client, ref: str):
    """The image for ``ref`` if the local store has it; never pulls."""
    import docker

    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError:
        # An unparsable reference (e.g. a digest for another repo name) is "not present" as well.
        return None


@dataclass(frozen=True)
class ResolvedBase:
    from_ref: str  # what the Dockerfile builds FROM
    image_id: str
    repo_digests: tuple[str, ...]


def resolve_base(client, base: BaseImage, pull: bool, emit: Emit, store: Store | None = None,
                 saved: StoreItem | None = None) -> ResolvedBase:
    """Find the base locally by digest; load it from the store (``saved``, a rebuild) or pull it by digest
    only when asked. Never builds FROM a tag.

    A registry image is found by its repo digest. An image made locally (``docker import``, like the
    debootstrap base of .ci/base-image.sh) has no repo digest; it is pinned by its image id, and the Dockerfile
    then builds FROM that id. ``docker load`` keeps an image's id, so a saved base comes back as itself.
    """
    _check_base(base)
    image, from_ref = find_base(client, base)
    if image is None and saved is not None and store is not None:
        emit(f"loading base image {base.name} from the store ({saved.label()})")
        loaded = store.load_image(client, saved)
        image = image_present(client, loaded)
        from_ref = loaded  # the store item's sha256 is what the lock recorded for this base
    if image is None and pull:
        emit(f"pulling {base.reference} (by digest)")
        _pull_by_digest(client, base)
        image, from_ref = image_present(client, base.reference), base.reference
    if image is None:
        # The reference was validated above, and is shell-quoted anyway: the user may paste this line.
        raise UserError(
            f"base image {base.reference} ({base.name}) is not present locally; "
            f"pass --pull, or run: docker pull {shlex.quote(base.reference)}{_local_hint(client, base)}"
        )
    return ResolvedBase(from_ref=from_ref, image_id=image.id, repo_digests=tuple(image.attrs.get("RepoDigests") or ()))


def find_base(client, base: BaseImage) -> tuple[Any, str]:
    """The base image if the engine has it (by its repo digest, or by image id for a local base) and the reference
    to build FROM; ``(None, reference)`` when absent. Never pulls."""
    image = image_present(client, base.reference)
    if image is not None:
        return image, base.reference
    image = image_present(client, base.digest)
    if image is not None and image.id == base.digest:
        return image, base.digest
    return None, base.reference


def _local_hint(client, base: BaseImage) -> str:
    """A base made on this machine under the recipe's name but with another id: say which id to pin."""
    image = image_present(client, base.name)
    if image is None or image.attrs.get("RepoDigests"):
        return ""
    return (f" (a local image {base.name} exists with id {image.id}: a local base is pinned by its image id, "
            "so put that id in base_image.digest if it is the one you mean)")


def _check_base(base: BaseImage) -> None:
    """Recipes are validated on load; a BaseImage built any other way is checked before it reaches Docker."""
    if not is_pinned_reference(base.reference):
        raise UserError(f"base image {base.reference!r}: not an image name pinned by digest "
                        "(repository@sha256:<64 hex>)")


def _pull_by_digest(client, base: BaseImage) -> None:
    import docker

    _check_base(base)
    repo = base.reference.split("@", 1)[0]
    try:
        client.images.pull(repo, tag=base.digest)
    except docker.errors.APIError as exc:
        raise UserError(f"--pull: cannot pull {base.reference}: {' '.join(str(exc).split())}") from None
