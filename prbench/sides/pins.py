"""Which Triton commit belongs to a PyTorch commit: read PyTorch's own pin file at that commit.

PyTorch records the Triton commit its CI builds against in a pin file whose name and folder drifted over
the years (``triton.txt`` unified CUDA and ROCm in 2.5; older trees have ``triton-rocm.txt``, and some keep
the pins under ``.github/``). The file is read from the git objects of the exact commit (never from a
working tree, which hipify leaves dirty), and the lock records which file it came from. A ``--triton-ref`` given
to ``invoke build``, ``compare`` or ``bisect`` replaces both the recipe's commit and the pin (`TRITON_REF`);
``--triton-base``/``--triton-pr`` give each side of a Triton A/B its own (`TRITON_BASE`, `TRITON_PR`).

A PyTorch PR that changes nothing but the pin file (and the version file its wheel build reads,
``.ci/docker/triton_version.txt``) is a Triton A/B in disguise (`only_moves_triton_pin`). Triton in turn pins
the LLVM it is built with (`llvm_pin`): ``cmake/llvm-hash.txt`` (a commit and a newline, up to 3.5) or
``cmake/llvm-info.json``'s ``llvm_hash`` (main), read from the git objects of the commit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import git

from foundation.errors import UserError

_SHA_RE = re.compile(r"[0-9a-f]{40}")  # fullmatch: "$" would let a trailing newline through

# Probed in order. ROCm trees before PyTorch 2.5 pinned Triton in triton-rocm.txt; from 2.5 on triton.txt
# holds the one commit for both platforms, so it is preferred even for ROCm when both exist.
_PIN_DIRS = (".ci/docker/ci_commit_pins", ".github/ci_commit_pins")
_PIN_NAMES = {
    "rocm": ("triton.txt", "triton-rocm.txt"),
    "cuda": ("triton.txt",),
    "cpu": ("triton.txt",),
}

# Files a pin-bump PR may change besides the pin: the version its wheel build stamps (read by no source build).
_PIN_BUMP_EXTRA = (".ci/docker/triton_version.txt",)
_LLVM_FILES = ("cmake/llvm-hash.txt", "cmake/llvm-info.json")

OVERRIDE = "recipe"
TRITON_REF = "--triton-ref"  # the user named the Triton commit on the command line
TRITON_BASE = "--triton-base"  # a Triton A/B: the user named each side's commit
TRITON_PR = "--triton-pr"


@dataclass(frozen=True)
class TritonPin:
    commit: str
    # Where the commit came from: the pin file's path inside the PyTorch tree, OVERRIDE when the recipe names the
    # commit, TRITON_REF when the command line did.
    source: str

    def origin(self, pytorch_commit: str) -> str:
        """Where the commit came from, in words (for a message about it)."""
        if self.source == OVERRIDE:
            return "the recipe's triton.commit"
        if self.source in (TRITON_REF, TRITON_BASE, TRITON_PR):
            return self.source
        return f"pinned by PyTorch {pytorch_commit[:12]} in {self.source}"


def pin_candidates(platform: str) -> list[str]:
    names = _PIN_NAMES.get(platform, ("triton.txt",))
    return [f"{folder}/{name}" for name in names for folder in _PIN_DIRS]


def open_repo(path: Path, what: str) -> git.Repo:
    """A local clone as a GitPython repo, or a one-line error naming the flag-like ``what``."""
    try:
        return git.Repo(path)
    except (git.NoSuchPathError, git.InvalidGitRepositoryError):
        raise UserError(f"{what}: {path} is not a git clone") from None


def resolve_commit(repo: git.Repo, rev: str, what: str) -> str:
    """A full 40-hex SHA for ``rev`` in ``repo``; the commit must be present locally (builds are offline)."""
    try:
        return repo.commit(rev).hexsha
    except (git.BadName, git.BadObject, ValueError):
        raise UserError(
            f"{what}: commit {rev} is not in the clone {repo.working_dir or repo.git_dir} "
            "(fetch it there first: builds never fetch sources)"
        ) from None


def triton_from_pytorch(repo: git.Repo, pytorch_commit: str, platform: str) -> TritonPin:
    """Read the Triton pin at ``pytorch_commit``; a one-line error lists every file probed."""
    tree = repo.commit(pytorch_commit).tree
    for path in pin_candidates(platform):
        try:
            blob = tree / path
        except KeyError:
            continue
        text = blob.data_stream.read().decode("utf-8", "replace").strip()
        if not _SHA_RE.fullmatch(text):
            raise UserError(
                f"triton pin: {path} at PyTorch {pytorch_commit[:12]} holds {text[:60]!r}, not a 40-hex commit"
            )
        return TritonPin(commit=text, source=path)
    probed = ", ".join(pin_candidates(platform))
    raise UserError(
        f"triton pin: PyTorch {pytorch_commit[:12]} has no Triton pin file (probed {probed}); "
        "set triton.commit in the recipe"
    )


def triton_pin(recipe_commit: str, pytorch_repo: git.Repo, pytorch_commit: str, platform: str) -> TritonPin:
    """The Triton commit to build: the recipe's explicit commit, or the one PyTorch pins."""
    if _SHA_RE.fullmatch(recipe_commit):
        return TritonPin(commit=recipe_commit, source=OVERRIDE)
    return triton_from_pytorch(pytorch_repo, pytorch_commit, platform)


def only_moves_triton_pin(repo: git.Repo, base: str, pr: str, platform: str) -> str | None:
    """The pin file a PyTorch PR (``base``..``pr``) moves when that is all it changes (``_PIN_BUMP_EXTRA``
    aside) and the Triton commit the platform's build reads differs; else None (a PR of PyTorch)."""
    candidates = pin_candidates(platform)
    changed = {path for d in repo.commit(base).diff(pr) for path in (d.a_path, d.b_path) if path}
    if not changed or not changed <= {*candidates, *_PIN_BUMP_EXTRA}:
        return None
    before, after = triton_from_pytorch(repo, base, platform), triton_from_pytorch(repo, pr, platform)
    return after.source if before.commit != after.commit else None


def llvm_pin(repo: git.Repo, commit: str) -> str | None:
    """The LLVM commit the Triton tree at ``commit`` pins, or None for a tree that pins none in a known file."""
    tree = repo.commit(commit).tree
    for path in _LLVM_FILES:
        try:
            text = (tree / path).data_stream.read().decode("utf-8", "replace").strip()
        except KeyError:
            continue
        if path.endswith(".json"):
            try:
                text = str(json.loads(text).get("llvm_hash", ""))
            except (ValueError, AttributeError):
                raise UserError(f"triton {commit[:12]}: {path} is not a JSON object with llvm_hash") from None
        if not re.fullmatch(r"[0-9a-f]{8,40}", text):
            raise UserError(f"triton {commit[:12]}: {path} holds {text[:60]!r}, not an LLVM commit")
        return text
    return None
