"""A host process the way ``invoke compare`` is one, for the stop tests: ``python tests/support/termination_host.py hold
--runs R --marker M --beat B --out O [--image I [--ray ADDRESS]]`` takes run ``held`` under ``R`` (its lock and a
manifest record), runs the slow stand-in stage (``tests.support.slow_stage``) through the local runner, or the Docker
runner in image ``I`` with the run's labels (with ``--ray``: as a shard on the Ray cluster at ``ADDRESS``), and is
wrapped by the CLI's error boundary (``prbench.commands.cli.user_facing``) as every task is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from invoke import Collection, Program, task

from prbench.commands.cli import user_facing


@task(help={"runs": "runs directory", "marker": "the stage's marker file", "beat": "the stage's heartbeat file",
            "out": "the stage's output", "image": "run the stage in a container of this image (default: locally)",
            "ray": "run it as a shard on the Ray cluster at this address (with --image)"})
@user_facing
def hold(ctx: Any, runs: str, marker: str, beat: str, out: str, image: str = "", ray: str = "") -> None:
    from prbench.runners import SIDE_LABEL, StageCommand
    from prbench.runs.run_store import RunStore

    with RunStore(Path(runs)).create_or_open("held", {}, "test") as run, run.stage("base/slow", {}):
        command = StageCommand("tests.support.slow_stage", ["--marker", marker, "--beat", beat, "--out", out],
                               log_path=run.path("base", "logs", "slow.log"), labels={SIDE_LABEL: "base"})
        writable = [run.root, Path(marker).parent]
        if ray:
            _on_ray(ray, image, writable, command, Path(out))
        else:
            _runner(image, writable).run(command)


def _on_ray(address: str, image: str, writable: list[Path], command: Any, out: Path) -> None:
    from prbench.executors import RunnerSpec, ShardTask, StageStep
    from prbench.executors.ray_cluster import RayExecutor

    spec = RunnerSpec("docker", platform="cpu", image=image, writable=tuple(writable), run=writable[0])
    executor = RayExecutor(address, platform="cpu", say=print)
    try:
        executor.run([ShardTask("kernels round 1 shard 1/1", (StageStep(spec, command),), (out,))],
                     lambda outcome: None)
    finally:
        executor.close()


def _runner(image: str, writable: list[Path]) -> Any:
    if not image:
        from prbench.runners.local import LocalRunner

        return LocalRunner()
    from prbench.runners.docker import DockerRunner, run_labels

    return DockerRunner(image, "cpu", writable=writable, labels=run_labels(writable[0]))


if __name__ == "__main__":
    Program(namespace=Collection(hold), name="host", version="0").run()
