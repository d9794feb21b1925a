"""``invoke compare --executor ray`` on a local Ray cluster (two fake GPUs, the actors on the CPU): the same run
files and the same report (the same pairs, the same verdict logic) as the local pool, the shards spread over both
actors, and the nodes and devices listed in the report's environment table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.ray_support import local_cluster

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cpu-prefer-256bit-vectors.patch"
COMMON = ("--base=installed", f"--pr={EXAMPLE}", "--models", "ElectraForCausalLM", "--run", "r", "--iterations",
          "10", "--warmup", "3", "--kernel-iterations", "10", "--rounds", "3", "--passes", "2")

pytestmark = [pytest.mark.integration, pytest.mark.ray]
pytest.importorskip("ray")


def invoke(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=1800, env={**os.environ, **(env or {})})


def results(run: Path) -> dict[str, Any]:
    """What must not depend on the executor."""
    pairs = pd.read_csv(run / "report" / "kernels_compare.csv")
    files = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()
                   and p.parts[len(run.parts)] in ("base", "pr", "pair", "report")
                   and "work" not in p.parts and "logs" not in p.parts and "shards" not in p.parts)
    summary = json.loads((run / "report" / "summary.json").read_text())
    return {"pairs": sorted(zip(pairs["base_path"], pairs["pr_path"], strict=True)),
            "files": files,
            "samples": {side: sorted(json.loads((run / side / "kernel_samples.json").read_text()))
                        for side in ("base", "pr")},
            "summary": {key: sorted(summary[key]) if isinstance(summary[key], dict) else None for key in summary},
            "kernels": {key: summary["kernels"][key] for key in ("n", "rounds", "confidence")},
            "models": {key: summary["models"][key] for key in ("n", "rounds", "confidence")}}


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any], Path, str]:
    runs = tmp_path_factory.mktemp("runs")
    local = invoke("compare", *COMMON, "--runs-dir", str(runs))
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    on_local = results(runs / "r")
    with local_cluster(gpus=2) as address:
        # The same run again, its rounds redone on the cluster (the suite and the organized kernels are kept).
        ray = invoke("compare", *COMMON, "--runs-dir", str(runs), "--executor", "ray", "--ray-address", address,
                     "--shard-size", "2", "--force", "models", "--force", "kernels")
    assert ray.returncode == 0, ray.stdout[-3000:] + ray.stderr[-3000:]
    return on_local, results(runs / "r"), runs / "r", ray.stdout


def test_ray_writes_the_same_files_and_pairs_as_the_local_pool(both) -> None:
    on_local, on_ray, _, _ = both
    assert on_ray == on_local


def test_the_shards_spread_over_both_actors_and_the_report_lists_them(both) -> None:
    _, _, run, stdout = both
    # One model and one C++ graph: a shard per round, the rounds on both actors at once.
    shards = [s for r in (1, 2, 3) for s in json.loads((run / "pair" / "kernels" / f"round-00{r}.json").read_text())[
        "shards"]]
    assert len(shards) == 3 and len({tuple(s["cpus"]) for s in shards}) == 2
    nodes = json.loads((run / "lock.json").read_text())["nodes"]
    assert nodes and all(entry["facts"]["host"] for entry in nodes.values())
    report = (run / "report" / "report.md").read_text()
    assert "ran on." in report
    assert "ray executor" in stdout
