"""What PyTorch's own build downloads, read from a PyTorch tree, and the environment of its build step.

An image build runs with the network off, so everything PyTorch's build would fetch is either in the store
(and the build told to use it) or switched off where that cannot change what Inductor generates. The facts below
were read in the real trees' build files (PyTorch v2.9.0 and main, ROCm and CUDA); they are read from the tree
at the recorded commit, never assumed from a version number.

Fetched into the store (``Download``, laid out by ``prbench.images.build_context``):

- **AOTriton** (ROCm; ``cmake/External/aotriton.cmake``, included while flash / memory-efficient attention are
  on, the default). The data are ``set()`` lists in that file (it says it replaces
  ``.ci/docker/aotriton_version.txt``): ``__AOTRITON_VER`` (v2.9.0: ``0.11b``; main: ``0.14.x``),
  ``__AOTRITON_ROCM_LIST`` / ``__AOTRITON_MANYLINUX_LIST`` / ``__AOTRITON_SHA256_LIST`` (one runtime per ROCm
  release), ``__AOTRITON_IMAGE_LIST`` / ``__AOTRITON_IMAGE_SHA256_LIST`` (GPU kernel images per family,
  ``amd-gfx942``, ``amd-gfx11xx``, ...), ``__AOTRITON_Z`` and the release base URL. CMake takes the runtime whose
  ``rocm<major.minor>`` equals the image's HIP version (none: it clones AOTriton from GitHub and builds it, which
  is refused here), named ``aotriton-<ver>-<manylinux>_<machine>-<rocm>-shared.tar.<z>``, and each image
  ``aotriton-<ver>-images-<image>.tar.<z>`` whose family (the part after ``amd-gfx``, ``x`` matching any
  character) is found in an entry of ``PYTORCH_ROCM_ARCH``; each is checked against the sha256 the file lists.
  All archives have one top directory, ``aotriton/``, so they unpack into one prefix, and
  ``AOTRITON_INSTALLED_PREFIX`` pointed at it makes CMake install its ``lib/`` and ``include/`` into ``torch/``
  instead of downloading: the same files. Switching AOTriton off instead (``USE_FLASH_ATTENTION=0``) would make
  ``scaled_dot_product_attention`` decompose into other Inductor kernels: it would change what is compared.

Switched off (``build_env``), because no Inductor kernel and no extern call Inductor emits reaches them:

- **NNPACK** (``USE_NNPACK=0``): on x86-64 NNPACK's own CMakeLists downloads ``six`` from PyPI for its PeachPy
  code generator (``cmake/DownloadSix.cmake``), since PyTorch's ``cmake/External/nnpack.cmake`` does not define
  ``PYTHON_SIX_SOURCE_DIR`` and ``setup.py`` passes no such variable on. NNPACK is an eager CPU convolution
  library; Inductor's GPU code is Triton plus vendor-library externs, its CPU code C++ plus oneDNN/ATen externs
  (and ATen prefers oneDNN to NNPACK for float convolutions on x86).
- **NCCL** (CUDA, ``USE_NCCL=0``): ``setup.py``'s build step git-clones NVIDIA/nccl at the tag of
  ``.ci/docker/ci_commit_pins/nccl-cu12.txt`` (v2.9.0; ``nccl.txt`` on main) unless NCCL is off or the system's
  is used. NCCL carries collectives between processes; prbench compiles and times each model on one GPU.

Everything else PyTorch builds from is a git submodule under ``third_party/``, and the source archive
(``Store.add_commit_archive``) holds every submodule at its recorded commit, so ``setup.py`` finds them present
and fetches none. A recipe's ``[build] env`` that turns NNPACK or NCCL back on is a one-line error: the build
would have to download.

The build step's environment (``build_env``): the seed's settings (``BUILD_TEST=0``, no FBGEMM/MPI/XNNPACK, and
on ROCm its CK default ``USE_CK=0``: ``USE_ROCM_CK_GEMM=0``, ``USE_ROCM_CK_SDPA=0``, ``USE_MSLK=0``), the switches
above, then the recipe's ``[build] env``. ``CMAKE_PREFIX_PATH`` is unset in the step (``docker/pytorch.j2``): the
ROCm images point it at their bundled torch, whose CMake files would otherwise be found first. ``MAX_JOBS``
defaults to ``build_jobs`` of the machine that plans the build (see there).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from foundation.errors import UserError
from prbench.images.downloads import Download
from prbench.sides.recipes import Recipe

AOTRITON_CMAKE = "cmake/External/aotriton.cmake"
_AOTRITON_LISTS = ("__AOTRITON_VER", "__AOTRITON_MANYLINUX_LIST", "__AOTRITON_ROCM_LIST", "__AOTRITON_SHA256_LIST",
                   "__AOTRITON_IMAGE_LIST", "__AOTRITON_IMAGE_SHA256_LIST", "__AOTRITON_Z")
_IMAGE_PREFIX = "amd-gfx"  # aotriton.cmake takes the family as the image name from its 8th character on
# A real PyTorch build peaks at about 2-4 GB per compile job (hipcc/nvcc on the attention and CK/CUTLASS kernels are
# the top end); a job count the memory cannot hold gets compilers killed hours in, so the upper figure is used.
JOB_MEMORY_BYTES = 4 << 30
_OFF = ("OFF", "0", "NO", "FALSE", "N")  # what PyTorch's setup helpers read as a negative flag


def pytorch_downloads(tree: Path, platform: str, arch: tuple[str, ...], *, rocm_version: Callable[[], str],
                      machine: Callable[[], str]) -> list[Download]:
    """PyTorch's downloads for a build on ``platform`` of the tree ``tree`` (an exported commit): AOTriton's
    runtime for the image's ROCm and machine and its images for ``arch`` on ``rocm``; none elsewhere (see the
    module docstring for what is switched off instead). ``rocm_version`` (``major.minor``) and ``machine``
    (``x86_64``) are asked only when the tree downloads AOTriton: each may start a container."""
    cmake = tree / AOTRITON_CMAKE
    if platform != "rocm" or not cmake.is_file():
        return []
    values = _cmake_lists(cmake)
    version, z = _one(values, "__AOTRITON_VER", cmake), _one(values, "__AOTRITON_Z", cmake)
    base = re.search(r'"(https://[^"\s]+/releases/download/)"', cmake.read_text(encoding="utf-8"))
    if base is None:
        raise UserError(f"{cmake}: no AOTriton release URL (https://.../releases/download/) prbench can read")
    url = f"{base.group(1)}{version}/"
    env = {"AOTRITON_INSTALLED_PREFIX": "{path}/aotriton"}
    image_rocm = rocm_version()
    rocm = f"rocm{image_rocm}"
    rocms = values["__AOTRITON_ROCM_LIST"]
    if rocm not in rocms:
        raise UserError(f"{cmake}: AOTriton {version} has no runtime for the image's ROCm {image_rocm} (it has "
                        f"{', '.join(rocms)}); PyTorch's build would clone AOTriton from GitHub and compile it")
    index = rocms.index(rocm)
    manylinux = _at(values, "__AOTRITON_MANYLINUX_LIST", index, cmake)
    name = f"aotriton-{version}-{manylinux}_{machine()}-{rocm}-shared.tar.{z}"
    downloads = [Download("aotriton", url + name, env, key=_key(f"aotriton-runtime-{rocm}"),
                          sha256=_at(values, "__AOTRITON_SHA256_LIST", index, cmake),
                          tool=f"AOTriton {version} runtime ({rocm})")]
    for index, image in enumerate(values["__AOTRITON_IMAGE_LIST"]):
        family = image[len(_IMAGE_PREFIX):].replace("x", ".")
        if any(re.search(family, target) for target in arch):
            downloads.append(Download("aotriton", f"{url}aotriton-{version}-images-{image}.tar.{z}", env,
                                      key=_key(f"aotriton-images-{image}"),
                                      sha256=_at(values, "__AOTRITON_IMAGE_SHA256_LIST", index, cmake),
                                      tool=f"AOTriton {version} images {image}"))
    return downloads


def _cmake_lists(cmake: Path) -> dict[str, list[str]]:
    """The first ``set(NAME values...)`` of each AOTriton list, comments dropped."""
    lines = [re.sub(r'#[^"\n]*$', "", line) for line in cmake.read_text(encoding="utf-8").splitlines()]
    text = "\n".join(lines)
    values: dict[str, list[str]] = {}
    for match in re.finditer(r"\bset\(\s*(__AOTRITON_\w+)\s([^()]*)\)", text):
        if match.group(1) in _AOTRITON_LISTS and match.group(1) not in values:
            values[match.group(1)] = [a or b for a, b in re.findall(r'"([^"]*)"|([^\s"]+)', match.group(2))]
    missing = [name for name in _AOTRITON_LISTS if name not in values]
    if missing:
        raise UserError(f"{cmake}: no {', '.join(missing)} (the AOTriton lists of PyTorch 2.9 and later); this "
                        "tree's AOTriton download is not supported yet")
    return values


def _one(values: dict[str, list[str]], name: str, cmake: Path) -> str:
    found = values[name]
    if len(found) != 1 or not re.fullmatch(r"[A-Za-z0-9._-]+", found[0]):
        raise UserError(f"{cmake}: {name} is {' '.join(found)!r}; expected one word like 0.11b")
    return found[0]


def _at(values: dict[str, list[str]], name: str, index: int, cmake: Path) -> str:
    try:
        return values[name][index]
    except IndexError:
        raise UserError(f"{cmake}: {name} has {len(values[name])} entries, fewer than the list it goes with") from None


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def build_env(recipe: Recipe) -> dict[str, str]:
    """The variables of the PyTorch build step: prbench's defaults for the platform, then ``[build] env``; none
    for a wheel recipe, which builds nothing."""
    if recipe.is_wheel:
        return {}
    env = {"BUILD_TEST": "0", "USE_FBGEMM": "0", "USE_MPI": "0", "USE_XNNPACK": "0", "USE_NNPACK": "0"}
    if recipe.platform == "rocm":
        env.update({"USE_ROCM_CK_GEMM": "0", "USE_ROCM_CK_SDPA": "0", "USE_MSLK": "0"})
    if recipe.platform == "cuda":
        env["USE_NCCL"] = "0"
    for name, why in (("USE_NNPACK", "NNPACK's build downloads six from PyPI"),
                      ("USE_NCCL", "the build would git-clone NCCL from GitHub")):
        value = recipe.build_env.get(name)
        if value is not None and value.upper() not in _OFF:
            raise UserError(f"{recipe.path}: key 'build.env.{name}': {why}, and image builds run offline; leave "
                            f"it off (Inductor's code never calls it; see prbench.images.pytorch_setup)")
    return {**env, **recipe.build_env}


def build_jobs(cores: int, memory_bytes: int) -> int:
    """Compile jobs for a machine: one per core, at most one per ``JOB_MEMORY_BYTES`` of memory, at least one."""
    return max(1, min(cores, memory_bytes // JOB_MEMORY_BYTES))


def host_build_jobs() -> int:
    """``build_jobs`` of this machine (the cores this process may use; the physical memory)."""
    return build_jobs(len(os.sched_getaffinity(0)), os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def image_rocm_version(client: Any, image: str) -> str:
    """``major.minor`` of the ROCm in ``image`` (``/opt/rocm/.info/version``), read by a container without network:
    AOTriton's runtime is picked by it, as CMake picks it by the HIP version of the same installation."""
    import docker

    try:
        out = client.containers.run(image, ["cat", "/opt/rocm/.info/version"], remove=True, network_mode="none",
                                    entrypoint=[], stdout=True, stderr=True).decode()
    except (docker.errors.ContainerError, docker.errors.APIError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise UserError(f"base image {image[:19]}: cannot read its ROCm version ({reason})") from None
    found = re.match(r"\s*([0-9]+\.[0-9]+)", out)
    if found is None:
        raise UserError(f"base image {image[:19]}: /opt/rocm/.info/version says {out[:60]!r}; expected 7.0.0-...")
    return found.group(1)
