"""Rewriting the timing line of an Inductor kernel file's ``__main__`` harness, and its device indices.

The line drifted across torch versions:

* ≤2.4: ``ms = do_bench(lambda: call(args), rep=40, fast_flush=True)`` (Triton's do_bench; ``fast_flush`` was
  removed from Triton's do_bench in 3.x, so it must go for the file to run on a newer Triton);
* ~2.5–2.9: ``ms = benchmarker.benchmark_gpu(lambda: call(args), rep=40[, fast_flush=True])``;
* ≥2.10: ``ms = benchmarker.benchmark(lambda: call(args), device='cuda:0', rep=40)``.

The seed organizer appended ``return_mode="median"``; Inductor's default ``InductorBenchmarker`` now raises on
anything but ``min``/``all``. ``rewrite_benchmark_line`` only emits a ``return_mode`` the benchmarker that will
run the line accepts. Device indices become 0 so a kernel compiled on GPU 7 runs on whichever GPU the worker is
pinned to. Pure text processing.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass

# Which return modes each benchmarker accepts (torch 2.13 runtime/benchmarking.py, Triton 3.x testing.do_bench).
ACCEPTED_RETURN_MODES = {
    "inductor": ("min", "all"),
    "triton": ("min", "max", "mean", "median", "all"),
    "profiler": ("min", "mean", "max"),
}

_LINE = re.compile(
    r"^(?P<indent>[ \t]*)ms\s*=\s*(?P<func>do_bench|benchmarker\.benchmark_gpu|benchmarker\.benchmark)"
    r"\((?P<args>.*)\)\s*$",
    re.M,
)
_DEVICE_PATTERNS = (
    (re.compile(r"""(device\s*=\s*['"](?:cuda|hip|xpu)):\d+(['"])"""), r"\g<1>:0\g<2>"),
    (re.compile(r"(_DeviceGuard\()\d+(\))"), r"\g<1>0\g<2>"),
    (re.compile(r"(\.set_device\()\d+(\))"), r"\g<1>0\g<2>"),
    (re.compile(r"(get_raw_stream\()\d+(\))"), r"\g<1>0\g<2>"),
    (re.compile(r"(DeviceProperties\(type='(?:cuda|hip|xpu)',\s*index=)\d+"), r"\g<1>0"),
)


@dataclass(frozen=True)
class BenchmarkLine:
    indent: str
    func: str  # "do_bench", "benchmarker.benchmark_gpu" or "benchmarker.benchmark"
    positional: tuple[str, ...]
    keywords: tuple[tuple[str, str], ...]  # (name, source text) in order

    @property
    def form(self) -> str:
        return {"do_bench": "do_bench", "benchmarker.benchmark_gpu": "benchmark_gpu"}.get(self.func, "benchmark")

    def render(self) -> str:
        items = [*self.positional, *(f"{k}={v}" for k, v in self.keywords)]
        return f"{self.indent}ms = {self.func}({', '.join(items)})"


def active_benchmarker(env: Mapping[str, str], func: str = "benchmarker.benchmark") -> str:
    """Which benchmarker a harness line will call under ``env`` (torch 2.13 ``_make_default_benchmarker``)."""
    if func == "do_bench":
        return "triton"
    if env.get("TORCHINDUCTOR_USE_TORCH_PROFILER_BENCHMARKER") == "1":
        return "profiler"
    if env.get("TORCHINDUCTOR_USE_EXPERIMENTAL_BENCHMARKER", "1") == "0":
        return "triton"
    return "inductor"


def find_benchmark_line(source: str) -> BenchmarkLine | None:
    match = _LINE.search(source)
    if not match:
        return None
    try:
        call = ast.parse(f"f({match.group('args')})", mode="eval").body
    except SyntaxError:
        return None
    assert isinstance(call, ast.Call)
    text = f"f({match.group('args')})"
    positional = tuple(ast.get_source_segment(text, arg) or "" for arg in call.args)
    keywords = tuple((kw.arg or "", ast.get_source_segment(text, kw.value) or "") for kw in call.keywords)
    return BenchmarkLine(match.group("indent"), match.group("func"), positional, keywords)


def rewrite_benchmark_line(
    source: str,
    rep: int = 100,
    warmup: int = 10,
    return_mode: str | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """Set ``rep``/``warmup`` on the timing line, drop ``fast_flush``, normalize its device to index 0, and add
    ``return_mode`` only where the benchmarker that will run it accepts it. Files without a harness are returned
    unchanged."""
    line = find_benchmark_line(source)
    if line is None:
        return source
    benchmarker = active_benchmarker(env or {}, line.func)
    keep_mode = return_mode is not None and return_mode in ACCEPTED_RETURN_MODES[benchmarker]
    keywords: list[tuple[str, str]] = []
    for name, value in line.keywords:
        if name in ("rep", "warmup", "fast_flush", "return_mode"):
            continue
        if name == "device":
            value = re.sub(r"""^(['"])(cuda|hip|xpu):\d+(['"])$""", r"\1\2:0\3", value)
        keywords.append((name, value))
    keywords += [("rep", str(rep)), ("warmup", str(warmup))]
    if keep_mode:
        keywords.append(("return_mode", repr(return_mode)))
    rewritten = BenchmarkLine(line.indent, line.func, line.positional, tuple(keywords)).render()
    return _LINE.sub(lambda _: rewritten, source, count=1)


def normalize_device_indices(source: str) -> str:
    """``cuda:N`` / ``_DeviceGuard(N)`` / ``set_device(N)`` / ``get_raw_stream(N)`` / ``index=N`` → 0."""
    for pattern, replacement in _DEVICE_PATTERNS:
        source = pattern.sub(replacement, source)
    return source


def prepare_kernel_source(source: str, rep: int = 100, warmup: int = 10, env: Mapping[str, str] | None = None) -> str:
    """What organize writes: benchmark line rewritten and device indices normalized."""
    return normalize_device_indices(rewrite_benchmark_line(source, rep=rep, warmup=warmup, env=env))
