"""Python overlays: run a Python-only PyTorch PR (or, in a Triton A/B, a Python-only Triton patch) on the
installed binary without a rebuild.

The overlay is a shadow ``torch`` (or ``triton``: `PythonOverlay.package`) package: a directory tree that mirrors
the installed package with symlinks, except along the paths the PR changes, where directories are real and the
changed ``.py`` files are real files with the PR applied. Putting its parent first on ``PYTHONPATH`` makes
``import torch`` load the PR's Python on top of the installed compiled libraries. A diff that touches anything but
Python files is refused: that needs a rebuild (a Docker recipe).
"""

from __future__ import annotations

import filecmp
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from foundation.errors import UserError
from foundation.records import read_bytes
from prbench.sides.local_torch import installed_torch
from prbench.sides.patches import MAX_PATCH_BYTES, apply_error_at_commit, special_file_change

PACKAGE = "torch"
_PROJECT = {"torch": "PyTorch", "triton": "Triton"}  # what a Docker recipe rebuilds for a package's compiled code
_DIFF_GIT = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
_PLUS_MINUS = re.compile(r"^(---|\+\+\+) (?:[ab]/)?(\S+)")


@dataclass(frozen=True)
class ChangedFile:
    path: str  # relative to the PyTorch source root, e.g. torch/_inductor/config.py
    deleted: bool = False


@dataclass(frozen=True)
class PythonOverlay:
    """A validated Python-only diff against the PyTorch source tree (paths from its root, the package's ``torch/…``;
    a Triton patch's paths are made the installed package's ``triton/…`` first)."""

    patch_text: str
    files: tuple[ChangedFile, ...]  # the files inside the package that the overlay changes
    ignored: tuple[str, ...]  # Python files outside the package (tests, benchmarks): no effect at run time
    origin: str
    package: str = PACKAGE  # the installed package it shadows: torch, or triton (prbench.sides.triton_overlay)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.patch_text.encode()).hexdigest()

    @classmethod
    def from_patch_file(cls, path: Path, flag: str = "--overlay") -> PythonOverlay:
        return cls.from_text(read_patch(path, flag), origin=str(path), flag=f"{flag} {path}")

    @classmethod
    def from_text(cls, text: str, origin: str, flag: str, package: str = PACKAGE) -> PythonOverlay:
        changed = _changed_paths(text)
        if not changed:
            raise UserError(f"{flag}: no file changes found (expected a unified diff against the {_PROJECT[package]} "
                            "tree)")
        if "GIT binary patch" in text or "\nBinary files " in text:
            raise UserError(f"{flag}: the diff has binary changes; a Python overlay takes .py files only")
        special = special_file_change(text)
        if special:
            raise UserError(f"{flag}: '{special}': a symbolic link or submodule; a Python overlay takes regular "
                            ".py files only")
        not_python = sorted(p for p, _ in changed if not p.endswith(".py"))
        if not_python:
            shown = ", ".join(not_python[:3]) + (f" and {len(not_python) - 3} more" if len(not_python) > 3 else "")
            raise UserError(
                f"{flag}: touches non-Python files ({shown}); a Python overlay cannot change compiled code, "
                f"use a Docker recipe to rebuild {_PROJECT[package]}"
            )
        in_package = tuple(ChangedFile(p, deleted) for p, deleted in changed if p.startswith(f"{package}/"))
        ignored = tuple(p for p, _ in changed if not p.startswith(f"{package}/"))
        if not in_package:
            raise UserError(f"{flag}: changes no file inside the {package}/ package, so it cannot change what runs")
        return cls(patch_text=text, files=in_package, ignored=ignored, origin=origin, package=package)

    def materialize(self, dest: Path, installed_package: Path) -> Path:
        """Build the shadow package under ``dest`` (replacing any previous one); return the PYTHONPATH entry."""
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        relative = [Path(f.path).relative_to(self.package) for f in self.files]
        _mirror(installed_package, dest / self.package, _prefixes(relative))
        for rel in relative:
            target = dest / self.package / rel
            if target.is_symlink():
                real = target.resolve()
                target.unlink()
                shutil.copyfile(real, target)
        self._apply(dest)
        for f, rel in zip(self.files, relative, strict=True):
            # git apply skips, without a word, files that --include does not match after -p stripping.
            target, original = dest / self.package / rel, installed_package / rel
            if f.deleted:
                unchanged = target.exists()
            else:
                unchanged = original.is_file() and filecmp.cmp(target, original, shallow=False)
            if unchanged:
                raise UserError(f"overlay {self.origin}: git apply left {f.path} unchanged; check the diff's paths")
        (dest / "overlay.patch").write_text(self.patch_text, encoding="utf-8")
        return dest

    def check_applies(self, installed_package: Path) -> None:
        """Build the shadow package in a throw-away directory: a PR that does not apply fails before any work."""
        with tempfile.TemporaryDirectory(prefix="prbench-overlay-check-") as scratch:
            self.materialize(Path(scratch) / "shadow", installed_package)

    def check_applies_to_commit(self, repo_dir: Path, commit: str) -> None:
        """``git apply --check`` against ``commit``'s tree, read into a scratch index (no checkout is touched)."""
        error = apply_error_at_commit(self.patch_text, repo_dir, commit, strip_level(self.patch_text))
        if error is not None:
            raise UserError(f"overlay {self.origin}: does not apply to PyTorch {commit[:12]} ({error})")

    def check_applies_to_wheel(self, wheel: Path, label: str) -> None:
        """Apply the overlay, in a scratch directory, to the files it changes as the wheel ships them: a PR that
        does not apply to the pinned wheel's package fails before any image is built."""
        import zipfile

        with tempfile.TemporaryDirectory(prefix="prbench-overlay-check-") as scratch, zipfile.ZipFile(wheel) as whl:
            names = set(whl.namelist())
            for changed in self.files:
                if changed.path in names:
                    target = Path(scratch) / changed.path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(whl.read(changed.path))
            try:
                self._apply(Path(scratch))
            except UserError as exc:
                raise UserError(str(exc).replace("the installed torch", label).split("; is --base")[0]) from None

    def _apply(self, dest: Path) -> None:
        # Only the package's files are applied: tests and benchmarks in the diff are not in the shadow tree.
        # The ceiling stops git from treating an enclosing repository (the runs dir may sit in one) as ours.
        env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(dest.parent.resolve())}
        base = ["git", "apply", f"-p{strip_level(self.patch_text)}", f"--include={self.package}/*",
                "--whitespace=nowarn"]
        for check in (["--check"], []):
            proc = subprocess.run(
                [*base, *check, "-"], input=self.patch_text, text=True, cwd=dest, env=env, capture_output=True
            )
            if proc.returncode != 0:
                first = (proc.stderr.strip().splitlines() or ["git apply failed"])[0]
                hint = ("is --base the installed torch's commit?" if self.package == PACKAGE
                        else f"is it a patch on the installed {_PROJECT[self.package]}'s version?")
                raise UserError(f"overlay {self.origin}: does not apply to the installed {self.package} ({first}); "
                                f"{hint}")


