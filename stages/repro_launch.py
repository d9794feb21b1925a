"""Stage ``repro_launch``: one kernel of one side, made standalone for ``invoke repro``: its module and its launch.

    python -m stages.repro_launch --organized DIR --kernel NAME --path REL [--graph REL] --out DIR

Writes ``<out>/kernel.py`` and ``<out>/launch.pt`` + ``<out>/launch.json`` (``analysis.kernels.repro``'s layout):

* C++ kernel (``--graph`` names its compiled graph module): ``kernel.py`` compiles the very source the graph module
  embeds through torch's own ``AsyncCompile.cpp_pybinding`` (so the same compiler flags Inductor used, on the
  machine that runs it), with the argument types the graph declares. The launch is recorded by running the graph
  once on its seeded example inputs and copying every tensor argument's *storage* at the moment of the kernel's
  first launch: Inductor reuses buffers, so a later kernel of the graph may overwrite this one's inputs, and a
  kernel may read past a view's shape through its raw pointer, so a copy of the view alone would not do.
* Triton kernel: ``kernel.py`` is the organized file itself (Inductor's harness with ``get_args()``/``call()``);
  the launch is its ``get_args()`` drawn from the seed on the CPU (moved to the GPU by ``run.py``), so a launch
  can be recorded on a machine without the GPU the kernel was made for.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import Any

from analysis.kernels.repro import LAUNCH_JSON, LAUNCH_PT, MODULE_FILE, launch_record
from foundation.atomic_io import atomic_path, write_json, write_text
from foundation.errors import UserError
from foundation.formats.kernel_index import embedded_kernels
from stages.entry import StageArgumentParser, run_as_script
from stages.support import cpp_replay


def cpp_module_text(graph_source: str, kernel: str, simdlen: int | None) -> str:
    """A module that compiles ``kernel`` as the graph module does, bound to the name ``kernel``, for the vector ISA
    this side's Inductor picked (``simdlen`` bits): a PR may change that pick (the README's 256-bit example does),
    and code generated for 8-wide float vectors compiled for 16-wide ones aborts."""
    found = [k for k in embedded_kernels(graph_source) if k.variable == kernel and k.backend == "cpp"]
    if not found or not found[0].complete:
        raise UserError(f"--graph: the graph module holds no complete C++ kernel named {kernel}")
    source = found[0].source
    if "'''" in source:  # the graph module itself embeds it in r'''...''', so this cannot be Inductor's text
        raise UserError(f"--graph: the source of {kernel} holds ''' and cannot be embedded")
    return (f'"""C++ kernel {kernel} as its graph module compiles it: torch\'s own C++ build, same flags."""\n\n'
            "import torch._inductor.config as inductor_config\n"
            "from torch._inductor.async_compile import AsyncCompile\n\n"
            "async_compile = AsyncCompile()\n"
            f"with inductor_config.patch({{'cpp.simdlen': {simdlen!r}}}):  # the vector ISA the run's side picked\n"
            f"    kernel = async_compile.cpp_pybinding({list(found[0].arg_types)!r}, r'''\n{source}''')\n"
            "    async_compile.wait(globals())\n")


def snapshot(args: tuple[Any, ...]) -> list[Any]:
    """The arguments as they are now, each tensor over a copy of its whole storage (shared storages stay shared)."""
    import torch

    copies: dict[int, Any] = {}
    out: list[Any] = []
    for arg in args:
        if not isinstance(arg, torch.Tensor):
            out.append(arg)
            continue
        storage = arg.untyped_storage()
        key = storage.data_ptr()
        if key not in copies:
            copies[key] = storage.clone()
        out.append(torch.empty(0, dtype=arg.dtype, device=arg.device).set_(
            copies[key], arg.storage_offset(), arg.size(), arg.stride()))
    return out


