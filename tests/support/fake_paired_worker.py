"""A stand-in worker for the paired orchestrator's tests: deterministic samples, and jobs that crash or hang.

    python -m tests.support.fake_paired_worker --worker --result-fd N

A job's ``behave`` decides: ``ok`` (default), ``crash`` (SIGSEGV), ``hang`` (never replies), ``error`` (raises), and
the ways a reply can be broken on the result channel: ``garbage`` (a stray non-JSON line before the real reply),
``half`` (a reply cut in the middle), ``list`` (JSON that is not an object), ``nan`` (NaN samples). A kernels job
(``foundation.formats.stage_records.Job``, which has no ``behave``) takes it from its file name: ``/x/garbage.py``.
ROCm's HIP module table (``foundation.hip_modules``): ``hip`` loads a module at the job's first timed call in
this process, and past ``$FAKE_HIP_TABLE`` modules held (default 2) that load fails with error 209 as Triton's HIP
driver words it, so a fresh worker passes; ``no-binary`` fails every call with error 209 as Inductor's static launcher
words it on ROCm (a binary for another GPU: no fresh worker helps). ``sleep`` (seconds ``sleep_s`` before replying: a
long kernel), and for the executors' tests ``kill-parent`` / ``kill-grandparent``: the first time (no file at the
job's ``marker`` yet) SIGKILL the paired stage that started this worker, or the process that started that stage (a Ray
actor), as a node going down would. Samples are ``[ms] * iterations`` (``ms`` default 1.0). Models must be prepared
before they are timed; a prepare replies the job's ``compile_s`` (default 0.0) as the first call's time and logs the
models it names as prepared later. Every job prints one line (pid, CPU affinity, what it did) to the worker's log, for
the tests to read.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from stages.support.worker_process import serve

prepared: set[str] = set()
hip_modules: list[str] = []  # the kernel paths whose module this process has loaded
RESULT_FD = -1
# hipGetErrorString(209) in the line Triton's HIP driver raises (its own spelling), and the static launcher's line.
TRITON_HIP_209 = ("Triton Error [HIP]:  Code: 209, Messsage: no kernel image is available for execution on the "
                  "device")
STATIC_LAUNCHER_209 = "CUDA driver error: 209"


def behaviour(job: dict[str, Any]) -> str:
    return str(job.get("behave") or Path(str(job.get("path", ""))).stem or "ok")


def behave(job: dict[str, Any]) -> None:
    what = behaviour(job)
    if what in ("garbage", "half", "list"):
        # Written straight to the result channel, ahead of the reply serve() writes (or instead of it).
        line = {"garbage": b"Segmentation fault? no: a stray print\n", "half": b'{"results": {"k": {"sampl\n',
                "list": b"[1, 2, 3]\n"}[what]
        os.write(RESULT_FD, line)
    if what == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if what == "hang":
        time.sleep(3600)
    if what == "error":
        raise RuntimeError("the kernel raised")
    if what == "hip" and job.get("kind") != "load" and job["path"] not in hip_modules:
        if len(hip_modules) >= int(os.environ.get("FAKE_HIP_TABLE", "2")):
            raise RuntimeError(TRITON_HIP_209)
        hip_modules.append(job["path"])
    if what == "no-binary" and job.get("kind") != "load":
        raise RuntimeError(STATIC_LAUNCHER_209)
    if what == "sleep":
        time.sleep(float(job.get("sleep_s", 1.0)))
    if what in ("kill-parent", "kill-grandparent") and not Path(job["marker"]).exists():
        Path(job["marker"]).write_text(str(os.getpid()))
        stage = os.getppid()
        os.kill(stage if what == "kill-parent" else parent_of(stage), signal.SIGKILL)
        os._exit(0)  # nobody is left to read a reply


def parent_of(pid: int) -> int:
    # /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after its closing parenthesis.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def handle(job: dict[str, Any]) -> dict[str, Any]:
    label = job.get("model") or ",".join(job.get("kernels", {}))
    print(f"{job.get('kind', 'kernel')} {label} pid {os.getpid()} cpus {sorted(os.sched_getaffinity(0))} "
          f"pad {len(os.environ.get('PRBENCH_LAYOUT_PAD', '-'))}", flush=True)
    behave(job)
    samples = [float("nan") if behaviour(job) == "nan" else float(job.get("ms", 1.0))] * int(job.get("iterations", 3))
    if job.get("kind") == "prepare":
        print(f"later {','.join(job.get('later', [])) or '-'}", flush=True)
        prepared.add(job["model"])
        return {"results": {job["model"]: {"compile_s": float(job.get("compile_s", 0.0))}}}
    if job.get("kind") == "time":
        if job["model"] not in prepared:
            raise KeyError(f"{job['model']} was not prepared in this worker")
        return {"results": {job["model"]: {"samples": samples}}}
    return {"results": {name: {"samples": samples} for name in job["kernels"]}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--result-fd", type=int, required=True)
    RESULT_FD = parser.parse_args().result_fd
    sys.exit(serve(RESULT_FD, handle))
