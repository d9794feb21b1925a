"""What a node does with a docker shard: use the variant's image when it has it by content tag, else build it from
the side's lock and the store, and tell the host which image id it ran. The Docker engine here is a stand-in (the
real build path is ``prbench.images.image_lock.build_and_lock``, covered by the docker tier); what is checked is the
decision and the paths."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from foundation.errors import UserError
from prbench.executors import DeviceSlot, RunnerSpec
from prbench.executors.node import NodeRunners
from prbench.images import docker_engine
from prbench.images import image_lock as lock
from prbench.images.build import BuildResult
from prbench.images.image_lock import BuildOutcome

TAG = "prbench/cpu-docker:0123456789ab"


def docker_spec(tmp_path: Path) -> RunnerSpec:
    side = tmp_path / "run" / "pr"
    side.mkdir(parents=True)
    (side / "lock.json").write_text("{}")
    return RunnerSpec("docker", platform="cpu", image=TAG, image_id="sha256:host", lock=side / "lock.json",
                      store=tmp_path / "store", writable=(tmp_path / "run",))


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    state: dict[str, Any] = {"images": {}, "builds": []}
    monkeypatch.setattr(docker_engine, "docker_client", lambda: SimpleNamespace(name="client"))

    def present(client: Any, ref: str) -> Any:
        return SimpleNamespace(id=state["images"][ref]) if ref in state["images"] else None

    monkeypatch.setattr(docker_engine, "image_present", present)
    monkeypatch.setattr(lock, "read_lock", lambda path: {"read": str(path)})
    monkeypatch.setattr(lock, "plan_from_lock", lambda locked, overlay_dir: (SimpleNamespace(locked=locked), []))

    def build(plan: Any, client: Any, images_dir: Path, *, lock_path: Path, store: Any, emit: Any) -> BuildOutcome:
        state["builds"].append({"lock": plan.locked["read"], "images_dir": images_dir, "lock_path": lock_path})
        state["images"][TAG] = "sha256:built-here"
        return BuildOutcome(BuildResult(tag=TAG, image_id="sha256:built-here", built=True), lock_path)

    monkeypatch.setattr(lock, "build_and_lock", build)
    return state


def test_a_node_that_has_the_image_by_its_tag_runs_it(tmp_path: Path, engine: dict[str, Any]) -> None:
    engine["images"][TAG] = "sha256:host"
    node = NodeRunners("node-a", say=lambda line: None)
    runner = node.runner(docker_spec(tmp_path))

    assert runner.image == "sha256:host" and engine["builds"] == []  # type: ignore[attr-defined]
    assert node.facts()["images"][TAG] == {"id": "sha256:host", "same_as_host": True}


def test_a_node_without_the_image_builds_it_from_the_lock_and_records_its_own_lock(tmp_path: Path,
                                                                                  engine: dict[str, Any]) -> None:
    said: list[str] = []
    spec = docker_spec(tmp_path)
    node = NodeRunners("node-b", say=said.append)
    runner = node.runner(spec)

    assert runner.image == "sha256:built-here"  # type: ignore[attr-defined]
    (build,) = engine["builds"]
    assert build["lock"] == str(spec.lock)
    assert build["lock_path"] == tmp_path / "run" / "pr" / "nodes" / "node-b.lock.json"
    assert node.facts()["images"][TAG] == {"id": "sha256:built-here", "same_as_host": False}
    assert any("building prbench/cpu-docker:0123456789ab" in line for line in said)
    node.runner(spec)
    assert len(engine["builds"]) == 1  # once per node


def test_a_node_without_the_image_or_its_lock_says_so_in_one_line(tmp_path: Path, engine: dict[str, Any]) -> None:
    spec = docker_spec(tmp_path)
    assert spec.lock is not None
    spec.lock.unlink()
    with pytest.raises(UserError, match=rf"^node node-c: image {TAG} is not here and there is no lock"):
        NodeRunners("node-c", say=lambda line: None).runner(spec)


def test_a_shard_that_wrote_nothing_is_a_failure_naming_it(tmp_path: Path) -> None:
    from prbench.executors import ShardTask, StageStep
    from prbench.runners import StageCommand, StageFailed

    ran: list[list[str]] = []

    class Quiet:
        name = "quiet"

        def environment(self, command: StageCommand) -> dict[str, str]:
            return {}

        def run(self, command: StageCommand) -> None:
            ran.append(command.args)

        def interrupt(self) -> None:
            pass

    node = NodeRunners("node-d", make=lambda spec: Quiet())
    task = ShardTask("kernels round 1 shard 1/1", (StageStep(RunnerSpec("local"), StageCommand("stages.paired", [])),),
                     (tmp_path / "shard-001.json",))
    with pytest.raises(StageFailed, match="shard 1/1: finished on node-d GPU 3 but did not write"):
        node.run_shard(task, DeviceSlot("node-d", "3"))
    assert ran == [["--device", "3", "--node", "node-d"]]
