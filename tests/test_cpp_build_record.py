"""Each side records how its Inductor compiles C++ kernels, so the paired plan can tell identical source compiled
alike (timed from base's binaries) from identical source compiled otherwise (timed in each side's own graph).

These run the recording for real (the installed torch builds the command lines it keys its C++ binaries by) in a
fresh process per side, as each side's ``stages.launch_cost`` does after ``prepare_inductor``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.kernels.cpp_build import CPP_BUILD_RECORD, read_cpp_build, same_cpp_build

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]

RECORD = """
import json, sys
from pathlib import Path
from stages.support.environment import prepare_inductor, record_cpp_build

prepare_inductor(json.loads(sys.argv[1]))
record_cpp_build(Path(sys.argv[2]))
"""


def torch_version() -> str:
    import torch

    return str(torch.__version__)


def record(cache: Path, overrides: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TRITON_"))}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    result = subprocess.run([sys.executable, "-c", RECORD, json.dumps(overrides), str(cache)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_a_side_that_changes_only_a_compile_flag_records_another_build_and_equal_sides_the_same(
        tmp_path: Path) -> None:
    base, same, flagged = (tmp_path / name for name in ("base", "same", "flagged"))
    for cache in (base, same, flagged):
        cache.mkdir()

    record(base, {})
    record(same, {})
    record(flagged, {"cpp.enable_floating_point_contract_flag": "fast"})  # -ffp-contract=off → fast

    commands = json.loads((base / CPP_BUILD_RECORD).read_text())
    assert commands["format_version"] == 2 and len(commands["commands"]) == 2  # the kernel's and its module's
    assert commands["torch"].startswith(torch_version()) and len(commands["headers"]) == 64
    kernel = read_cpp_build(base)
    assert kernel is not None and "-ffp-contract=off" in kernel[0] and "-O3" in kernel[0]
    assert same_cpp_build(base, same)
    assert not same_cpp_build(base, flagged)
