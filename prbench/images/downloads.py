"""A file a source tree's own build would fetch by URL, and how the image build gives it a stored copy instead.

``prbench.images.pytorch_setup`` reads PyTorch's from a PyTorch tree and ``prbench.images.triton_setup`` Triton's from a
Triton tree; ``prbench.images.build_context`` takes each
from the store (``Store.add_url``, checked against ``sha256`` when the tree names one), lays it into the build
context, unpacks it in the image (``place.sh``) and exports ``env`` around the build step (``env.sh``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Download:
    """One file a build would fetch. ``env`` values use ``{path}`` for the directory the file is placed and
    unpacked in (in the image); ``unpack_under`` is a directory relative to it ("" = that directory)."""

    what: str  # the context directory it goes in: "aotriton"
    url: str
    env: dict[str, str]
    key: str  # unique within one build's downloads, [a-z0-9-]: the lock's used_as is downloads/<key>
    sha256: str = ""  # what the tree itself expects ("" when it names none: the first fetch is recorded)
    unpack_under: str = ""
    tool: str = field(default="", compare=False)  # for people: "AOTriton 0.11b runtime (rocm7.0)"
