"""What every stage that compiles or runs compiled code does first inside its environment: apply the variant's
Inductor config overrides and point Inductor at the shared precompiled-header directory (organize, which only
reads files, and the upstream launcher do neither)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from analysis.errors import UserError
from analysis.formats.stage_records import HEADER_DIR_ENV, INDUCTOR_CONFIG_ENV


def inductor_overrides() -> dict[str, Any]:
    raw = os.environ.get(INDUCTOR_CONFIG_ENV, "")
    return json.loads(raw) if raw else {}


def prepare_inductor(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Share the precompiled headers (``$PRBENCH_INDUCTOR_HEADERS``), then set ``torch._inductor.config`` entries
    (dotted names such as ``cpp.simdlen``); return what was set. Neither imports torch when it has nothing to do."""
    if os.environ.get(HEADER_DIR_ENV):
        share_precompiled_headers()
    overrides = inductor_overrides() if overrides is None else overrides
    if not overrides:
        return overrides
    import torch._inductor.config as inductor_config

    for dotted, value in overrides.items():
        owner = inductor_config
        *parents, leaf = dotted.split(".")
        for part in parents:
            owner = getattr(owner, part)
        if not hasattr(owner, leaf):
            # A UserError, so the stage's entry wrapper makes it the stage's one "error:" line the host shows.
            raise UserError(f"inductor config: unknown key '{dotted}'")
        setattr(owner, leaf, value)
    return overrides


def share_precompiled_headers() -> None:
    """Move Inductor's directory of precompiled C++ headers to ``$PRBENCH_INDUCTOR_HEADERS``.

    The first C++ kernel a process compiles or loads needs a precompiled header (150 MB, about 6 s of g++), which
    Inductor keeps in a directory it derives from TMPDIR on import. Every side and every suite shard of a run has a
    TMPDIR of its own, so each built the same header again, and so did every new run. Inductor keys a header by
    compiler, flags and preprocessed text and builds it under a file lock in that directory, so stages may share
    one. Inductor has no setting for it: its module globals are set, where this torch has them; otherwise (and
    where the directory cannot be made) the header stays under TMPDIR."""
    codecache, shared = _codecache_with_header_dir(), os.environ.get(HEADER_DIR_ENV, "")
    if codecache is None or not shared:
        return
    try:
        os.makedirs(shared, exist_ok=True)
    except OSError:
        return
    codecache._HEADER_DIR = shared
    codecache._HEADER_LOCK_DIR = os.path.join(shared, "locks")


def lend_precompiled_headers(tmpdir: Path) -> None:
    """Let the Python processes this stage starts with ``TMPDIR=tmpdir`` (a compiled graph's ``-p`` run, which
    imports no stage code) find this process's precompiled headers (shared or not, after :func:`prepare_inductor`):
    Inductor there looks under ``<tmpdir>/torchinductor_<user>/precompiled_headers``, which becomes a link to them.
    The link lives in ``tmpdir``, which the stage owns and removes."""
    codecache = _codecache_with_header_dir()
    if codecache is None:
        return
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # another torch layout: each -p run builds its own, as before
        return
    ours = Path(codecache._HEADER_DIR)
    theirs = tmpdir / Path(default_cache_dir()).name / "precompiled_headers"
    with contextlib.suppress(OSError):  # no links on this file system: the same
        ours.mkdir(parents=True, exist_ok=True)
        theirs.parent.mkdir(parents=True, exist_ok=True)
        theirs.symlink_to(ours, target_is_directory=True)


def _codecache_with_header_dir() -> Any:
    """Inductor's code cache module where it keeps its header directory in module globals, else None."""
    try:
        from torch._inductor import codecache
    except ImportError:  # a torch without Inductor (the stand-in torch of the Docker tests)
        return None
    if not hasattr(codecache, "_HEADER_DIR") or not hasattr(codecache, "_HEADER_LOCK_DIR"):
        return None
    return codecache
