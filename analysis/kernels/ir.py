"""Triton's intermediate forms of one kernel, summarized, and what changed between a base and a PR kernel.

Torch-free text processing of a kernel's IR directory: the files Triton's cache keeps for one compiled kernel
(``<name>.ttir .ttgir .llir .ptx|.amdgcn .json``), as a GPU run's cache holds them under ``<hash>/`` or as
``stages.triton_ir`` writes them (compiled for a named target without a device) under ``<side>/ir/<name>/``, plus
``<name>.ptxas`` (the ``ptxas -v`` log: registers and spills on CUDA, which the cache does not keep).

The summary is what decides a kernel's speed before its code does: ``num_warps``/``num_stages`` and shared memory
(the ``.json`` metadata), registers and spills (ptxas' log on CUDA, the AMDGCN metadata's ``.vgpr_count`` and
``*_spill_count`` on ROCm), loops (TTGIR ``scf.for``), the vector width (TTGIR's ``sizePerThread`` along the
fastest dimension, and the widest global load or store of the assembly in bits) and the assembly's instructions
counted by kind. `what_changed` turns two summaries and the launch configurations into the report's one line.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from foundation.errors import UserError

IR_SUFFIXES = (".ttir", ".ttgir", ".llir", ".ptx", ".amdgcn", ".json")
IR_FORMS = ("ttir", "ttgir", "llir", "ptx", "amdgcn")  # the order a reader follows the compiler
PTXAS_SUFFIX = ".ptxas"
CONFIG_SUFFIX = ".config.json"

_BLOCKED = re.compile(r"#ttg\.blocked<\{sizePerThread = \[([\d, ]+)\].*?order = \[([\d, ]+)\]")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_AMD_META = re.compile(r"^\s*\.(vgpr_count|sgpr_count|vgpr_spill_count|sgpr_spill_count):\s*(\d+)", re.M)
_PTX_VECTOR = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:ld|st)\.global\S*?(?:\.v(\d))?\.[bfsu](\d+)\s", re.M)
_AMD_VECTOR = re.compile(r"^\s*(?:global|buffer)_(?:load|store)_(dword|short|byte|ubyte|ushort)(?:x(\d))?", re.M)
_PTX_OPCODE = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.:]*)", re.M)
_AMD_OPCODE = re.compile(r"^\s+([a-z][a-z0-9_]*)\b", re.M)

# Instruction kinds, first match wins: memory by space, then synchronisation, cross-lane, arithmetic by type.
_PTX_KINDS = (
    ("global load", ("ld.global",)), ("global store", ("st.global", "red.global", "atom.global")),
    ("shared memory", ("ld.shared", "st.shared", "atom.shared", "cp.async")),
    ("barrier", ("bar.", "barrier", "membar", "fence")), ("warp shuffle", ("shfl", "vote", "redux")),
    ("float math", (".f16", ".bf16", ".f32", ".f64", "fma.", "ex2.", "lg2.", "rsqrt.", "rcp.", "sqrt.")),
    ("convert", ("cvt",)), ("compare/select", ("setp", "selp")), ("branch", ("bra", "ret", "call")),
    ("parameter load", ("ld.param",)), ("move", ("mov",)),
)
_AMD_KINDS = (
    ("global load", ("global_load", "buffer_load", "flat_load")),
    ("global store", ("global_store", "buffer_store", "flat_store", "global_atomic", "buffer_atomic")),
    ("shared memory", ("ds_read", "ds_write", "ds_load", "ds_store", "ds_add")),
    ("barrier", ("s_barrier",)), ("wait", ("s_waitcnt",)),
    ("warp shuffle", ("ds_swizzle", "ds_bpermute", "ds_permute", "v_readlane", "v_writelane", "_dpp")),
    ("float math", ("v_fma", "v_mul_f", "v_add_f", "v_sub_f", "v_max_f", "v_min_f", "v_exp", "v_log", "v_rsq",
                    "v_rcp", "v_sqrt", "v_mac_f", "v_pk_")),
    ("convert", ("v_cvt",)), ("compare/select", ("v_cmp", "v_cndmask", "s_cmp", "s_cselect")),
    ("branch", ("s_branch", "s_cbranch", "s_setpc", "s_endpgm")), ("vector ALU", ("v_",)), ("scalar ALU", ("s_",)),
)
_NOT_INSTRUCTIONS = ("//", ".")  # PTX directives and comments


@dataclass(frozen=True)
class IRSummary:
    target: str  # "cuda sm_90", "hip gfx942"
    num_warps: int | None
    num_stages: int | None
    shared_bytes: int | None
    registers: int | None  # CUDA: ptxas' count; ROCm: VGPRs
    spills: int | None  # CUDA: bytes spilled (stores + loads); ROCm: registers spilled (VGPR + SGPR)
    spill_unit: str
    loops: int  # scf.for in the TTGIR
    vector_elements: int | None  # TTGIR: widest sizePerThread along a layout's fastest dimension
    global_access_bits: int | None  # the widest global load/store of the assembly
    instructions: dict[str, int] = field(default_factory=dict)  # assembly instructions by kind

    @property
    def total(self) -> int:
        return sum(self.instructions.values())


@dataclass(frozen=True)
class KernelIR:
    name: str
    texts: dict[str, str]  # form (ttir, ttgir, llir, ptx, amdgcn) → text
    summary: IRSummary


def parse_target(spec: str) -> tuple[str, str, int]:
    """``cuda:90`` or ``hip:gfx942`` → (backend, arch, warp size)."""
    backend, _, arch = spec.partition(":")
    if backend == "cuda" and arch.isdigit():
        return backend, arch, 32
    if backend == "hip" and re.fullmatch(r"gfx[0-9a-f]+", arch):
        return backend, arch, 64
    raise UserError(f"--target {spec!r}: expected cuda:<capability> (cuda:90) or hip:<arch> (hip:gfx942)")


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def read_kernel_ir(directory: Path, name: str) -> KernelIR | None:
    """The IR of kernel ``name`` in ``directory`` (one kernel's files); None when it holds no TTGIR for it."""
    texts = {form: text for form in IR_FORMS if (text := _read(directory / f"{name}.{form}")) is not None}
    if "ttgir" not in texts:
        return None
    raw = _read(directory / f"{name}.json")
    try:
        meta = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        raise UserError(f"{directory / (name + '.json')}: not Triton's kernel metadata (not JSON)") from None
    if not isinstance(meta, dict):
        raise UserError(f"{directory / (name + '.json')}: not Triton's kernel metadata (not a JSON object)")
    return KernelIR(name, texts, summarize(texts, meta, _read(directory / f"{name}{PTXAS_SUFFIX}") or ""))


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _target(meta: dict) -> str:
    found = meta.get("target")
    target = found if isinstance(found, dict) else {}
    backend, arch = target.get("backend"), target.get("arch")
    if backend == "cuda":
        return f"cuda sm_{arch}"
    return f"{backend} {arch}" if backend else "unknown target"


def vector_elements(ttgir: str) -> int | None:
    """The widest per-thread run of contiguous elements any blocked layout gives (``sizePerThread[order[0]]``)."""
    widths = []
    for sizes, order in _BLOCKED.findall(ttgir):
        size = [int(s) for s in sizes.split(",")]
        fastest = int(order.split(",")[0])
        widths.append(size[fastest] if fastest < len(size) else max(size))
    return max(widths) if widths else None


def _access_bits(assembly: str, amd: bool) -> int | None:
    if amd:
        unit = {"dword": 32, "short": 16, "ushort": 16, "byte": 8, "ubyte": 8}
        found = [unit[kind] * int(count or 1) for kind, count in _AMD_VECTOR.findall(assembly)]
    else:
        found = [int(count or 1) * int(bits) for count, bits in _PTX_VECTOR.findall(assembly)]
    return max(found) if found else None


def instruction_kinds(assembly: str, amd: bool) -> dict[str, int]:
    """The assembly's instructions counted by kind (`_PTX_KINDS`/`_AMD_KINDS`; the rest is "other")."""
    kinds = _AMD_KINDS if amd else _PTX_KINDS
    counts: Counter[str] = Counter()
    for opcode in (_AMD_OPCODE if amd else _PTX_OPCODE).findall(assembly):
        if opcode.startswith(_NOT_INSTRUCTIONS) or (amd and not re.match(r"^[a-z]+_", opcode)):
            continue
        kind = next((k for k, marks in kinds if any(m in opcode for m in marks)), "integer/other")
        counts[kind] += 1
    return dict(counts)


def _amd_body(amdgcn: str) -> str:
    """The instructions of an AMDGCN listing: its code section, not the metadata after it."""
    return amdgcn.split("\t.section", 1)[0]


def summarize(texts: dict[str, str], meta: dict, ptxas_log: str) -> IRSummary:
    amd = "amdgcn" in texts
    assembly = _amd_body(texts["amdgcn"]) if amd else texts.get("ptx", "")
    if amd:
        regs = {k: int(v) for k, v in _AMD_META.findall(texts["amdgcn"])}
        registers = regs.get("vgpr_count")
        spills = (regs["vgpr_spill_count"] + regs.get("sgpr_spill_count", 0)) if "vgpr_spill_count" in regs else None
        unit = "registers"
    else:
        used = _PTXAS_REGS.findall(ptxas_log)
        spilled = _PTXAS_SPILL.findall(ptxas_log)
        registers = int(used[-1]) if used else None
        spills = sum(int(a) + int(b) for a, b in spilled[-1:]) if spilled else None
        unit = "bytes"
    return IRSummary(
        target=_target(meta), num_warps=_int(meta.get("num_warps")), num_stages=_int(meta.get("num_stages")),
        shared_bytes=_int(meta.get("shared")), registers=registers, spills=spills, spill_unit=unit,
        loops=texts["ttgir"].count("scf.for "), vector_elements=vector_elements(texts["ttgir"]),
        global_access_bits=_access_bits(assembly, amd) if assembly else None,
        instructions=instruction_kinds(assembly, amd) if assembly else {})


# --- a pair ------------------------------------------------------------------------------------------------------


_CATEGORY_WORDS = {"persistent_reduction": "persistent", "reduction": "looped", "pointwise": "pointwise",
                   "template": "template", "foreach": "foreach"}


def _change(label: str, a: object, b: object, unit: str = "") -> str | None:
    if a is None or b is None or a == b:
        return None
    return f"{label} {a} → {b}{unit}"


def _launch_change(base_launch: str, pr_launch: str) -> str | None:
    """The parts of the one-line launch configurations that differ, base → PR."""
    a, b = base_launch.split("; "), pr_launch.split("; ")
    gone, new = [p for p in a if p not in b], [p for p in b if p not in a]
    if not gone and not new:
        return None
    return f"{', '.join(gone) or '–'} → {', '.join(new) or '–'}"


def what_changed(base_category: str, pr_category: str, base_launch: str, pr_launch: str,
                 base_ir: IRSummary | None = None, pr_ir: IRSummary | None = None,
                 code_facts: tuple[dict[str, int], dict[str, int]] | None = None) -> str:
    """One line a reviewer reads before any diff, e.g. "persistent → looped reduction; num_warps 8 → 4;
    vector width 16 → 8; 2 more spill bytes". ``code_facts``: counts read from both kernels' code (C++: vectorized
    and scalar loops, vector loads), each shown when it differs."""
    parts: list[str | None] = []
    if base_category != pr_category:
        a, b = (_CATEGORY_WORDS.get(c, c) for c in (base_category, pr_category))
        both_reductions = base_category.endswith("reduction") and pr_category.endswith("reduction")
        parts.append(f"{a} → {b} reduction" if both_reductions else f"{a} → {b}")
    if base_ir is not None and pr_ir is not None:
        parts += [_change("num_warps", base_ir.num_warps, pr_ir.num_warps),
                  _change("num_stages", base_ir.num_stages, pr_ir.num_stages),
                  _change("vector width", base_ir.vector_elements, pr_ir.vector_elements),
                  _change("widest global access", base_ir.global_access_bits, pr_ir.global_access_bits, " bits"),
                  _change("loops", base_ir.loops, pr_ir.loops),
                  _change("registers", base_ir.registers, pr_ir.registers),
                  _change("shared memory", base_ir.shared_bytes, pr_ir.shared_bytes, " B")]
        if base_ir.spills is not None and pr_ir.spills is not None and base_ir.spills != pr_ir.spills:
            delta = pr_ir.spills - base_ir.spills
            parts.append(f"{abs(delta)} {'more' if delta > 0 else 'fewer'} spilled {pr_ir.spill_unit}")
        if base_ir.total != pr_ir.total:
            parts.append(f"instructions {base_ir.total} → {pr_ir.total}")
    elif base_category == pr_category:
        parts.append(_launch_change(base_launch, pr_launch))
    if code_facts is not None:
        parts += [_change(label, value, code_facts[1].get(label)) for label, value in code_facts[0].items()]
    shown = [p for p in parts if p]
    return "; ".join(shown) if shown else "same launch configuration" + (" and IR summary" if base_ir else "")


def summary_rows(base: IRSummary, pr: IRSummary) -> list[tuple[str, str, str]]:
    """(what, base, PR) rows of the pair's summary table: the settings, then instructions by kind."""
    def text(value: int | None, unit: str = "") -> str:
        return "–" if value is None else f"{value}{unit}"

    rows = [("target", base.target, pr.target), ("num_warps", text(base.num_warps), text(pr.num_warps)),
            ("num_stages", text(base.num_stages), text(pr.num_stages)),
            ("shared memory", text(base.shared_bytes, " B"), text(pr.shared_bytes, " B")),
            ("registers" + (" (VGPR)" if base.spill_unit == "registers" else ""), text(base.registers),
             text(pr.registers)),
            (f"spills ({base.spill_unit})", text(base.spills), text(pr.spills)),
            ("loops (scf.for)", str(base.loops), str(pr.loops)),
            ("vector width (elements per thread)", text(base.vector_elements), text(pr.vector_elements)),
            ("widest global access", text(base.global_access_bits, " bits"), text(pr.global_access_bits, " bits")),
            ("instructions", str(base.total), str(pr.total))]
    kinds = sorted(set(base.instructions) | set(pr.instructions),
                   key=lambda k: -(base.instructions.get(k, 0) + pr.instructions.get(k, 0)))
    rows += [(f"instructions: {kind}", str(base.instructions.get(kind, 0)), str(pr.instructions.get(kind, 0)))
             for kind in kinds]
    return rows


def ir_diff(base: KernelIR, pr: KernelIR, form: str) -> str:
    """Unified diff, base → PR, of one intermediate form ("" when either side lacks it)."""
    if form not in base.texts or form not in pr.texts:
        return ""
    return "\n".join(difflib.unified_diff(base.texts[form].splitlines(), pr.texts[form].splitlines(),
                                          fromfile=f"base/{base.name}.{form}", tofile=f"pr/{pr.name}.{form}",
                                          n=1, lineterm=""))
