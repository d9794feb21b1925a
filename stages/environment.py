"""What every stage that compiles or runs compiled code does first inside its environment: apply the variant's
Inductor config overrides (organize, which only reads files, and the upstream launcher do not)."""

from __future__ import annotations

import json
import os
from typing import Any

from analysis.errors import UserError

INDUCTOR_CONFIG_ENV = "PRBENCH_INDUCTOR_CONFIG"


def inductor_overrides() -> dict[str, Any]:
    raw = os.environ.get(INDUCTOR_CONFIG_ENV, "")
    return json.loads(raw) if raw else {}


def apply_inductor_config(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Set ``torch._inductor.config`` entries (dotted names such as ``cpp.simdlen``); return what was set."""
    overrides = inductor_overrides() if overrides is None else overrides
    if not overrides:
        return overrides  # nothing to set: torch is not imported for it
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
