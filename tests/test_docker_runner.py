"""A stage runs inside a container of the variant's image: same paths as on the host, outputs in the run
directory owned by the user, no network, a clear error on failure or timeout, and no container left over."""

from __future__ import annotations

import csv
import io
import json
import os
import time
from pathlib import Path

import pytest

from prbench.images.build import build_image, plan_build
from prbench.runners import StageCommand, StageFailed
from prbench.runners.docker import DockerRunner
from prbench.sides.recipes import load_recipe
from tests.support.docker_support import base_image_id, make_standins, require_engine, stage_containers, write_recipe

# Under ``pytest -n``, the docker tests that build stand-in images share one worker: they build (and remove) images
# of the same tags.
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker-standins")]

CACHE = Path(__file__).resolve().parent / "fixtures" / "docker_cache"
PROBE = '''\
"""Reports where it runs: which torch, which user, which network interfaces."""
import json, os, sys, time
import torch
if "--sleep" in sys.argv:
    time.sleep(60)
print(json.dumps({"torch": torch.__file__, "uid": os.getuid(), "gid": os.getgid(),
                  "net": sorted(os.listdir("/sys/class/net")), "knob": os.environ.get("PRBENCH_TEST_KNOB"),
                  "stage_env": os.environ.get("STAGE_ENV")}), flush=True)
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
'''


@pytest.fixture(scope="module")
def client():
    return require_engine()


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory, client) -> str:
    root = tmp_path_factory.mktemp("runner")
    standins = make_standins(root)
    recipe = write_recipe("bookworm-cpu.toml", root, digest=base_image_id(client),
                          pytorch_commit=standins.pytorch_commit)
    result = build_image(plan_build(load_recipe(str(recipe), root)), client, stream=io.StringIO(),
                         emit=lambda _: None)
    return result.image_id


def _probe(tmp_path: Path) -> Path:
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    (probe_dir / "prbench_probe.py").write_text(PROBE)
    return probe_dir


def test_organize_runs_in_the_container_and_writes_into_the_run_dir(image: str, client, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "r1"
    out = run_dir / "base" / "organized"
    log = run_dir / "base" / "organize.log"
    runner = DockerRunner(image, "cpu", [run_dir], client=client, output=io.StringIO())
    # the cache lives outside the run directory: the runner mounts it read-only at the same path
    runner.run(StageCommand("stages.organize", ["--cache", str(CACHE), "--out", str(out), "--rep", "7"],
                            log_path=log))
    rows = list(csv.DictReader((out / "index.csv").open()))
    assert [(r["category"], r["kernel_name"], r["shape_key"]) for r in rows] == [
        ("pointwise", "triton_poi_fused_gelu_0", "x4096")]
    kernel = out / rows[0]["path"]
    assert "rep=7" in kernel.read_text()
    assert (kernel.stat().st_uid, kernel.stat().st_gid) == (os.getuid(), os.getgid())
    assert "organize: 1 kernels (1 pointwise)" in log.read_text()
    assert stage_containers(client, image) == []


def test_stage_sees_the_image_torch_its_env_and_no_network(image: str, client, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    runner = DockerRunner(image, "cpu", [run_dir], client=client, output=io.StringIO())
    log = run_dir / "probe.log"
    runner.run(StageCommand("prbench_probe", [], env={"STAGE_ENV": "from the variant"},
                            python_path=[_probe(tmp_path)], log_path=log))
    facts = json.loads(log.read_text().strip().splitlines()[-1])
    assert facts["torch"] == "/opt/prbench/src/pytorch/torch/__init__.py"  # the image's build, not the host's
    assert (facts["uid"], facts["gid"]) == (os.getuid(), os.getgid())
    assert facts["net"] == ["lo"]
    assert facts["knob"] == "1" and facts["stage_env"] == "from the variant"


def test_a_failing_stage_is_a_clear_error_and_its_container_is_removed(image: str, client, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    runner = DockerRunner(image, "cpu", [run_dir], client=client, output=io.StringIO())
    with pytest.raises(StageFailed, match=r"stage prbench_probe failed in .* with exit code 3; log: .*probe.log"):
        runner.run(StageCommand("prbench_probe", [], env={"PROBE_EXIT": "3"}, python_path=[_probe(tmp_path)],
                                log_path=run_dir / "probe.log"))
    assert stage_containers(client, image) == []


def test_a_stage_past_its_timeout_is_stopped(image: str, client, tmp_path: Path) -> None:
    runner = DockerRunner(image, "cpu", [tmp_path / "run"], client=client, output=io.StringIO())
    started = time.monotonic()
    with pytest.raises(StageFailed, match="timed out after 3s"):
        runner.run(StageCommand("prbench_probe", ["--sleep"], python_path=[_probe(tmp_path)], timeout_s=3))
    assert time.monotonic() - started < 30
    assert stage_containers(client, image) == []


def test_an_image_that_is_not_present_is_never_pulled(client, tmp_path: Path) -> None:
    runner = DockerRunner("prbench/no-such-recipe:000000000000", "cpu", [tmp_path], client=client)
    with pytest.raises(Exception, match="not present locally; build it with 'invoke build'"):
        runner.run(StageCommand("stages.organize", []))
