"""The sources a side builds from: the local clones, the commits resolved in them, and the Triton commit that
belongs to a PyTorch commit, read from PyTorch's own pin file at that commit.

Git refs (GitPython): `open_repo` opens a clone (one line naming the flag when it is none), `resolve` turns a ref
into a full SHA (unknown and ambiguous refs name the flag), `merge_base` and `diff` compare two refs.

A recipe built from source needs a local PyTorch and Triton clone (`clone_path`: ``--pytorch-src``/``--triton-src``,
else the recipe's source when it is a directory); builds never fetch, so every commit must be in its clone
(`resolve_commit`). `check_source_flags` checks the clones and the Triton flags at a building task's door;
`source_trees` turns a recipe (and a side's refs) into the two `SourceTree` a build plan renders, with the layout facts
read from the commits' git objects.

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
from prbench.sides.recipes import Recipe

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


@dataclass(frozen=True)
class SourceTree:
    """One source tree to build: a local clone, the exact commit, and the layout facts the template needs."""

    name: str  # "pytorch" or "triton"
    clone: Path | None  # None on a rebuild from the store alone (the archive is in the lock)
    commit: str
    install_dir: str = "."  # where `pip install -e` runs ("python" for Triton <= 3.3)
    requirements: tuple[str, ...] = ()  # requirement files whose wheels the build installs from the wheelhouse
    llvm: str | None = None  # Triton: the LLVM commit the tree pins (`llvm_pin`), when it pins one


def pin_candidates(platform: str) -> list[str]:
    names = _PIN_NAMES.get(platform, ("triton.txt",))
    return [f"{folder}/{name}" for name in names for folder in _PIN_DIRS]


def resolve_commit(repo: git.Repo, rev: str, what: str) -> str:
    """A full 40-hex SHA for ``rev`` in ``repo``; the commit must be present locally (builds are offline)."""
    try:
        return repo.commit(rev).hexsha
    except (git.BadName, git.BadObject, ValueError):
        raise UserError(
            f"{what}: commit {rev} is not in the clone {repo.working_dir or repo.git_dir} "
            "(fetch it there first: builds never fetch sources)"
        ) from None


def clone_path(recipe: Recipe, key: str, explicit: Path | None) -> Path:
    """The local clone of ``key`` (pytorch or triton): the ``--<key>-src`` flag, else the recipe's source when it
    is a directory; else one line naming the flag, where the recipe builds from, and how to get a clone."""
    if explicit is not None:
        return explicit
    pin = getattr(recipe, key)
    source = pin.source
    candidate = Path(source) if Path(source).is_absolute() else recipe.path.parent / source
    if "://" not in source and candidate.is_dir():
        return candidate
    if key == "pytorch":
        what = f"PyTorch from {source}"
    else:
        what = f"Triton from {source} " + ("at the PyTorch pin" if pin.from_pytorch_pin else f"at {pin.commit[:12]}")
    remote = "://" in source or source.startswith("git@")
    how = f"git clone {source}" if remote else f"{candidate} is not a directory here"
    raise UserError(f"--{key}-src: recipe {recipe.name} builds {what}; give a local clone of it "
                    f"({how}; builds never fetch sources)")


def check_triton_flags(recipe: Recipe, triton_src: Path | None, triton_ref: str | None, triton_pr: str | None,
                       triton_base: str | None) -> bool:
    """The Triton flags together, nothing read (one line naming the flag): none where the recipe builds no Triton
    but a local recipe's --triton-pr patch file (an overlay on the installed Triton), --triton-base only with
    --triton-pr, --triton-ref not with it. True when the recipe builds from source."""
    flags = (("--triton-src", triton_src), ("--triton-ref", triton_ref), ("--triton-pr", triton_pr),
             ("--triton-base", triton_base))
    if recipe.runner == "local" and triton_pr is not None:
        if not Path(triton_pr).is_file():
            raise UserError(f"--triton-pr {triton_pr}: recipe {recipe.name} runs the installed torch and Triton; "
                            "there a Triton A/B takes a Python-only patch file on the installed Triton (a Triton "
                            "commit needs a docker recipe that builds from source)")
        given = [flag for flag, value in flags if value is not None and flag != "--triton-pr"]
        if given:
            raise UserError(f"{given[0]}: recipe {recipe.name} runs the installed Triton, the base of its Triton A/B "
                            f"(leave {given[0]} out)")
        return False
    if not recipe.is_docker or recipe.is_wheel or recipe.pytorch is None or recipe.triton is None:
        what = "installs wheels" if recipe.is_docker else "runs an installed torch"
        for flag, value in flags:
            if value is not None:
                raise UserError(f"{flag}: recipe {recipe.name} {what}; it builds no Triton (leave {flag} out, or "
                                "give a docker recipe that builds from source)")
        return False
    if triton_base is not None and triton_pr is None:
        raise UserError("--triton-base: a Triton A/B also needs --triton-pr (the PR side's Triton commit)")
    if triton_pr is not None and triton_ref is not None:
        raise UserError("--triton-ref: builds one Triton on both sides; a Triton A/B (--triton-pr) names each "
                        "side's (--triton-base, default the pinned one): leave --triton-ref out")
    return True


def check_one_pytorch(base: str | None, pr: str | None, triton_pr: str | None) -> None:
    """A Triton A/B (``triton_pr``) keeps PyTorch the same on both sides: ``--pr``, when given, is ``--base``'s
    (``installed`` when ``--base`` is not given)."""
    if triton_pr is not None and pr is not None and pr != (base or "installed"):
        raise UserError(f"--pr {pr}: a Triton A/B (--triton-pr) keeps PyTorch the same on both sides; leave --pr "
                        "out (or give the --base commit), and compare PyTorch changes in a run of their own")


def check_source_flags(recipe: Recipe, pytorch_src: Path | None, triton_src: Path | None,
                       triton_ref: str | None, triton_pr: str | None = None,
                       triton_base: str | None = None) -> tuple[Path, Path] | None:
    """At the door of a task that builds (compare, bisect): Triton flags where the recipe builds no Triton are
    refused, and a recipe that builds from source needs both clones, given or local in the recipe, and
    ``--triton-ref`` (or a Triton A/B's ``--triton-base``/``--triton-pr``) in the Triton clone (one line naming
    the flag otherwise); returns the clones (None: nothing is built from source)."""
    if not check_triton_flags(recipe, triton_src, triton_ref, triton_pr, triton_base):
        return None
    assert recipe.triton is not None, "a recipe built from source names its Triton"
    if triton_pr is not None and triton_src is None:
        try:
            clone_path(recipe, "triton", None)
        except UserError:
            raise UserError(f"--triton-pr: a Triton A/B builds both Triton commits from a local clone; give it "
                            f"with --triton-src (recipe {recipe.name} builds Triton from "
                            f"{recipe.triton.source})") from None
    clones = (clone_path(recipe, "pytorch", pytorch_src), clone_path(recipe, "triton", triton_src))
    open_repo(clones[0], "--pytorch-src")
    triton = open_repo(clones[1], "--triton-src")
    for flag, value in (("--triton-ref", triton_ref), ("--triton-pr", triton_pr), ("--triton-base", triton_base)):
        if value is not None and not (flag == "--triton-pr" and Path(value).is_file()):  # a patch: checked when
            resolve_commit(triton, value, flag)  # the base's Triton commit is known (variant_plan)
    return clones


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


def triton_source(recipe: Recipe, pytorch_repo: git.Repo, pytorch_commit: str, triton_src: Path | None,
                  triton_ref: str | None = None, pin: TritonPin | None = None) -> tuple[git.Repo, TritonPin]:
    """The Triton clone and the Triton commit built with PyTorch ``pytorch_commit``: ``pin`` when given (a lock's,
    or one resolved before), else ``--triton-ref`` resolved in the clone, else the recipe's commit or the one
    PyTorch pins at that commit. The commit must be in the clone (builds never fetch): else one line naming
    ``--triton-src``, the commit, where it came from, and the command that fetches it."""
    assert recipe.triton is not None
    repo = open_repo(clone_path(recipe, "triton", triton_src), "--triton-src")
    if pin is None and triton_ref is not None:
        return repo, TritonPin(resolve_commit(repo, triton_ref, "--triton-ref"), TRITON_REF)
    chosen = pin or triton_pin(recipe.triton.commit, pytorch_repo, pytorch_commit, recipe.platform)
    try:
        commit = repo.commit(chosen.commit).hexsha
    except (git.BadName, git.BadObject, ValueError):
        other = "" if pin is not None else ", or build another commit with --triton-ref"
        raise UserError(
            f"--triton-src: Triton commit {chosen.commit} ({chosen.origin(pytorch_commit)}) is not in the clone "
            f"{repo.working_dir}; fetch it there (git -C {repo.working_dir} fetch origin {chosen.commit}){other}"
        ) from None
    return repo, TritonPin(commit, chosen.source)


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


def source_trees(
    recipe: Recipe, pytorch_src: Path | None, triton_src: Path | None, pytorch_ref: str | None,
    triton_ref: str | None, pin: TritonPin | None, merge_base: str | None,
) -> tuple[SourceTree, SourceTree, TritonPin, str | None]:
    """The PyTorch and Triton trees of a source recipe, their commits resolved in local clones."""
    assert recipe.pytorch is not None and recipe.triton is not None
    pt_repo = open_repo(clone_path(recipe, "pytorch", pytorch_src), "--pytorch-src")
    pt_commit = resolve_commit(pt_repo, pytorch_ref or recipe.pytorch.commit, "--pytorch-ref")
    tr_repo, tp = triton_source(recipe, pt_repo, pt_commit, triton_src, triton_ref, pin)
    pytorch = SourceTree("pytorch", Path(pt_repo.working_dir), pt_commit,
                         requirements=_present(pt_repo, pt_commit, ["requirements.txt", "requirements-build.txt"]))
    if merge_base is not None:
        merge_base = resolve_commit(pt_repo, merge_base, "--merge-base")
    return pytorch, _triton_tree(tr_repo, tp.commit), tp, merge_base


def _present(repo: git.Repo, commit: str, paths: list[str]) -> tuple[str, ...]:
    tree = repo.commit(commit).tree
    found = []
    for path in paths:
        try:
            tree / path
            found.append(path)
        except KeyError:
            continue
    return tuple(found)


def _triton_tree(repo: git.Repo, commit: str) -> SourceTree:
    # Old trees build from python/ (python/setup.py), new ones from the root (setup.py or pyproject.toml).
    if _present(repo, commit, ["python/setup.py"]) and not _present(repo, commit, ["setup.py"]):
        install_dir = "python"
    elif _present(repo, commit, ["setup.py", "pyproject.toml"]):
        install_dir = "."
    else:
        raise UserError(f"triton source: commit {commit[:12]} has neither setup.py/pyproject.toml nor python/setup.py")
    requirements = _present(repo, commit, ["python/requirements.txt"])
    return SourceTree("triton", Path(repo.working_dir), commit, install_dir=install_dir, requirements=requirements,
                      llvm=llvm_pin(repo, commit))
