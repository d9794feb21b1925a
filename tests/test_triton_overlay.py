"""A Triton A/B on a local recipe: ``invoke compare --recipe cpu-local --triton-pr fix.patch``, where nothing is
built. The patch is written against the Triton source tree (``python/triton/…``, ``third_party/<backend>/backend/…``)
as a Docker recipe's Triton A/B applies it; on the local recipe it becomes an overlay on the installed ``triton``
package, the PR side's alone, while the base side runs the installed Triton as is.

Here the installed Triton is a stand-in package with the real layout of the files the patch changes; the whole
compare on this interpreter's real Triton is tests/test_triton_overlay_compare.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from foundation.errors import UserError
from foundation.formats.triton_ab import INSTALLED_OVERLAY
from prbench.compare import variant_plan
from prbench.compare.variant_plan import LocalEnvironment, local_lock, plan_local
from prbench.sides.triton_overlay import triton_overlay
from tests.support.cli_support import invoke_in_process, one_line

ROOT = Path(__file__).resolve().parents[1]

COMPILER = '''class CUDAOptions:
    num_warps: int = 4
    num_ctas: int = 1
    num_stages: int = 3
'''

# A change of a default in the NVIDIA backend's Python options, a line in the package's __init__.py, and a test,
# as `git diff` in a Triton clone writes them.
PATCH = '''diff --git a/third_party/nvidia/backend/compiler.py b/third_party/nvidia/backend/compiler.py
--- a/third_party/nvidia/backend/compiler.py
+++ b/third_party/nvidia/backend/compiler.py
@@ -1,4 +1,4 @@
 class CUDAOptions:
-    num_warps: int = 4
+    num_warps: int = 8
     num_ctas: int = 1
     num_stages: int = 3
diff --git a/python/triton/__init__.py b/python/triton/__init__.py
--- a/python/triton/__init__.py
+++ b/python/triton/__init__.py
@@ -1,2 +1,3 @@
 """isort:skip_file"""
 __version__ = '3.9.0'
+PATCHED = True
diff --git a/python/test/unit/test_warps.py b/python/test/unit/test_warps.py
new file mode 100644
--- /dev/null
+++ b/python/test/unit/test_warps.py
@@ -0,0 +1 @@
+assert True
'''


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The installed triton package (its files the patch changes, and a compiled library it does not) and an
    interpreter that describes torch 2.13.0 with Triton 3.9.0."""
    package = tmp_path / "site-packages" / "triton"
    (package / "backends" / "nvidia").mkdir(parents=True)
    (package / "__init__.py").write_text('"""isort:skip_file"""\n__version__ = \'3.9.0\'\n')
    (package / "backends" / "nvidia" / "compiler.py").write_text(COMPILER)
    (package / "_C").mkdir()
    (package / "_C" / "libtriton.so").write_bytes(b"\x7fELF")
    monkeypatch.setattr(variant_plan, "describe_local_environment", lambda python: LocalEnvironment(
        {"torch": "2.13.0+cpu", "torch_git": "a" * 40, "triton": "3.9.0"}))
    monkeypatch.setattr(variant_plan, "installed_package_dir",
                        lambda python, name="torch": package if name == "triton" else pytest.fail(name))
    return package


def _patch(tmp_path: Path, text: str = PATCH) -> Path:
    path = tmp_path / "warps.patch"
    path.write_text(text)
    return path


def test_a_patch_on_the_triton_source_tree_shadows_the_installed_package(tmp_path, installed):
    overlay = triton_overlay(_patch(tmp_path))
    assert [f.path for f in overlay.files] == ["triton/backends/nvidia/compiler.py", "triton/__init__.py"]
    assert overlay.ignored == ("python/test/unit/test_warps.py",)  # a test: nothing that runs

    shadow = overlay.materialize(tmp_path / "shadow", installed)

    assert (shadow / "triton" / "backends" / "nvidia" / "compiler.py").read_text() == COMPILER.replace("= 4", "= 8")
    assert (shadow / "triton" / "__init__.py").read_text().endswith("PATCHED = True\n")
    assert (shadow / "triton" / "_C").is_symlink(), "the compiled library is the installed one"
    assert (installed / "backends" / "nvidia" / "compiler.py").read_text() == COMPILER, "the install is untouched"


