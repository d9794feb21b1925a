"""Python overlays: a Python-only PR runs on the installed torch through a shadow package, never touching it."""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from foundation.errors import UserError
from prbench.runners import StageCommand
from prbench.runners.local import LocalRunner
from prbench.sides.overlay import PythonOverlay, installed_package_dir

INSTALLED = Path(importlib.util.find_spec("torch").submodule_search_locations[0])
CONFIG = "torch/_inductor/config.py"
DEFAULT = "max_fusion_size = 64\n"
CHANGED = "max_fusion_size = 1\n"


def installed_text(rel: str) -> str:
    return (INSTALLED.parent / rel).read_text(encoding="utf-8")


def plain_diff(rel: str, old: str, new: str, prefixes: tuple[str, str] = ("a/", "b/")) -> str:
    """A traditional unified diff (no `diff --git` header), as `diff -u` or difflib writes it."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), prefixes[0] + rel, prefixes[1] + rel
    )
    return "".join(lines)


def git_diff(tmp_path: Path, changes: dict[str, str | None]) -> str:
    """`git diff` from the installed torch's files to ``changes`` (new text; None deletes; a new path adds)."""
    repo = tmp_path / "pytorch-src"
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)}

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                              env=env).stdout

    repo.mkdir()
    git("init", "-q")
    for rel in changes:
        if (INSTALLED.parent / rel).exists():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(installed_text(rel), encoding="utf-8")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    for rel, new in changes.items():
        if new is None:
            (repo / rel).unlink()
        else:
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(new, encoding="utf-8")
    git("add", "-A")
    return git("diff", "--cached", "--full-index", "--no-color")


def config_patch() -> str:
    old = installed_text(CONFIG)
    assert old.count(DEFAULT) == 1, "the installed torch no longer has the default this test changes"
    return plain_diff(CONFIG, old, old.replace(DEFAULT, CHANGED))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pycache_state() -> dict[str, int]:
    caches = [INSTALLED / "__pycache__", INSTALLED / "_inductor" / "__pycache__"]
    return {str(p): p.stat().st_mtime_ns for c in caches if c.exists() for p in c.iterdir()}


def overlay_error(text: str) -> str:
    with pytest.raises(UserError) as info:
        PythonOverlay.from_text(text, origin="pr.diff", flag="--overlay pr.diff")
    message = str(info.value)
    assert "\n" not in message and message.startswith("--overlay pr.diff: ")
    return message


# --- what a patch may contain ----------------------------------------------------------------------------


def test_a_python_patch_lists_the_package_files_it_changes(tmp_path: Path) -> None:
    text = git_diff(tmp_path, {CONFIG: installed_text(CONFIG).replace(DEFAULT, CHANGED)})

    overlay = PythonOverlay.from_text(text, origin="pr.diff", flag="--overlay pr.diff")

    assert [(f.path, f.deleted) for f in overlay.files] == [(CONFIG, False)]
    assert overlay.ignored == ()
    assert overlay.sha256 == hashlib.sha256(text.encode()).hexdigest()


def test_a_non_python_file_is_refused_naming_it() -> None:
    text = config_patch() + plain_diff("aten/src/ATen/native/Fused.cpp", "int a;\n", "int a = 1;\n")

    message = overlay_error(text)

    assert "aten/src/ATen/native/Fused.cpp" in message
    assert "non-Python" in message and "Docker recipe" in message


def test_a_binary_diff_is_refused() -> None:
    text = config_patch() + (
        "diff --git a/torch/_inductor/blob.py b/torch/_inductor/blob.py\n"
        "index 1111111..2222222 100644\n"
        "Binary files a/torch/_inductor/blob.py and b/torch/_inductor/blob.py differ\n"
    )

    assert "binary" in overlay_error(text)


def test_a_diff_only_outside_the_package_is_refused() -> None:
    text = plain_diff("test/inductor/test_fusion.py", "x = 1\n", "x = 2\n")

    assert "changes no file inside the torch/ package" in overlay_error(text)


def test_text_that_is_not_a_diff_is_refused() -> None:
    assert "no file changes found" in overlay_error("Fix fusion heuristics (#12345)\n\nSee the PR.\n")


def test_a_missing_patch_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=f"^--overlay {tmp_path / 'nope.diff'}: no such patch file$"):
        PythonOverlay.from_patch_file(tmp_path / "nope.diff")


def test_tests_in_the_patch_are_ignored_not_applied(tmp_path: Path) -> None:
    text = config_patch() + plain_diff("test/inductor/test_fusion.py", "x = 1\n", "x = 2\n")
    overlay = PythonOverlay.from_text(text, origin="pr.diff", flag="--overlay pr.diff")

    shadow = overlay.materialize(tmp_path / "shadow", INSTALLED)

    assert overlay.ignored == ("test/inductor/test_fusion.py",)
    assert CHANGED in (shadow / CONFIG).read_text()
    assert not (shadow / "test").exists()


