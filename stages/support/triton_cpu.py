"""Make real Inductor *Triton* kernels generate and run on a CPU-only machine (through the Triton interpreter).

Triton 3.9 has no CPU backend, so on CPU Inductor normally emits C++ kernels. With ``install()``:

* codegen works: Inductor embeds ``triton_hash_with_backend()`` in every kernel, which needs an active GPU
  driver; we replace it with a constant so no driver is needed (the driver itself is left alone, so a worker
  that also has a GPU is not confused by a fake one);
* kernels execute: under ``TRITON_INTERPRET=1`` the ``libdevice.*`` functions are empty stubs that return
  ``None`` (the compiler swaps them for a backend module, the interpreter never does); we give the stubs
  numpy / torch.special implementations that work on the interpreter's ``TensorHandle`` data;
* ``TORCHINDUCTOR_BENCHMARK_KERNEL=1`` works: on CPU the per-kernel harness imports are mis-indented because
  the CPU ``get_raw_stream`` override is a multi-line ``def`` (textwrap.dedent finds no common indent); we
  make it a one-line lambda at codegen time;
* ``torch._inductor.config.cpu_backend = "triton"``.

Interpreter timings are meaningless (about 1.6 s per launch): this path is for correctness and for testing the
organize / identity / runner machinery on real generated files, never for performance numbers.
``TRITON_INTERPRET=1`` must be set before triton is first imported (it is read at import time).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from typing import Any

# The constant that replaces Triton's backend hash in generated kernels; visible in inductor_meta['backend_hash'].
CPU_BACKEND_HASH = "CPU_TRITON_INTERPRETER"


def require_interpreter() -> None:
    """Fail clearly when the interpreter was not requested before triton was imported."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("stages.support.triton_cpu needs TRITON_INTERPRET=1 in the environment"
                           " before triton is imported")
    # Triton reads the variable when a JITFunction is created, so a module imported earlier would still be
    # compiled rather than interpreted; kernels are created later, so only the env var matters here.


def install() -> None:
    """Everything needed for ``torch.compile`` on CPU to emit and run Triton kernels (idempotent)."""
    require_interpreter()
    stub_backend_hash()
    patch_libdevice()
    patch_cpu_benchmark_harness()
    vectorize_inductor_min_max()
    import torch._inductor.config as inductor_config

    inductor_config.cpu_backend = "triton"


def stub_backend_hash() -> None:
    import torch.utils._triton as torch_triton

    if getattr(torch_triton.triton_hash_with_backend, "_prbench_stub", False):
        return

    def triton_hash_with_backend() -> str:
        return CPU_BACKEND_HASH

    triton_hash_with_backend._prbench_stub = True  # type: ignore[attr-defined]
    torch_triton.triton_hash_with_backend = triton_hash_with_backend  # type: ignore[assignment]


def patch_cpu_benchmark_harness() -> None:
    """One-line ``get_raw_stream`` so the BENCHMARK_KERNEL harness imports dedent correctly on CPU."""
    from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides

    def import_get_raw_stream_as(self: Any, name: str) -> str:
        return f"{name} = lambda _=None: 0"

    CpuDeviceOpOverrides.import_get_raw_stream_as = import_get_raw_stream_as  # type: ignore[method-assign]


def vectorize_inductor_min_max() -> None:
    """Reduce with numpy for Inductor's NaN-propagating ``triton_helpers.max2``/``min2``.

    The interpreter has numpy fast paths only for Triton's own combine functions; Inductor's ``maximum`` /
    ``minimum`` fall back to an element-by-element Python reduction (seconds per softmax launch). np.max/np.min
    propagate NaN exactly like those combine functions, so results are unchanged.
    """
    import numpy as np
    from torch._inductor.runtime import triton_helpers
    from triton.runtime.interpreter import ReduceOps

    original = ReduceOps.apply_impl
    if getattr(original, "_prbench_vectorized", False):
        return

    def apply_impl(self: Any, input: Any) -> Any:
        if self.combine_fn is triton_helpers.maximum:
            return self.min_max(input[0], val_reduce_op=np.max)
        if self.combine_fn is triton_helpers.minimum:
            return self.min_max(input[0], val_reduce_op=np.min)
        return original(self, input)

    apply_impl._prbench_vectorized = True  # type: ignore[attr-defined]
    ReduceOps.apply_impl = apply_impl


# --- libdevice ---------------------------------------------------------------------------------------------


def _torch_unary(op_name: str) -> Callable[[Any], Any]:
    """Special functions numpy lacks, evaluated with torch on the numpy buffer (no copy for float32/64)."""

    def apply(x: Any) -> Any:
        import torch

        op = _resolve_torch(op_name)
        return op(torch.from_numpy(x.copy())).numpy()

    return apply


def _resolve_torch(dotted: str) -> Callable[..., Any]:
    import torch

    owner: Any = torch
    for part in dotted.split("."):
        owner = getattr(owner, part)
    return owner


def _np() -> Any:
    import numpy

    return numpy


def _ilogb(x: Any) -> Any:
    np = _np()
    _, exponent = np.frexp(x)
    return (exponent - 1).astype(np.int32)


def _round_half_away(x: Any) -> Any:
    np = _np()
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _ieee_remainder(x: Any, y: Any) -> Any:
    np = _np()
    return x - np.rint(x / y) * y


def _gamma(x: Any) -> Any:
    np = _np()
    return np.vectorize(math.gamma, otypes=[x.dtype])(x)


