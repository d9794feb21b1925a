"""ROCm's HIP module table, torch-free: how a stage recognizes that a process ran out of it (error 209), and how
many models and kernel modules one process takes on ROCm so that it does not get there.

Why: every kernel binary a process loads is a HIP module (a Triton kernel loads one per autotune config it
compiles), and those Inductor's static launcher loads are never unloaded. The seed author's analysis
(``inductor/HIP_MODULE_EXHAUSTION_ANALYSIS.md`` in ``naromero77amd/framework_scripts``) saw the driver's module table
run out after about 20,000 kernel binaries in one process (a training model recompiled 8 times under exhaustive GEMM
autotuning; how many were still loaded then is not known, the garbage collector had unloaded some). From then
on every load in that process fails with ``hipErrorNoBinaryForGpu`` (209), the error a binary built for another
GPU gives too. The process does not recover; a fresh one does.

The rules, one definition for the stages and the host:

- `is_error_209`: an error text carries error 209 in one of the forms the stack prints it (`ERROR_209_FORMS`).
- The suite compiles each model in its own process on ROCm (`suite_models_per_process`), as PyTorch's own harness
  does (one ``--only`` process per model).
- A model worker of the paired rounds keeps `models_per_process` models (ROCm: 1, what one suite process held
  while it compiled that model).
- A kernel worker loads at most `modules_per_worker` kernel modules before a fresh worker takes over (ROCm:
  `ROCM_MODULES_PER_WORKER`); after an error 209 the job runs once more in a fresh worker, and a second 209 is
  the job's error (`RETRIES_AFTER_209`).

0 means no limit: other platforms keep every model and module in one process, as before.
"""

from __future__ import annotations

import re

# A kernel file's first call on a GPU autotunes its configs (their *.best_config files are deleted before every
# run and round) and loads a module per config: 1 to about 8 for pointwise and reduction kernels under
# max-autotune-pointwise. 500 files stay near 4,000 modules, a fifth of the ~20,000 the analysis saw exhaust the
# table, and cost one worker start (the imports: 4-7 s on the H100/H200, docs/cost-model.md) per 500 modules.
ROCM_MODULES_PER_WORKER = 500
ROCM_MODELS_PER_PROCESS = 1
ROCM_SUITE_MODELS_PER_PROCESS = 1
RETRIES_AFTER_209 = 1

# hipGetErrorName and hipGetErrorString of 209 (PyTorch's "HIP error: ..." / hipified "CUDA error: ...", and Triton's
# HIP driver "Triton Error [HIP]:  Code: 209, Messsage: <the string>"), then the bare code as Inductor's static
# launcher prints it on ROCm ("CUDA driver error: 209", "CUDA driver error code: 209"). "worker exited with code 209"
# (an exit status) is no such form.
ERROR_209_FORMS = re.compile(
    r"hipErrorNoBinaryForGpu|no kernel image is available for execution on the device|\berror(?: code)?:?\s*209\b",
    re.IGNORECASE,
)


def is_error_209(error: str) -> bool:
    """Whether an error text is HIP's error 209 (``hipErrorNoBinaryForGpu``): the module table may be full."""
    return bool(error) and ERROR_209_FORMS.search(error) is not None


def modules_per_worker(platform: str) -> int:
    """Kernel modules a kernel worker loads before a fresh one takes over (0: no limit)."""
    return ROCM_MODULES_PER_WORKER if platform == "rocm" else 0


def models_per_process(platform: str) -> int:
    """Models one model worker of the paired rounds prepares (0: every model in one worker)."""
    return ROCM_MODELS_PER_PROCESS if platform == "rocm" else 0


def suite_models_per_process(platform: str) -> int:
    """Models one suite process compiles when nothing else cuts the suite (0: one process for every model)."""
    return ROCM_SUITE_MODELS_PER_PROCESS if platform == "rocm" else 0
