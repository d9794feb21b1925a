"""An A/A comparison builds the same binaries on both sides.

Given the embedded default recipe, when the same code is compiled by the base and the PR variant (each with its
own cache directory under base/ and pr/), the C++ kernel libraries are byte-identical: nothing about where a side
lives may change how its kernels are laid out, or every comparison carries a per-side offset that no number of
timing rounds can remove. Both sides share one precompiled C++ header: the first builds it, the second finds it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from foundation.formats.stage_records import HEADER_DIR_ENV
from prbench.sides.recipes import load_recipe
from prbench.sides.variants import Variant

ROOT = Path(__file__).resolve().parents[1]
COMPILE = """
import torch
from stages.support.environment import prepare_inductor
prepare_inductor()
f = torch.compile(lambda x, y: (x.sin() + y).relu().sum(1))
f(torch.randn(64, 64), torch.randn(64, 64))
"""


def compiled_libraries(variant: Variant, variant_dir: Path) -> dict[str, str]:
    env = {**os.environ, **variant.stage_environment(variant_dir), "PYTHONPATH": str(ROOT)}
    for key in ("TORCHINDUCTOR_CACHE_DIR", "TMPDIR"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", COMPILE], env=env, check=True, cwd=ROOT, timeout=600)
    cache = Path(env["TORCHINDUCTOR_CACHE_DIR"])
    return {str(p.relative_to(cache)): hashlib.sha256(p.read_bytes()).hexdigest() for p in cache.rglob("*.so")}


def precompiled_headers(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*.h.*ch") if p.suffix in (".gch", ".pch")]


@pytest.mark.integration
def test_base_and_pr_compile_byte_identical_kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    headers = tmp_path / "inductor-headers"
    monkeypatch.setenv(HEADER_DIR_ENV, str(headers))
    recipe = load_recipe("cpu-local", ROOT / "recipes")
    base = compiled_libraries(Variant("base", recipe), tmp_path / "run" / "base")
    pr = compiled_libraries(Variant("pr", recipe), tmp_path / "run" / "pr")

    assert base and base == pr
    # One header for both sides, and none under either side's TMPDIR.
    assert len(precompiled_headers(headers)) == 1
    assert precompiled_headers(tmp_path / "run") == []
