"""``invoke compare --executor ray`` on a local Ray cluster (two fake GPUs, the actors on the CPU): the same run
files and the same report (the same pairs, the same verdict logic) as the local pool, the shards spread over both
actors, and the nodes and devices listed in the report's environment table. The model rounds are redone on the
cluster; the kernel rounds on a cluster are tests/test_ray_node_loss.py's (the same files there too)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.electra_compare import ELECTRA_FLAGS, copy_run, executor_independent, invoke
from tests.support.ray_support import NEEDS_RAY, local_cluster

# The local pool's run is the session's ``electra_compare`` (tests/conftest.py), shared with test_compare_e2e.py:
# on one worker under ``pytest -n``, so that it runs once.
pytestmark = [pytest.mark.integration, pytest.mark.ray, pytest.mark.xdist_group("electra-compare"), NEEDS_RAY]


@pytest.fixture(scope="module")
def both(electra_compare, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any], Path, str]:
    local_run, local = electra_compare
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    run = copy_run(local_run, tmp_path_factory.mktemp("runs"))
    on_local = executor_independent(run)
    with local_cluster(gpus=2) as address:
        # The same run again, its model rounds redone on the cluster; the suite, the organized kernels and the kernel
        # rounds are kept (their inputs are the local run's: a --shard-size would be one of them and redo them all).
        ray = invoke("compare", *ELECTRA_FLAGS, "--runs-dir", str(run.parent), "--run", run.name, "--executor", "ray",
                     "--ray-address", address, "--force", "models")
    assert ray.returncode == 0, ray.stdout[-3000:] + ray.stderr[-3000:]
    return on_local, executor_independent(run), run, ray.stdout


def test_ray_writes_the_same_files_and_pairs_as_the_local_pool(both) -> None:
    on_local, on_ray, _, _ = both
    assert on_ray == on_local


def test_the_shards_spread_over_both_actors_and_the_report_lists_them(both) -> None:
    _, _, run, stdout = both
    # One model: a shard per round, the rounds on both actors at once.
    shards = [s for r in (1, 2, 3) for s in json.loads((run / "pair" / "models" / f"round-00{r}.json").read_text())[
        "shards"]]
    assert len(shards) == 3 and len({tuple(s["cpus"]) for s in shards}) == 2
    nodes = json.loads((run / "lock.json").read_text())["nodes"]
    assert nodes and all(entry["facts"]["host"] for entry in nodes.values())
    report = (run / "report" / "report.md").read_text()
    assert "ran on." in report
    assert "ray executor" in stdout
    # Only the model rounds ran on the cluster: the kernel rounds' inputs are the local run's.
    for number in (1, 2, 3):
        assert f"pair/kernels-round-{number}: done earlier with the same inputs, skipped" in stdout
        assert f"pair/models-round-{number}: done earlier" not in stdout
