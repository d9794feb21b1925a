"""A user mistakes a flag: one line naming it, exit 2, before any run directory exists and before torch is imported.

"Before torch is imported" is what keeps the answer under a second (torch alone takes seconds to import); it is
checked from the interpreter's own import log rather than by the clock, which a loaded machine makes unreliable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from foundation.errors import UserError
from foundation.flag_values import real_number, regular_expression, whole_number
from prbench.stages.kernels import check_devices
from tests.support.cli_support import invoke_in_process

ROOT = Path(__file__).resolve().parents[1]

# (command line after `invoke`, text the one line must contain)
BAD_FLAGS = [
    ("perf-report {tmp} -t abc", "--top 'abc': expected a whole number"),
    ("perf-report {tmp} -t -5", "--top -5: expected at least 1"),
    ("trace-diff a.json b.json -t 0", "--top 0: expected at least 1"),
    ("kernels -d {tmp} -i 0", "--iterations 0: expected at least 1"),
    ("kernels -d {tmp} -i abc", "--iterations 'abc': expected a whole number"),
    ("kernels -d {tmp} -t 0", "--timeout 0: expected a number above 0"),
    ("kernels -d {tmp} -w -1", "--warmup -1: expected at least 0"),
    ("kernels -d {tmp} -f (", "--filter '(': not a valid regular expression"),
    ("organize cache.tar.gz {tmp}/out -r 0", "--rep 0: expected at least 1"),
    ("profile suite.csv {tmp}/out --steps 0", "--steps 0: expected at least 1"),
    ("profile suite.csv {tmp}/out --device tpu", "--device 'tpu': expected cpu or cuda"),
    ("build --max-jobs -1", "--max-jobs -1: expected at least 1"),
    ("compare --pr installed --python /nonexistent/python3", "--python /nonexistent/python3: no such interpreter"),
    ("compare --pr installed --alpha abc", "--alpha 'abc': expected a number"),
    ("compare --pr installed --alpha 5", "--alpha"),
    ("compare --pr installed --threshold -0.5", "--threshold -0.5"),
    ("compare --pr installed --confidence nan", "--confidence 'nan': expected a finite number"),
    ("compare --pr installed --kernel-iterations 0", "--kernel-iterations 0: expected at least 1"),
    ("compare --pr installed --kernel-timeout abc", "--kernel-timeout 'abc': expected a number"),
    ("compare --pr installed --rounds 2", "--rounds 2"),
    ("compare --pr installed --resolution fine", "--resolution 'fine': expected a percentage such as 2%"),
    ("compare --pr installed --resolution 0%", "--resolution '0%': expected a percentage such as 2%"),
    ("compare --pr installed --rounds 5 --resolution 3%", "--max-rounds, --budget and --resolution go with adaptive"),
    ("compare --pr installed --passes 0", "--passes 0: expected at least 1"),
    ("compare --pr installed --passes two", "--passes 'two': expected a whole number"),
    ("compare --pr installed --models-per-process -1", "--models-per-process -1: expected at least 0"),
    ("publish --repo o --pr 1", "--repo 'o': expected OWNER/NAME of a GitHub repository"),
    ("publish --repo o/r --pr x", "--pr 'x': expected a whole number"),
    ("publish --repo o/r", "--pr is needed: the pull request's number"),
    ("publish --repo o/r --pr 1 --api-url http://example.com", "the token would travel unencrypted; use https"),
    ("publish --repo o/r --pr 1 --key a/b", "--key 'a/b': expected 1-64 letters"),
    ("bisect --good a --bad b --kernel k", "--pytorch-src: required"),
    ("bisect --pytorch-src {tmp} --good a --bad b --rounds 2", "--rounds 2"),
    ("bisect --pytorch-src {tmp} --good a --bad b --max-rounds 2", "--max-rounds 2: expected at least 3"),
    ("bisect --pytorch-src {tmp} --good a --bad b", "--model or --kernel: name what regressed"),
    ("bisect --pytorch-src {tmp} --good a --bad b --model Nope", "--model: "),
    ("bisect --pytorch-src {tmp} --good a --bad b --kernel k", ": not a git repository"),
]


HEAVY = {"torch", "transformers", "triton"}  # each takes seconds to import
IMPORT_LOG = "import time:"


def _invoke(command: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], list[str], set[str]]:
    """Run `invoke COMMAND`; return the process, the lines it showed and the top-level packages it imported."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    proc = subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *command.split()],
                          cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
    shown = [line for line in (proc.stdout + proc.stderr).strip().splitlines() if not line.startswith(IMPORT_LOG)]
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                if line.startswith(IMPORT_LOG)}
    return proc, shown, imported


def _command_line(command: str, tmp_path: Path) -> str:
    line = command.format(tmp=tmp_path)
    return line + f" --runs-dir {tmp_path}/runs" if command.startswith(("compare", "bisect")) else line