def _libdevice_table() -> dict[str, tuple[Callable[..., Any], str | None]]:
    """name → (numpy-level implementation, result kind: None = same dtype as the first input)."""
    np = _np()
    same: str | None = None
    table: dict[str, tuple[Callable[..., Any], str | None]] = {
        "abs": (np.abs, same), "acos": (np.arccos, same), "acosh": (np.arccosh, same),
        "asin": (np.arcsin, same), "asinh": (np.arcsinh, same), "atan": (np.arctan, same),
        "atanh": (np.arctanh, same), "atan2": (np.arctan2, same), "cbrt": (np.cbrt, same),
        "ceil": (np.ceil, same), "copysign": (np.copysign, same), "cos": (np.cos, same),
        "cosh": (np.cosh, same), "exp": (np.exp, same), "exp2": (np.exp2, same),
        "exp10": (lambda x: np.power(10.0, x), same), "expm1": (np.expm1, same),
        "fdim": (lambda x, y: np.maximum(x - y, 0), same), "floor": (np.floor, same),
        "fma": (lambda a, b, c: a * b + c, same), "fmod": (np.fmod, same), "hypot": (np.hypot, same),
        "ldexp": (lambda x, n: x * np.power(2.0, n).astype(x.dtype), same), "log": (np.log, same),
        "log10": (np.log10, same), "log1p": (np.log1p, same), "log2": (np.log2, same),
        "mul_rn": (np.multiply, same), "add_rn": (np.add, same), "sub_rn": (np.subtract, same),
        "div_rn": (np.divide, same), "rcp_rn": (np.reciprocal, same),
        "nearbyint": (np.rint, same), "rint": (np.rint, same), "nextafter": (np.nextafter, same),
        "pow": (np.power, same), "remainder": (_ieee_remainder, same), "round": (_round_half_away, same),
        "rsqrt": (lambda x: 1.0 / np.sqrt(x), same), "sin": (np.sin, same), "sinh": (np.sinh, same),
        "sqrt": (np.sqrt, same), "sqrt_rn": (np.sqrt, same), "tan": (np.tan, same), "tanh": (np.tanh, same),
        "fast_tanhf": (np.tanh, same), "fast_expf": (np.exp, same), "fast_logf": (np.log, same),
        "trunc": (np.trunc, same), "tgamma": (_gamma, same),
        "erf": (_torch_unary("special.erf"), same), "erfc": (_torch_unary("special.erfc"), same),
        "erfinv": (_torch_unary("special.erfinv"), same), "erfcx": (_torch_unary("special.erfcx"), same),
        "lgamma": (_torch_unary("lgamma"), same), "cyl_bessel_i0": (_torch_unary("special.i0"), same),
        "cyl_bessel_i1": (_torch_unary("special.i1"), same), "j0": (_torch_unary("special.bessel_j0"), same),
        "j1": (_torch_unary("special.bessel_j1"), same), "y0": (_torch_unary("special.bessel_y0"), same),
        "y1": (_torch_unary("special.bessel_y1"), same),
        "isinf": (np.isinf, "int1"), "isnan": (np.isnan, "int1"), "signbit": (np.signbit, "int1"),
        "isfinited": (np.isfinite, "int1"), "finitef": (np.isfinite, "int1"),
        "llrint": (lambda x: np.rint(x).astype(np.int64), "int64"), "ilogb": (_ilogb, "int32"),
    }
    return table


def _make_libdevice_fn(name: str, impl: Callable[..., Any], kind: str | None) -> Callable[..., Any]:
    def libdevice_fn(*args: Any, **kwargs: Any) -> Any:
        import numpy as np
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle, _get_np_dtype

        kwargs.pop("_semantic", None)  # builtins may be called with the semantic object in newer tritons
        tensors = [a for a in args if isinstance(a, tl.tensor)]
        if not tensors:
            raise TypeError(f"libdevice.{name}: expected at least one tensor argument")
        first = tensors[0]
        values = [_as_numpy(a) for a in args]
        with np.errstate(all="ignore"):  # inf/nan results are legitimate values here, as on the GPU
            result = np.asarray(impl(*values))
        element = first.type.scalar if kind is None else getattr(tl, kind)
        result = result.astype(_get_np_dtype(element), copy=False)
        if first.type.is_block():
            block = tl.block_type(element, list(result.shape))
            return tl.tensor(TensorHandle(result, element), block)
        return tl.tensor(TensorHandle(result, element), element)

    libdevice_fn.__name__ = name
    libdevice_fn.__qualname__ = f"libdevice.{name}"
    return libdevice_fn


def _as_numpy(value: Any) -> Any:
    import numpy as np
    import triton.language as tl

    if isinstance(value, tl.tensor):
        return value.handle.data
    if isinstance(value, tl.constexpr):
        value = value.value
    return np.asarray(value)


def patch_libdevice() -> list[str]:
    """Replace the libdevice stubs the interpreter would call with working implementations; return their names."""
    require_interpreter()
    modules = _libdevice_modules()
    patched: list[str] = []
    for name, (impl, kind) in _libdevice_table().items():
        fn = _make_libdevice_fn(name, impl, kind)
        for module in modules:
            if hasattr(module, name):
                setattr(module, name, fn)
        patched.append(name)
    return patched


def _libdevice_modules() -> list[Any]:
    """Every module object a kernel might reach as ``libdevice`` (Inductor re-exports one of them)."""
    import triton.language.extra.libdevice as generic

    modules = [generic]
    from torch._inductor.runtime import triton_compat

    inductor_view = getattr(triton_compat, "libdevice", None)
    if inductor_view is not None and inductor_view not in modules:
        modules.append(inductor_view)
    for name in ("triton.language.extra.cuda.libdevice", "triton.language.extra.hip.libdevice"):
        module = sys.modules.get(name)
        if module is not None and module not in modules:
            modules.append(module)
    return modules