def installed_package_dir(python: str, package: str = PACKAGE) -> Path:
    """Where ``python`` imports torch (or ``package``) from: the installed package the overlay shadows."""
    found = installed_torch(python, package)
    if found is None or found.package is None:
        raise UserError(f"--python {python}: cannot import {package} there")
    return found.package


def read_patch(path: Path, flag: str) -> str:
    """A patch file's text, bounded (a regular file: a FIFO would never end); one line naming ``flag`` otherwise."""
    if not Path(path).exists():
        raise UserError(f"{flag} {path}: no such patch file")
    try:
        return read_bytes(path, "a unified diff", MAX_PATCH_BYTES).decode("utf-8")
    except UserError as exc:
        raise UserError(f"{flag} {exc}") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{flag} {path}: cannot read the patch ({exc})") from None


def _changed_paths(text: str) -> list[tuple[str, bool]]:
    """(path, deleted) for every file in a git or plain unified diff."""
    files: dict[str, bool] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _DIFF_GIT.match(line)
        if m:
            deleted = any(lines[j].startswith("deleted file mode") for j in range(i + 1, min(i + 4, len(lines))))
            files[m.group(2)] = deleted
    if files:
        return list(files.items())
    minus = None
    for line in lines:
        m = _PLUS_MINUS.match(line)
        if not m:
            continue
        if m.group(1) == "---":
            minus = m.group(2)
        else:
            path = m.group(2)
            if path == "/dev/null" or line.startswith("+++ /dev/null"):
                files[minus or path] = True
            else:
                files[path] = False
    return list(files.items())


def strip_level(text: str) -> int:
    """``-p`` for git apply: 1 for ``a/...`` ``b/...`` paths, 0 for paths from the source root (``--no-prefix``)."""
    for line in text.splitlines():
        if _DIFF_GIT.match(line):
            return 1
        m = _PLUS_MINUS.match(line)
        if m and m.group(2) != "/dev/null":
            return 1 if line[4:].startswith(("a/", "b/")) else 0
    return 1


def _prefixes(paths: list[Path]) -> set[Path]:
    """Every directory on the way to a changed file, plus the files themselves."""
    out: set[Path] = set()
    for p in paths:
        out.add(p)
        out.update(p.parents)
    out.discard(Path("."))
    return out


def _mirror(src: Path, dst: Path, real: set[Path], rel: Path = Path(".")) -> None:
    """Mirror ``src`` into ``dst``: real directories along ``real`` paths, symlinks everywhere else."""
    dst.mkdir(exist_ok=True)
    for entry in os.scandir(src):
        child = rel / entry.name
        if entry.name == "__pycache__":
            # Bytecode of the changed modules must not land in (or be read from) the installed package.
            continue
        if child in real and entry.is_dir(follow_symlinks=False):
            _mirror(Path(entry.path), dst / entry.name, real, child)
        else:
            (dst / entry.name).symlink_to(entry.path)
