"""A node lost mid-run: ``invoke compare --executor ray`` on a real two-node Ray cluster on this machine (a head and
a second raylet with its own ports, one fake GPU each), the second node killed with its whole process tree (its
raylet, its workers, the stage a worker runs) once a shard runs there. The run ends as if nothing had happened:
every shard once in the round files, the lost one redone on the head, the same files, pairs and counts as the same
compare without the loss and the report's verdicts agreeing with it; its manifest says what was redone where and
what the loss cost, and nothing of either node is left."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.electra_compare import ELECTRA_FLAGS, ROOT, copy_run, executor_independent
from tests.support.ray_support import NEEDS_RAY, Cluster, two_node_cluster

# The run without the loss is the session's ``electra_compare`` (tests/conftest.py), on the worker that runs it.
pytestmark = [pytest.mark.integration, pytest.mark.ray, pytest.mark.xdist_group("electra-compare"), NEEDS_RAY]

HEAD, LOST = "node-head", "node-lost"
SHARD_STARTED_S = 600.0  # the suite and the model rounds are kept; the first kernel round starts within minutes


# What a report says that no timing decides: how many items each kind compared, and the gates whose values are
# counts or memory, not times.
UNTIMED_GATES = ("pass rate", "peak-memory compression ratio")
# Claims that contradict each other: a kind or a timed gate said one way in one run and the other way in the other.
OPPOSITE = ({"improved", "regressed"}, {"pass", "fail"})


def verdicts(run: Path) -> dict[str, Any]:
    """The report's verdicts: each gate's status, each kind's verdict and counts, the in-run control's outcome."""
    summary = json.loads((run / "report" / "summary.json").read_text())
    return {"gates": {gate["name"]: gate["status"] for gate in summary["gates"]},
            "n": {kind: summary[kind]["n"] for kind in ("models", "kernels")},
            "kinds": {kind: summary[kind]["verdict"] for kind in ("models", "kernels")}}


def stage_on(cluster: Cluster, node: int) -> int | None:
    """The pid of a paired stage (a shard) running on the cluster's node ``node``, if one runs there now."""
    for pid in cluster.nodes[node].tree():
        try:
            if b"stages.paired" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


@pytest.fixture(scope="module")
def lost_run(electra_compare, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    local_run, local = electra_compare
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    run = copy_run(local_run, tmp_path_factory.mktemp("runs"))
    out = run.parent / "compare.out"
    with two_node_cluster(HEAD, LOST) as cluster, out.open("w") as stdout:
        # The kernel rounds redone on the cluster (the suite, the organized kernels and the model rounds are kept);
        # the only test of kernel rounds of a compare on a cluster (test_compare_ray redoes the model rounds).
        compare = subprocess.Popen([sys.executable, "-m", "invoke", "compare", *ELECTRA_FLAGS, "--runs-dir",
                                    str(run.parent), "--run", run.name, "--executor", "ray", "--ray-address",
                                    cluster.address, "--force", "kernels"],
                                   cwd=ROOT, stdout=stdout, stderr=subprocess.STDOUT, text=True)
        started_at = time.monotonic()
        try:
            deadline = time.monotonic() + SHARD_STARTED_S
            while (stage := stage_on(cluster, 1)) is None and compare.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert stage is not None, f"no shard started on {LOST}: {out.read_text()[-3000:]}"
            seen_at = time.monotonic()
            tree = cluster.nodes[1].tree()
            cluster.nodes[1].kill()
            killed_at = time.monotonic()
            compare.wait(timeout=1800)
            ended_at = time.monotonic()
        finally:
            if compare.poll() is None:
                compare.kill()
                compare.wait()
    return {"run": run, "local": local_run, "rc": compare.returncode, "stdout": out.read_text(), "tree": tree,
            "cluster": cluster,
            "seen_to_kill_s": killed_at - seen_at, "compare_s": ended_at - started_at}


def test_the_run_ends_with_every_shard_done_once_and_the_lost_one_redone_on_the_head(lost_run) -> None:
    run = lost_run["run"]
    assert lost_run["rc"] == 0, lost_run["stdout"][-3000:]
    redone = {key: rec["summary"]["redone"] for key, rec in json.loads((run / "manifest.json").read_text())[
        "stages"].items() if "redone" in rec["summary"]}
    # One GPU on the lost node, so one actor there and one shard lost with it.
    assert len(redone) == 1 and len(next(iter(redone.values()))) == 1, redone
    stage, [redo] = next(iter(redone.items()))
    kind, number = stage.removeprefix("pair/").split("-round-")
    assert redo["shard"] == f"{kind} round {number} shard 1/1" and redo["attempt"] == 1
    assert redo["lost_on"]["node"] == LOST and redo["redone_on"]["node"] == HEAD
    assert "actor" in redo["reason"]
    # The time lost: from the attempt's start (before the test saw its stage) to Ray's word that the node was gone
    # (after the kill), within the compare's own time.
    assert lost_run["seen_to_kill_s"] < redo["lost_s"] < lost_run["compare_s"]
    said = " ".join(lost_run["stdout"].split())  # the console wraps its lines at its width
    assert f"attempt 2 ({redo['lost_s']:.1f} s lost on {LOST} " in said

    for kind_dir in (run / "pair" / "models", run / "pair" / "kernels"):
        for number in (1, 2, 3):
            shards = json.loads((kind_dir / f"round-00{number}.json").read_text())["shards"]
            records = list((kind_dir / "shards").glob(f"round-00{number}-*/shard-*.json"))
            assert len(shards) == 1 and len(records) == 1  # done once: one record, one placement
            if f"pair/{kind_dir.name}-round-{number}" == stage:
                assert shards[0]["node"] == HEAD


def test_the_run_has_the_files_pairs_and_counts_of_the_run_without_the_loss(lost_run) -> None:
    """As test_compare_ray asserts of a cluster that loses nothing: the loss and the redone shard leave no file more
    or less than the local pool's run (attempts and logs aside), the same pairs and the same counts."""
    assert lost_run["rc"] == 0, lost_run["stdout"][-3000:]
    assert executor_independent(lost_run["run"]) == executor_independent(lost_run["local"])


def test_the_report_has_the_verdicts_of_the_run_without_the_loss(lost_run) -> None:
    """Both runs time the same code on this machine at different moments, so a timed verdict can differ by noise
    alone: at load 18, three rounds of one model read "improved" in one run and "inconclusive" in the other. The
    margin this test holds at any load: the same items compared, the same untimed gates, and no timed claim that
    contradicts the other run's (each is made at the strict level, so a contradiction is a false claim, not noise)."""
    assert lost_run["rc"] == 0, lost_run["stdout"][-3000:]
    lost, local = verdicts(lost_run["run"]), verdicts(lost_run["local"])
    assert lost["n"] == local["n"]
    assert [lost["gates"][gate] for gate in UNTIMED_GATES] == [local["gates"][gate] for gate in UNTIMED_GATES]
    assert lost["gates"].keys() == local["gates"].keys()
    said = [(f"gate {name}", lost["gates"][name], local["gates"][name]) for name in local["gates"]]
    said += [(kind, lost["kinds"][kind], local["kinds"][kind]) for kind in local["kinds"]]
    assert not [claim for claim in said if {claim[1], claim[2]} in OPPOSITE], said


def test_nothing_of_either_node_is_left(lost_run) -> None:
    cluster = lost_run["cluster"]
    assert not [pid for pid in lost_run["tree"] if Path(f"/proc/{pid}").exists()]
    assert cluster.leftovers() == [] and not Path(cluster.temp).exists()
