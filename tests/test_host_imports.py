"""The host never imports torch (or Ray unless asked): every ``invoke`` command would otherwise pay seconds before doing
anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOST_MODULES = ("prbench.compare.driver", "prbench.stages.suite", "prbench.stages.paired",
                "prbench.commands.publish", "prbench.commands.node_replay", "tasks")
HEAVY = ("torch", "transformers", "triton", "ray")  # ray: only with --executor ray


@pytest.mark.integration
def test_no_host_module_imports_torch() -> None:
    # A fresh interpreter: this test process may have imported torch for other tests already. The modules are
    # imported one after another and the heavy packages read after each, so the first one to bring them in is named.
    probe = (f"import importlib, json, sys\n"
             f"for module in {HOST_MODULES!r}:\n"
             f"    importlib.import_module(module)\n"
             f"    print(json.dumps([module, sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})]))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    imported = dict(json.loads(line) for line in done.stdout.strip().splitlines()[-len(HOST_MODULES):])
    assert imported == {module: [] for module in HOST_MODULES}


@pytest.mark.xdist_group("torch-in-process")  # torch in the test process: one worker imports it
def test_suite_options_match_the_model_specs() -> None:
    """Every torch-free name is one the stage can build: its family has a shrinking rule for every shrunken size
    and its class is one transformers exports."""
    pytest.importorskip("torch")
    import transformers

    from foundation.formats.suite_options import MODEL_NAMES, SIZES, TINY_DEFAULT
    from stages.support import hf_models

    assert set(hf_models.SCALES) == set(SIZES) - {"full"}
    for name in MODEL_NAMES:
        entry = hf_models.spec(name)
        assert entry.family in hf_models._SHRINK, name
        assert hasattr(transformers, entry.model_class), name
    assert set(TINY_DEFAULT) <= set(MODEL_NAMES)
