"""The common, reader-independent form of a profile: device activities, runtime calls and step windows.

Every reader (Kineto, rocprof, nsys, compiled-module ``-p`` output) fills a :class:`TraceBuilder` and returns a
:class:`TraceData`. Device activities are held column-wise (one row per kernel, memcpy or memset) so a trace with
millions of kernels costs tens of bytes per kernel, not a Python dict each: in ``array`` columns
(:class:`EventColumns`, what the lean analyses read), seen as numpy arrays (``TraceData.start_ns`` …, zero-copy
views) by the analyses that need numpy. numpy is imported only then, and the op attribution (numpy too) is
computed on first use: reading a trace and its GPU timeline and kernel totals import neither numpy nor pandas
(their imports took 0.28 s of CPU, over twice the decode of a 14 MB trace).
Times are integer nanoseconds everywhere: readers convert their native unit (Kineto µs, rocprof/nsys ns) once.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
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

    name_id: np.ndarray
    shape_id: np.ndarray
    shapes: list[OpShape]
    dur_ns: np.ndarray  # each call's host duration
    # Each call's host start and end (ns; empty when the reader has no host times): only the serving-step lookup
    # of KV-cache attention reads them (analysis.traces.analyses.serving_steps).
    start_ns: np.ndarray | None = None
    end_ns: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.name_id.size)

    @staticmethod
    def empty() -> OpTable:
        import numpy as np  # only where ops are used (see the module docstring)

        return OpTable(np.empty(0, dtype=np.int32), np.empty(0, dtype=np.int32), [], np.empty(0, dtype=np.int64))


@dataclass(frozen=True)
class Attribution:
    """The launching op of every device event (index into ``ops``, −1 when no op encloses its launch) and the
    Inductor-compiled region around its launch (``## Call CompiledFxGraph <hash> ##``, ``CompiledFunction``,
    ``Torch-Compiled Region``; an index into the trace's ``names``, −1 if none)."""

    ops: OpTable
    event_op: np.ndarray
    event_graph: np.ndarray

    @staticmethod
    def none(n_events: int) -> Attribution:
        import numpy as np  # only where ops are used (see the module docstring)

        unlinked = np.full(n_events, -1, dtype=np.int32)
        return Attribution(OpTable.empty(), unlinked, unlinked.copy())


@dataclass
class EventColumns:
    """The device activities (``start_ns`` … ``correlation``) and the runtime calls (``rt_*``), one ``array`` each."""

    start_ns: array = field(default_factory=lambda: array("q"))
    dur_ns: array = field(default_factory=lambda: array("q"))
    name_id: array = field(default_factory=lambda: array("i"))
    kind: array = field(default_factory=lambda: array("b"))
    device: array = field(default_factory=lambda: array("i"))
    stream: array = field(default_factory=lambda: array("q"))
    correlation: array = field(default_factory=lambda: array("q"))
    rt_start_ns: array = field(default_factory=lambda: array("q"))
    rt_dur_ns: array = field(default_factory=lambda: array("q"))
    rt_name_id: array = field(default_factory=lambda: array("i"))
    rt_correlation: array = field(default_factory=lambda: array("q"))


_DTYPES = {"q": "int64", "i": "int32", "b": "int8"}  # array typecode → numpy dtype


class _NumpyColumn:
    """``TraceData.<column>``: that column of ``TraceData.columns`` as a numpy array, a zero-copy view made on first
    use (and then kept in the instance's ``__dict__``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _NumpyColumn: ...
    @overload
    def __get__(self, obj: TraceData, owner: type | None = None) -> np.ndarray: ...

    def __get__(self, obj: TraceData | None, owner: type | None = None) -> np.ndarray | _NumpyColumn:
        if obj is None:
            return self
        import numpy as np  # only where an analysis needs numpy (see the module docstring)

        values: array = getattr(obj.columns, self.name)
        dtype = np.dtype(_DTYPES[values.typecode])
        view = np.frombuffer(values, dtype=dtype) if len(values) else np.empty(0, dtype=dtype)
        obj.__dict__[self.name] = view
        return view


@dataclass
class TraceData:
    """Everything the analyses need from one trace file (one rank)."""

    path: Path
    source: str
    names: list[str]
    columns: EventColumns
    steps: list[StepWindow] = field(default_factory=list)
    # A serving engine's step annotations (vLLM ``execute_…``, SGLang ``step[…]``, ATOM ``prefill[…]``/``decode[…]``
    # user_annotations), by start: the context of KV-cache attention (analysis.traces.analyses.serving_steps).
    serving_steps: list[StepWindow] = field(default_factory=list)
    aggregates: list[KernelAggregate] = field(default_factory=list)
    rank: int | None = None
    world_size: int | None = None
    platform: str = "unknown"
    device_names: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    # Whether the trace had host ops (Kineto cpu_op events); then ``link_ops`` computes the op attribution
    # (:class:`Attribution`, see ``ops``, ``event_op``, ``event_graph``) on first use.
    has_host_ops: bool = False
    link_ops: Callable[[TraceData], Attribution] | None = field(default=None, repr=False, compare=False)
    skipped: SkippedEvents = field(default_factory=SkippedEvents)
    collectives: dict[int, CollectiveArgs] = field(default_factory=dict)  # device event index → its metadata

    start_ns = _NumpyColumn()
    dur_ns = _NumpyColumn()
    name_id = _NumpyColumn()
    kind = _NumpyColumn()
    device = _NumpyColumn()
    stream = _NumpyColumn()
    correlation = _NumpyColumn()
    rt_start_ns = _NumpyColumn()
    rt_dur_ns = _NumpyColumn()
    rt_name_id = _NumpyColumn()
    rt_correlation = _NumpyColumn()

    @cached_property
    def attribution(self) -> Attribution:
        """The launching op and compiled region of every device event (none without host ops)."""
        return self.link_ops(self) if self.link_ops is not None else Attribution.none(self.n_events)

    @property
    def ops(self) -> OpTable:
        """The host ops that launched device work (see :class:`OpTable`)."""
        return self.attribution.ops

    @property
    def event_op(self) -> np.ndarray:
        return self.attribution.event_op

    @property
    def event_graph(self) -> np.ndarray:
        return self.attribution.event_graph

    @property
    def n_events(self) -> int:
        return len(self.columns.start_ns)

    @property
    def end_ns(self) -> np.ndarray:
        return self.start_ns + self.dur_ns

    @property
    def has_timeline(self) -> bool:
        """Summary-only formats carry aggregates but no per-event times."""
        return self.n_events > 0

    def event_names(self) -> np.ndarray:
        """Name of every device event, as an object array aligned with the columns."""
        import numpy as np  # only where an analysis needs numpy (see the module docstring)

        return np.asarray(self.names, dtype=object)[self.name_id] if self.n_events else np.array([], dtype=object)

    def events(self) -> Iterator[KernelEvent]:
        c = self.columns
        for name_id, start, dur, kind, device, stream, corr in zip(c.name_id, c.start_ns, c.dur_ns, c.kind, c.device,
                                                                   c.stream, c.correlation, strict=True):
            yield KernelEvent(self.names[name_id], start, dur, KIND_NAMES[kind], device, stream, corr)

    def runtime_calls(self) -> Iterator[RuntimeCall]:
        c = self.columns
        for name_id, start, dur, corr in zip(c.rt_name_id, c.rt_start_ns, c.rt_dur_ns, c.rt_correlation, strict=True):
            yield RuntimeCall(self.names[name_id], start, dur, corr)

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else self.path.name


def extend(column: array, values: Iterable[Any]) -> None:
    """``column.extend(values)``, about twice as fast: ``array.extend`` grows the array one value at a time,
    ``fromlist`` converts a list at its size (35 against 77 ns a float, 69 against 157 ns an int)."""
    if isinstance(values, array):
        column.extend(values)  # (of the same type: a copy of its bytes)
    else:
        column.fromlist(values if isinstance(values, list) else list(values))


def _extend(column: array, values: Any, n: int) -> None:
    """Append ``n`` values to ``column``: one value repeated (a scalar) or a sequence of ``n`` whole numbers."""
    extend(column, repeat(values, n) if isinstance(values, int) else
           values.tolist() if hasattr(values, "tolist") else values)


class TraceBuilder:
    """Append-only columnar buffers (``array``, :class:`EventColumns`) that readers fill; ``build`` hands them to
    the :class:`TraceData`."""

    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.source = source
        self.names: list[str] = []
        self._name_ids: dict[str, int] = {}
        self.columns = EventColumns()
        self.steps: list[StepWindow] = []
        self.serving_steps: list[StepWindow] = []
        self.aggregates: list[KernelAggregate] = []
        self.rank: int | None = None
        self.world_size: int | None = None
        self.platform = "unknown"
        self.device_names: list[str] = []
        self.metadata: dict[str, Any] = {}
        self.has_host_ops = False
        self.link_ops: Callable[[TraceData], Attribution] | None = None
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
        c = self.columns
        c.start_ns.append(start_ns)
        c.dur_ns.append(max(dur_ns, 0))
        c.name_id.append(self.intern(name))
        c.kind.append(kind)
        c.device.append(device)
        c.stream.append(stream)
        c.correlation.append(correlation)

    def name_ids(self, names: list[str]) -> Iterator[int]:
        """Interned ids of many names at once (one dict lookup per name, new names added in order)."""
        for name in dict.fromkeys(names):
            self.intern(name)
        return map(self._name_ids.__getitem__, names)

    def add_events(self, names: list[str], start_ns: Iterable[int], dur_ns: Iterable[int], kind: Any, device: Any,
                   stream: Any, correlation: Any) -> None:
        """Many device events at once: the column form of :meth:`add_event` (each of ``kind``, ``device``,
        ``stream`` and ``correlation`` one value for all or a sequence of whole numbers)."""
        n, c = len(names), self.columns
        extend(c.start_ns, start_ns)
        extend(c.dur_ns, map(max, dur_ns, repeat(0)))
        extend(c.name_id, self.name_ids(names))
        for column, values in ((c.kind, kind), (c.device, device), (c.stream, stream), (c.correlation, correlation)):
            _extend(column, values, n)

    def add_runtimes(self, names: list[str], start_ns: Iterable[int], dur_ns: Iterable[int], correlation: Any) -> None:
        """Many runtime calls at once: the column form of :meth:`add_runtime`."""
        c = self.columns
        extend(c.rt_start_ns, start_ns)
        extend(c.rt_dur_ns, map(max, dur_ns, repeat(0)))
        extend(c.rt_name_id, self.name_ids(names))
        _extend(c.rt_correlation, correlation, len(names))

    def add_runtime(self, name: str, start_ns: int, dur_ns: int, correlation: int = -1) -> None:
        c = self.columns
        c.rt_start_ns.append(start_ns)
        c.rt_dur_ns.append(max(dur_ns, 0))
        c.rt_name_id.append(self.intern(name))
        c.rt_correlation.append(correlation)

    def build(self) -> TraceData:
        return TraceData(
            path=self.path,
            source=self.source,
            names=self.names,
            columns=self.columns,
            steps=sorted(self.steps, key=lambda s: s.start_ns),
            serving_steps=sorted(self.serving_steps, key=lambda s: s.start_ns),
            aggregates=self.aggregates,
            rank=self.rank,
            world_size=self.world_size,
            platform=self.platform,
            device_names=self.device_names,
            metadata=self.metadata,
            has_host_ops=self.has_host_ops,
            link_ops=self.link_ops,
            skipped=self.skipped,
            collectives=self.collectives,
        )
