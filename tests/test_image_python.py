"""What an image runs works on the oldest Python an image has: the ROCm base images' 3.10
(``prbench.images.build.IMAGE_PYTHON``), while the host needs 3.11.

That code is what a build copies into an image (``IMAGE_CODE``: the stages, the analysis package they import, the
build's check script) and the scripts the host hands to an image's or a user's interpreter (``python -c SCRIPT``
under prbench/). A user who compares on a ROCm image would otherwise see the suite stage and every paired round
die at once (``datetime.UTC`` is 3.11's). Each check catches what the others miss:

- mypy at 3.10 over the copied code: a name 3.10's standard library lacks (``datetime.UTC``, ``tomllib``,
  ``typing.Self``, ``hashlib.file_digest``), anywhere, in any function;
- vermin ``--target=3.10-``: APIs and syntax newer than 3.10, in the copied code and in the scripts;
- a real Python 3.10 (pyenv's, skipped when this machine has none): compiles every file and script, and imports
  every package module whose imports it has (the standard library's; those needing torch or numpy, and the
  scripts, are compiled only);
- ruff's per-file target version for that code is 3.10 too, so its fixes never bring 3.11-only code back.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import tomllib
from itertools import pairwise
from pathlib import Path

import pytest

from prbench.images.build import IMAGE_CODE, IMAGE_PYTHON, PROJECT_ROOT

VERSION = ".".join(map(str, IMAGE_PYTHON))
# pyenv's interpreter of that version, part of this machine's image (and CI's); a machine without it skips.
FLOOR_PYTHON = Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions"
PROBE = Path(__file__).parent / "support" / "image_python_probe.py"


def image_files() -> list[Path]:
    """Every Python file of IMAGE_CODE (a package's templates included: a repro folder's run.py runs with torch)."""
    files: list[Path] = []
    for entry in IMAGE_CODE:
        found = sorted(entry.rglob("*.py")) if entry.is_dir() else [entry]
        files += [f for f in found if "__pycache__" not in f.parts]
    return files


def host_scripts() -> dict[str, str]:
    """{module.NAME: source} of every script prbench runs as ``[python, "-c", NAME]``, found in the source with ast
    and read from the imported module (some are f-strings)."""
    scripts: dict[str, str] = {}
    for path in sorted((PROJECT_ROOT / "prbench").rglob("*.py")):
        module = ".".join(path.relative_to(PROJECT_ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.List, ast.Tuple)):
                continue
            for flag, script in pairwise(node.elts):
                if isinstance(flag, ast.Constant) and flag.value == "-c" and isinstance(script, ast.Name):
                    scripts[f"{module}.{script.id}"] = getattr(importlib.import_module(module), script.id)
    return scripts


def relative(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(PROJECT_ROOT)) for p in paths]


def test_the_image_code_is_the_stages_the_analysis_package_and_the_build_check():
    """The set the checks cover is what a build copies: the stage modules and what they import are among it."""
    names = set(relative(image_files()))
    assert {"stages/suite.py", "stages/paired.py", "foundation/formats/run_layout.py",
            "docker/check_environment.py", "analysis/templates/repro_run.py"} <= names
    assert not any(name.startswith(("prbench/", "tasks.py")) for name in names)


def test_the_host_scripts_an_image_runs_are_found():
    assert {"prbench.images.image_lock.FACTS_SCRIPT", "prbench.images.wheels._TARGET_SCRIPT",
            "prbench.compare.variant_plan._DESCRIBE", "prbench.sides.local_torch._FIND_PACKAGE"} <= set(host_scripts())


def test_ruff_targets_the_image_python_for_exactly_the_image_code():
    """pyproject.toml cannot import IMAGE_CODE; its ruff per-file target versions must name the same code."""
    config = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    per_file = config["tool"]["ruff"]["per-file-target-version"]
    expected = {f"{entry.relative_to(PROJECT_ROOT)}/**" if entry.is_dir() else str(entry.relative_to(PROJECT_ROOT))
                for entry in IMAGE_CODE}
    assert per_file == dict.fromkeys(expected, f"py{VERSION.replace('.', '')}")


# The installed libraries whose sources mypy would otherwise read at this version too (5x the time of the check:
# 241 s against 51 s under load); their types are the project's mypy's, at the host's Python (README, CI). What
# this check looks for is the standard library's API, which typeshed's stubs give whatever is skipped.
NOT_FOLLOWED = ("torch", "transformers")


def mypy_config_for_the_image_python(directory: Path) -> Path:
    """The project's mypy settings (pyproject.toml) as a mypy.ini, with `NOT_FOLLOWED` skipped; an ignore comment
    about a skipped library's type is then unused, which is the project's mypy's to say, not this check's."""
    def ini(value: object) -> str:
        return ",".join(map(str, value)) if isinstance(value, list) else str(value)

    settings = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    lines = ["[mypy]", "warn_unused_ignores = False"]
    lines += [f"{key} = {ini(value)}" for key, value in settings.items()
              if key not in ("overrides", "files", "python_version", "warn_unused_ignores")]
    for override in settings.get("overrides", []):
        lines += [f"[mypy-{ini(override['module'])}]"]
        lines += [f"{key} = {ini(value)}" for key, value in override.items() if key != "module"]
    lines += [f"[mypy-{','.join(f'{name},{name}.*' for name in NOT_FOLLOWED)}]", "follow_imports = skip"]
    path = directory / "mypy.ini"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.integration
def test_mypy_at_the_image_python_finds_no_newer_api(tmp_path):
    """mypy with typeshed's 3.10 standard library over the image code (the project's mypy settings otherwise)."""
    config = mypy_config_for_the_image_python(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), "--python-version", VERSION,
                           *relative(image_files())],
                          cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.integration
def test_vermin_finds_no_api_or_syntax_newer_than_the_image_python(tmp_path):
    scripts = []
    for name, source in host_scripts().items():
        scripts.append(tmp_path / f"{name}.py")
        scripts[-1].write_text(source, encoding="utf-8")
    vermin = Path(sysconfig.get_path("scripts")) / "vermin"
    assert vermin.is_file(), f"{vermin}: missing; the dev extra has it (pip install -e '.[dev]')"
    proc = subprocess.run([str(vermin), f"--target={VERSION}-", "--no-tips", "--violations", "--eval-annotations",
                           *relative(image_files()), *map(str, scripts)],
                          cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.integration
def test_a_real_python_of_that_version_compiles_and_imports_the_image_code():
    pythons = sorted(FLOOR_PYTHON.glob(f"{VERSION}.*/bin/python{VERSION}"))
    if not pythons:
        pytest.skip(f"no Python {VERSION} under {FLOOR_PYTHON} (pyenv): mypy and vermin still check the image code")
    files = image_files()
    given = {"scripts": host_scripts(), "host_stdlib": sorted(sys.stdlib_module_names)}
    proc = subprocess.run([str(pythons[-1]), "-I", str(PROBE), str(PROJECT_ROOT), *map(str, files)],
                          input=json.dumps(given), capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["errors"] == {}
    assert found["compiled"] == len(files) + len(given["scripts"])
    # The stages of the suite and the paired rounds, the errors and the run layout import torch only where they
    # use it: really imported.
    assert {"stages.suite", "stages.paired", "stages.entry", "foundation.errors",
            "foundation.formats.run_layout"} <= set(found["imported"])
    # What the others need is a package this Python lacks and the host has (torch, numpy), not a newer module.
    assert [m for m in set(found["needs"].values()) if importlib.util.find_spec(m) is None] == []
