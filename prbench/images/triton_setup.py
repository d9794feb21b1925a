"""What Triton's own build downloads, read from a Triton source tree, and how to make it use local copies instead.

Triton's ``setup.py`` fetches by URL what its build needs beyond the source tree: a prebuilt LLVM, nlohmann/json
(for the Proton profiler), pybind11 (3.0 only), and the NVIDIA tools and headers its CUDA backend ships. An image
build with the network off needs each of them in the store, and Triton told to use the stored copy. The rules below
were checked against the real ``setup.py`` of Triton 3.0.0 and 3.2.0 (``python/setup.py``) and 3.4.0 (``setup.py``
at the repository root); they are read from the tree at the recorded commit, never assumed from a version number:

- **LLVM** (3.0–3.4): ``cmake/llvm-hash.txt``'s first 8 characters ``R`` give
  ``<base>/llvm-R-<system>.tar.gz`` (``<base>`` as written in setup.py,
  ``https://oaitriton.blob.core.windows.net/public/llvm-builds`` in all three), one top directory
  ``llvm-R-<system>``; ``<system>`` follows the image's machine and glibc as setup.py picks it (x86_64:
  ``ubuntu-x64`` above glibc 2.28, ``almalinux-x64`` above 2.17, else ``centos-x64``; aarch64: ``ubuntu-arm64``).
  ``LLVM_SYSPATH=<that directory>`` makes setup.py use it (and derive the include and library directories).
- **json** (3.0–3.4): the ``include.zip`` URL written in setup.py (v3.11.3 in all three), unpacked so that
  ``include/`` is at the top; ``JSON_SYSPATH=<that directory>``.
- **pybind11** (3.0 only; 3.2+ use the pip package): ``cmake/pybind11-version.txt`` ``V`` gives
  ``https://github.com/pybind/pybind11/archive/refs/tags/vV.tar.gz``, top directory ``pybind11-V``;
  ``PYBIND11_SYSPATH=<that directory>``.
- **NVIDIA tools** (3.0–3.4, every ``download_and_copy(...)`` call of setup.py, whichever backend is built):
  3.0 reads one version from ``cmake/nvidia-toolchain-version.txt`` and fetches conda packages from
  anaconda.org (arch ``64``/``aarch64``); 3.2 and 3.4 read per-tool versions from
  ``cmake/nvidia-toolchain-version.json`` and fetch NVIDIA's redist archives (arch ``x86_64``/``sbsa``; 3.2 also a
  ``ptxas-blackwell``). setup.py skips a tool when its variable (``TRITON_PTXAS_PATH``, ``TRITON_CUOBJDUMP_PATH``,
  ``TRITON_NVDISASM_PATH``, ``TRITON_CUDACRT_PATH``, ``TRITON_CUDART_PATH``, ``TRITON_CUPTI_PATH`` (3.0),
  ``TRITON_CUPTI_INCLUDE_PATH`` and ``TRITON_CUPTI_LIB_PATH`` (3.2+)) is set, but then it does not copy the tool
  into the backend either, and the installed Triton lacks ``bin/ptxas`` and ``include/cuda.h`` (its driver
  compiles against ``backend/include``). So for a CUDA build the archives are instead laid where setup.py looks
  before downloading, ``$TRITON_HOME/.triton/nvidia/<name>/``, and setup.py copies them in as it would after a
  download: each such download has ``unpack_under=".triton/nvidia/<name>"`` and ``TRITON_HOME={path}``.
- **Switches**: ``TRITON_OFFLINE_BUILD=1`` (3.2+, where setup.py defines ``is_offline_build``) makes setup.py fail
  instead of downloading and skips the unit tests (which fetch googletest); it also skips the NVIDIA tools, so it
  is set for ``rocm``/``cpu`` builds only. Where there is no such switch (3.0) a ``rocm``/``cpu`` build sets each
  NVIDIA variable instead. A ``cuda`` build turns the unit tests off with ``TRITON_APPEND_CMAKE_ARGS`` where
  setup.py reads it (3.2+). These switches ride on the LLVM download's ``env``.

A tree whose setup.py has none of these (newer Triton fetches from CMake, with ``cmake/llvm-info.json``) is a
one-line error: prbench does not know its downloads yet.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from analysis.errors import UserError

PLATFORMS = ("cuda", "rocm", "cpu")
# Where setup.py keeps downloads it unpacked itself: $TRITON_HOME/.triton/<package>/...
_CACHE = ".triton"


@dataclass(frozen=True)
class TritonDownload:
    """One file Triton's build would fetch, and how to make it use a local copy.

    ``env`` values use ``{path}`` for the directory the file is placed and unpacked in (in the image);
    ``unpack_under`` is a directory relative to ``{path}`` to unpack into instead ("" = ``{path}`` itself).
    """

    what: str  # "llvm", "json", "pybind11", "nvidia-toolchain"
    url: str
    env: dict[str, str]
    unpack_under: str = ""
    tool: str = field(default="", compare=False)  # for people: "nvcc 12.8.93", "LLVM 4611156"
    # Unique within one triton_downloads() list (several NVIDIA downloads share ``what`` and one directory, and
    # 3.0 unpacks one archive twice): "llvm", "json", "pybind11", "nvidia-nvcc-12-8-93". [a-z0-9-] only.
    key: str = ""


def triton_downloads(tree: Path, platform: str, *, machine: str = "x86_64",
                     glibc: str = "2.35") -> list[TritonDownload]:
    """Triton's downloads for a build on ``platform`` ("cuda" adds the NVIDIA tools; "rocm"/"cpu" do not), read
    from the source tree ``tree`` (an exported commit). ``machine`` and ``glibc`` are the image's (they pick the
    LLVM build, as setup.py does with ``platform.machine()`` and ``platform.libc_ver()``)."""
    if platform not in PLATFORMS:
        raise UserError(f"triton downloads: platform {platform!r}: expected one of {', '.join(PLATFORMS)}")
    setup = _setup_file(tree)
    text = setup.read_text(encoding="utf-8")
    llvm_base = re.search(r"[\"'](https://[^\"'{}]+/llvm-builds)/\{name\}\.tar\.gz[\"']", text)
    if llvm_base is None:
        raise UserError(f"{setup}: no LLVM download of the form prbench knows (Triton 3.0–3.4's "
                        "'.../llvm-builds/{name}.tar.gz'); this Triton's downloads are not supported yet")
    downloads = [_llvm(tree, llvm_base.group(1), machine, glibc, _switches(text, platform, setup))]
    json_url = re.search(r"[\"'](https://github\.com/nlohmann/json/releases/download/[^\"']+\.zip)[\"']", text)
    if json_url:
        downloads.append(TritonDownload("json", json_url.group(1), {"JSON_SYSPATH": "{path}"}, tool="nlohmann/json",
                                        key="json"))
    if "get_pybind11_package_info" in text:
        downloads.append(_pybind11(tree, text, setup))
    if platform == "cuda":
        downloads += _nvidia(tree, text, setup, machine)
    return downloads


def _setup_file(tree: Path) -> Path:
    for candidate in (tree / "setup.py", tree / "python" / "setup.py"):
        if candidate.is_file() and "llvm" in candidate.read_text(encoding="utf-8", errors="replace"):
            return candidate
    raise UserError(f"{tree}: no Triton setup.py (looked for setup.py and python/setup.py that fetch LLVM); "
                    "is this a Triton source tree?")


def _read(tree: Path, relative: str) -> str:
    path = tree / relative
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise UserError(f"{path}: missing from the Triton tree (its setup.py reads it)") from None


def _llvm_system(machine: str, glibc: str) -> str:
    if machine in ("aarch64", "arm64"):
        return "ubuntu-arm64"
    if machine != "x86_64":
        raise UserError(f"triton downloads: no prebuilt LLVM for machine {machine!r} (x86_64 or aarch64)")
    match = re.fullmatch(r"([0-9]+)\.([0-9]+)", glibc)
    if match is None:
        raise UserError(f"triton downloads: glibc version {glibc!r}: expected MAJOR.MINOR, e.g. 2.35")
    version = int(match.group(1)) * 100 + int(match.group(2))
    return "ubuntu-x64" if version > 228 else "almalinux-x64" if version > 217 else "centos-x64"


def _llvm(tree: Path, base: str, machine: str, glibc: str, switches: dict[str, str]) -> TritonDownload:
    revision = _read(tree, "cmake/llvm-hash.txt")[:8]
    if not re.fullmatch(r"[0-9a-f]{8}", revision):
        raise UserError(f"{tree / 'cmake/llvm-hash.txt'}: expected an LLVM commit hash, found {revision!r}")
    name = f"llvm-{revision}-{_llvm_system(machine, glibc)}"
    return TritonDownload("llvm", f"{base}/{name}.tar.gz", {"LLVM_SYSPATH": f"{{path}}/{name}", **switches},
                          tool=f"LLVM {revision}", key="llvm")


def _pybind11(tree: Path, text: str, setup: Path) -> TritonDownload:
    template = re.search(r"f[\"'](https://github\.com/pybind/pybind11/archive/[^\"']*\{version\}[^\"']*)[\"']", text)
    if template is None:
        raise UserError(f"{setup}: its pybind11 download has no URL prbench can read")
    version = _read(tree, "cmake/pybind11-version.txt")
    return TritonDownload("pybind11", template.group(1).replace("{version}", version),
                          {"PYBIND11_SYSPATH": f"{{path}}/pybind11-{version}"}, tool=f"pybind11 {version}",
                          key="pybind11")


def _switches(text: str, platform: str, setup: Path) -> dict[str, str]:
    """The environment that keeps setup.py from fetching anything else (see the module docstring)."""
    if platform == "cuda":
        if "TRITON_APPEND_CMAKE_ARGS" in text and "TRITON_BUILD_UT" in text:
            return {"TRITON_APPEND_CMAKE_ARGS": "-DTRITON_BUILD_UT=OFF"}
        return {}
    if "def is_offline_build" in text:
        return {"TRITON_OFFLINE_BUILD": "1"}
    return {call.variable: f"unused-on-{platform}" for call in _download_calls(text, setup)}


@dataclass(frozen=True)
class _Call:
    """One ``download_and_copy(...)`` of setup.py."""

    name: str  # its directory under $TRITON_HOME/.triton/nvidia
    variable: str  # the environment variable that skips it
    version_key: str | None  # the key in nvidia-toolchain-version.json; None: the .txt file's one version
    url: ast.JoinedStr  # the f-string of url_func


def _download_calls(text: str, setup: Path) -> list[_Call]:
    calls = []
    for node in ast.walk(ast.parse(text, filename=str(setup))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "download_and_copy"):
            continue
        keywords = {keyword.arg: keyword.value for keyword in node.keywords}
        try:
            name, variable = _constant(keywords["name"]), _constant(keywords["variable"])
            version = keywords["version"]
            url = keywords["url_func"]
        except (KeyError, ValueError):
            raise UserError(f"{setup}:{node.lineno}: a download_and_copy call prbench cannot read") from None
        if isinstance(version, ast.Subscript):
            key: str | None = _constant(version.slice)
        elif isinstance(version, ast.Name):
            key = None
        else:
            raise UserError(f"{setup}:{node.lineno}: download_and_copy's version is not a toolchain-file entry")
        if not (isinstance(url, ast.Lambda) and isinstance(url.body, ast.JoinedStr)):
            raise UserError(f"{setup}:{node.lineno}: download_and_copy's url_func is not a lambda of an f-string")
        calls.append(_Call(name, variable, key, url.body))
    return sorted(calls, key=lambda call: call.url.lineno)


def _constant(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise ValueError(ast.dump(node))


def _arch_map(text: str) -> dict[str, str]:
    """The machine → URL arch mapping inside setup.py's download_and_copy (``{"arm64": "sbsa", ...}``)."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == "download_and_copy":
            for inner in ast.walk(node):
                if isinstance(inner, ast.Dict) and inner.keys and all(
                        isinstance(key, ast.Constant) for key in inner.keys):
                    keys = [_constant(key) for key in inner.keys if key is not None]
                    if "arm64" in keys or "aarch64" in keys or "x86_64" in keys:
                        return dict(zip(keys, [_constant(value) for value in inner.values], strict=True))
    return {}


