"""Variants: one side of a comparison = recipe + PyTorch ref + optional Python overlay + env + Inductor config.

The variant decides the environment every stage of that side runs with: the per-variant Inductor and
Triton caches, the knobs the seed workflow sets, and the recipe's and user's overrides.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foundation.errors import UserError
from foundation.formats.run_layout import VariantLayout
from foundation.formats.stage_records import HEADER_DIR_ENV, INDUCTOR_CONFIG_ENV
from prbench.sides.header_cache import shared_header_dir
from prbench.sides.recipes import Recipe

VARIANT_NAMES = ("base", "pr")

# Environment every stage gets (the seed's run_hf.sh knobs that do not depend on the platform).
_STAGE_ENV = {
    "TORCHINDUCTOR_BENCHMARK_KERNEL": "1",
    "TORCHINDUCTOR_UNIQUE_KERNEL_NAMES": "1",
    # Line tables embed each C++ kernel's absolute cache path, and base/ and pr/ differ in length: the same
    # source then links into differently laid-out binaries, a per-side offset that no round can average
    # away (an A/A measured a steady 2-3 % "change"). Without them both sides' binaries are byte-identical.
    "AOT_INDUCTOR_ENABLE_LINE_TABLES": "0",
}


@dataclass(frozen=True)
class Variant:
    name: str
    recipe: Recipe
    pytorch_ref: str = "installed"  # resolved full SHA, or "installed"
    overlay_sha256: str | None = None  # the Python-only diff applied on top of pytorch_ref, if any
    env: dict[str, str] = field(default_factory=dict)
    inductor_config: dict[str, Any] = field(default_factory=dict)
    # The Triton commit --triton-ref or a Triton A/B chose, "+<sha256>" of a --triton-pr patch on it (None: the
    # recipe's or PyTorch's pin, which the recipe and pytorch_ref already fix): a stage done with another Triton is
    # not done.
    triton_commit: str | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "recipe": self.recipe.name,
            "recipe_hash": self.recipe.content_hash(),
            "pytorch_ref": self.pytorch_ref,
            "overlay_sha256": self.overlay_sha256,
            "env": dict(sorted(self.env.items())),
            "inductor_config": self.merged_inductor_config(),
            # only when set, so the identity (and the stages recorded under it) of every other variant stays
            **({"triton_commit": self.triton_commit} if self.triton_commit else {}),
        }

    def identity_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.describe(), sort_keys=True).encode()).hexdigest()[:16]

    def merged_inductor_config(self) -> dict[str, Any]:
        return {**self.recipe.inductor_config, **self.inductor_config}

    def stage_environment(self, variant_dir: Path, keep_bytecode: bool = False) -> dict[str, str]:
        """The environment for a stage of this variant; caches live in the variant's work directory, and so does
        torch's bytecode with ``keep_bytecode`` (the caller knows the stage's Python: `Pipeline.prepare`)."""
        layout = VariantLayout(variant_dir)
        work = layout.work
        env = dict(_STAGE_ENV)
        env.update(
            TORCHINDUCTOR_CACHE_DIR=str(layout.inductor_cache),
            TRITON_CACHE_DIR=str(layout.triton_cache),
            # Inductor writes its precompiled header and -p traces under TMPDIR whatever the cache dir says.
            TMPDIR=str(work / "tmp"),
        )
        if keep_bytecode:
            # Every stage and every round's worker is a fresh process importing torch._inductor (~1,200 modules):
            # where the stage's Python keeps no bytecode for its torch (an install without .pyc files, and
            # PYTHONDONTWRITEBYTECODE or a read-only site-packages), each compiled them again, 5 s per process on an
            # H200 machine, most of a kernel round's worker start-up. The side keeps it here ("" unsets the variable).
            env.update(PYTHONPYCACHEPREFIX=str(work / "bytecode"), PYTHONDONTWRITEBYTECODE="")
        if self.recipe.platform == "cpu":
            # The thread count is baked into C++ codegen and a shared 2-core box is noisy otherwise.
            env["OMP_NUM_THREADS"] = "1"
        header_dir = shared_header_dir()
        if self.recipe.runner == "local" and header_dir:  # a container sees only the run directory
            env[HEADER_DIR_ENV] = header_dir
        env.update(self.recipe.env)
        env.update(self.env)
        config = self.merged_inductor_config()
        if config:
            env[INDUCTOR_CONFIG_ENV] = json.dumps(config, sort_keys=True)
        return env


def parse_assignments(items: list[str] | tuple[str, ...], flag: str) -> dict[str, str]:
    """``KEY=VALUE`` flags (``--env``, ``--inductor-config``) into a dict, with a clear error otherwise."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"{flag} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def parse_config_values(items: dict[str, str]) -> dict[str, Any]:
    """Inductor config values given on the command line: JSON literals where they parse, else strings."""
    out: dict[str, Any] = {}
    for key, raw in items.items():
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out
