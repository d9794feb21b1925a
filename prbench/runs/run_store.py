"""The run store: ``runs/<run-id>/`` with a manifest that records every stage's status, inputs and outputs.

A stage is skipped when the manifest says it finished with the same input hash and its outputs still exist;
``force`` redoes it. The manifest is rewritten atomically after every change, so an interrupt (Ctrl-C,
a killed process) always leaves a manifest that describes what really finished.

Only one process writes a run at a time: opening it for writing (``create_or_open``, ``open(write=True)``)
takes the run's lock (``prbench.runs.run_lock``), and ``Run.close`` (or leaving ``with run:``) lets it go. A run
opened to be read (``invoke status``) takes no lock and cannot be saved.

A new run may start with one side of another run (``RunStore.seed_side``: the side's directory and its finished
stages' records), as a bisect's steps do with the good commit they all compare against.

When a stage starts recomputing, the run's previous report moves to ``report.stale/`` (its report.md says so
on its first line), so a later failure never leaves an old verdict looking current.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from foundation import atomic_io
from foundation.errors import UserError
from foundation.formats.run_layout import MANIFEST, REPORT_DIR, REPORT_MD, STALE_REPORT_DIR, RunLayout
from foundation.records import check_format_version, expect_list, expect_number, expect_object, expect_str, read_json
from prbench.runs.run_lock import RunLock, note_end

_RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # fullmatch: "$" would let a trailing newline through


class StageStatus:
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    STALE = "stale"  # the report, once the run started recomputing what it was made from


@dataclass
class StageRecord:
    status: str
    input_hash: str
    outputs: list[str] = field(default_factory=list)
    started: str = ""
    finished: str = ""
    duration_s: float = 0.0
    error: str = ""
    summary: dict[str, Any] = field(default_factory=dict)


# 1: run_id, created, prbench_version, settings, stages (manifests written before the version was recorded).
# Bump it when a key is renamed or removed or changes meaning; a new optional key does not bump it.
# Optional keys added since: a sharded stage's summary ``redone`` (the shards lost and run again:
# ``prbench.executors.ShardRedo``).
# 2: settings.rounds_policy holds each kind's most rounds and resolution target (``kinds``: the kinds differ by
#    default, `analysis.report.sequential.DEFAULT_ROUNDS`); its ``max_rounds`` is the most of any kind, and its
#    ``resolution_pct`` (one target for both) is gone. Nothing reads rounds_policy back: version 1 reads as before.
MANIFEST_FORMAT_VERSION = 2


@dataclass
class RunManifest:
    run_id: str
    created: str
    prbench_version: str
    settings: dict[str, Any] = field(default_factory=dict)
    stages: dict[str, StageRecord] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, where: str = "manifest") -> RunManifest:
        """Check the shape while building: a manifest of the wrong shape must be refused here, not crash later."""
        data = expect_object(data, where)
        check_format_version(data, where, MANIFEST_FORMAT_VERSION)
        stages = expect_object(data.get("stages", {}), f"{where}: stages")
        return cls(
            run_id=expect_str(data.get("run_id"), f"{where}: run_id"),
            created=expect_str(data.get("created"), f"{where}: created"),
            prbench_version=expect_str(data.get("prbench_version", ""), f"{where}: prbench_version"),
            settings=expect_object(data.get("settings", {}), f"{where}: settings"),
            stages={key: _stage_record(value, f"{where}: stages.{key}") for key, value in stages.items()},
        )

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": MANIFEST_FORMAT_VERSION, **asdict(self)}


def _stage_record(value: Any, where: str) -> StageRecord:
    rec = expect_object(value, where)
    outputs = expect_list(rec.get("outputs", []), f"{where}.outputs")
    return StageRecord(
        status=expect_str(rec.get("status"), f"{where}.status"),
        input_hash=expect_str(rec.get("input_hash"), f"{where}.input_hash"),
        outputs=[expect_str(o, f"{where}.outputs[{i}]") for i, o in enumerate(outputs)],
        started=expect_str(rec.get("started", ""), f"{where}.started"),
        finished=expect_str(rec.get("finished", ""), f"{where}.finished"),
        duration_s=expect_number(rec.get("duration_s", 0.0), f"{where}.duration_s", minimum=0),
        error=expect_str(rec.get("error", ""), f"{where}.error"),
        summary=expect_object(rec.get("summary", {}), f"{where}.summary"),
    )


def input_hash(inputs: dict[str, Any]) -> str:
    """Stable hash of a stage's inputs (settings, upstream hashes, recipe hash...)."""
    blob = json.dumps(inputs, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Run:
    """One run directory and its manifest; ``lock`` is held when it was opened for writing."""

    def __init__(self, root: Path, manifest: RunManifest, lock: RunLock | None = None) -> None:
        self.root = root
        self.manifest = manifest
        self.lock = lock

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Let go of the run's lock (the run can still be read, no longer written)."""
        if self.lock is not None:
            self.lock.release()

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.root)

    def relative(self, path: Path) -> str:
        return os.path.relpath(path, self.root)

    def save(self) -> None:
        if self.lock is None or not self.lock.held:
            # A programming error, not the user's: whatever writes a run must have opened it for writing.
            raise RuntimeError(f"run {self.run_id}: written without holding its lock (open it with write=True)")
        atomic_io.write_json(self.root / MANIFEST, self.manifest.to_dict())

    def record(self, key: str) -> StageRecord | None:
        return self.manifest.stages.get(key)

    def is_done(self, key: str, inputs_hash: str) -> bool:
        rec = self.record(key)
        if rec is None or rec.status != StageStatus.DONE or rec.input_hash != inputs_hash:
            return False
        return all((self.root / out).exists() for out in rec.outputs)

    @contextlib.contextmanager
    def stage(self, key: str, inputs: dict[str, Any]) -> Iterator[StageRecord]:
        """Record a stage around the block: running → done / failed / interrupted, with timings.

        The block fills ``record.outputs`` (paths relative to the run directory) and ``record.summary``. A block
        recording work that ran before the stage (shards on an executor) sets ``record.started`` and
        ``record.duration_s`` to that work's; the block's own time is added to it.
        Starting a stage retires the run's report: what it was made from is being recomputed.
        """
        self.retire_report()
        rec = StageRecord(status=StageStatus.RUNNING, input_hash=input_hash(inputs), started=_now())
        self.manifest.stages[key] = rec
        self.save()
        t0 = time.monotonic()
        with self._ended_by_errors({key: rec}, t0):
            yield rec
        self._finish(rec, StageStatus.DONE, t0, "")

    @contextlib.contextmanager
    def running_elsewhere(self, stages: dict[str, dict[str, Any]]) -> Iterator[Callable[[str, dict[str, Any]], None]]:
        """Show stages as running for the block (``invoke status`` reads them) while their work runs elsewhere:
        shards on an executor, each stage recorded (``stage``) once its shards are merged. The block gets
        ``progress(key, summary)`` to say what a stage has done so far. A stage the block leaves unrecorded ends
        interrupted, or failed with the error that ended the block."""
        started, t0 = _now(), time.monotonic()
        marks = {key: StageRecord(status=StageStatus.RUNNING, input_hash=input_hash(inputs), started=started)
                 for key, inputs in stages.items()}

        def progress(key: str, summary: dict[str, Any]) -> None:
            mark = marks[key]
            if self.manifest.stages.get(key) is mark and mark.summary != summary:
                mark.summary = summary
                self.save()

        if marks:
            self.retire_report()
            self.manifest.stages.update(marks)
            self.save()
        with self._ended_by_errors(marks, t0):
            yield progress

    @contextlib.contextmanager
    def _ended_by_errors(self, records: dict[str, StageRecord], t0: float) -> Iterator[None]:
        """When the block raises, each of ``records`` still in the manifest (no stage recorded its key since) ends
        interrupted (Ctrl-C) or failed with the error."""
        try:
            yield
        except BaseException as exc:
            interrupted = isinstance(exc, KeyboardInterrupt)
            for key, rec in records.items():
                if self.manifest.stages.get(key) is rec:
                    self._finish_after_error(rec, StageStatus.INTERRUPTED if interrupted else StageStatus.FAILED,
                                             t0, "interrupted by the user" if interrupted else _one_line(exc))
            raise

    def _finish(self, rec: StageRecord, status: str, t0: float, error: str) -> None:
        rec.status = status
        rec.error = error
        rec.finished = _now()
        rec.duration_s = round(rec.duration_s + time.monotonic() - t0, 3)
        self.save()

    def _finish_after_error(self, rec: StageRecord, status: str, t0: float, error: str) -> None:
        # The disk may be full or gone: the error that stopped the stage is the one to report, not a second
        # one from recording it (the manifest then still says "running", the run's lock is free, and the lock
        # file says why, for `invoke status`).
        try:
            self._finish(rec, status, t0, error)
        except OSError:
            note_end(self.root, error)

    def retire_report(self) -> Path | None:
        """Move ``report/`` to ``report.stale/`` (replacing an older one); return where it went, if anywhere.

        One rename, so there is no moment at which an old report still looks current while its inputs change.
        """
        current = self.path(REPORT_DIR)
        if not current.is_dir():
            return None
        stale = self.path(STALE_REPORT_DIR)
        if stale.exists():
            shutil.rmtree(stale)
        os.replace(current, stale)
        _mark_stale(stale / REPORT_MD)
        rec = self.record("report")
        if rec is not None and rec.status == StageStatus.DONE:
            rec.status = StageStatus.STALE
            rec.error = f"moved to {STALE_REPORT_DIR}/: the run started recomputing its inputs"
            self.save()
        return stale


