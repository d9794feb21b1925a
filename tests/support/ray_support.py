"""Ray for the tests: `NEEDS_RAY`, and the one-machine cluster with fake GPUs (`local_cluster`,
`two_node_cluster`, `Cluster`) of ``benchmarks/local_ray_cluster.py``, which ``benchmarks/scale.py`` starts too (a
benchmark never imports the tests)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from local_ray_cluster import Cluster, local_cluster, two_node_cluster

__all__ = ["NEEDS_RAY", "Cluster", "local_cluster", "two_node_cluster"]

# Skips a module without the ray extra. It looks for the package without importing it: importing Ray costs each
# pytest process about half a second when it collects the module, also in the tiers that deselect its tests.
NEEDS_RAY = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="needs the ray extra (pip install -e '.[ray]')")
