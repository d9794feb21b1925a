"""The HF configs PyTorch's harness loads by Hub id, written without the Hub (for ``stages.upstream_suite``).

``benchmarks/dynamo/huggingface.py`` calls ``AutoConfig.from_pretrained("<hub id>")`` for its extra models while
it is imported (t5-small, distilgpt2, allenai/longformer-base-4096, google/fnet-base and
YituTech/conv-bert-base in the trees we know), so every harness command, whatever model it runs, needs those
configs. No Hub is reachable here, and a run must not depend on what the Hub serves today, so each config is
written from the environment's own ``transformers`` config class (its defaults, plus the architecture numbers
where the named checkpoint differs from them) into the Hub cache layout that ``from_pretrained`` reads with
``HF_HUB_OFFLINE=1``:

    <hf_home>/hub/models--<org>--<name>/snapshots/<rev>/config.json
    <hf_home>/hub/models--<org>--<name>/refs/main            holds <rev>: the sha1 of that config.json

The harness builds every model with random weights, so a config is all it needs. The names come from the tree's
own harness (read with ``ast``, never imported): a harness that loads a name this module cannot write is
reported by `prepare_offline_hub`, and the harness then fails on that name as it would on any machine offline.
"""

from __future__ import annotations

import ast
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation import atomic_io
from foundation.formats.hf_entries import BY_NAME, HARNESS_CONFIG_IDS
from stages.suite import hub_offline

# Hub id → (the config's model_type, what the checkpoint sets differently from that config class's defaults):
# the suite entries' own published numbers (foundation.formats.hf_entries), so the harness and the builtin suite
# build the same architectures. Only numbers that shape the model: the harness feeds Longformer 1024-token inputs
# (its checkpoint has 4098 positions, the class default 512) and DistilGPT2 is GPT-2 with 6 layers; the others
# are their class defaults.
HUB_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    hub_id: (BY_NAME[name].family, dict(BY_NAME[name].published)) for hub_id, name in HARNESS_CONFIG_IDS.items()
}
# Variables through which an older transformers picks another cache than HF_HUB_CACHE; none may win over ours.
_OTHER_CACHE_VARS = ("TRANSFORMERS_CACHE", "PYTORCH_TRANSFORMERS_CACHE", "PYTORCH_PRETRAINED_BERT_CACHE")


@dataclass(frozen=True)
class OfflineHub:
    """What `prepare_offline_hub` did: the configs written, the names it cannot write, and where they are."""

    hf_home: Path
    written: tuple[str, ...]
    unknown: tuple[str, ...]
    transformers_version: str


def loaded_names(script: Path) -> list[str]:
    """The Hub ids ``script`` passes to ``AutoConfig.from_pretrained`` as a string literal, in order."""
    tree = ast.parse(script.read_text(encoding="utf-8"), filename=str(script))
    names: list[str] = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "from_pretrained" and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "AutoConfig" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.append(node.args[0].value)
    return list(dict.fromkeys(names))


def repo_folder(hub_cache: Path, hub_id: str) -> Path:
    """The Hub cache's folder of one model repository (``models--org--name``)."""
    return hub_cache / ("models--" + hub_id.replace("/", "--"))


def write_config(hub_cache: Path, hub_id: str) -> None:
    """One known Hub id's config.json into the Hub cache layout (see the module docstring)."""
    from transformers import AutoConfig

    model_type, overrides = HUB_CONFIGS[hub_id]
    text = AutoConfig.for_model(model_type, **overrides).to_json_string()
    revision = hashlib.sha1(text.encode("utf-8")).hexdigest()  # a name, 40 hex digits as the Hub's commit ids
    folder = repo_folder(hub_cache, hub_id)
    atomic_io.write_text(folder / "snapshots" / revision / "config.json", text)
    atomic_io.write_text(folder / "refs" / "main", revision)


def prepare_offline_hub(hf_home: Path, harness: Path) -> OfflineHub | None:
    """Write the configs ``harness`` loads into ``hf_home`` and point this process's environment (inherited by
    the harness) at it, offline. None when the harness loads no config by Hub id (transformers not imported)."""
    names = loaded_names(harness)
    if not names:
        return None
    hub_cache = hf_home / "hub"
    hub_offline()
    os.environ.update(HF_HOME=str(hf_home), HF_HUB_CACHE=str(hub_cache))
    for variable in _OTHER_CACHE_VARS:
        os.environ.pop(variable, None)
    import transformers

    known = [name for name in names if name in HUB_CONFIGS]
    for name in known:
        write_config(hub_cache, name)
    return OfflineHub(hf_home, tuple(known), tuple(n for n in names if n not in HUB_CONFIGS),
                      transformers.__version__)
