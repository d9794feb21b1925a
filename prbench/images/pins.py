"""Which Triton commit belongs to a PyTorch commit: read PyTorch's own pin file at that commit.

PyTorch records the Triton commit its CI builds against in a pin file whose name and folder drifted over
the years (``triton.txt`` unified CUDA and ROCm in 2.5; older trees have ``triton-rocm.txt``, and some keep
the pins under ``.github/``). The file is read from the git objects of the exact commit (never from a
working tree, which hipify leaves dirty), and the lock records which file it came from. A ``--triton-ref`` given
to ``invoke build``, ``compare`` or ``bisect`` replaces both the recipe's commit and the pin (`TRITON_REF`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import git

from analysis.errors import UserError

_SHA_RE = re.compile(r"[0-9a-f]{40}")  # fullmatch: "$" would let a trailing newline through

# Probed in order. ROCm trees before PyTorch 2.5 pinned Triton in triton-rocm.txt; from 2.5 on triton.txt
# holds the one commit for both platforms, so it is preferred even for ROCm when both exist.
_PIN_DIRS = (".ci/docker/ci_commit_pins", ".github/ci_commit_pins")
_PIN_NAMES = {
    "rocm": ("triton.txt", "triton-rocm.txt"),
    "cuda": ("triton.txt",),
    "cpu": ("triton.txt",),
}

OVERRIDE = "recipe"
TRITON_REF = "--triton-ref"  # the user named the Triton commit on the command line


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
        if self.source == TRITON_REF:
            return "--triton-ref"
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
