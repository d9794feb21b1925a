"""A stand-in PyTorch history for `invoke bisect`'s tests: a git repository whose first commit holds copies of
files of a torch package (the installed one, or a small fake of it), then one commit per entry of a list: a
comment appended to a file (a no-op), or a patch applied (a planted change). The first commit plays the
installed torch's commit (`installed_is`), so each later commit is the installed torch plus a Python overlay."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest

from prbench.compare import variant_plan
from prbench.compare.variant_plan import LocalEnvironment

NOOP = "noop"


def standin_history(root: Path, package: Path, files: list[str], commits: list[str | Path]) -> list[str]:
    """The repository at ``root``: ``torch/<file>`` copied from ``package`` for each of ``files``, then one
    commit per entry of ``commits`` (`NOOP`: a comment appended to the first file; a path: that patch applied,
    or, for a file name not ending in .patch, that file added, or with a leading ``-`` removed). The SHAs, first
    commit first."""
    repo = git.Repo.init(root)
    with repo.config_writer() as config:
        config.set_value("user", "name", "stand-in").set_value("user", "email", "stand-in@example.invalid")
    for rel in files:
        target = root / "torch" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((package / rel).read_bytes())
    repo.git.add("--all")
    shas = [repo.index.commit("the installed torch's files").hexsha]
    for number, change in enumerate(commits, start=1):
        if change == NOOP:
            first = root / "torch" / files[0]
            first.write_text(first.read_text() + f"# stand-in history: commit {number}\n")
            message = f"commit {number}: a comment"
        elif str(change).endswith(".patch"):
            subprocess.run(["git", "apply", str(change)], cwd=root, check=True)
            message = f"commit {number}: {Path(change).name}"
        elif str(change).startswith("-"):
            repo.git.rm(str(change)[1:])
            message = f"commit {number}: {str(change)[1:]} removed"
        else:
            added = root / str(change)
            added.parent.mkdir(parents=True, exist_ok=True)
            added.write_text("// compiled code\n")
            message = f"commit {number}: {change}"
        repo.git.add("--all")
        shas.append(repo.index.commit(message).hexsha)
    return shas


def installed_is(monkeypatch: pytest.MonkeyPatch, facts: dict[str, object], commit: str) -> None:
    """The interpreter's torch says it was built from ``commit`` (its other facts as given)."""
    monkeypatch.setattr(variant_plan, "describe_local_environment",
                        lambda python: LocalEnvironment({**facts, "torch_git": commit}))