def record_cpp_launch(graph_path: Path, kernel: str) -> list[Any]:
    """Run the graph once on its seeded inputs; the kernel's arguments at its first launch."""
    from stages.kernels import load_module, seeded_args

    module = load_module(str(graph_path), "prbench_repro_graph")
    if not hasattr(module, kernel):
        raise UserError(f"--graph {graph_path}: the graph module has no kernel {kernel}")
    original = getattr(module, kernel)
    recorded: list[list[Any]] = []

    def launch(*call_args: Any) -> Any:
        if not recorded:
            recorded.append(snapshot(call_args))
        return original(*call_args)

    setattr(module, kernel, launch)
    try:
        module.call(list(seeded_args(module)))
    finally:
        setattr(module, kernel, original)
    if not recorded:
        raise UserError(f"--graph {graph_path}: the graph's call() did not launch {kernel}")
    return recorded[0]


def triton_cpu_args(kernel_source: str) -> list[Any]:
    """The file's ``get_args()``, drawn from the seed with every tensor made on the CPU."""
    import torch
    from torch._dynamo.testing import rand_strided

    from stages.support.hf_models import seed_everything

    tree = ast.parse(kernel_source)
    found: list[ast.stmt] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_args"]
    if not found:
        raise UserError("--path: the Triton kernel file has no get_args()")

    def on_cpu(*args: Any, **kwargs: Any) -> Any:
        kwargs["device"] = "cpu"
        return rand_strided(*args, **kwargs)

    namespace: dict[str, Any] = {"rand_strided": on_cpu, "torch": torch}
    exec(compile(ast.Module(body=found, type_ignores=[]), "get_args", "exec"), namespace)
    seed_everything()
    return list(namespace["get_args"]())


def run(organized: Path, kernel: str, rel_path: str, graph: str | None, out: Path) -> None:
    import torch

    kernel_file = organized / rel_path
    text = kernel_file.read_text(encoding="utf-8")
    out.mkdir(parents=True, exist_ok=True)
    if rel_path.endswith(".cpp"):
        if not graph:
            raise UserError(f"--graph is required for the C++ kernel {rel_path}")
        from stages.support.environment import prepare_inductor

        prepare_inductor()
        graph_path = organized / graph
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        width = pick_vec_isa().bit_width()
        write_text(out / MODULE_FILE, cpp_module_text(graph_path.read_text(encoding="utf-8"), kernel, width or None))
        args = record_cpp_launch(graph_path, kernel)
        positions = cpp_replay.writable_arguments(str(graph_path)).get(kernel)  # the kernel stage's own rule
        written = [i for i, a in enumerate(args)
                   if isinstance(a, torch.Tensor) and (positions is None or i in positions)]
        backend = "cpp"
    else:
        write_text(out / MODULE_FILE, text)
        args = triton_cpu_args(text)
        written = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        backend = "triton"
    with atomic_path(out / LAUNCH_PT) as tmp:
        torch.save(args, tmp)
    described = [{"kind": "tensor", "shape": list(a.shape), "stride": list(a.stride()), "dtype": str(a.dtype),
                  "storage_offset": a.storage_offset()} if isinstance(a, torch.Tensor)
                 else {"kind": type(a).__name__, "value": a} for a in args]
    write_json(out / LAUNCH_JSON, launch_record(kernel, backend, described, written))
    print(f"repro_launch: {kernel} ({backend}): {len(args)} arguments → {out / LAUNCH_PT}", flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = StageArgumentParser(prog="python -m stages.repro_launch", description=__doc__.splitlines()[0])
    parser.add_argument("--organized", type=Path, required=True, help="the side's organized kernels directory")
    parser.add_argument("--kernel", required=True, help="the kernel's name (its variable in the graph module)")
    parser.add_argument("--path", required=True, help="the kernel file, relative to --organized")
    parser.add_argument("--graph", default=None, help="C++: the graph module that launches it, relative to --organized")
    parser.add_argument("--out", type=Path, required=True, help="where kernel.py and launch.pt/.json go")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run(args.organized.resolve(), args.kernel, args.path, args.graph, args.out)
    return 0


if __name__ == "__main__":
    run_as_script(main)
