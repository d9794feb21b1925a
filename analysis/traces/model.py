"""The common, reader-independent form of a profile: device activities, runtime calls and step windows.

Every reader (Kineto, rocprof, nsys, compiled-module ``-p`` output) fills a :class:`TraceBuilder` and returns a
:class:`TraceData`. Device activities are held column-wise in numpy arrays (one row per kernel, memcpy or
memset) so a trace with millions of kernels costs tens of bytes per kernel, not a Python dict each.
Times are integer nanoseconds everywhere: readers convert their native unit (Kineto µs, rocprof/nsys ns) once.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# Kinds of device activity. CPU_KERNEL is an Inductor C++ kernel (``cpp_fused_*``) or a CPU extern GEMM seen
# as a cpu_op in a CPU-only profile: the CPU is then the device whose time we break down.
KERNEL, MEMCPY, MEMSET, CPU_KERNEL = 0, 1, 2, 3
KIND_NAMES = {KERNEL: "kernel", MEMCPY: "memcpy", MEMSET: "memset", CPU_KERNEL: "cpu_kernel"}


@dataclass(frozen=True)
class KernelEvent:
    """One device activity (kernel, memcpy, memset or CPU kernel), times in ns."""

    name: str
    start_ns: int
    dur_ns: int
    kind: str = "kernel"
    device: int = -1
    stream: int = -1
    correlation: int = -1

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass(frozen=True)
class RuntimeCall:
    """A host runtime API call (launch, memcpy, synchronize), times in ns."""

    name: str
    start_ns: int
    dur_ns: int
    correlation: int = -1


@dataclass(frozen=True)
class StepWindow:
    """A ``ProfilerStep#N`` annotation; ``on_device`` marks the GPU-side projection (gpu_user_annotation)."""

    name: str
    start_ns: int
    end_ns: int
    on_device: bool = False


@dataclass(frozen=True)
class KernelAggregate:
    """A pre-aggregated kernel row from summary-only formats (stats CSVs, nsys sums, ``-p`` tables)."""

    name: str
    calls: int
    total_ns: int
    min_ns: int | None = None
    max_ns: int | None = None
    kind: str = "kernel"


@dataclass(frozen=True)
class OpShape:
    """What ``record_shapes`` wrote for one op call: ``Input Dims``, ``Input type``, ``Concrete Inputs`` and,
    where the profiler wrote them (PyTorch 2.1 and later), ``Input Strides`` (empty otherwise)."""

    dims: tuple[Any, ...]
    types: tuple[str, ...]
    concrete: tuple[str, ...]
    strides: tuple[Any, ...] = ()


# The collective metadata Kineto copies onto an NCCL/RCCL kernel's args from its record_param_comms op.
COLLECTIVE_ARG_KEYS = ("Collective name", "Process Group Name", "Process Group Ranks", "Group size", "dtype",
                       "In msg nelems", "Out msg nelems", "In split size", "Out split size")


@dataclass(frozen=True)
class CollectiveArgs:
    """:data:`COLLECTIVE_ARG_KEYS` of one communication kernel, as text ("" when the trace does not carry it)."""

    collective: str
    group_name: str
    group_ranks: str
    group_size: str
    dtype: str
    in_nelems: str
    out_nelems: str
    in_split: str
    out_split: str


@dataclass(frozen=True)
class SkippedEvents:
    """Events a report would use that were left out because their ``ts`` or ``dur`` is missing (or, read with
    ``lenient``, malformed): never read as 0. ``first`` says where the first one is and what it lacks."""

    count: int = 0
    first: str = ""

    def sentence(self) -> str:
        """The report's line about them ("" when there are none)."""
        if not self.count:
            return ""
        return (f"{self.count} event(s) left out for a missing or malformed 'ts'/'dur' (read with --lenient; "
                f"first: {self.first}): the tables do not count them.")


@dataclass
class OpTable:
    """The host ops that launched device work (one row per op call), held column-wise.

    Only ops that are the innermost ``cpu_op`` around some launch are kept, so the table is as long as the
    number of launching op calls, not the number of ops in the trace.
    """

    name_id: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int32))
    shape_id: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int32))
    shapes: list[OpShape] = field(default_factory=list)
    dur_ns: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # each call's host duration

    def __len__(self) -> int:
        return int(self.name_id.size)


