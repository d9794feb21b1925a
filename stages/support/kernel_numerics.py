"""Kernel workers' side of the numerical A/B: record a kernel's inputs and outputs, and run the PR's kernel on
base's recorded inputs (``analysis.kernels.numerics`` holds the files and the comparison).

A worker whose environment names its side's ``numerics.json`` (``analysis.kernels.numerics.CONFIG_VAR``, set by the
kernel plan) records each kernel once per run: at the first visit that finds no record of the kernel's current
code, the graph (or the Triton kernel file) runs once more on its seeded inputs with the kernel wrapped, so the
first launch of the kernel copies every tensor argument before it and every argument it may write after it
(``self``). On the PR side, once base's record of the partner exists (base and PR visit a block in turn, so from
the second visit on, at the latest in the next round), the PR kernel also runs on base's recorded inputs
(``cross``): its arguments are set to base's values, it runs, its outputs are copied, and its own values are put
back and it runs again, so the rest of the graph sees what it always sees. A record that exists is never redone:
the cost is one more run of each graph per side and run, with copies of its kernels' buffers.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.kernels.numerics import CONFIG_VAR, dump_path, read_dump, write_dump

MAX_BYTES = 256 << 20  # a launch whose tensor arguments exceed this is not recorded (full-size models)
Paths = tuple[Path | None, Path | None, Path | None]  # self record to write, cross record to write, base's to read


class Recorder:
    """The side's configuration and the jobs already recorded in this worker."""

    def __init__(self, config: dict[str, Any] | None, directory: Path | None) -> None:
        self.config = config
        self.directory = directory
        self.done: set[int] = set()

    @classmethod
    def from_environment(cls) -> Recorder:
        path = os.environ.get(CONFIG_VAR)
        if not path or not Path(path).is_file():
            return cls(None, None)
        return cls(json.loads(Path(path).read_text(encoding="utf-8")), Path(path).parent)

    def wanted(self, kernels: dict[str, str]) -> tuple[dict[str, Paths], bool]:
        """{kernel: (its self record to write, its cross record to write, base's record to read)} for the kernels
        something can be recorded for now, and whether anything is left for a later visit (base's record of a
        partner not there yet)."""
        if self.config is None or self.directory is None:
            return {}, False
        organized = Path(self.config["organized"])
        reference = self.config.get("reference")
        partners = self.config.get("partners") or {}
        wanted, later = {}, False
        for name, rel in kernels.items():
            try:
                own = dump_path(self.directory, organized, rel, "self")
                cross = base = None
                if reference and rel in partners:
                    cross = dump_path(self.directory, organized, rel, "cross")
                    base = dump_path(Path(reference["outputs"]), Path(reference["organized"]), partners[rel],
                                     "self")
            except OSError:  # a kernel file that is not there has nothing to tie a record to
                continue
            if cross is not None and base is not None:
                if not cross.exists() and not base.exists():
                    later = True
                if cross.exists() or not base.exists():
                    cross = base = None
            if not own.exists() or cross is not None:
                wanted[name] = (None if own.exists() else own, cross, base)
        return wanted, later

    def _todo(self, job_id: int, kernels: dict[str, str]) -> dict[str, Paths]:
        if self.config is None or job_id in self.done:
            return {}
        wanted, later = self.wanted(kernels)
        if not later:
            self.done.add(job_id)  # what is wanted now is recorded below: nothing is left for this worker
        return wanted

    def guarded(self, job_id: int, record: Callable[[], None]) -> None:
        """Recording must never cost a visit its timing: a failure is printed to the worker's log, and the job
        is not recorded again in this worker."""
        try:
            record()
        except Exception:
            traceback.print_exc()
            self.done.add(job_id)

    def record_graph(self, job_id: int, kernels: dict[str, str], module: Any, args: Callable[[], list[Any]],
                     writable: dict[str, set[int] | None]) -> None:
        """Run the graph once more on ``args()`` with the wanted kernels' first launches recorded."""
        wanted = self._todo(job_id, kernels)
        if not wanted:
            return
        seen: set[str] = set()

        def wrapped(name: str, function: Any) -> Any:
            def launch(*call_args: Any) -> Any:
                if name in seen:
                    return function(*call_args)
                seen.add(name)
                return _first_launch(name, function, call_args, writable.get(name), wanted[name])
            return launch

        originals = {name: getattr(module, name) for name in wanted if hasattr(module, name)}
        try:
            for name, function in originals.items():
                setattr(module, name, wrapped(name, function))
            module.call(list(args()))
        finally:
            for name, function in originals.items():
                setattr(module, name, function)

    def record_call(self, job_id: int, kernels: dict[str, str], module: Any, args: list[Any]) -> None:
        """A Triton kernel file: its ``call`` on its seeded arguments is the launch (every tensor may be written)."""
        wanted = self._todo(job_id, kernels)
        for name, paths in wanted.items():
            _first_launch(name, lambda *a: module.call(list(a)), tuple(args), None, paths)


def _dtype(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _numpy(tensor: Any) -> Any:
    import torch

    keep = torch.float64 if tensor.dtype == torch.float64 else (
        torch.float32 if tensor.is_floating_point() else tensor.dtype)
    return tensor.detach().to("cpu", keep).numpy().copy()


def _first_launch(name: str, function: Any, args: tuple[Any, ...], positions: set[int] | None,
                  paths: Paths) -> Any:
    import torch

    own, cross, base = paths
    tensors = {i: a for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
    written = {i for i in tensors if positions is None or i in positions}
    meta: dict[str, Any] = {"kernel": name, "dtypes": {str(i): _dtype(t) for i, t in tensors.items()},
                            "error": None}
    if sum(t.numel() * t.element_size() for t in tensors.values()) > MAX_BYTES:
        meta["error"] = f"buffers above {MAX_BYTES >> 20} MiB are not recorded"
        for path in (own, cross):
            if path is not None:
                write_dump(path, {}, {}, meta)
        return function(*args)
    if cross is not None and base is not None:
        _run_on(cross, base, function, args, tensors, written, meta)
    before = {i: _numpy(t) for i, t in tensors.items()} if own is not None else {}
    result = function(*args)
    if own is not None:
        write_dump(own, before, {i: _numpy(tensors[i]) for i in written}, meta)
    return result


def _run_on(path: Path, base: Path, function: Any, args: tuple[Any, ...], tensors: dict[int, Any],
            written: set[int], meta: dict[str, Any]) -> None:
    """The kernel on base's recorded inputs (its own restored afterwards), its outputs written to ``path``."""
    import torch

    recorded = read_dump(base)
    shapes = {i: list(t.shape) for i, t in tensors.items()}
    if recorded.inputs.keys() != tensors.keys() or any(list(recorded.inputs[i].shape) != shapes[i]
                                                       for i in tensors):
        write_dump(path, {}, {}, {**meta, "error": "its tensor arguments differ from base's in number or shape"})
        return
    if (recorded.meta.get("dtypes") or {}) != meta["dtypes"]:
        write_dump(path, {}, {}, {**meta, "error": "its tensor arguments differ from base's in dtype"})
        return
    own = {i: t.clone() for i, t in tensors.items()}
    for i, t in tensors.items():
        t.copy_(torch.from_numpy(recorded.inputs[i]).to(t.dtype))
    function(*args)
    write_dump(path, {}, {i: _numpy(tensors[i]) for i in written}, meta)
    for i, t in tensors.items():
        t.copy_(own[i])