# --- the shadow package ----------------------------------------------------------------------------------


@pytest.mark.integration
def test_import_torch_through_the_shadow_sees_the_pr_and_the_installed_torch_is_untouched(tmp_path: Path) -> None:
    installed_config = INSTALLED / "_inductor" / "config.py"
    before = (digest(installed_config), pycache_state())
    overlay = PythonOverlay.from_text(config_patch(), origin="pr.diff", flag="--overlay pr.diff")

    shadow = overlay.materialize(tmp_path / "overlay", installed_package_dir(sys.executable))
    probe = "import torch, torch._inductor.config as c; print(c.max_fusion_size, c.__file__, torch.__version__)"
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
        # Bytecode writing on (this environment may turn it off), to see where it would go.
        env={**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": str(shadow)},
    )

    assert proc.returncode == 0, proc.stderr
    value, config_file, _version = proc.stdout.split()
    assert value == "1"
    assert config_file == str(shadow / CONFIG)
    # Only the changed file is a real file; the rest of the package is the installed one, by symlink.
    assert not (shadow / CONFIG).is_symlink()
    assert (shadow / "torch" / "_inductor" / "scheduler.py").resolve() == INSTALLED / "_inductor" / "scheduler.py"
    assert (shadow / "torch" / "lib").resolve() == INSTALLED / "lib"
    # The installed file and its bytecode are as they were; the PR's bytecode lives in the shadow.
    assert (digest(installed_config), pycache_state()) == before
    assert list((shadow / "torch" / "_inductor" / "__pycache__").glob("config.*.pyc"))
    assert (shadow / "overlay.patch").read_text() == overlay.patch_text


def test_a_plain_diff_without_prefixes_applies(tmp_path: Path) -> None:
    old = installed_text(CONFIG)
    text = plain_diff(CONFIG, old, old.replace(DEFAULT, CHANGED), prefixes=("", ""))

    shadow = PythonOverlay.from_text(text, origin="pr.diff", flag="--overlay pr.diff").materialize(
        tmp_path / "shadow", INSTALLED)

    assert CHANGED in (shadow / CONFIG).read_text()


def test_deleted_and_added_files(tmp_path: Path) -> None:
    doomed = smallest_module("torch/_inductor/codegen")
    added = "torch/_inductor/brand_new/heuristics.py"
    text = git_diff(tmp_path, {doomed: None, added: "FUSE = False\n"})

    overlay = PythonOverlay.from_text(text, origin="pr.diff", flag="--overlay pr.diff")
    shadow = overlay.materialize(tmp_path / "shadow", INSTALLED)

    assert {(f.path, f.deleted) for f in overlay.files} == {(doomed, True), (added, False)}
    assert not (shadow / doomed).exists() and not (shadow / doomed).is_symlink()
    assert (INSTALLED.parent / doomed).exists()
    assert (shadow / added).read_text() == "FUSE = False\n"


def test_a_patch_that_does_not_apply_is_a_user_error(tmp_path: Path) -> None:
    old = installed_text(CONFIG).replace(DEFAULT, "max_fusion_size = 32\n")  # a PR against another torch
    text = plain_diff(CONFIG, old, old.replace("max_fusion_size = 32\n", CHANGED))
    overlay = PythonOverlay.from_text(text, origin="pr.diff", flag="--overlay pr.diff")

    with pytest.raises(UserError) as info:
        overlay.materialize(tmp_path / "shadow", INSTALLED)

    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("overlay pr.diff: does not apply to the installed torch")
    assert CONFIG in message
    assert digest(INSTALLED / "_inductor" / "config.py") == digest(INSTALLED.parent / CONFIG)


def test_a_file_that_git_apply_would_silently_skip_is_a_user_error(tmp_path: Path) -> None:
    other = smallest_module("torch/_inductor/codegen")
    # One file with git's a/ b/ prefixes, the next without: git apply -p1 turns it into a path outside torch/.
    text = config_patch() + plain_diff(other, installed_text(other), installed_text(other) + "# PR\n", ("", ""))
    overlay = PythonOverlay.from_text(text, origin="pr.diff", flag="--overlay pr.diff")

    with pytest.raises(UserError, match=f"^overlay pr.diff: git apply left {other} unchanged"):
        overlay.materialize(tmp_path / "shadow", INSTALLED)


