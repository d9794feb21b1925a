"""PyTorch git refs (GitPython): resolve a ref to a full SHA, find merge-bases, diff two refs."""

from __future__ import annotations

from pathlib import Path

import git

from foundation.errors import UserError


def open_repo(path: Path, flag: str = "--pytorch-src") -> git.Repo:
    try:
        return git.Repo(path)
    except git.NoSuchPathError:
        raise UserError(f"{flag} {path}: no such directory") from None
    except git.InvalidGitRepositoryError:
        raise UserError(f"{flag} {path}: not a git repository") from None


def resolve(repo: git.Repo, ref: str, flag: str) -> str:
    """Full 40-hex SHA of ``ref``; unknown and ambiguous refs are user errors naming the flag."""
    try:
        return repo.git.rev_parse("--verify", "--end-of-options", f"{ref}^{{commit}}")
    except git.GitCommandError as exc:
        if "ambiguous" in exc.stderr:
            raise UserError(f"{flag}={ref}: ambiguous in {repo.working_dir}; give more characters of the SHA") from None
        raise UserError(f"{flag}={ref}: unknown ref in {repo.working_dir}") from None


def merge_base(repo: git.Repo, a: str, b: str) -> str | None:
    bases = repo.merge_base(a, b)
    return bases[0].hexsha if bases else None


def diff(repo: git.Repo, base: str, pr: str) -> str:
    """The unified diff from ``base`` to ``pr`` (full index lines, no colour, no renames folded)."""
    return repo.git.diff(base, pr, "--no-color", "--no-renames", "--full-index", "--no-ext-diff") + "\n"
