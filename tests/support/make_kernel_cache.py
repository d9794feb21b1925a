"""Fill a fresh Inductor cache by compiling builtin-suite models on this CPU (used by the integration tests).

    python tests/support/make_kernel_cache.py --cache DIR --backend triton|cpp --models A,B [--shifted]

``--backend triton`` generates real Triton kernels through ``stages.support.triton_cpu`` (interpreter, BENCHMARK_KERNEL
harness included); ``cpp`` is the default CPU backend with ``cpp.enable_kernel_profile`` on, as the
``cpu-local`` recipe sets it. ``--shifted`` compiles each model behind one extra, independent reduction that
Inductor schedules first, so every later kernel's ordinal moves by one: the renumbering a PR can cause.
Run in a subprocess: it patches torch globally and needs TRITON_INTERPRET set before triton is imported.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", required=True, type=Path)
    parser.add_argument("--backend", choices=("triton", "cpp"), required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--shifted", action="store_true")
    args = parser.parse_args()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(args.cache)
    if args.backend == "triton":
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["TORCHINDUCTOR_BENCHMARK_KERNEL"] = "1"
    sys.path.insert(0, str(ROOT))
    import torch
    import torch._inductor.config as inductor_config

    if args.backend == "triton":
        from stages.support import triton_cpu

        triton_cpu.install()
    else:
        inductor_config.cpp.enable_kernel_profile = True
    from stages.support.environment import prepare_inductor
    from stages.support.hf_models import build

    prepare_inductor({})  # as the stages do: the session's precompiled header, no config of a variant

    for name in args.models.split(","):
        built = build(name)
        model = shifted(built.model) if args.shifted else built.model
        extra = (torch.arange(7 * 13, dtype=torch.float32).reshape(7, 13),) if args.shifted else ()
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(model)(*extra, **built.inputs)
        print(f"compiled {name}", flush=True)
    return 0


def shifted(model: object):
    """The model behind one extra, independent kernel that comes first in the graph."""
    import torch

    def forward(extra: torch.Tensor, **inputs: object) -> object:
        shift = (extra.cos() * 3.0).amax(dim=1)  # its own kernel, scheduled before the model's
        return shift, model(**inputs)

    return forward


if __name__ == "__main__":
    code = main()
    from stages.entry import end_process  # (on the path main() set) without the teardown, as the stages end

    end_process(code)
