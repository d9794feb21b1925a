"""The Docker runner: a stage runs in a fresh container of the variant's image.

Paths are the same inside and outside: the run directory is mounted read-write and the code read-only at
their host paths, and any other existing absolute path a stage argument names (an Inductor cache to
organize, say) read-only, so a StageCommand's arguments need no translation.

The container runs as the host user (uid:gid). Everything a stage writes lands in the bind-mounted run
directory, and files owned by root there would be unremovable by the user who started the run; the images
need no user entry for this because stages only write under the run directory, TMPDIR and HOME (which is
pointed at /tmp). On ROCm the host's ``video`` and render groups (by numeric gid, which varies per host)
are added so a non-root process can open ``/dev/kfd`` and ``/dev/dri``.

The image is checked to be present and run by id: ``containers.run`` would silently pull on a miss.
Containers get no network unless the stage asks for it.

A container is removed when its stage ends, however it ends (an error, a timeout, Ctrl-C, SIGTERM). Only a process
killed outright (SIGKILL, a lost Ray actor) cannot do that, so every container carries labels that say whose it
is (``prbench.runners``: the run, the shard and side, the owning process), and `remove_containers` removes what
such a process left: the executor before it runs the shard again, ``invoke compare`` when it starts and ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from foundation.errors import UserError
from prbench.runners import (
    CODE_ROOT,
    OWNER_LABEL,
    RUN_LABEL,
    STAGE_LABEL,
    ErrorLineTracker,
    StageCommand,
    StageFailed,
    StageLost,
)
from prbench.termination import STOP_GRACE_S

IMAGE_CODE = "/opt/prbench/code"  # our code baked into the image (tools layer): the fallback on PYTHONPATH
VIDEO_GID = 44  # Debian/Ubuntu's fixed gid for "video"
_PATH_IN_ARG = re.compile(r"^(?:--[\w-]+=)?(/.+)$")


@dataclass
class GpuOptions:
    """docker-py keyword arguments that give a container the platform's GPUs."""

    kwargs: dict[str, Any] = field(default_factory=dict)


def gpu_options(platform: str, shm_size: str = "16G", dev: Path = Path("/dev")) -> GpuOptions:
    """ROCm: the AMD-recommended device and security flags; CUDA: a DeviceRequest; cpu: nothing."""
    if platform == "rocm":
        kfd, dri = dev / "kfd", dev / "dri"
        if not kfd.exists() or not dri.exists():
            raise UserError(f"docker runner: a rocm recipe needs {kfd} and {dri} on this host (is amdgpu loaded?)")
        groups = sorted({VIDEO_GID, os.stat(kfd).st_gid})  # the render group's gid varies per host
        return GpuOptions({
            "devices": [f"{kfd}:{kfd}:rwm", f"{dri}:{dri}:rwm"],
            "group_add": [str(g) for g in groups],
            "ipc_mode": "host",
            "shm_size": shm_size,
            "security_opt": ["seccomp=unconfined"],
            "cap_add": ["SYS_PTRACE"],
        })
    if platform == "cuda":
        import docker

        return GpuOptions({
            "device_requests": [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])],
            "ipc_mode": "host",
            "shm_size": shm_size,
        })
    return GpuOptions({})


def run_labels(run_root: Path) -> dict[str, str]:
    """The label every container of the run at ``run_root`` carries."""
    return {RUN_LABEL: str(run_root.resolve())}


def owner_label(pid: int | None = None, host: str | None = None) -> str:
    """The owner label's value for process ``pid`` (default: this one) of ``host`` (default: this machine)."""
    return f"{host or socket.gethostname()}:{pid if pid is not None else os.getpid()}"


def remove_containers(client: Any, labels: Mapping[str, str]) -> list[str]:
    """Remove every container that carries all of ``labels`` (one of them the run's), killing it if it runs;
    the short ids of those removed. One already gone (its owner removed it meanwhile) is no error."""
    import docker

    if RUN_LABEL not in labels:  # a filter without the run could reach another run's containers
        raise ValueError(f"remove_containers: the labels must name the run ({RUN_LABEL})")
    removed = []
    filters = {"label": [f"{key}={value}" for key, value in labels.items()]}
    for container in client.containers.list(all=True, filters=filters):
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            continue
        removed.append(str(container.short_id))
    return removed


def mounts_for(command: StageCommand, writable: list[Path], code_root: Path = CODE_ROOT) -> dict[str, dict[str, str]]:
    """Bind mounts at identical paths: writable dirs rw, code and any other named existing path ro."""
    volumes: dict[str, dict[str, str]] = {}
    for path in writable:
        path.mkdir(parents=True, exist_ok=True)
        volumes[str(path.resolve())] = {"bind": str(path.resolve()), "mode": "rw"}
    candidates = [code_root, *command.python_path, *_paths_in_args(command.args)]
    for path in candidates:
        resolved = path.resolve()
        if not resolved.exists() or _covered(resolved, volumes):
            continue
        volumes[str(resolved)] = {"bind": str(resolved), "mode": "ro"}
    return volumes


def _paths_in_args(args: list[str]) -> list[Path]:
    found = []
    for arg in args:
        match = _PATH_IN_ARG.match(arg)
        if match and Path(match.group(1)).exists():
            found.append(Path(match.group(1)))
    return found


def _covered(path: Path, volumes: dict[str, dict[str, str]]) -> bool:
    return any(path.is_relative_to(Path(host)) for host in volumes)