@pytest.mark.parametrize(("command", "expected"), BAD_FLAGS, ids=[c for c, _ in BAD_FLAGS])
def test_a_bad_flag_is_one_line_before_anything_runs(tmp_path: Path, command: str, expected: str) -> None:
    proc = invoke_in_process("-r", str(ROOT), *_command_line(command, tmp_path).split(), cwd=tmp_path)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()


# A bad flag of each task (and the statistical settings of compare), run as the user runs it: a fresh interpreter
# whose import log is read.
IMPORT_CHECKED = [(command, dict(BAD_FLAGS)[command]) for command in (
    "perf-report {tmp} -t abc", "trace-diff a.json b.json -t 0", "kernels -d {tmp} -i 0",
    "organize cache.tar.gz {tmp}/out -r 0", "profile suite.csv {tmp}/out --steps 0", "build --max-jobs -1",
    "compare --pr installed --alpha 5", "compare --pr installed --rounds 2", "publish --repo o --pr 1",
    "bisect --pytorch-src {tmp} --good a --bad b --kernel k")]


@pytest.mark.parametrize(("command", "expected"), IMPORT_CHECKED, ids=[c for c, _ in IMPORT_CHECKED])
@pytest.mark.integration
def test_a_bad_flag_is_refused_before_torch_is_imported(tmp_path: Path, command: str, expected: str) -> None:
    proc, lines, imported = _invoke(_command_line(command, tmp_path), tmp_path)
    assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], lines
    assert "invoke" in imported and not imported & HEAVY, sorted(imported & HEAVY)


@pytest.mark.parametrize(("flag", "value"), [("--inductor-config", "cpp.simdlen=abc"),
                                             ("--inductor-config", "cpp.no_such_setting=1")])
@pytest.mark.integration
def test_a_wrong_inductor_setting_fails_before_the_run_exists(tmp_path: Path, flag: str, value: str) -> None:
    proc, lines, _ = _invoke(f"compare --pr installed {flag} {value} --runs-dir {tmp_path}/runs", tmp_path)
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert "--inductor-config" in lines[0] and value.split("=")[0] in lines[0]
    assert not (tmp_path / "runs").exists()


def test_flag_values_keep_their_meaning() -> None:
    assert whole_number("--iterations", "30", minimum=1) == 30
    assert real_number("--kernel-timeout", "2.5", above=0) == 2.5
    assert regular_expression("--filter", "cpp_.*").match("cpp_fused")
    for bad in (True, 2.5, "3e1", None):
        with pytest.raises(UserError):
            whole_number("--iterations", bad)
    for bad in ("inf", float("nan"), "1e400"):
        with pytest.raises(UserError):
            real_number("--alpha", bad)


def test_gpu_indices_need_a_gpu_on_this_machine(tmp_path: Path) -> None:
    assert check_devices("cpu,cpu", dev=tmp_path) == "cpu,cpu"
    with pytest.raises(UserError, match="this machine has no GPU"):
        check_devices("0", dev=tmp_path)
    (tmp_path / "nvidia0").touch()
    assert check_devices("0", dev=tmp_path) == "0"
    with pytest.raises(UserError, match="no GPU 1 here"):
        check_devices("0,1", dev=tmp_path)


STALE_PATCH = """diff --git a/torch/_inductor/config.py b/torch/_inductor/config.py
--- a/torch/_inductor/config.py
+++ b/torch/_inductor/config.py
@@ -1,2 +1,2 @@
-a line this torch does not have
+its replacement
 another line it does not have
"""


@pytest.mark.integration
def test_a_pr_patch_that_does_not_apply_fails_before_the_base_side_runs(tmp_path: Path) -> None:
    patch = tmp_path / "stale.patch"
    patch.write_text(STALE_PATCH)
    proc = invoke_in_process("compare", f"--pr={patch}", "--runs-dir", str(tmp_path / "runs"))
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert f"overlay {patch}: does not apply to the installed torch" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_a_docker_pr_patch_is_checked_against_the_base_commit(tmp_path: Path) -> None:
    import git

    from prbench.sides.overlay import PythonOverlay

    repo = git.Repo.init(tmp_path / "pytorch")
    source = tmp_path / "pytorch" / "torch" / "_inductor" / "config.py"
    source.parent.mkdir(parents=True)
    source.write_text("a = 1\nb = 2\n")
    repo.index.add(["torch/_inductor/config.py"])
    base = repo.index.commit("base").hexsha
    good = PythonOverlay.from_text(
        "--- a/torch/_inductor/config.py\n+++ b/torch/_inductor/config.py\n@@ -1,2 +1,2 @@\n-a = 1\n+a = 3\n b = 2\n",
        origin="good.patch", flag="--pr")
    good.check_applies_to_commit(tmp_path / "pytorch", base)
    with pytest.raises(UserError, match=f"overlay stale.patch: does not apply to PyTorch {base[:12]}"):
        PythonOverlay.from_text(STALE_PATCH, origin="stale.patch", flag="--pr").check_applies_to_commit(
            tmp_path / "pytorch", base)
    assert repo.git.status("--porcelain") == ""  # the user's clone and index are untouched
