"""benchmarks/hf_suite_check.py: the whole list checked model by model without a compare, and its one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "hf_suite_check.py"


def check(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=timeout)


@pytest.mark.integration
def test_the_build_check_steps_each_model_and_names_the_entries_that_cannot_be_built() -> None:
    proc = check("build", "--models", "T5Small,whisper-tiny,Qwen/Qwen3-0.6B")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["ok   T5Small", "ok   whisper-tiny", "ok   Qwen3-0.6B"]
    assert "3 of 55 list entries built and stepped at size tiny (3 tried, 0 failed)" in lines
    assert any(line.startswith("cannot be built: CamemBert: ") for line in lines)


@pytest.mark.integration
def test_an_unknown_model_or_size_is_one_line() -> None:
    proc = check("build", "--models", "Bert")
    assert proc.returncode == 2 and proc.stderr.startswith("error: --models: unknown model 'Bert'")
    proc = check("share", "--sizes", "tiny,huge")
    assert (proc.returncode, proc.stderr.strip()) == (2, "error: --sizes: huge: expected of tiny, small, full")
