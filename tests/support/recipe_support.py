"""Writing recipes the way a user does, and reading the one-line error a bad one gets (shared by the recipe
tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from foundation.errors import UserError
from prbench.sides.recipes import FROM_PYTORCH_PIN, load_recipe

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"
SHA = "0123456789abcdef0123456789abcdef01234567"
DIGEST = "sha256:" + "ab" * 32


def docker_recipe() -> dict[str, Any]:
    """A valid ROCm Docker recipe, as the user would write it."""
    return {
        "description": "ROCm 7 on MI300",
        "platform": "rocm",
        "arch": ["gfx942"],
        "base_image": {"name": "rocm/pytorch:rocm7.0_ubuntu22.04_py3.10_pytorch_release_2.8.0", "digest": DIGEST},
        "triton": {"source": "https://github.com/triton-lang/triton.git", "commit": FROM_PYTORCH_PIN},
        "pytorch": {"source": "https://github.com/pytorch/pytorch.git", "commit": SHA},
        "env": {"AMDGCN_USE_BUFFER_OPS": "1"},
        "build": {"max_jobs": 8},
    }


def to_toml(data: dict[str, Any]) -> str:
    """Enough TOML for these tests: scalars and lists (JSON syntax is valid TOML for them), then tables."""
    lines = [f"{k} = {json.dumps(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for key, table in data.items():
        if isinstance(table, dict):
            lines.append(f"[{key}]")
            lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def write(tmp_path: Path, data: dict[str, Any] | str, name: str = "mine") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(data if isinstance(data, str) else to_toml(data), encoding="utf-8")
    return path


def load_error(path: Path) -> str:
    """Load the recipe at ``path``, which must fail with one line naming the file; return the line."""
    with pytest.raises(UserError) as info:
        load_recipe(str(path), path.parent)
    message = str(info.value)
    assert "\n" not in message, f"error is not one line: {message!r}"
    assert str(path) in message, f"error does not name the file: {message!r}"
    return message


def set_key(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    *tables, leaf = dotted.split(".")
    node = data
    for t in tables:
        node = node.setdefault(t, {})
    node[leaf] = value
    return data


def drop_key(data: dict[str, Any], dotted: str) -> dict[str, Any]:
    *tables, leaf = dotted.split(".")
    node = data
    for t in tables:
        node = node[t]
    del node[leaf]
    return data