def test_materialize_replaces_a_previous_shadow(tmp_path: Path) -> None:
    overlay = PythonOverlay.from_text(config_patch(), origin="pr.diff", flag="--overlay pr.diff")
    (tmp_path / "shadow" / "torch").mkdir(parents=True)
    (tmp_path / "shadow" / "torch" / "stale.py").write_text("left from an older PR\n")

    shadow = overlay.materialize(tmp_path / "shadow", INSTALLED)

    assert not (shadow / "torch" / "stale.py").exists()
    assert CHANGED in (shadow / CONFIG).read_text()


def smallest_module(rel_dir: str) -> str:
    files = [p for p in (INSTALLED.parent / rel_dir).glob("*.py") if p.stat().st_size > 0]
    return str(min(files, key=lambda p: p.stat().st_size).relative_to(INSTALLED.parent))


# --- the overlay changes what Inductor generates (real torch.compile on the CPU) -------------------------

COMPILE_STAGE = textwrap.dedent('''
    """Compile three reductions of one pointwise chain on a 64x64 tensor and run them once."""
    import sys
    import torch
    import torch._inductor.config as config

    def f(x, y):
        b = (torch.relu(x) + y).sin() * 2
        return b.sum(-1), b.amax(-1), (b.exp() - x).mean(-1)

    torch.manual_seed(0)
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    out = torch.compile(f)(x, y)
    torch.testing.assert_close(out, f(x, y))
    print("max_fusion_size", config.max_fusion_size, "from", config.__file__, flush=True)
''')


def compiled_kernels(cache: Path) -> dict[str, str]:
    """{cpp_fused_* kernel name: C++ source} from the graph wrappers Inductor wrote into the cache."""
    kernels = {}
    for wrapper in cache.rglob("*.py"):
        text = wrapper.read_text(errors="replace")
        for m in re.finditer(r"^(cpp_fused_\w+) = async_compile\.cpp_pybinding\(.*?r'''(.*?)'''", text, re.M | re.S):
            kernels[m.group(1)] = m.group(2)
    return kernels


@pytest.mark.integration
def test_an_overlay_changing_an_inductor_default_changes_the_generated_code(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "prbench_test_compile_stage.py").write_text(COMPILE_STAGE)
    overlay = PythonOverlay.from_text(config_patch(), origin="pr.diff", flag="--overlay pr.diff")
    shadow = overlay.materialize(tmp_path / "pr" / "overlay", INSTALLED)

    def command(variant: str, extra_path: list[Path]) -> StageCommand:
        work = tmp_path / variant
        for d in ("inductor-cache", "tmp"):
            (work / d).mkdir(parents=True, exist_ok=True)
        return StageCommand(
            module="prbench_test_compile_stage", args=[],
            env={"TORCHINDUCTOR_CACHE_DIR": str(work / "inductor-cache"), "TMPDIR": str(work / "tmp"),
                 "OMP_NUM_THREADS": "1",
                 # No 150 MB precompiled header: same code, about a third less CPU time per compile.
                 "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "0"},
            python_path=[*extra_path, tmp_path / "code"], log_path=work / "compile.log", timeout_s=300,
        )

    runner = LocalRunner(stream_output=False)
    with ThreadPoolExecutor(max_workers=2) as pool:  # two independent processes: run them side by side
        for done in [pool.submit(runner.run, command("base", [])), pool.submit(runner.run, command("pr", [shadow]))]:
            done.result()

    base_log, pr_log = (tmp_path / "base" / "compile.log").read_text(), (tmp_path / "pr" / "compile.log").read_text()
    assert f"max_fusion_size 64 from {INSTALLED / '_inductor' / 'config.py'}" in base_log
    assert f"max_fusion_size 1 from {shadow / CONFIG}" in pr_log
    base = compiled_kernels(tmp_path / "base" / "inductor-cache")
    pr = compiled_kernels(tmp_path / "pr" / "inductor-cache")
    # The C++ backend emits the whole graph as one kernel either way, under the same name...
    assert list(base) == list(pr) == ["cpp_fused_add_amax_exp_mean_mul_relu_sin_sub_sum_0"]
    (base_src,), (pr_src,) = base.values(), pr.values()
    # ...but its body differs: by default the three reductions share one loop nest with three accumulators;
    # with max_fusion_size = 1 nothing may fuse, so each reduction gets its own loop nest and accumulator.
    def loop_nests(src: str) -> int:
        return len(re.findall(r"^ {8}for\(int64_t x0=", src, re.M))

    def accumulators(src: str) -> set[str]:
        return set(re.findall(r"\bfloat (tmp_acc\d+) =", src))

    assert (loop_nests(base_src), accumulators(base_src)) == (2, {"tmp_acc0", "tmp_acc1", "tmp_acc2"})
    assert (loop_nests(pr_src), accumulators(pr_src)) == (4, {"tmp_acc0"})