def test_the_plan_runs_the_installed_triton_on_the_base_and_the_patched_one_on_the_pr(tmp_path, installed):
    patch = _patch(tmp_path)

    plan = plan_local("installed", "installed", None, "python", triton_pr=str(patch))

    assert plan.base.overlay is None and plan.base.how == "installed torch 2.13.0+cpu, Triton 3.9.0 as is"
    assert plan.pr.overlay is not None and plan.pr.overlay.package == "triton"
    assert plan.pr.how == "installed torch 2.13.0+cpu, Triton 3.9.0 + Python overlay warps.patch (2 files)"
    record = plan.triton_ab
    assert record is not None and (record.base, record.pr, record.reason) == ("3.9.0", "3.9.0", INSTALLED_OVERLAY)
    assert record.commits().startswith("Triton 3.9.0 → 3.9.0 + warps.patch sha256:")
    base, pr = (local_lock(side, plan.local) for side in (plan.base, plan.pr))
    assert "overlay" not in base and base["environment"]["triton"] == "3.9.0"
    assert pr["overlay"] == {"package": "triton", "origin": "warps.patch",
                             "files": ["triton/backends/nvidia/compiler.py", "triton/__init__.py"]}


@pytest.mark.parametrize("text, expected", [
    (PATCH.replace("= 4\n+", "= 2\n+"),
     "overlay {patch}: does not apply to the installed triton (error: patch failed: "
     "triton/backends/nvidia/compiler.py:1); is it a patch on the installed Triton's version?"),
    (PATCH.replace("third_party/nvidia/backend/compiler.py", "lib/Dialect/TritonGPU/Transforms/Pipeliner.cpp"),
     "--triton-pr {patch}: touches non-Python files (lib/Dialect/TritonGPU/Transforms/Pipeliner.cpp); a Python "
     "overlay cannot change compiled code, use a Docker recipe to rebuild Triton"),
])
def test_a_patch_the_installed_triton_cannot_take_is_refused_before_any_work(tmp_path, installed, text, expected):
    patch = _patch(tmp_path, text)
    with pytest.raises(UserError) as refused:
        plan_local("installed", "installed", None, "python", triton_pr=str(patch))
    assert str(refused.value) == expected.format(patch=patch)


@pytest.mark.parametrize("args, expected", [
    (("--triton-pr", "HEAD"),
     "error: --triton-pr HEAD: recipe cpu-local runs the installed torch and Triton; there a Triton A/B takes a "
     "Python-only patch file on the installed Triton (a Triton commit needs a docker recipe that builds from "
     "source)"),
    (("--triton-pr", "{patch}", "--triton-base", "HEAD"),
     "error: --triton-base: recipe cpu-local runs the installed Triton, the base of its Triton A/B (leave "
     "--triton-base out)"),
    (("--triton-pr", "{patch}", "--base", "v2.13.0"),
     "error: --base v2.13.0: a Triton A/B on a local recipe runs the installed torch as is on both sides; leave "
     "--base out (or give 'installed')"),
])
def test_a_local_triton_ab_is_checked_at_the_door(tmp_path, args, expected):
    patch = _patch(tmp_path)
    given = [arg.format(patch=patch) for arg in args]
    result = invoke_in_process("compare", "--recipe", "cpu-local", *given, "--runs-dir", str(tmp_path / "runs"))
    assert one_line(result) == expected
    assert not (tmp_path / "runs").exists()


def test_the_doctor_checks_that_the_patch_applies_to_the_installed_triton(tmp_path, installed, monkeypatch):
    from prbench.compare import doctor
    from prbench.sides import overlay
    from tests.test_doctor import amd_machine, inputs

    monkeypatch.setattr(overlay, "installed_package_dir", variant_plan.installed_package_dir)
    session = doctor.Session(inputs(ROOT / "recipes" / "cpu-local.toml", tmp_path, triton_pr=str(_patch(tmp_path))),
                             amd_machine(tmp_path, gpu=False))
    found = doctor.check_triton_patch(session)
    assert (found.status, found.detail) == ("ok", f"warps.patch applies to the installed Triton ({installed}) as an "
                                                  "overlay of 2 file(s)")

    _patch(tmp_path, PATCH.replace("= 4\n+", "= 2\n+"))
    found = doctor.check_triton_patch(session)
    assert found.status == "fail" and found.detail.startswith(f"overlay {tmp_path / 'warps.patch'}: does not apply "
                                                              "to the installed triton")