class DockerRunner:
    """Runs ``python3 -m stages.<name>`` in a container of ``image`` (an image id or a present tag)."""

    name = "docker"

    def __init__(
        self,
        image: str,
        platform: str,
        writable: list[Path],
        *,
        client: Any = None,
        network: bool = False,
        user: str | None = None,
        shm_size: str = "16G",
        stream_output: bool = True,
        output: IO[str] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        from prbench.images.docker_engine import docker_client

        self.client = client or docker_client()
        self.image = image
        self.platform = platform
        self.writable = writable
        self.network = network
        self.user = user if user is not None else f"{os.getuid()}:{os.getgid()}"
        self.shm_size = shm_size
        self.stream_output = stream_output
        self.output = output
        self.labels = dict(labels or {})  # every container's (the run's: `run_labels`), besides the command's
        self._running: set[Any] = set()  # the containers running now (one per device of an executor)
        self._lock = threading.Lock()

    def environment(self, command: StageCommand) -> dict[str, str]:
        env = {"HOME": "/tmp", **command.env}
        env["PYTHONPATH"] = os.pathsep.join([*map(str, command.python_path), str(CODE_ROOT), IMAGE_CODE])
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def container_options(self, command: StageCommand) -> dict[str, Any]:
        """The docker-py create() keyword arguments (separate so tests can read them without a GPU)."""
        return {
            "command": ["python3", "-m", command.module, *command.args],
            "environment": self.environment(command),
            "volumes": mounts_for(command, self.writable),
            "working_dir": str(CODE_ROOT),
            "user": self.user,
            # No bridge networks exist on our hosts: a stage that needs the network shares the host's.
            "network_mode": "host" if self.network else "none",
            "labels": {STAGE_LABEL: command.label, OWNER_LABEL: owner_label(), **self.labels,
                       **command.labels},
            **({"cpuset_cpus": ",".join(map(str, sorted(command.cpus)))} if command.cpus else {}),
            **gpu_options(self.platform, self.shm_size).kwargs,
        }

    def run(self, command: StageCommand) -> None:
        import requests

        import docker

        image_id = self._image_id()
        try:
            container = self.client.containers.create(image_id, **self.container_options(command))
        except docker.errors.APIError as exc:
            reason = " ".join(str(exc).split())
            raise StageFailed(f"stage {command.label}: cannot create a container: {reason}") from None
        log = None
        with self._lock:
            self._running.add(container)
        try:
            log = _open_log(command.log_path)
            container.start()
            errors = ErrorLineTracker(command.on_line)
            reader = threading.Thread(target=self._copy_logs, args=(container, log, errors), daemon=True)
            reader.start()
            try:
                result = container.wait(timeout=command.timeout_s)
            except requests.exceptions.RequestException:  # wait()'s read timeout (ReadTimeout or ConnectionError)
                _stop(container)
                raise StageFailed(f"stage {command.label}: timed out after {command.timeout_s:.0f}s") from None
            reader.join(timeout=30)
        except KeyboardInterrupt:
            _stop(container)
            raise
        finally:
            with self._lock:
                self._running.discard(container)
            _remove(container)
            if log:
                log.close()
        code = result.get("StatusCode", -1)
        if code == 137:  # SIGKILL from outside (the OOM killer, docker kill): the stage itself did nothing wrong
            raise StageLost(f"stage {command.label} was killed in {self.image[:19]} (exit code 137)")
        if code != 0:
            raise errors.failure(command, f"failed in {self.image[:19]} with exit code {code}")

    def interrupt(self) -> None:
        """Stop the running stages' containers as Ctrl-C would (SIGINT, then SIGKILL)."""
        with self._lock:
            running = list(self._running)
        _stop(*running)

    def _image_id(self) -> str:
        from prbench.images.docker_engine import image_present

        image = image_present(self.client, self.image)
        if image is None:
            raise UserError(f"docker runner: image {self.image} is not present locally; build it with 'invoke build'")
        return image.id

    def _copy_logs(self, container: Any, log: IO[str] | None, errors: ErrorLineTracker) -> None:
        out = self.output or sys.stdout
        for chunk in container.logs(stream=True, follow=True):
            text = chunk.decode("utf-8", "replace")
            errors.feed(text)
            if log:
                log.write(text)
                log.flush()
            if self.stream_output:
                out.write(text)
                out.flush()


def _open_log(path: Path | None) -> IO[str] | None:
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "a", encoding="utf-8")


def _stop(*containers: Any) -> None:
    """SIGINT first (the stage is PID 1, which ignores SIGTERM, but Python handles SIGINT) so each stage can finish
    its current atomic write; SIGKILL for those not stopped `STOP_GRACE_S` later (a grace the stages share)."""
    import requests

    import docker

    signalled = []
    for container in containers:
        with contextlib.suppress(docker.errors.APIError):
            container.kill(signal="SIGINT")
            signalled.append(container)
    deadline = time.monotonic() + STOP_GRACE_S
    for container in containers:
        if container in signalled:
            try:
                container.wait(timeout=max(1.0, deadline - time.monotonic()))
                continue
            except (docker.errors.APIError, requests.exceptions.RequestException):
                pass
        with contextlib.suppress(docker.errors.APIError):
            container.kill(signal="SIGKILL")


def _remove(container: Any) -> None:
    import docker

    with contextlib.suppress(docker.errors.APIError):
        container.remove(force=True)
