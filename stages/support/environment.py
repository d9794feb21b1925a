"""What every stage that compiles or runs compiled code does first inside its environment: apply the variant's
Inductor config overrides, point Inductor at the shared precompiled-header directory and reuse the side's probe of
the CPU's vector instruction sets (organize, which only reads files, and the upstream launcher do none of this)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from analysis.kernels.cpp_build import write_cpp_build
from foundation import atomic_io
from foundation.errors import UserError
from foundation.formats.modes import DYNAMIC_SHAPES_ENV
from foundation.formats.stage_records import HEADER_DIR_ENV, INDUCTOR_CONFIG_ENV

VEC_ISA_RECORD = "prbench-vec-isa.json"  # in the side's Inductor cache: `reuse_vec_isa_probe`
VEC_ISA_RECORD_VERSION = 1


def inductor_overrides() -> dict[str, Any]:
    raw = os.environ.get(INDUCTOR_CONFIG_ENV, "")
    return json.loads(raw) if raw else {}


def prepare_inductor(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Share the precompiled headers (``$PRBENCH_INDUCTOR_HEADERS``), set ``torch._inductor.config`` entries
    (dotted names such as ``cpp.simdlen``), compile with dynamic shapes where the mode asks
    (``$PRBENCH_DYNAMIC_SHAPES``), then reuse the side's vector-ISA probe (``$TORCHINDUCTOR_CACHE_DIR``); return
    the Inductor settings set. Imports torch only for the last three."""
    if os.environ.get(HEADER_DIR_ENV):
        share_precompiled_headers()
    overrides = inductor_overrides() if overrides is None else overrides
    if overrides:
        _set_inductor_config(overrides)
    if os.environ.get(DYNAMIC_SHAPES_ENV) == "1":
        import torch._dynamo.config as dynamo_config

        # What PyTorch's harness does for --dynamic-shapes: every input size starts symbolic, not only those that
        # changed between calls (the `dynamic` mode, foundation.formats.modes).
        dynamo_config.assume_static_by_default = False
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        reuse_vec_isa_probe(Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]))
    return overrides


def _set_inductor_config(overrides: dict[str, Any]) -> None:
    import torch._inductor.config as inductor_config

    for dotted, value in overrides.items():
        owner = inductor_config
        *parents, leaf = dotted.split(".")
        for part in parents:
            owner = getattr(owner, part)
        if not hasattr(owner, leaf):
            # A UserError, so the stage's entry wrapper makes it the stage's one "error:" line the host shows.
            raise UserError(f"inductor config: unknown key '{dotted}'")
        setattr(owner, leaf, value)


def share_precompiled_headers() -> None:
    """Move Inductor's directory of precompiled C++ headers to ``$PRBENCH_INDUCTOR_HEADERS``.

    The first C++ kernel a process compiles or loads needs a precompiled header (150 MB, about 6 s of g++), which
    Inductor keeps in a directory it derives from TMPDIR on import. Every side and every suite shard of a run has a
    TMPDIR of its own, so each built the same header again, and so did every new run. Inductor keys a header by
    compiler, flags and preprocessed text and builds it under a file lock in that directory, so stages may share
    one. Inductor has no setting for it: its module globals are set, where this torch has them; otherwise (and
    where the directory cannot be made) the header stays under TMPDIR."""
    codecache, shared = _codecache_with_header_dir(), os.environ.get(HEADER_DIR_ENV, "")
    if codecache is None or not shared:
        return
    try:
        os.makedirs(shared, exist_ok=True)
    except OSError:
        return
    codecache._HEADER_DIR = shared
    codecache._HEADER_LOCK_DIR = os.path.join(shared, "locks")


def reuse_vec_isa_probe(cache_dir: Path) -> None:
    """Load-test each of Inductor's vector-ISA test programs once per side and machine, not once per process.

    Before its first C++ kernel a process compiles a test program for each instruction set the CPU reports
    (AVX-512 VNNI, AVX-512, AVX2 here; compiled once, then found in the cache) and loads each in a Python
    subprocess, to be sure it does not crash the process that loads it: 1.26 s of every model worker's first call
    (BertForMaskedLM from the warm cache: 2.5 s → 1.6 s without it), and again in every kernel worker and
    ``launch_cost``, round after round. A program's path in the side's Inductor cache names its code, flags,
    compiler and torch, so a load that worked once works again on the same CPU with the same Python: each process
    of the side now records the programs that loaded (``prbench-vec-isa.json`` in that cache, keyed by the CPU
    and the Python) and skips those subprocesses for them. Everything else Inductor decides from the probe (which
    sets are usable, the AVX-512 BF16 flag) it still decides itself, so the picked ISA and every compile flag, and
    with them the cache keys, are what a full probe gives. A torch without this layout probes as before."""
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:  # a torch without Inductor (the stand-in torch of the Docker tests)
        return
    vec_isa: Any = getattr(cpu_vec_isa, "VecISA", None)
    probe = getattr(vec_isa, "_probe_load", None)
    if probe is None or getattr(probe, "remembers", False):
        return
    path = cache_dir / VEC_ISA_RECORD
    key = _vec_isa_key()
    loaded: list[str] = []
    with contextlib.suppress(OSError, ValueError, AttributeError):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("key") == key:
            loaded = [str(program) for program in record["loaded"]]

    def remembered(self: Any, output_path: str) -> bool:
        if output_path in loaded:
            return True
        if not probe(self, output_path):
            return False
        loaded.append(output_path)
        with contextlib.suppress(OSError):
            atomic_io.write_json(path, {"format_version": VEC_ISA_RECORD_VERSION, "key": key, "loaded": loaded})
        return True

    remembered.remembers = True  # type: ignore[attr-defined]
    vec_isa._probe_load = remembered


