"""A whole Triton A/B on a local recipe, on this interpreter's real torch and Triton: ``invoke compare --recipe
cpu-local --triton-pr warps.patch``. The patch is written against the Triton source tree, as ``git diff`` in a Triton
clone gives it: a default of the NVIDIA backend's Python options (harmless on the CPU) and two lines in the package's
``__init__.py`` that leave a note in the side's Triton cache naming the file each process imported.

The PR side's processes import the patched Triton from the side's overlay, the base side's the installed one (no
note); the run's lock.json names the installed Triton on both sides and the PR's overlay; the report's headline
names both and says that no Triton code was compared (Inductor generates C++ kernels on the CPU).

The base side (the installed torch and Triton, the suite flags of the session's compare ``electra_compare``) is that
compare's: the run starts with it, and only the PR side compiles.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest

from foundation.formats.run_layout import VariantLayout
from tests.support.cli_support import invoke_in_process
from tests.support.electra_compare import BASE_STAGES, SUITE_FLAGS, seed_base, skipped_base_stages

NOTE = '''import os as _prbench_os
if _prbench_os.environ.get("TRITON_CACHE_DIR"):
    with open(_prbench_os.path.join(_prbench_os.environ["TRITON_CACHE_DIR"], f"patched-{_prbench_os.getpid()}"),
              "w") as _note:
        _note.write(__file__)
'''


def _file_diff(source_path: str, before: str, after: str) -> str:
    return f"diff --git a/{source_path} b/{source_path}\n" + "".join(difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{source_path}", f"b/{source_path}"))


def _patch_on_installed_triton(tmp_path: Path) -> tuple[Path, str]:
    import triton

    package = Path(triton.__file__).parent
    init = (package / "__init__.py").read_text()
    compiler = (package / "backends" / "nvidia" / "compiler.py").read_text()
    assert "    num_warps: int = 4\n" in compiler
    version_line = f"__version__ = '{triton.__version__}'\n"
    assert version_line in init
    patch = tmp_path / "warps.patch"
    patch.write_text(_file_diff("third_party/nvidia/backend/compiler.py", compiler,
                                compiler.replace("    num_warps: int = 4\n", "    num_warps: int = 8\n", 1))
                     + _file_diff("python/triton/__init__.py", init, init.replace(version_line, version_line + NOTE)))
    return patch, triton.__version__


@pytest.mark.integration
@pytest.mark.xdist_group("electra-compare")  # the session's compare is made once, on the worker of its group
def test_a_triton_patch_on_a_local_recipe_runs_on_the_pr_side_only_and_the_report_says_no_triton_was_compared(
        electra_compare, tmp_path):
    patch, version = _patch_on_installed_triton(tmp_path)
    electra, _ = electra_compare
    run = seed_base(electra, tmp_path / "runs", "triton-overlay")

    result = invoke_in_process("compare", "--recipe", "cpu-local", "--triton-pr", str(patch), *SUITE_FLAGS,
                               "--runs-dir", str(run.parent), "--run", run.name)

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert skipped_base_stages(run, electra, result.stdout) == list(BASE_STAGES), result.stdout[-3000:]
    notes = {side: sorted((run / side).rglob("patched-*")) for side in ("base", "pr")}
    assert notes["base"] == [], "the base side's processes import the installed Triton"
    assert len(notes["pr"]) >= 2, "the suite and the rounds' workers import Triton"
    shadow = VariantLayout(run / "pr").overlay_shadow / "triton"
    assert {Path(note.read_text()) for note in notes["pr"]} == {shadow / "__init__.py"}
    assert "    num_warps: int = 8\n" in (shadow / "backends" / "nvidia" / "compiler.py").read_text()

    lock = json.loads((run / "lock.json").read_text())
    assert lock["base"]["environment"]["triton"] == lock["pr"]["environment"]["triton"] == version
    assert "overlay" not in lock["base"] and lock["pr"]["overlay"] == {
        "package": "triton", "origin": "warps.patch",
        "files": ["triton/backends/nvidia/compiler.py", "triton/__init__.py"]}
    verdict = next(line for line in (run / "report" / "report.md").read_text().splitlines()
                   if line.startswith("**Verdict:**"))
    assert verdict.startswith(f"**Verdict:** **Triton A/B** (--triton-pr as a Python overlay on the installed "
                              f"Triton): Triton {version} → {version} + warps.patch sha256:"), verdict
    assert "the same on both sides (installed). **No Triton code was compared**" in verdict, verdict
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert summary["triton_ab"]["reason"] == "installed-overlay"
    assert summary["kernels"]["code_identical"] > 0 and summary["kernels"]["code_changed"] == 0  # C++: the control