def _render(template: ast.JoinedStr, values: dict[str, str], setup: Path) -> str:
    parts = []
    for part in template.values:
        if isinstance(part, ast.Constant):
            parts.append(str(part.value))
        elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name) and part.value.id in values:
            parts.append(values[part.value.id])
        else:
            raise UserError(f"{setup}:{template.lineno}: a download URL with a part prbench cannot fill in "
                            f"({ast.unparse(part)})")
    return "".join(parts)


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _nvidia(tree: Path, text: str, setup: Path, machine: str) -> list[TritonDownload]:
    calls = _download_calls(text, setup)
    if not calls:
        return []
    if "nvidia-toolchain-version.json" in text:
        relative = "cmake/nvidia-toolchain-version.json"
        try:
            versions = json.loads(_read(tree, relative))
        except json.JSONDecodeError as exc:
            raise UserError(f"{tree / relative}: not valid JSON ({exc.msg})") from None
        if not isinstance(versions, dict):
            raise UserError(f"{tree / relative}: expected an object of tool versions")
    else:
        relative = "cmake/nvidia-toolchain-version.txt"
        versions = {None: _read(tree, relative)}
    arch = _arch_map(text).get(machine, machine)
    downloads: dict[tuple[str, str], TritonDownload] = {}
    for call in calls:
        version = versions.get(call.version_key)
        if not isinstance(version, str):
            raise UserError(f"{tree / relative}: no version for {call.version_key!r} (setup.py's {call.variable})")
        url = _render(call.url, {"system": "linux", "arch": arch, "version": version}, setup)
        downloads.setdefault((url, call.name), TritonDownload(
            "nvidia-toolchain", url, {"TRITON_HOME": "{path}"}, unpack_under=f"{_CACHE}/nvidia/{call.name}",
            tool=f"{call.name} {version}", key=_key(f"nvidia-{call.name}-{version}")))
    return list(downloads.values())
