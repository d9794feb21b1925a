"""Bounded background CPU load whose intensity changes over time, to check that a comparison survives neighbours.

    python benchmarks/background_load.py [--workers 2] [--min-duty 0.2] [--max-duty 1.0] [--period-s 40]
        [--max-seconds 3600]

or, from Python, ``with BackgroundLoad(workers=2): ...``. Each worker is a separate Python process (standard
library only) that alternates busy-spinning and sleeping in short slices; the busy share of a slice (the duty)
follows a slow sine wave over ``period_s`` with random jumps to a random level that last a few seconds, each
worker with its own phase and random stream, so the load on the machine shifts within a single comparison.
CPU only: no network, no files, no memory churn.

Bounded three ways: the context manager (or the script, on Ctrl-C / SIGTERM) kills the workers on exit; every
worker exits by itself after ``max_seconds``; and a worker exits within one slice once its parent process is
gone (it checks its parent's pid), so a killed benchmark never leaves load behind.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import NoReturn

SLICE_S = 0.05  # one busy+sleep cycle; also how quickly a worker notices its deadline or a dead parent
STOP_GRACE_S = 1.0  # how long stop() waits after SIGTERM before SIGKILL


@dataclass(frozen=True)
class LoadSettings:
    workers: int = 2
    min_duty: float = 0.2
    max_duty: float = 1.0
    period_s: float = 40.0
    max_seconds: float = 3600.0

    def validate(self) -> LoadSettings:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"--workers {self.workers}: expected a whole number >= 1")
        if not (0.0 <= self.min_duty <= self.max_duty <= 1.0):
            raise ValueError(f"--min-duty {self.min_duty} / --max-duty {self.max_duty}: expected "
                             "0 <= min-duty <= max-duty <= 1")
        for flag, value in (("--period-s", self.period_s), ("--max-seconds", self.max_seconds)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{flag} {value}: expected a positive number of seconds")
        return self

    def describe(self) -> str:
        return (f"{self.workers} worker(s), duty {self.min_duty:.0%}-{self.max_duty:.0%} "
                f"(sine over {self.period_s:g} s plus random jumps), stops after {self.max_seconds:g} s at most")


# --- the worker -------------------------------------------------------------------------------------------


@dataclass
class DutySchedule:
    """The busy share of a slice at time t (seconds since the worker started): a wave, overridden by jumps."""

    settings: LoadSettings
    rng: random.Random
    phase: float = 0.0
    jump_level: float = 0.0
    jump_until: float = -1.0

    def duty(self, t: float, dt: float) -> float:
        s = self.settings
        if t >= self.jump_until and self.rng.random() < dt / (s.period_s / 2):  # about two jumps per period
            self.jump_level = self.rng.uniform(s.min_duty, s.max_duty)
            self.jump_until = t + self.rng.uniform(1.0, max(1.0, s.period_s / 4))
        if t < self.jump_until:
            return self.jump_level
        middle, half = (s.min_duty + s.max_duty) / 2, (s.max_duty - s.min_duty) / 2
        return middle + half * math.sin(2 * math.pi * t / s.period_s + self.phase)


def spin_until(deadline: float) -> None:
    x = 1.0001
    while time.perf_counter() < deadline:
        for _ in range(200):
            x = x * x % 7.0 + 1.0001


def run_worker(settings: LoadSettings, parent_pid: int, seed: int) -> int:
    """Busy/sleep slices until max_seconds have passed or the parent is gone."""
    rng = random.Random(seed)
    schedule = DutySchedule(settings, rng, phase=rng.uniform(0, 2 * math.pi))
    start = time.perf_counter()
    while True:
        now = time.perf_counter()
        t = now - start
        if t >= settings.max_seconds or os.getppid() != parent_pid:
            return 0
        busy = SLICE_S * min(max(schedule.duty(t, SLICE_S), 0.0), 1.0)
        spin_until(now + busy)
        rest = SLICE_S - busy
        if rest > 0:
            time.sleep(rest)


# --- the parent side --------------------------------------------------------------------------------------


@dataclass
class BackgroundLoad:
    """Worker processes that load the CPU while the ``with`` block runs; killed on exit."""

    workers: int = 2
    min_duty: float = 0.2
    max_duty: float = 1.0
    period_s: float = 40.0
    max_seconds: float = 3600.0
    seed: int | None = None  # None: a different load pattern every time
    quiet: bool = False
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list, init=False, repr=False)

    @property
    def settings(self) -> LoadSettings:
        return LoadSettings(self.workers, self.min_duty, self.max_duty, self.period_s, self.max_seconds)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def start(self) -> BackgroundLoad:
        settings = self.settings.validate()
        if self.processes:
            raise RuntimeError("background load already started")
        base_seed = self.seed if self.seed is not None else random.SystemRandom().randrange(2**31)
        try:
            for number in range(settings.workers):
                self.processes.append(_spawn(settings, os.getpid(), base_seed + number))
        except BaseException:
            self.stop()
            raise
        if not self.quiet:
            print(f"background load: {settings.describe()}; pids {', '.join(map(str, self.pids))}", flush=True)
        return self

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for process in self.processes:
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes = []

    def __enter__(self) -> BackgroundLoad:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def _spawn(settings: LoadSettings, parent_pid: int, seed: int) -> subprocess.Popen[bytes]:
    # -I: isolated (no site packages, no PYTHONPATH, no script directory); the worker needs the standard library
    argv = [sys.executable, "-I", str(Path(__file__).resolve()), "--worker", "--parent-pid", str(parent_pid),
            "--seed", str(seed), "--workers", "1", "--min-duty", repr(settings.min_duty),
            "--max-duty", repr(settings.max_duty), "--period-s", repr(settings.period_s),
            "--max-seconds", repr(settings.max_seconds)]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, close_fds=True)


# --- command line -----------------------------------------------------------------------------------------


class OneLineParser(argparse.ArgumentParser):
    """A user mistake is one line ``error: ...`` and exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    defaults = LoadSettings()
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=defaults.workers,
                        help=f"worker processes, each up to one core (default {defaults.workers})")
    parser.add_argument("--min-duty", type=float, default=defaults.min_duty,
                        help=f"lowest busy share of a worker (default {defaults.min_duty})")
    parser.add_argument("--max-duty", type=float, default=defaults.max_duty,
                        help=f"highest busy share of a worker (default {defaults.max_duty})")
    parser.add_argument("--period-s", type=float, default=defaults.period_s,
                        help=f"period of the slow wave in seconds (default {defaults.period_s:g})")
    parser.add_argument("--max-seconds", type=float, default=defaults.max_seconds,
                        help=f"the load stops by itself after this many seconds (default {defaults.max_seconds:g})")
    parser.add_argument("--seed", type=int, default=None, help="random seed of the load pattern (default: random)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--parent-pid", type=int, default=0, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = LoadSettings(args.workers, args.min_duty, args.max_duty, args.period_s, args.max_seconds)
    try:
        settings.validate()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.worker:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C in the terminal ends a worker without a traceback
        return run_worker(settings, args.parent_pid or os.getppid(), args.seed or 0)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # SIGTERM runs the `with` exit like Ctrl-C does
    load = BackgroundLoad(args.workers, args.min_duty, args.max_duty, args.period_s, args.max_seconds, args.seed)
    with load:
        try:
            deadline = time.monotonic() + args.max_seconds
            while time.monotonic() < deadline and any(p.poll() is None for p in load.processes):
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    print("background load: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
