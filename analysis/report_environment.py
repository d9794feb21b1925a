"""The environment tables of the report: both sides' ``env.json`` side by side, and what ``lock.json`` pins."""

from __future__ import annotations

from typing import Any

import pandas as pd

_ENV_PRIORITY = ("commit", "sha", "ref", "digest", "image", "device", "gpu", "cpu", "rocm", "hip", "cuda", "torch",
                 "triton", "driver", "python", "platform", "recipe", "overlay")


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts → dotted keys; lists and scalars become short strings."""
    out: dict[str, str] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(data, list) and all(not isinstance(v, (dict, list)) for v in data):
        out[prefix] = ", ".join(str(v) for v in data)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out.update(flatten(value, f"{prefix}[{i}]"))
    else:
        out[prefix] = "" if data is None else str(data)
    return out


def environment_table(base_env: dict[str, Any], pr_env: dict[str, Any]) -> pd.DataFrame:
    """One row per setting of either side; identity-bearing keys (commits, digests, device, versions) first."""
    base, pr = flatten(base_env), flatten(pr_env)
    keys = list(dict.fromkeys([*base, *pr]))

    def rank(key: str) -> tuple[int, str]:
        low = key.lower()
        hits = [i for i, word in enumerate(_ENV_PRIORITY) if word in low]
        return (min(hits) if hits else len(_ENV_PRIORITY), key)

    rows = [{"setting": k, "base": base.get(k, "–"), "pr": pr.get(k, "–"), "same": _sameness(base.get(k), pr.get(k))}
            for k in sorted(keys, key=rank) if k != "name"]
    return pd.DataFrame(rows, columns=["setting", "base", "pr", "same"])


def _sameness(base: str | None, pr: str | None) -> str:
    if base == pr:
        return "✓"
    # Caches and temp dirs live in each side's own directory of the run: the same setting, not a difference.
    if base and pr and base.replace("/base/", "/pr/") == pr:
        return "✓ (own directory)"
    return "**differs**"


def lock_identity(lock: dict[str, Any]) -> pd.DataFrame:
    """The lock entries that identify an environment (commits, digests, versions), most telling first."""
    rows = [(k, v) for k, v in flatten(lock).items() if any(word in k.lower() for word in _ENV_PRIORITY)]
    return pd.DataFrame(rows, columns=["key", "value"])

