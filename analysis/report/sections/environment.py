"""The environment tables of the report: both sides' ``env.json`` side by side, and what ``lock.json`` pins."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.rendering import md_text

_ENV_PRIORITY = ("commit", "sha", "ref", "digest", "image", "ran on", "device", "gpu", "cpu", "rocm", "hip", "cuda",
                 "torch", "triton", "driver", "python", "platform", "recipe", "overlay")


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


def lock_summary(lock: Any) -> dict[str, str]:
    """The entries of one side's lock that say which environment ran: for an image its tag and id, the base
    digest, the PyTorch/Triton commits or wheel pins with their sha256, torch's own git commit, and how many
    wheels the image installed from the store; for a venv its directory, Python and Triton; for the local runner the
    torch it imported."""
    if not isinstance(lock, dict):
        return {}
    flat = flatten(lock)
    picks = {
        "image": "provenance.image.tag", "image id": "provenance.image.id", "base image": "base.name",
        "base digest": "base.digest", "torch commit": "sources.pytorch.commit", "torch wheel": "sources.pytorch.wheel",
        "torch wheel sha256": "sources.pytorch.sha256", "triton commit": "sources.triton.commit",
        "triton's llvm": "sources.triton.llvm",
        "triton wheel": "sources.triton.wheel", "triton wheel sha256": "sources.triton.sha256",
        "torch git (read in the image)": "contents.versions.torch_git", "torch version": "contents.pip.torch",
        "torch (local)": "environment.torch", "torch git (local)": "environment.torch_git",
        "venv": "provenance.venv.path", "venv python": "base.python", "triton version": "contents.pip.triton",
    }
    out = {label: flat[key] for label, key in picks.items() if flat.get(key)}
    wheels = [e for e in lock.get("store") or [] if isinstance(e, dict) and e.get("kind") == "wheel"]
    if wheels:  # each one's sha256 is in the lock table and report.xlsx; here, how many
        out["wheels installed from the store"] = f"{len(wheels)} (sha256 of each in lock.json)"
    return out


def placements(nodes: Any) -> dict[str, str]:
    """Where the timing rounds ran (the lock's ``nodes``, written by ``prbench.compare.round_sharding.node_summary``):
    ``{node: "GPU 0, GPU 1 (12 shards)"}``. Both sides of every shard ran on the same device, so this is one
    value for both."""
    if not isinstance(nodes, dict):
        return {}
    out = {}
    for node, entry in nodes.items():
        if isinstance(entry, dict):
            devices = ", ".join(str(d) for d in entry.get("devices") or [])
            out[str(node)] = f"{devices} ({entry.get('shards', 0)} shards)"
    return out


def with_lock_summaries(base_env: dict[str, Any], pr_env: dict[str, Any],
                        lock: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both sides' env.json with their lock's identity entries under ``lock`` and the nodes and devices the rounds
    ran on under ``ran on``, for the environment table."""
    sides = []
    ran_on = placements(lock.get("nodes")) if isinstance(lock, dict) else {}
    for name, env in (("base", base_env), ("pr", pr_env)):
        summary = lock_summary(lock.get(name)) if isinstance(lock, dict) else {}
        side = {**env, "lock": summary} if summary else dict(env)
        if ran_on:
            side["ran on"] = ran_on
        sides.append(side)
    return sides[0], sides[1]


def lock_identity(lock: dict[str, Any]) -> pd.DataFrame:
    """The lock entries that identify an environment (commits, digests, versions), most telling first."""
    rows = [(k, v) for k, v in flatten(lock).items() if any(word in k.lower() for word in _ENV_PRIORITY)]
    return pd.DataFrame(rows, columns=["key", "value"])



def _first(flat: dict[str, str], *suffixes: str) -> str:
    """The first non-empty value whose dotted key ends with one of ``suffixes`` (in that order)."""
    for suffix in suffixes:
        for key, value in flat.items():
            if (key == suffix or key.endswith("." + suffix)) and value and value != "None":
                return value
    return ""


def _run_minutes(manifest: dict[str, Any]) -> str:
    """From the run's creation to its last finished stage."""
    import datetime as dt

    stages = manifest.get("stages")
    if not isinstance(stages, dict):
        return ""
    ends = [s.get("finished") for s in stages.values() if isinstance(s, dict) and s.get("finished")]
    try:
        start = dt.datetime.fromisoformat(str(manifest["created"]))
        end = max(dt.datetime.fromisoformat(str(e)) for e in ends)
    except (KeyError, ValueError, TypeError):
        return ""
    return f"{(end - start).total_seconds() / 60:.0f} min"


def environment_line(base_env: dict[str, Any], lock: dict[str, Any], manifest: dict[str, Any]) -> str:
    """The environment in one line, what a reader needs to place the numbers: the CPU model and its vector
    instruction set (or the GPU), cores, device, load when the run was planned, run time, model sizes, torch and
    Triton (base's side, then ``→ PR's`` where the PR's lock names another: a release A/B compares two torch
    versions); a fact the run did not record says so."""
    flat = flatten({"lock": lock.get("base") if isinstance(lock, dict) else {}, "env": base_env})
    pr_flat = flatten({"lock": lock.get("pr") if isinstance(lock, dict) else {}})
    suite = ((manifest.get("settings") or {}).get("suite") or {}) if isinstance(manifest, dict) else {}
    gpu = _first(flat, "gpu", "gpus")
    cpu = _first(flat, "cpu") or "CPU not recorded"
    isa = _first(flat, "vector_isa") or "vector ISA not recorded"
    cores = _first(flat, "cores")
    load = _first(flat, "load_1min")
    parts = [gpu if gpu else f"{cpu}, {isa}", f"{cores} cores" if cores else "cores not recorded",
             f"device {suite.get('device') or _first(flat, 'device') or '–'}",
             f"load {load} (1-min average at the start)" if load else "load not recorded"]
    minutes = _run_minutes(manifest)
    if minutes:
        parts.append(f"run {minutes}")
    if suite:
        parts.append(f"models {suite.get('models', '–')} (size {suite.get('size', '–')}, {suite.get('dtype', '–')} "
                     f"{suite.get('mode', '–')})")
    for label, keys in (("torch", ("torch", "torch version")), ("Triton", ("triton",))):
        base, pr = _first(flat, *keys) or "–", _first(pr_flat, *keys)
        parts.append(f"{label} {base} → {pr}" if pr and pr != base else f"{label} {base}")
    return "**Environment:** " + md_text(", ".join(parts)) + "."  # values read from files: text, never markup
