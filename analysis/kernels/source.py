"""What a reviewer reads of one kernel pair: the diff of its code and its launch configuration.

The diff compares the texts ``body_hash`` is computed from (`analysis.kernels.identity.normalized_triton_body`,
`normalized_cpp_body`), so a renumbered kernel, a new graph ordinal in the profiler line or a changed comment is
no difference here either: what the diff shows is exactly why the two hashes differ. The launch configuration
is what the kernel file itself says about how it is launched (Triton: grid type, size hints, block sizes and
``num_warps``/``num_stages`` where the file fixes them; C++: the vector width, loop bounds and threading),
because the autotuned choice is made at run time and is not in the file.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from analysis.kernels.identity import (
    KernelParseError,
    cpp_loop_bounds,
    is_triton_kernel_source,
    normalized_cpp_body,
    normalized_triton_body,
    strip_cpp_comments,
    strip_python_comments,
)
from analysis.kernels.ir import KernelIR, read_kernel_ir, what_changed
from foundation.formats.run_layout import VariantLayout

DIFF_CONTEXT = 2  # unchanged lines kept around each change: enough to see where in the loop nest it is

_SIZE_HINTS = re.compile(r"size_hints\s*=\s*(\{[^}]*\}|\[[^\]]*\])")
_GRID_TYPE = re.compile(r"""['"]grid_type['"]\s*:\s*['"](\w+)['"]""")
_NUM_WARPS = re.compile(r"""\bnum_warps['"]?\s*[:=]\s*(\d+)""")
_NUM_STAGES = re.compile(r"""\bnum_stages['"]?\s*[:=]\s*(\d+)""")
_BLOCK_VALUE = re.compile(r"""['"]?\b([XYZ]BLOCK|R0_BLOCK|R1_BLOCK|RBLOCK|BLOCK_[MNK])['"]?\s*[:=]\s*(\d+)""")
_CONSTEXPR_PARAM = re.compile(r"\b([XYZ]BLOCK|R0_BLOCK|R1_BLOCK|RBLOCK)\s*:\s*tl\.constexpr")
_CPP_STEP = re.compile(r"for\s*\(\s*int64_t\s+(\w+)\s*=[^;]*;[^;]*;\s*\1\s*\+=\s*static_cast<int64_t>\((\d+)L?\)\)")
_CPP_VEC = re.compile(r"at::vec::(Vectorized|VectorizedN)<\s*(\w+)\s*(?:,\s*\d+\s*)?>")
_CPP_OMP = re.compile(r"#pragma\s+omp\s+(parallel[^\n]*|for[^\n]*)")


@dataclass(frozen=True)
class CodeDiff:
    text: str  # unified diff of the normalised texts ("" when they are the same)
    changed_lines: int  # lines removed + lines added
    identical: bool


def read_kernel_file(organized: Path | None, rel_path: str) -> str | None:
    """The organized kernel file's text; None when the directory or the file is not there (an old run, a run
    copied without ``organized/``): the report then says the source is not available."""
    if organized is None or not rel_path:
        return None
    path = Path(organized) / rel_path
    if not path.is_file():  # gone, or a FIFO or device in its place: nothing to read
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def normalized_source(text: str, backend: str) -> str:
    """The text ``body_hash`` hashes; a file the identity parser cannot read is compared without comments."""
    try:
        if backend == "cpp":
            return normalized_cpp_body(text)
        return normalized_triton_body(text)
    except KernelParseError:
        return strip_cpp_comments(text) if backend == "cpp" else strip_python_comments(text)


def code_diff(base_text: str, pr_text: str, backend: str, base_label: str, pr_label: str) -> CodeDiff:
    """Unified diff, base → PR, of the two kernels' normalised texts."""
    a = normalized_source(base_text, backend).splitlines()
    b = normalized_source(pr_text, backend).splitlines()
    lines = list(difflib.unified_diff(a, b, fromfile=f"base/{base_label}", tofile=f"pr/{pr_label}",
                                      n=DIFF_CONTEXT, lineterm=""))
    changed = sum(1 for line in lines[2:] if line[:1] in "+-")
    return CodeDiff("\n".join(lines), changed, not lines)


def backend_of(text: str, rel_path: str) -> str:
    return "triton" if is_triton_kernel_source(text) or not rel_path.endswith(".cpp") else "cpp"


def launch_config(text: str, backend: str) -> str:
    """One line: what the kernel file says about its launch."""
    return _cpp_launch(text) if backend == "cpp" else _triton_launch(text)


def _triton_launch(text: str) -> str:
    parts = []
    grid = _GRID_TYPE.search(text)
    parts.append(f"grid {grid.group(1)}" if grid else "grid from the autotuned config")
    hints = _SIZE_HINTS.search(text)
    if hints:
        parts.append(f"size_hints {' '.join(hints.group(1).split())}")
    blocks = dict(_BLOCK_VALUE.findall(text))
    free = [p for p in dict.fromkeys(_CONSTEXPR_PARAM.findall(text)) if p not in blocks]
    parts += [f"{name}={value}" for name, value in blocks.items()]
    if free:
        parts.append(f"{', '.join(free)} autotuned at run time")
    for label, pattern in (("num_warps", _NUM_WARPS), ("num_stages", _NUM_STAGES)):
        values = sorted(set(pattern.findall(text)), key=int)
        parts.append(f"{label}={'/'.join(values)}" if values else f"{label} autotuned at run time")
    return "; ".join(parts)


def _cpp_launch(text: str) -> str:
    """A C++ kernel is one call on the CPU (no grid, warps or stages): its vector width, loops and threads."""
    steps = sorted({int(step) for _, step in _CPP_STEP.findall(text) if int(step) > 1})
    vec = sorted({f"{kind}<{dtype}>" for kind, dtype in _CPP_VEC.findall(text)})
    bounds = cpp_loop_bounds(text)
    omp = sorted(set(_CPP_OMP.findall(text)))
    parts = ["C++ (one call, no grid/warps/stages)",
             f"vector step {'/'.join(map(str, steps))}" if steps else "scalar loops",
             f"vector types {', '.join(vec)}" if vec else "",
             f"loops {', '.join(f'{v}<{b}' for v, b in bounds.items())}" if bounds else "",
             f"OpenMP {'; '.join(omp)}" if omp else "single-threaded (no OpenMP pragma)"]
    return "; ".join(p for p in parts if p)


_CPP_VECTOR_LOAD = re.compile(r"::loadu\(")


def cpp_code_facts(text: str) -> dict[str, int]:
    """What a C++ kernel's code says about its vectorization: loops by step (a step above 1 walks vectors) and
    vector loads. The example PR keeps the same vector width but makes the short reductions' loops scalar, which
    the launch line (the steps used) cannot show and these counts do."""
    steps = [int(step) for _, step in _CPP_STEP.findall(text)]
    return {"vectorized loops": sum(1 for s in steps if s > 1), "scalar loops": sum(1 for s in steps if s == 1),
            "vector loads": len(_CPP_VECTOR_LOAD.findall(text))}


@dataclass(frozen=True)
class KernelDetail:
    """One pair as the report's collapsed block shows it."""

    title: str  # "base name → PR name" (one name when the same)
    summary: str  # speedup, verdict, where it runs
    base_launch: str
    pr_launch: str
    diff: CodeDiff | None  # None: a source is not available (``missing`` says which)
    missing: str = ""
    what_changed: str = ""  # one line from the launch configurations and the IR summaries (`analysis.kernels.ir`)
    ir: tuple[KernelIR, KernelIR] | None = None  # both sides' Triton IR, where the run has it (<side>/ir/)


def _category(rel_path: str) -> str:
    """The organized directory a kernel is in: its category (``persistent_reduction/x.py``)."""
    return Path(rel_path).parts[0] if len(Path(rel_path).parts) > 1 else ""


def pair_ir(base_organized: Path | None, pr_organized: Path | None, base_name: str, pr_name: str
            ) -> tuple[KernelIR, KernelIR] | None:
    """Both kernels' IR from ``<side>/ir/<name>/`` beside each side's ``organized/``; None unless both have it."""
    if base_organized is None or pr_organized is None:
        return None
    base = read_kernel_ir(VariantLayout(Path(base_organized).parent).ir / base_name, base_name)
    pr = read_kernel_ir(VariantLayout(Path(pr_organized).parent).ir / pr_name, pr_name)
    return (base, pr) if base is not None and pr is not None else None


def pair_detail(row: dict, base_organized: Path | None, pr_organized: Path | None, summary: str) -> KernelDetail:
    """The code diff and launch configuration of one row of the kernel comparison table."""
    base_name, pr_name = str(row["base_name"]), str(row["pr_name"])
    title = base_name if base_name == pr_name else f"{base_name} → {pr_name}"
    base_text = read_kernel_file(base_organized, str(row["base_path"]))
    pr_text = read_kernel_file(pr_organized, str(row["pr_path"]))
    if base_text is None or pr_text is None:
        absent = [f"{side}/organized/{row[f'{side}_path']}" for side, text in (("base", base_text), ("pr", pr_text))
                  if text is None]
        return KernelDetail(title, summary, "–", "–", None, "source not available: " + ", ".join(absent))
    backend = backend_of(base_text, str(row["base_path"]))
    diff = code_diff(base_text, pr_text, backend, base_name, pr_name)
    base_launch, pr_launch = launch_config(base_text, backend), launch_config(pr_text, backend)
    ir = pair_ir(base_organized, pr_organized, base_name, pr_name) if backend == "triton" else None
    facts = (cpp_code_facts(base_text), cpp_code_facts(pr_text)) if backend == "cpp" else None
    changed = what_changed(_category(str(row["base_path"])), _category(str(row["pr_path"])), base_launch, pr_launch,
                           ir[0].summary if ir else None, ir[1].summary if ir else None, code_facts=facts)
    return KernelDetail(title, summary, base_launch, pr_launch, diff, what_changed=changed, ir=ir)