def _mark_stale(report_md: Path) -> None:
    """First line of a retired report.md: say it is stale. Best effort: the directory's name already says it,
    and on a full disk the rewrite cannot happen."""
    if not report_md.is_file():
        return
    note = (f"> **Stale report** (retired {_now()}): the run started recomputing what this report was made from. "
            f"The current report is `{REPORT_DIR}/{REPORT_MD}` once the run finishes.\n\n")
    with contextlib.suppress(OSError):
        atomic_io.write_text(report_md, note + report_md.read_text(encoding="utf-8", errors="replace"))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _read_manifest(path: Path) -> RunManifest:
    try:
        return RunManifest.from_dict(read_json(path, "a run manifest"), str(path))
    except UserError as exc:
        detail = str(exc).removeprefix(f"{path}: ")
        raise UserError(f"{path}: not a valid run manifest ({detail})") from None


def valid_run_id(run_id: str) -> bool:
    """A plain name: a run id never reaches outside the runs directory."""
    return bool(_RUN_ID_RE.fullmatch(run_id))


def check_run_id(run_id: str) -> None:
    if not valid_run_id(run_id):
        raise UserError(f"--run {run_id!r}: a run id may hold letters, digits, '.', '_' and '-' only")


class RunStore:
    """The directory that holds runs (``runs/`` by default)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _ensure_writable(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--runs-dir {self.root}: cannot create the runs directory ({exc.strerror})") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise UserError(f"--runs-dir {self.root}: the runs directory is not writable")

    def create_or_open(self, run_id: str | None, settings: dict[str, Any], version: str) -> Run:
        """Open ``run_id`` for writing if it exists (resume), else create it; either way hold its lock.

        A new id is made from the time when omitted. The manifest is read (or created) under the lock, so two
        processes starting the same new run cannot both create it.
        """
        if run_id is None:
            run_id = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        check_run_id(run_id)
        self._ensure_writable()
        root = self.root / run_id
        root.mkdir(exist_ok=True)
        lock = RunLock(root).acquire()
        try:
            if (root / MANIFEST).exists():
                run = Run(root, _read_manifest(root / MANIFEST), lock)
                run.manifest.settings.update(settings)
            else:
                run = Run(root, RunManifest(run_id=run_id, created=_now(), prbench_version=version,
                                            settings=settings), lock)
            run.save()
        except BaseException:
            lock.release()
            raise
        return run

    def seed_side(self, run_id: str, side: str, source: Run, version: str) -> list[str]:
        """Start the new run ``run_id`` with ``side`` as ``source`` left it: a copy of the side's directory and the
        records of its finished stages, which the new run then skips as done where it gives them the same inputs
        (a stage's inputs name no path of its run directory) and runs again where it does not. The keys of the
        stages taken; none, and nothing written, when ``run_id`` exists already or ``source`` finished none."""
        taken = {key: replace(record) for key, record in source.manifest.stages.items()
                 if key.startswith(f"{side}/") and record.status == StageStatus.DONE}
        if not taken or (self.root / run_id / MANIFEST).exists():
            return []
        with self.create_or_open(run_id, {}, version) as run:
            # Copied before its records are written: a copy cut short (a full disk) leaves records of nothing.
            shutil.copytree(source.path(side), run.path(side), symlinks=True)
            run.manifest.stages.update(taken)
            run.save()
        return sorted(taken)

    def open(self, run_id: str, *, write: bool = False) -> Run:
        """Open an existing run: to read (no lock; ``invoke status``) or, with ``write``, holding its lock."""
        check_run_id(run_id)  # `invoke status --run ../x` must not read outside the runs directory
        root = self.root / run_id
        path = root / MANIFEST
        if not path.exists():
            raise UserError(f"run '{run_id}': no {MANIFEST} under {root}")
        if not write:
            return Run(root, _read_manifest(path))
        lock = RunLock(root).acquire()
        try:
            return Run(root, _read_manifest(path), lock)  # read under the lock: the holder before may have written
        except BaseException:
            lock.release()
            raise

    def latest(self) -> Run:
        # Only regular manifests: the scan must never open a FIFO (its read would wait forever) or a device.
        found = ((p, p.stat()) for p in self.root.glob(f"*/{MANIFEST}")) if self.root.exists() else iter(())
        runs = [p for p, st in sorted(found, key=lambda f: f[1].st_mtime) if stat.S_ISREG(st.st_mode)]
        if not runs:
            raise UserError(f"--runs-dir {self.root}: no runs yet")
        return self.open(runs[-1].parent.name)