@dataclass
class TraceData:
    """Everything the analyses need from one trace file (one rank)."""

    path: Path
    source: str
    names: list[str]
    start_ns: np.ndarray
    dur_ns: np.ndarray
    name_id: np.ndarray
    kind: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    rt_start_ns: np.ndarray
    rt_dur_ns: np.ndarray
    rt_name_id: np.ndarray
    rt_correlation: np.ndarray
    steps: list[StepWindow] = field(default_factory=list)
    aggregates: list[KernelAggregate] = field(default_factory=list)
    rank: int | None = None
    world_size: int | None = None
    platform: str = "unknown"
    device_names: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    # Op attribution (Kineto traces with cpu_op events): the launching op of every device event (index into
    # ``ops``, −1 when no op encloses its launch), the Inductor-compiled region around its launch
    # (``## Call CompiledFxGraph <hash> ##``, ``CompiledFunction``, ``Torch-Compiled Region``; an index into
    # ``names``, −1 if none), and whether the trace had host ops at all.
    ops: OpTable = field(default_factory=OpTable)
    event_op: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int32))
    event_graph: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int32))
    has_host_ops: bool = False
    skipped: SkippedEvents = field(default_factory=SkippedEvents)
    collectives: dict[int, CollectiveArgs] = field(default_factory=dict)  # device event index → its metadata

    @property
    def n_events(self) -> int:
        return int(self.start_ns.size)

    @property
    def end_ns(self) -> np.ndarray:
        return self.start_ns + self.dur_ns

    @property
    def has_timeline(self) -> bool:
        """Summary-only formats carry aggregates but no per-event times."""
        return self.n_events > 0

    def event_names(self) -> np.ndarray:
        """Name of every device event, as an object array aligned with the columns."""
        return np.asarray(self.names, dtype=object)[self.name_id] if self.n_events else np.array([], dtype=object)

    def events(self) -> Iterator[KernelEvent]:
        for i in range(self.n_events):
            yield KernelEvent(
                name=self.names[self.name_id[i]],
                start_ns=int(self.start_ns[i]),
                dur_ns=int(self.dur_ns[i]),
                kind=KIND_NAMES[int(self.kind[i])],
                device=int(self.device[i]),
                stream=int(self.stream[i]),
                correlation=int(self.correlation[i]),
            )

    def runtime_calls(self) -> Iterator[RuntimeCall]:
        for i in range(int(self.rt_start_ns.size)):
            yield RuntimeCall(
                name=self.names[self.rt_name_id[i]],
                start_ns=int(self.rt_start_ns[i]),
                dur_ns=int(self.rt_dur_ns[i]),
                correlation=int(self.rt_correlation[i]),
            )

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else self.path.name


