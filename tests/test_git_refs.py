"""Git refs: the user names PyTorch commits by branch, tag or short SHA; prbench pins full SHAs and diffs them."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
from pathlib import Path

import pytest

from foundation.errors import UserError
from prbench.sides import pins
from prbench.sides.overlay import PythonOverlay

CONFIG = "torch/_inductor/config.py"
BASE_CONFIG = "import os\n\n# fusion heuristics\nmax_fusion_size = 64\nepilogue_fusion = True\n"
PR_CONFIG = BASE_CONFIG.replace("max_fusion_size = 64", "max_fusion_size = 1")


class Repo:
    """A small PyTorch-like repository made with the git CLI."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {
            **os.environ, "GIT_CEILING_DIRECTORIES": str(root.parent), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.com",
            "GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.com",
        }

    def git(self, *args: str, stdin: str | None = None) -> str:
        return subprocess.run(["git", "-C", str(self.root), *args], input=stdin, check=True, capture_output=True,
                              text=True, env=self.env).stdout.strip()

    def commit(self, files: dict[str, str], message: str) -> str:
        for rel, text in files.items():
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_text(text)
        self.git("add", "-A")
        self.git("commit", "-qm", message)
        return self.git("rev-parse", "HEAD")


@pytest.fixture
def src(tmp_path: Path) -> tuple[Repo, dict[str, str]]:
    """main: base → docs; branch pr (from base): the Inductor change; annotated tag v2.9.0 on base."""
    repo = Repo(tmp_path / "pytorch")
    repo.root.mkdir()
    repo.git("init", "-q", "-b", "main")
    shas = {"base": repo.commit({CONFIG: BASE_CONFIG, "README.md": "PyTorch\n"}, "base")}
    repo.git("tag", "-a", "v2.9.0", "-m", "release")
    shas["docs"] = repo.commit({"README.md": "PyTorch, faster\n"}, "docs")
    repo.git("checkout", "-q", "-b", "pr", shas["base"])
    shas["pr"] = repo.commit({CONFIG: PR_CONFIG}, "inductor: never fuse")
    return repo, shas


def test_branch_tag_and_short_sha_resolve_to_full_shas(src) -> None:
    repo, shas = src
    r = pins.open_repo(repo.root)

    assert pins.resolve(r, "main", "--base") == shas["docs"]
    assert pins.resolve(r, "pr", "--pr") == shas["pr"]
    assert pins.resolve(r, "v2.9.0", "--base") == shas["base"]  # the commit, not the annotated tag object
    assert pins.resolve(r, shas["pr"][:7], "--pr") == shas["pr"]
    assert pins.resolve(r, "pr~1", "--base") == shas["base"]


@pytest.mark.parametrize("ref", ["no-such-branch", "0000000", "--all", "main..pr"])
def test_an_unknown_ref_is_a_user_error_naming_the_flag(src, ref: str) -> None:
    repo, _ = src

    with pytest.raises(UserError) as info:
        pins.resolve(pins.open_repo(repo.root), ref, "--base")

    message = str(info.value)
    assert message == f"--base={ref}: unknown ref in {repo.root}"


def test_an_ambiguous_short_sha_is_a_user_error_saying_so(src) -> None:
    repo, _shas = src
    prefix = add_two_commits_sharing_a_prefix(repo, length=4)

    with pytest.raises(UserError) as info:
        pins.resolve(pins.open_repo(repo.root), prefix, "--pr")

    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"--pr={prefix}: ambiguous")
    assert "more characters" in message


def test_merge_base_of_a_pr_branch_is_where_it_forked(src) -> None:
    repo, shas = src
    r = pins.open_repo(repo.root)

    assert pins.merge_base(r, "main", "pr") == shas["base"]


def test_merge_base_of_unrelated_histories_is_none(src) -> None:
    repo, _ = src
    repo.git("checkout", "-q", "--orphan", "island")
    lonely = repo.commit({"other.py": "x = 1\n"}, "unrelated")

    assert pins.merge_base(pins.open_repo(repo.root), "main", lonely) is None


def test_the_diff_between_two_refs_is_a_python_overlay_that_applies(src, tmp_path: Path) -> None:
    repo, shas = src
    r = pins.open_repo(repo.root)
    base = pins.merge_base(r, "main", "pr")
    # The "installed" torch package is the base commit's.
    installed = tmp_path / "site-packages" / "torch"
    (installed / "_inductor").mkdir(parents=True)
    (installed / "_inductor" / "config.py").write_text(BASE_CONFIG)

    text = pins.diff(r, base, shas["pr"])
    overlay = PythonOverlay.from_text(text, origin=f"{base[:12]}..{shas['pr'][:12]}", flag="--pr")
    shadow = overlay.materialize(tmp_path / "overlay", installed)

    assert text.startswith(f"diff --git a/{CONFIG} b/{CONFIG}\n") and text.endswith("\n")
    assert [f.path for f in overlay.files] == [CONFIG]
    assert (shadow / CONFIG).read_text() == PR_CONFIG
    assert (installed / "_inductor" / "config.py").read_text() == BASE_CONFIG


def test_open_repo_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=f"^--pytorch-src {tmp_path / 'nope'}: no such directory$"):
        pins.open_repo(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    with pytest.raises(UserError, match=f"^--pytorch-src {tmp_path / 'plain'}: not a git repository$"):
        pins.open_repo(tmp_path / "plain")


def add_two_commits_sharing_a_prefix(repo: Repo, length: int) -> str:
    """Write two commit objects whose SHAs start with the same ``length`` hex digits; return that prefix.

    The hashes are computed here (a birthday search, a few hundred candidates) and only the pair is written.
    """
    tree = repo.git("rev-parse", "HEAD^{tree}")
    seen: dict[str, str] = {}
    for i in itertools.count():
        body = (f"tree {tree}\nauthor dev <dev@example.com> 0 +0000\ncommitter dev <dev@example.com> 0 +0000\n"
                f"\ncandidate {i}\n")
        sha = hashlib.sha1(f"commit {len(body)}\0{body}".encode()).hexdigest()
        prefix = sha[:length]
        if prefix in seen:
            for text in (seen[prefix], body):
                written = repo.git("hash-object", "-t", "commit", "-w", "--stdin", stdin=text)
                assert written.startswith(prefix)
            return prefix
        seen[prefix] = body
    raise AssertionError("unreachable")
