"""Isolated timing of Inductor's C++ kernels: each kernel of a compiled graph, its launches replayed alone.

A C++ kernel of 0.1–2 µs timed inside its graph measures mostly what the kernels before it left in the caches:
the same kernel moved by 5–30 % from one visit to the next in one process, so no number of rounds could resolve
a 2 % change. So a graph is run once to *record* its launches (the kernel, its arguments, and a copy of every
buffer it may write, taken just before it runs), and each kernel's launches are then *replayed* on their own,
back to back (none of the graph's other launches between: ``time_launches``), as the seed times a standalone kernel
file: the recorded buffers are restored first, so an in-place kernel (GELU on its own
output) computes on the same values every time instead of on what its previous replay left, and the kernel runs
with its inputs warm in the cache. A worker's visit first copies each kernel's buffers to fresh allocations at a
random offset (``placed``), so where one side's recording happened to put them is not an offset between the sides;
and it runs the kernel from one of several copies of its shared library (``code_copies``), drawn at random, so
where a process happened to map the code is not one either.

A replay's time is the kernel's own ``graph_<n>_<kernel>`` profiler event (the graph must be compiled with
``cpp.enable_kernel_profile``): it starts inside the kernel, so neither the restore nor the Python binding's
call overhead is counted. The restores and the placement copies leave no profiler event at all (`unrecorded`):
they are not timed, and their events were four in five of a visit's.

Which arguments a kernel may write comes from its declared argument types (``cpp_pybinding(['float*', 'const
float*', ...])`` in the graph module): every pointer not declared ``const``. A module without declared types
(the older ctypes form) has every tensor argument restored.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foundation.formats.kernel_index import embedded_kernels

PROFILER_EVENT = re.compile(r"^graph_\d+_(?P<kernel>.+)$")


@dataclass
class Launch:
    """One call of a kernel as the graph made it, with what it may write as it was before the call."""

    kernel: str
    function: Callable[..., Any]
    args: tuple[Any, ...]
    saved: list[tuple[Any, Any]] = field(default_factory=list)  # (live tensor, its value before the launch)
    # ``function`` and the same kernel from other copies of its shared library (`code_copies`); a visit draws one
    copies: tuple[Callable[..., Any], ...] = ()

    def replay(self) -> None:
        self.restore()
        self.function(*self.args)

    def restore(self) -> None:
        """Put back what the launch may write, as it was before the graph made it (no profiler event: `unrecorded`)."""
        if self.saved:
            with unrecorded():
                for live, before in self.saved:
                    live.copy_(before)


@functools.cache
def _op_recording_switch() -> Callable[[bool], None]:
    """torch's switch for its op-level profiler callbacks (this thread's); a torch without it records everything."""
    import torch

    return getattr(torch._C._autograd, "_enable_record_function", lambda enabled: None)


@contextlib.contextmanager
def unrecorded() -> Iterator[None]:
    """The torch ops inside leave no event in an open profiler window.

    A visit's window held an ``aten::copy_`` (and its ``aten::empty``, ``as_strided``...) event for every restore
    and placement copy: 793 events per C++ graph visit of the README run, 157 of them kernels. Reading and
    nesting them made most of 6.3 ms of overhead per visit against 0.4 ms of samples (a kernel round's timed
    visits: 5.4 s of warm-up and overhead, 0.9 s of samples); without them 2.5 ms. A kernel's own event and its
    samples are the same: no op of a restore or a copy runs inside a kernel's event. Not nested: leaving it turns
    recording back on.
    """
    record_ops = _op_recording_switch()
    record_ops(False)
    try:
        yield
    finally:
        record_ops(True)


def writable_arguments(module_path: str) -> dict[str, set[int] | None]:
    """{kernel variable: positions of the arguments it may write}; None where the types are not declared."""
    source = Path(module_path).read_text(encoding="utf-8")
    return {k.variable: ({i for i, t in enumerate(k.arg_types) if t.strip().endswith("*")
                          and not t.strip().startswith("const")} if k.arg_types else None)
            for k in embedded_kernels(source) if k.backend == "cpp"}


def record_launches(module: Any, args: list[Any], kernels: Iterable[str],
                    writable: dict[str, set[int] | None]) -> list[Launch]:
    """Run the graph once on ``args`` and return every launch of ``kernels``, in order."""
    import torch

    launches: list[Launch] = []
    originals = {name: getattr(module, name) for name in kernels if hasattr(module, name)}

    def recorder(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        positions = writable.get(name)

        def launch(*call_args: Any) -> Any:
            saved = [(arg, arg.clone()) for i, arg in enumerate(call_args)
                     if isinstance(arg, torch.Tensor) and (positions is None or i in positions)]
            launches.append(Launch(name, function, call_args, saved))
            return function(*call_args)

        return launch

    try:
        for name, function in originals.items():
            setattr(module, name, recorder(name, function))
        module.call(list(args))
    finally:
        for name, function in originals.items():
            setattr(module, name, function)
    return launches


# Copies of each C++ kernel's shared library a worker loads (its own file included): a visit runs one at random.
CODE_COPIES = 8


def code_copies(function: Callable[..., Any], count: int) -> tuple[Callable[..., Any], ...]:
    """``function`` and the same kernel from ``count`` − 1 copies of its shared library, each loaded from a file of
    its own (so a mapping, and pages, of its own); just ``function`` when it is not an extension module's. Each
    copy's file is removed once loaded (the mapping stays): a worker ends by SIGKILL, and left behind they were
    9.7 MB per worker and round in the side's temporary directory.

    Where a process maps a kernel's code moved its time: in one process, six copies of the same library of README
    command 1's 0.04–3.5 µs kernels timed 0.4–5.5 % apart (net of the visits' own spread; significant in four of
    ten kernels, `benchmarks/identical_bias.py --spread`), a fixed offset for the process that only more rounds
    averaged. Visits drawing among copies average it within the round. A copy costs 0.2 ms to write and load.
    """
    module = getattr(function, "__self__", None)
    origin, spec = getattr(module, "__file__", None), getattr(module, "__spec__", None)
    if not (isinstance(origin, str) and origin.endswith(".so") and spec is not None):
        return (function,)
    out = [function]
    for n in range(1, count):
        folder = Path(tempfile.mkdtemp(prefix="prbench-code-"))
        try:
            copy = folder / Path(origin).name
            shutil.copyfile(origin, copy)
            # The last part of the name picks the library's init function (PyInit_<part>); the first keeps it apart.
            found = importlib.util.spec_from_file_location(f"prbench_copy{n}_{spec.name}", copy)
            if found is None or found.loader is None:
                raise ImportError(f"cannot load a copy of {origin}")
            loaded = importlib.util.module_from_spec(found)
            found.loader.exec_module(loaded)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        out.append(getattr(loaded, function.__name__))
    return tuple(out)


def with_copies(launches: list[Launch], count: int,
                made: dict[Callable[..., Any], tuple[Callable[..., Any], ...]]) -> list[Launch]:
    """The launches with `code_copies` of their functions: those in ``made`` (a worker's, by function), else made
    now and kept there."""
    for launch in launches:
        if launch.function not in made:
            made[launch.function] = code_copies(launch.function, count)
    return [Launch(la.kernel, la.function, la.args, la.saved, made[la.function]) for la in launches]


def held_bytes(launches: list[Launch]) -> int:
    """Bytes of the storages the launches keep alive: their arguments and the saved buffers."""
    import torch

    storages: dict[int, int] = {}
    for launch in launches:
        for tensor in [*launch.args, *(before for _, before in launch.saved)]:
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def warm_profiler() -> None:
    """Start and stop the CPU profiler once: its first start in a process initialises Kineto (2.2 s here, loaded),
    which would otherwise fall into the first timed visit."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]):
        pass


# Each kernel's buffers are placed afresh at every visit, at a random offset within this many bytes (a multiple of
# 64, as torch's CPU allocator aligns): past a page, and past the L1 and L2 set index of a 2 MB huge page.
PLACEMENT_SPAN = 1 << 16


def placed(launches: list[Launch], rng: Any) -> list[Launch]:
    """The launches on fresh copies of their tensors' storages (arguments and the values a replay restores), each
    at a random 64-byte offset in ``PLACEMENT_SPAN`` (drawn from ``rng``); arguments that share a storage keep
    sharing one. The copies hold the storages' values as they are now. Each kernel's launches run one of its
    ``copies`` of the code, drawn from ``rng`` too."""
    import torch

    fresh: dict[int, tuple[Any, int]] = {}  # storage → (its copy's whole allocation, the copy's byte offset in it)

    def copy_of(tensor: Any) -> Any:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        size = tensor.element_size()
        if key not in fresh:
            raw = torch.empty(storage.nbytes() + PLACEMENT_SPAN, dtype=torch.uint8)
            start = rng.randrange(0, PLACEMENT_SPAN, 64)
            whole = tensor.as_strided((storage.nbytes() // size,), (1,), 0)  # the storage, in the tensor's dtype
            raw.view(tensor.dtype)[start // size:start // size + whole.numel()].copy_(whole)
            fresh[key] = (raw, start)
        raw, start = fresh[key]
        offset = start // size + tensor.storage_offset()
        return raw.view(tensor.dtype).as_strided(tensor.size(), tensor.stride(), offset)

    code: dict[str, Callable[..., Any]] = {}
    out = []
    for launch in launches:
        args = tuple(copy_of(a) if isinstance(a, torch.Tensor) else a for a in launch.args)
        saved = [(copy_of(live), copy_of(before)) for live, before in launch.saved]
        if launch.kernel not in code:
            code[launch.kernel] = rng.choice(launch.copies) if launch.copies else launch.function
        out.append(Launch(launch.kernel, code[launch.kernel], args, saved, launch.copies))
    return out


def time_launches(launches: list[Launch], warmup: int, iterations: int, rng: Any = None) -> dict[str, list[float]]:
    """Time each kernel on its own: its launches replayed ``warmup`` times, then ``iterations`` times, back to back,
    before the next kernel's: {kernel: [ms]}, a kernel launched k times giving k samples per iteration. With
    ``rng`` (a ``random.Random``), each kernel's buffers are first `placed` at random, and its code drawn among its
    copies.

    Alone, because what ran just before a kernel moves its time, and a graph's launches around a kernel differ
    between base and PR when the PR changed them: replayed in the graph's order, byte-identical kernels timed
    0.95× (1.5 µs, a changed RMS norm before it) and 0.2 µs kernels up to 1.8× their time alone. Placed at random,
    because where a side's recording put a kernel's buffers moved a byte-identical 40 µs kernel by 7 % in one
    process, the same way in every fresh process (``benchmarks/identical_bias.py``, docs/cost-model.md); drawn
    anew at every visit, that becomes visit-to-visit spread instead of an offset between the sides. One profiler
    window holds every kernel's replays (a window per kernel costs 1–3 ms to start and stop); the warm-up replays'
    events are dropped.
    """
    from torch.profiler import ProfilerActivity, profile

    by_kernel: dict[str, list[Launch]] = {}
    for launch in launches:
        by_kernel.setdefault(launch.kernel, []).append(launch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for own in by_kernel.values():
            if rng is not None:  # one kernel's copies at a time: a visit holds at most one kernel's buffers twice
                with unrecorded():
                    own = placed(own, rng)
            for _ in range(warmup + iterations):
                for launch in own:
                    launch.replay()
    samples = kernel_samples(prof.profiler.kineto_results.events())
    return {kernel: values[warmup * len(by_kernel[kernel]):] for kernel, values in samples.items()
            if kernel in by_kernel}


def kernel_samples(events: Iterable[Any]) -> dict[str, list[float]]:
    """{kernel: [ms]} from the profiler's raw events: each ``graph_<n>_<kernel>`` event's self CPU time, in order.

    The self time is torch's ``FunctionEvent.self_cpu_time_total``: the event's time less that of the events
    directly inside it on its thread (nesting as torch's event tree nests them, from the same filtered events).
    Reading the raw events instead of ``prof.events()`` skips building that tree and a Python object for every
    event of the window: 13 ms instead of 123 ms for 1,200 events here (loaded), 100-1,400 ms per C++ graph visit
    against its 3 ms of samples.
    """
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import _filter_name

    threads: dict[int, list[tuple[int, int, int]]] = {}  # thread → (start ns, -end ns, index) of its events
    spans: list[tuple[int, int, str]] = []  # index → (start ns, end ns, name)
    for event in events:
        name = event.name()
        if (_filter_name(name) or getattr(event, "is_hidden_event", lambda: False)() or event.is_async()
                or event.start_thread_id() != event.end_thread_id() or event.device_type() != DeviceType.CPU):
            continue
        threads.setdefault(event.start_thread_id(), []).append((event.start_ns(), -event.end_ns(), len(spans)))
        spans.append((event.start_ns(), event.end_ns(), name))
    children_ns = [0] * len(spans)
    for entries in threads.values():
        open_spans: list[int] = []  # each inside the one below it
        for start, negative_end, index in sorted(entries):
            while open_spans:
                parent_end = spans[open_spans[-1]][1]
                if start >= parent_end or -negative_end > parent_end:
                    open_spans.pop()
                else:
                    children_ns[open_spans[-1]] += spans[index][1] - spans[index][0]
                    break
            open_spans.append(index)
    samples: dict[str, list[float]] = {}
    for index, (start, end, name) in enumerate(spans):
        match = PROFILER_EVENT.match(name)
        if match:
            samples.setdefault(match.group("kernel"), []).append((end - start - children_ns[index]) / 1e6)
    return samples
