"""Stage ``triton_ir``: compile organized Triton kernels for a named GPU target, no GPU needed, keeping their IR.

    python -m stages.triton_ir --organized DIR --target cuda:90|hip:gfx942 --out DIR [--kernel NAME ...]

Triton compiles for a ``GPUTarget`` without a device: on this project's CPU machine (Triton 3.9) an Inductor
reduction kernel goes through TTIR, TTGIR, LLIR and PTX to a cubin for ``GPUTarget("cuda", 90, 32)`` in about
10 s, and to AMDGCN and an HSACO for ``GPUTarget("hip", "gfx942", 64)`` in about 5 s (the bundled ``ptxas`` and
LLVM's AMDGPU backend do the last steps). Only loading the binary needs the GPU, so what the driver reports on
load (the register count on CUDA) is taken from ``ptxas -v`` instead, which Triton runs anyway.

The kernel is taken from the organized file up to its ``get_args()`` harness, without the two lines that need a
GPU driver (``set_driver_to_gpu()`` and the CUDA stream import); the autotuner Inductor's decorator builds is not
run: its *first* config is compiled (a GPU run's autotuning may choose another: its Triton cache then says which).

Writes ``<out>/<kernel name>/`` in the Triton cache's own layout (``<name>.ttir .ttgir .llir .ptx|.amdgcn .json``,
binaries left out) plus ``<name>.ptxas`` (the ``ptxas -v`` log, CUDA) and ``<name>.config.json`` (the config
compiled and how many there were), which `analysis.kernels.ir` reads.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import tempfile
import types
from pathlib import Path
from typing import Any

from analysis.kernels.ir import CONFIG_SUFFIX, IR_SUFFIXES, PTXAS_SUFFIX, parse_target
from foundation.atomic_io import write_json, write_text
from foundation.errors import UserError
from foundation.formats.kernel_index import read_index
from stages.entry import StageArgumentParser, run_as_script

_DRIVER_LINES = re.compile(r"^.*(set_driver_to_gpu\(\)|_cuda_getCurrentRawStream).*$", re.M)


def kernel_object(path: Path) -> Any:
    """The file's kernel (Inductor's ``CachingAutotuner``), defined without a GPU driver."""
    text = path.read_text(encoding="utf-8").split("\ndef get_args", 1)[0]
    module = types.ModuleType(path.stem)
    module.__file__ = str(path)
    exec(compile(_DRIVER_LINES.sub("", text), str(path), "exec"), module.__dict__)
    # The kernel is the function Inductor's decorator wrapped; a scan kernel defines its combine function first.
    for name in re.findall(r"^def (\w+)\(", text, re.M):
        if hasattr(module.__dict__.get(name), "triton_meta"):
            return module.__dict__[name]
    raise UserError(f"{path}: no Inductor Triton kernel in the file")


def compile_for(path: Path, target_spec: str, out: Path) -> str:
    """Compile one kernel file for the target into ``out/<kernel name>/``; returns the kernel's name."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    backend, arch, warp = parse_target(target_spec)
    kernel = kernel_object(path)
    meta = kernel.triton_meta
    config = kernel.configs[0]
    constants = {**meta.get("constants", {}), **config.kwargs}
    attrs = meta["configs"][0] if meta.get("configs") else {}
    source = ASTSource(kernel.fn, dict(meta["signature"]), constants, attrs)
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    with tempfile.TemporaryDirectory(prefix="triton-ir-") as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        triton.knobs.cache.dir = cache
        triton.knobs.nvidia.dump_ptxas_log = True  # ptxas -v: registers and spills, what the driver would say
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            triton.compile(source, target=GPUTarget(backend, int(arch) if backend == "cuda" else arch, warp),
                           options=options)
        name = kernel.fn.__name__
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        for file in Path(cache).rglob(f"{name}.*"):
            if file.suffix in IR_SUFFIXES:
                shutil.copyfile(file, target / file.name)
    if backend == "cuda":
        write_text(target / f"{name}{PTXAS_SUFFIX}", log.getvalue())
    write_json(target / f"{name}{CONFIG_SUFFIX}",
               {"format_version": 1, "target": target_spec, "config": dict(config.kwargs),
                "num_warps": config.num_warps, "num_stages": config.num_stages, "configs": len(kernel.configs)})
    return name


def build_parser() -> argparse.ArgumentParser:
    parser = StageArgumentParser(prog="python -m stages.triton_ir", description=__doc__.splitlines()[0])
    parser.add_argument("--organized", type=Path, required=True, help="organized kernels directory (with index.csv)")
    parser.add_argument("--target", required=True, help="cuda:<capability> (cuda:90) or hip:<arch> (hip:gfx942)")
    parser.add_argument("--out", type=Path, required=True, help="where <kernel name>/ directories go")
    parser.add_argument("--kernel", action="append", default=None,
                        help="only this kernel (repeatable; default: every Triton kernel in index.csv)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    parse_target(args.target)
    rows = [r for r in read_index(args.organized / "index.csv") if r.backend == "triton"]
    if args.kernel:
        unknown = sorted(set(args.kernel) - {r.kernel_name for r in rows})
        if unknown:
            raise UserError(f"--kernel {unknown[0]}: no Triton kernel of this name in {args.organized / 'index.csv'}")
        rows = [r for r in rows if r.kernel_name in args.kernel]
    for row in rows:
        name = compile_for(args.organized / row.path, args.target, args.out)
        print(f"triton_ir: {name} for {args.target} → {args.out / name}", flush=True)
    return 0


if __name__ == "__main__":
    run_as_script(main)
