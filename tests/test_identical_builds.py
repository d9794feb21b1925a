"""An A/A comparison builds the same binaries on both sides.

Given the embedded default recipe, when the same code is compiled by the base and the PR variant (each with its
own cache directory under base/ and pr/), the C++ kernel libraries are byte-identical: nothing about where a side
lives may change how its kernels are laid out, or every comparison carries a per-side offset that no number of
timing rounds can remove.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prbench.recipes import load_recipe
from prbench.variants import Variant

ROOT = Path(__file__).resolve().parents[1]
COMPILE = """
import torch
from stages.environment import apply_inductor_config
apply_inductor_config()
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


@pytest.mark.integration
def test_base_and_pr_compile_byte_identical_kernels(tmp_path: Path) -> None:
    recipe = load_recipe("cpu-local", ROOT / "recipes")
    base = compiled_libraries(Variant("base", recipe), tmp_path / "run" / "base")
    pr = compiled_libraries(Variant("pr", recipe), tmp_path / "run" / "pr")

    assert base and base == pr