class TraceBuilder:
    """Append-only columnar buffers (``array``) that readers fill; ``build`` turns them into numpy arrays."""

    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.source = source
        self.names: list[str] = []
        self._name_ids: dict[str, int] = {}
        self.start_ns = array("q")
        self.dur_ns = array("q")
        self.name_id = array("i")
        self.kind = array("b")
        self.device = array("i")
        self.stream = array("q")
        self.correlation = array("q")
        self.rt_start_ns = array("q")
        self.rt_dur_ns = array("q")
        self.rt_name_id = array("i")
        self.rt_correlation = array("q")
        self.steps: list[StepWindow] = []
        self.aggregates: list[KernelAggregate] = []
        self.rank: int | None = None
        self.world_size: int | None = None
        self.platform = "unknown"
        self.device_names: list[str] = []
        self.metadata: dict[str, Any] = {}
        self.ops = OpTable()
        self.event_op: np.ndarray | None = None
        self.event_graph: np.ndarray | None = None
        self.has_host_ops = False
        self.skipped = SkippedEvents()
        self.collectives: dict[int, CollectiveArgs] = {}

    def intern(self, name: str) -> int:
        idx = self._name_ids.get(name)
        if idx is None:
            idx = self._name_ids[name] = len(self.names)
            self.names.append(name)
        return idx

    def add_event(self, name: str, start_ns: int, dur_ns: int, kind: int = KERNEL, device: int = -1,
                  stream: int = -1, correlation: int = -1) -> None:
        self.start_ns.append(start_ns)
        self.dur_ns.append(max(dur_ns, 0))
        self.name_id.append(self.intern(name))
        self.kind.append(kind)
        self.device.append(device)
        self.stream.append(stream)
        self.correlation.append(correlation)

    def name_ids(self, names: list[str]) -> np.ndarray:
        """Interned ids of many names at once (one dict lookup per name, new names added in order)."""
        for name in dict.fromkeys(names):
            self.intern(name)
        return np.fromiter(map(self._name_ids.__getitem__, names), dtype=np.int32, count=len(names))

    def add_events(self, names: list[str], start_ns: np.ndarray, dur_ns: np.ndarray, kind: Any, device: Any,
                   stream: Any, correlation: Any) -> None:
        """Many device events at once: the column form of :meth:`add_event` (scalars or arrays per column)."""
        n = len(names)

        def column(values: Any, dtype: Any) -> bytes:
            return np.broadcast_to(np.asarray(values, dtype=dtype), (n,)).tobytes()

        self.start_ns.frombytes(column(start_ns, np.int64))
        self.dur_ns.frombytes(column(np.maximum(np.asarray(dur_ns, dtype=np.int64), 0), np.int64))
        self.name_id.frombytes(self.name_ids(names).tobytes())
        self.kind.frombytes(column(kind, np.int8))
        self.device.frombytes(column(device, np.int32))
        self.stream.frombytes(column(stream, np.int64))
        self.correlation.frombytes(column(correlation, np.int64))

    def add_runtimes(self, names: list[str], start_ns: np.ndarray, dur_ns: np.ndarray, correlation: Any) -> None:
        """Many runtime calls at once: the column form of :meth:`add_runtime`."""
        n = len(names)
        self.rt_start_ns.frombytes(np.asarray(start_ns, dtype=np.int64).tobytes())
        self.rt_dur_ns.frombytes(np.maximum(np.asarray(dur_ns, dtype=np.int64), 0).tobytes())
        self.rt_name_id.frombytes(self.name_ids(names).tobytes())
        self.rt_correlation.frombytes(np.broadcast_to(np.asarray(correlation, dtype=np.int64), (n,)).tobytes())

    def add_runtime(self, name: str, start_ns: int, dur_ns: int, correlation: int = -1) -> None:
        self.rt_start_ns.append(start_ns)
        self.rt_dur_ns.append(max(dur_ns, 0))
        self.rt_name_id.append(self.intern(name))
        self.rt_correlation.append(correlation)

    def build(self) -> TraceData:
        def arr(a: array, dtype: Any) -> np.ndarray:
            return np.frombuffer(a, dtype=dtype).copy() if len(a) else np.empty(0, dtype=dtype)

        return TraceData(
            path=self.path,
            source=self.source,
            names=self.names,
            start_ns=arr(self.start_ns, np.int64),
            dur_ns=arr(self.dur_ns, np.int64),
            name_id=arr(self.name_id, np.int32),
            kind=arr(self.kind, np.int8),
            device=arr(self.device, np.int32),
            stream=arr(self.stream, np.int64),
            correlation=arr(self.correlation, np.int64),
            rt_start_ns=arr(self.rt_start_ns, np.int64),
            rt_dur_ns=arr(self.rt_dur_ns, np.int64),
            rt_name_id=arr(self.rt_name_id, np.int32),
            rt_correlation=arr(self.rt_correlation, np.int64),
            steps=sorted(self.steps, key=lambda s: s.start_ns),
            aggregates=self.aggregates,
            rank=self.rank,
            world_size=self.world_size,
            platform=self.platform,
            device_names=self.device_names,
            metadata=self.metadata,
            ops=self.ops,
            event_op=self.event_op if self.event_op is not None else np.full(len(self.start_ns), -1, dtype=np.int32),
            event_graph=self.event_graph if self.event_graph is not None
            else np.full(len(self.start_ns), -1, dtype=np.int32),
            has_host_ops=self.has_host_ops,
            skipped=self.skipped,
            collectives=self.collectives,
        )
