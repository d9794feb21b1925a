"""What an image build is, before anything runs: the build plan and the record of what the build consumed.

`BuildPlan` holds everything a build needs, resolved (the rendered Dockerfile, the source trees at their exact
commits, the patches, the overlay, the build args); its `BuildPlan.inputs` are hashed into the image's tag and
copied into its labels and its lock. `UsedItem` is one store item and the place in the build context it filled:
``prbench.images.build_context`` returns them, the image's ``dev.prbench.store`` label and its lock.json list them.
``prbench.images.build`` makes plans and builds them; ``prbench.images.build_context`` fills a context from a plan.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import prbench
from foundation.errors import UserError
from foundation.records import expect_list, expect_str
from prbench.images.content_store import StoreItem
from prbench.images.pytorch_setup import build_env
from prbench.sides.pins import SourceTree, TritonPin
from prbench.sides.recipes import BaseImage, Recipe

IMAGE_REPO = "prbench"
ROOT_IN_IMAGE = "/opt/prbench"
# Where docker/pytorch.j2 copies the PyTorch source tree (`COPY src/pytorch {{ root }}/src/pytorch`) and
# installs it editable: the upstream suite runs benchmarks/dynamo from there.
PYTORCH_SRC_IN_IMAGE = f"{ROOT_IN_IMAGE}/src/pytorch"

LABEL_PREFIX = "dev.prbench"
LABEL_INPUTS = f"{LABEL_PREFIX}.inputs"
# Not hashed (formatting or the machine's paths must not change the tag), but needed to rebuild from a lock.
LABEL_RECIPE_TOML = f"{LABEL_PREFIX}.recipe-toml"
LABEL_RECIPE_PATH = f"{LABEL_PREFIX}.recipe-path"
LABEL_CLONES = f"{LABEL_PREFIX}.clones"
LABEL_OVERLAY = f"{LABEL_PREFIX}.overlay-patch"
LABEL_TRITON_PATCH = f"{LABEL_PREFIX}.triton-patch"  # a Triton A/B's --triton-pr patch, applied to src/triton
# The store items the build consumed (build_context.UsedItem JSON), written when the image is built.
LABEL_STORE = f"{LABEL_PREFIX}.store"

PYTORCH_FIRST = "pytorch-first"  # inputs.build.layers of an image whose Triton is built on top of PyTorch
BASE_USE = "base"  # a saved base image (docker save), loaded on a rebuild when the engine lacks it
_USE_RE = re.compile(r"base|src/(?:pytorch|triton)|wheels/[a-z-]+|downloads/[a-z0-9_-]+")


@dataclass(frozen=True)
class UsedItem:
    """A store item and the place in the build context it filled (``src/pytorch``, ``wheels/extra``, ...); a wheel
    also names the requirement that brought it (``prbench.images.wheel_closure``; absent in older locks)."""

    item: StoreItem
    used_as: str
    brought_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        by = {} if self.brought_by is None else {"brought_by": self.brought_by}
        return {**self.item.to_json(), "used_as": self.used_as, **by}

    @classmethod
    def from_json(cls, data: Any, where: str) -> UsedItem:
        item = StoreItem.from_json(data, where)
        used_as = expect_str(data.get("used_as"), f"{where}.used_as")
        if not _USE_RE.fullmatch(used_as):
            raise UserError(f"{where}.used_as: expected base, src/<tree>, wheels/<group> or downloads/<what>, "
                            f"found {used_as[:60]!r}")
        brought_by = data.get("brought_by")
        return cls(item, used_as, None if brought_by is None else expect_str(brought_by, f"{where}.brought_by"))


def read_used_items(entries: Any, where: str) -> list[UsedItem]:
    """The ``store`` list of a lock (or an image label), each entry validated."""
    return [UsedItem.from_json(entry, f"{where}[{i}]") for i, entry in enumerate(expect_list(entries, where))]


@dataclass(frozen=True)
class PatchFile:
    name: str  # the recipe entry, e.g. "pytorch:fix-benchmark-line.patch"
    path: Path
    target: str  # the tree it applies to: "pytorch" or "triton"
    sha256: str


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build needs, resolved: the Dockerfile text, the context inputs and the tag."""

    recipe: Recipe  # a wheel side's recipe carries that side's wheel pin
    recipe_text: str
    base: BaseImage
    pytorch: SourceTree | None  # None for a wheel recipe
    triton: SourceTree | None
    triton_pin: TritonPin | None
    patches: tuple[PatchFile, ...]
    overlay: Path | None
    merge_base: str | None
    build_args: dict[str, str]
    dockerfile: str
    network_mode: str
    code_sha256: str
    templates_sha256: str
    # A rebuild: exactly these store items (from the lock), and the saved base to load when the engine lacks it.
    locked: tuple[UsedItem, ...] | None = None
    base_item: StoreItem | None = None
    # A Triton A/B: PyTorch's layers first and Triton's build on top, so that two images of one PyTorch and two
    # Tritons share every layer below Triton (the default order, Triton first, shares Triton across PyTorch PRs).
    pytorch_first: bool = False
    triton_patch: Path | None = None  # a patch on the Triton tree (a Triton A/B's --triton-pr patch)

    def sources(self) -> dict[str, Any]:
        """What PyTorch and Triton are: commits built from source, or wheels pinned by sha256."""
        if self.recipe.is_wheel:
            return {key: {"wheel": pin.requirement, "sha256": pin.sha256}
                    for key, pin in (("pytorch", self.recipe.pytorch_wheel), ("triton", self.recipe.triton_wheel))
                    if pin is not None}
        assert self.pytorch is not None and self.triton is not None and self.triton_pin is not None
        return {
            "pytorch": {"source": self.recipe.pytorch.source if self.recipe.pytorch else "",
                        "commit": self.pytorch.commit, "merge_base": self.merge_base},
            "triton": {"source": self.recipe.triton.source if self.recipe.triton else "",
                       "commit": self.triton.commit, "pin_source": self.triton_pin.source,
                       "install_dir": self.triton.install_dir,
                       **({"llvm": self.triton.llvm} if self.triton.llvm else {}),
                       **({"patch_sha256": sha256_file(self.triton_patch)} if self.triton_patch else {})},
        }

    def inputs(self) -> dict[str, Any]:
        """The record hashed into the tag, stored as a label and copied into the lock."""
        return {
            "recipe": {"name": self.recipe.name, "hash": self.recipe.content_hash()},
            "base": {"name": self.base.name, "digest": self.base.digest},
            "sources": self.sources(),
            "patches": {p.name: p.sha256 for p in self.patches},
            "overlay_sha256": sha256_file(self.overlay) if self.overlay else None,
            "build": {
                "args": dict(sorted(self.build_args.items())),
                "dockerfile_sha256": hashlib.sha256(self.dockerfile.encode()).hexdigest(),
                "templates_sha256": self.templates_sha256,
                "code_sha256": self.code_sha256,
                "network_mode": self.network_mode,
                "builder": "docker-py classic builder",
                # The PyTorch step's variables (prbench's defaults and the recipe's [build] env); MAX_JOBS is an arg.
                "env": dict(sorted(self.build_env().items())),
                **({"layers": PYTORCH_FIRST} if self.pytorch_first else {}),
            },
            "env": dict(sorted(self.recipe.env.items())),
        }

    def build_env(self) -> dict[str, str]:
        """The variables of the PyTorch build step (prbench.images.pytorch_setup.build_env)."""
        return build_env(self.recipe)

    @property
    def inputs_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.inputs(), sort_keys=True).encode()).hexdigest()

    @property
    def tag(self) -> str:
        return f"{IMAGE_REPO}/{self.recipe.name}:{self.inputs_hash[:12]}"

    def labels(self) -> dict[str, str]:
        labels = {
            "org.opencontainers.image.base.name": self.base.name,
            "org.opencontainers.image.base.digest": self.base.digest,
            "org.opencontainers.image.version": prbench.__version__,
            "org.opencontainers.image.title": f"prbench {self.recipe.name}",
            f"{LABEL_PREFIX}.recipe": self.recipe.name,
            f"{LABEL_PREFIX}.recipe-hash": self.recipe.content_hash(),
            f"{LABEL_PREFIX}.inputs-hash": self.inputs_hash,
            f"{LABEL_PREFIX}.prbench-version": prbench.__version__,
            LABEL_INPUTS: json.dumps(self.inputs(), sort_keys=True),
            LABEL_RECIPE_TOML: self.recipe_text,
            LABEL_RECIPE_PATH: str(self.recipe.path.resolve()),
            LABEL_CLONES: json.dumps({tree.name: str(tree.clone) for tree in (self.pytorch, self.triton)
                                      if tree is not None and tree.clone is not None}),
            **({LABEL_OVERLAY: self.overlay.read_text(encoding="utf-8")} if self.overlay else {}),
            **({LABEL_TRITON_PATCH: self.triton_patch.read_text(encoding="utf-8")} if self.triton_patch else {}),
        }
        if self.recipe.is_wheel:
            labels[f"{LABEL_PREFIX}.wheels"] = json.dumps(self.sources(), sort_keys=True)
        if self.pytorch is not None and self.triton is not None and self.triton_pin is not None:
            labels.update({
                "org.opencontainers.image.revision": self.pytorch.commit,
                f"{LABEL_PREFIX}.pytorch.commit": self.pytorch.commit,
                f"{LABEL_PREFIX}.triton.commit": self.triton.commit,
                f"{LABEL_PREFIX}.triton.pin-source": self.triton_pin.source,
            })
        return labels


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