def record_cpp_build(cache_dir: Path) -> None:
    """Record in the side's Inductor cache how its C++ kernels are built (``analysis.kernels.cpp_build``): the
    command lines Inductor builds a kernel (optimised, compile only) and its module (minimal optimisation, linked)
    with here, as it makes them for its cache key; the torch build; a digest of the headers a kernel includes. The
    paired plan times identical source from base's binaries only where both sides' records agree.
    ``stages.launch_cost`` calls it after :func:`prepare_inductor` (so the variant's Inductor overrides are in
    them), before the paired rounds. A torch whose builder is laid out otherwise records nothing (and removes an
    older record)."""
    commands: list[str] | None = None
    torch_build = headers = ""
    with contextlib.suppress(ImportError, AttributeError, TypeError, OSError):
        import torch
        from torch._inductor.cpp_builder import CppBuilder, CppTorchDeviceOptions
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        isa = pick_vec_isa()
        commands = [CppBuilder(name="o", sources="i", BuildOption=CppTorchDeviceOptions(
                        vec_isa=isa, device_type="cpu", compile_only=compile_only, min_optimize=not compile_only),
                    ).get_command_line() for compile_only in (True, False)]
        torch_build = f"{torch.__version__} {torch.version.git_version}"
        headers = _kernel_headers_digest(Path(torch.__file__).parent)
    with contextlib.suppress(OSError):
        write_cpp_build(cache_dir, commands, torch_build, headers)


# What Inductor's C++ prefix header pulls in from the torch install (torch 2.13's cpp_prefix.h): the prefix itself,
# ATen's vector classes, c10's scalar types and math, ATen's numeric helpers. Files or folders under ``include/``.
_KERNEL_HEADERS = ("torch/csrc/inductor/cpp_prefix.h", "ATen/cpu/vec", "c10/util", "ATen/native/Math.h",
                   "ATen/NumericUtils.h")


def _kernel_headers_digest(torch_dir: Path) -> str:
    """A digest of the headers every Inductor C++ kernel includes (``_KERNEL_HEADERS`` under the torch install)."""
    include = torch_dir / "include"
    digest = hashlib.sha256()
    for entry in _KERNEL_HEADERS:
        path = include / entry
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for header in files:
            digest.update(str(header.relative_to(include)).encode() + b"\0" + header.read_bytes())
    return digest.hexdigest()


def _vec_isa_key() -> dict[str, Any]:
    """What a test program's load depends on beyond its path: the CPU (its model and flags) and the Python."""
    cpu: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
        for line in info:
            name, _, value = line.partition(":")
            name = name.strip()
            if name in ("model name", "flags", "Features", "CPU part") and name not in cpu:
                cpu[name] = " ".join(value.split())
            if not line.strip() and cpu:
                break
    return {"machine": platform.machine(), "cpu": cpu, "python": sys.executable}


def lend_precompiled_headers(tmpdir: Path) -> None:
    """Let the Python processes this stage starts with ``TMPDIR=tmpdir`` (a compiled graph's ``-p`` run, which
    imports no stage code) find this process's precompiled headers (shared or not, after :func:`prepare_inductor`):
    Inductor there looks under ``<tmpdir>/torchinductor_<user>/precompiled_headers``, which becomes a link to them.
    The link lives in ``tmpdir``, which the stage owns and removes."""
    codecache = _codecache_with_header_dir()
    if codecache is None:
        return
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # another torch layout: each -p run builds its own, as before
        return
    ours = Path(codecache._HEADER_DIR)
    theirs = tmpdir / Path(default_cache_dir()).name / "precompiled_headers"
    with contextlib.suppress(OSError):  # no links on this file system: the same
        ours.mkdir(parents=True, exist_ok=True)
        theirs.parent.mkdir(parents=True, exist_ok=True)
        theirs.symlink_to(ours, target_is_directory=True)


def _codecache_with_header_dir() -> Any:
    """Inductor's code cache module where it keeps its header directory in module globals, else None."""
    try:
        from torch._inductor import codecache
    except ImportError:  # a torch without Inductor (the stand-in torch of the Docker tests)
        return None
    if not hasattr(codecache, "_HEADER_DIR") or not hasattr(codecache, "_HEADER_LOCK_DIR"):
        return None
    return codecache
