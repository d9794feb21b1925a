"""Isolated timing of Inductor's C++ kernels: every launch of a compiled graph, replayed alone.

A C++ kernel of 0.1–2 µs timed inside its graph measures mostly what the kernels before it left in the caches:
the same kernel moved by 5–30 % from one visit to the next in one process, so no number of rounds could resolve
a 2 % change. So a graph is run once to *record* its launches (the kernel, its arguments, and a copy of every
buffer it may write, taken just before it runs), and each launch is then *replayed* on its own, as the seed
times a standalone kernel file: the recorded buffers are restored first, so an in-place kernel (GELU on its own
output) computes on the same values every time instead of on what its previous replay left, and the kernel runs
with its inputs warm in the cache.

A replay's time is the kernel's own ``graph_<n>_<kernel>`` profiler event (the graph must be compiled with
``cpp.enable_kernel_profile``): it starts inside the kernel, so neither the restore nor the Python binding's
call overhead is counted.

Which arguments a kernel may write comes from its declared argument types (``cpp_pybinding(['float*', 'const
float*', ...])`` in the graph module): every pointer not declared ``const``. A module without declared types
(the older ctypes form) has every tensor argument restored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.kernel_index import embedded_kernels

PROFILER_EVENT = re.compile(r"^graph_\d+_(?P<kernel>.+)$")


@dataclass
class Launch:
    """One call of a kernel as the graph made it, with what it may write as it was before the call."""

    kernel: str
    function: Callable[..., Any]
    args: tuple[Any, ...]
    saved: list[tuple[Any, Any]] = field(default_factory=list)  # (live tensor, its value before the launch)

    def replay(self) -> None:
        for live, before in self.saved:
            live.copy_(before)
        self.function(*self.args)


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


def time_launches(launches: list[Launch], warmup: int, iterations: int) -> dict[str, list[float]]:
    """Replay every launch ``warmup`` times, then ``iterations`` times under the profiler: {kernel: [ms]}.

    One pass replays each launch once, so a kernel the graph launches k times gives k samples per iteration.
    """
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        for launch in launches:
            launch.replay()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(iterations):
            for launch in launches:
                launch.replay()
    samples: dict[str, list[float]] = {}
    for event in prof.events():
        match = PROFILER_EVENT.match(event.name)
        if match:
            samples.setdefault(match.group("kernel"), []).append(event.self_cpu_time_total / 1000.0)
    return samples
