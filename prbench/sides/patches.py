"""Applying the patches in ``patches/`` to an upstream source tree, with a clear message when upstream drifted.

Every patch is checked with ``git apply --check`` before anything is written, so a tree is either fully
patched or untouched; on drift the error names the patch and the file it no longer fits.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from foundation.errors import UserError
from foundation.records import read_bytes

PATCHES_DIR = Path(__file__).resolve().parents[2] / "patches"

_TARGET = re.compile(r"^\+\+\+ (?:b/)?(?P<path>\S+)", re.M)
# "error: patch failed: FILE:LINE" must win over the generic "error: FILE: ..." form, which would name "patch".
_FAILED_FILE = re.compile(r"patch failed: (?P<path>[^:\s]+)|^error: (?P<other>[^:\s]+):", re.M)


@dataclass(frozen=True)
class AppliedPatch:
    patch: Path
    tree: Path
    files: tuple[str, ...]


def find_patch(name: str | Path) -> Path:
    """A path, or a file name inside ``patches/``."""
    path = Path(name)
    if path.is_file():
        return path
    candidate = PATCHES_DIR / path.name
    if candidate.is_file():
        return candidate
    raise UserError(f"patch {name}: not found (looked in {PATCHES_DIR})")


# The file modes a git diff names (new, old, deleted, or unchanged on the index line). Only regular files may be
# patched: 120000 is a symbolic link (a patch could point a source file at /etc/passwd), 160000 a submodule.
_MODE = re.compile(r"^(?:(?:new file|new|old|deleted file) mode|index \S+) (?P<mode>\d{6})\s*$", re.M)
_REGULAR_MODES = ("100644", "100755")
MAX_PATCH_BYTES = 64 << 20  # a diff read whole; PyTorch's largest Python-only PRs are a few MB


def special_file_change(text: str) -> str | None:
    """The first line of a diff that makes or changes a symbolic link or a submodule (None when there is none)."""
    return next((m.group(0).strip() for m in _MODE.finditer(text) if m.group("mode") not in _REGULAR_MODES), None)


def patched_files(patch: Path) -> tuple[str, ...]:
    """Files a unified diff modifies (its ``+++ b/...`` lines)."""
    text = read_bytes(patch, "a unified diff", MAX_PATCH_BYTES).decode("utf-8", errors="replace")
    return tuple(m.group("path") for m in _TARGET.finditer(text))


def _git_apply(patch: Path, tree: Path, check: bool) -> subprocess.CompletedProcess[str]:
    argv = ["git", "apply", "--check" if check else "--whitespace=nowarn", str(patch.resolve())]
    if check:
        argv.insert(3, "--whitespace=nowarn")
    try:
        return subprocess.run(argv, cwd=tree, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UserError("git is not installed: it is needed to apply patches") from None


def check_patch(patch: str | Path, tree: Path) -> Path:
    """Raise UserError (patch + file named) unless ``patch`` applies cleanly to ``tree``; return the patch path."""
    path = find_patch(patch)
    if not tree.is_dir():
        raise UserError(f"patch {path.name}: source tree {tree} is not a directory")
    special = special_file_change(read_bytes(path, "a unified diff", MAX_PATCH_BYTES).decode("utf-8", "replace"))
    if special:
        raise UserError(f"patch {path.name}: '{special}': patches may change regular files only")
    result = _git_apply(path, tree, check=True)
    if result.returncode != 0:
        files = patched_files(path)
        failed = _FAILED_FILE.search(result.stderr)
        target = (failed.group("path") or failed.group("other")) if failed else (files[0] if files else "?")
        first = next((line for line in result.stderr.splitlines() if line.strip()), "git apply failed")
        raise UserError(f"patch {path.name} does not apply to {target} in {tree} (upstream drifted?): {first}")
    return path


def apply_patch(patch: str | Path, tree: Path) -> AppliedPatch:
    """Check, then apply ``patch`` to the source tree rooted at ``tree`` (paths in the diff are relative to it)."""
    path = check_patch(patch, tree)
    result = _git_apply(path, tree, check=False)
    if result.returncode != 0:
        first = next((line for line in result.stderr.splitlines() if line.strip()), "git apply failed")
        raise UserError(f"patch {path.name}: applying to {tree} failed after a clean check: {first}")
    return AppliedPatch(path, tree, patched_files(path))


def apply_error_at_commit(text: str, repo_dir: Path, commit: str, strip: int = 1) -> str | None:
    """``git apply --check`` of the diff ``text`` against ``commit``'s tree in the clone ``repo_dir``, read into a
    scratch index (no checkout is touched): None when it applies, else git's first line."""
    with tempfile.TemporaryDirectory(prefix="prbench-patch-check-") as scratch:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
        read = subprocess.run(["git", "read-tree", commit], cwd=repo_dir, env=env, capture_output=True, text=True)
        if read.returncode != 0:
            return f"cannot read the tree of {commit[:12]} in {repo_dir}"
        proc = subprocess.run(["git", "apply", "--cached", "--check", f"-p{strip}", "--whitespace=nowarn", "-"],
                              input=text, text=True, cwd=repo_dir, env=env, capture_output=True)
        return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["git apply failed"])[0]


def check_patch_at_commit(patch: Path, repo_dir: Path, commit: str, flag: str, what: str) -> str:
    """A patch file given as ``flag`` that must apply to ``what`` (e.g. "Triton") at ``commit``: its text, or one
    line naming the flag (a symbolic link or submodule change is refused, as for every patch)."""
    if not patch.is_file():
        raise UserError(f"{flag} {patch}: not a file")
    text = read_bytes(patch, "a unified diff", MAX_PATCH_BYTES).decode("utf-8", errors="replace")
    special = special_file_change(text)
    if special:
        raise UserError(f"{flag} {patch}: '{special}': patches may change regular files only")
    if not _TARGET.search(text):
        raise UserError(f"{flag} {patch}: not a unified diff (no '+++ b/<file>' line)")
    error = apply_error_at_commit(text, repo_dir, commit)
    if error is not None:
        raise UserError(f"{flag} {patch}: does not apply to {what} {commit[:12]} ({error})")
    return text
