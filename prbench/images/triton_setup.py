"""What Triton's own build downloads, read from a Triton source tree, and how to make it use local copies instead.

Triton's build fetches by URL what it needs beyond the source tree: a prebuilt LLVM, nlohmann/json, pybind11 (3.0
only), the NVIDIA tools and headers its CUDA backend ships, and googletest for its C++ unit tests. An image build
with the network off needs each of them either in the store, with Triton told to use the stored copy, or switched
off. The rules below were checked against the real trees of Triton 3.0.0 and 3.2.0 (``python/setup.py``), 3.4.0
and 3.5 (release/3.5.x, the Triton PyTorch 2.9 pins: ``setup.py`` at the root), and main as of August 2026 (3.8
development: the downloads moved from ``setup.py`` to ``python/build_helpers.py``, which CMake runs). They are read
from the tree at the recorded commit, never assumed from a version number: the *download code* is the first of
``setup.py`` (``python/setup.py`` where there is no root one) and ``python/build_helpers.py`` that holds the LLVM
URL, and the *switches* are those of the ``setup.py`` pip runs.

- **LLVM**: ``<base>/<name>.tar.gz`` with ``<base>`` as written in the download code
  (``https://oaitriton.blob.core.windows.net/public/llvm-builds`` in all five) and ``<name>`` its
  ``name = f"llvm-..."`` template, one top directory ``<name>``; ``LLVM_SYSPATH=<that directory>`` makes the build
  use it. The pin comes in two formats: ``cmake/llvm-hash.txt`` (3.0–3.5: ``{rev}`` is its first 8 characters,
  ``<name>`` is ``llvm-{rev}-{system_suffix}``) and ``cmake/llvm-info.json`` (main: keys ``llvm_hash``,
  ``build_number``, ``sha256sum`` by system; ``<name>`` is ``llvm-{rev}-{system_suffix}-{build_number}`` and the
  archive's sha256 is ``sha256sum[system]``, which the store then checks). ``{system_suffix}`` follows the image's
  machine and glibc as the download code picks it (x86_64: ``ubuntu-x64`` above glibc 2.28, else
  ``almalinux-x64``, and ``centos-x64`` at 2.17 and below where the code still names it (up to 3.5); aarch64:
  ``ubuntu-arm64``). ``cmake/llvm-build-info.json`` (main) only describes how LLVM was built: not read.
- **json**: 3.0–3.5 fetch the ``include.zip`` whose URL setup.py writes only inside ``get_proton_cmake_args``, so
  only for Proton, which prbench switches off (below): nothing to fetch. Main resolves it for every build: the
  URL template ``.../nlohmann/json/releases/download/{version}/include.zip`` with ``cmake/json-version.txt``,
  unpacked so that ``include/`` is at the top; ``JSON_SYSPATH=<that directory>``.
- **pybind11** (3.0 only; 3.2–3.5 use the pip package, main nanobind's): ``cmake/pybind11-version.txt`` ``V`` gives
  ``https://github.com/pybind/pybind11/archive/refs/tags/vV.tar.gz``, top directory ``pybind11-V``;
  ``PYBIND11_SYSPATH=<that directory>``.
- **NVIDIA tools** (every ``download_and_copy(...)`` call of the download code, whichever backend is built): 3.0
  reads one version from ``cmake/nvidia-toolchain-version.txt`` and fetches conda packages from anaconda.org (arch
  ``64``/``aarch64``); 3.2 onwards read per-tool versions from ``cmake/nvidia-toolchain-version.json`` and fetch
  NVIDIA's redist archives (arch ``x86_64``/``sbsa``; 3.2 and main also a Blackwell ``ptxas``, main a Blackwell
  CUPTI, and main picks the CRT headers' archive by the ``cudacrt`` major version: a ``crt = "crt" if ... >= 13
  else "nvcc"`` choice, evaluated here). Each call skips its tool when its override is set (``variable=
  "TRITON_PTXAS_PATH"`` and the like up to 3.5, ``override_path=helper_args...`` on main), but then the tool is not
  copied into the backend either, and the installed Triton lacks ``bin/ptxas`` and ``include/cuda.h``. So for a
  CUDA build the archives are laid where the code looks before downloading, ``$TRITON_HOME/.triton/nvidia/<name>/``
  (main passes the same directory to CMake as ``TRITON_CACHE_PATH``), and the code copies them in as it would after
  a download: each such download has ``unpack_under=".triton/nvidia/<name>"`` and ``TRITON_HOME={path}``.
- **Switches**, which ride on the LLVM download's ``env``:

  - ``TRITON_BUILD_PROTON=OFF`` on every build (a tree whose setup.py lacks the switch is refused). Why: Proton is
    Triton's profiler (``triton.profiler`` and its C++ runtime); what Inductor generates does not depend on it (the
    Proton MLIR dialect the compiler uses is built either way, and Inductor imports ``triton.profiler`` only under
    ``triton.proton_profiling``, off by default and never set by prbench). Built, it needs the CUPTI headers of the
    NVIDIA downloads, which an offline ROCm/CPU build does not fetch (ROCm builds failed there), and on 3.5 its C++
    tests need googletest whenever Proton is built (gated on ``TRITON_BUILD_UT`` only from 3.6).
  - ``TRITON_OFFLINE_BUILD=1`` on ``rocm``/``cpu`` (3.2+, where setup.py defines ``is_offline_build``): the build
    fails instead of downloading, skips the NVIDIA tools and turns the unit tests off. Not for ``cuda``: it would
    skip the NVIDIA tools too. Where there is no such switch (3.0) a ``rocm``/``cpu`` build sets each NVIDIA
    variable instead.
  - ``TRITON_APPEND_CMAKE_ARGS=-DTRITON_BUILD_UT=OFF`` on ``cuda`` where setup.py reads it (3.2+). Why: the C++
    unit tests fetch googletest from GitHub at configure time and are not part of what Inductor runs.

A tree whose download code is none of these (no LLVM URL of that form in setup.py, python/setup.py or
python/build_helpers.py) is a one-line error: prbench does not know its downloads yet.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation.errors import UserError
from prbench.images.downloads import Download

PLATFORMS = ("cuda", "rocm", "cpu")
# Where the build keeps downloads it unpacked itself: $TRITON_HOME/.triton/<package>/...
_CACHE = ".triton"
_LLVM_BASE = re.compile(r"[\"'](https://[^\"'{}]+/llvm-builds)/\{name\}\.tar\.gz[\"']")
_LLVM_NAME = re.compile(r"\bname\s*=\s*f[\"'](llvm-[^\"']+)[\"']")
_JSON_URL = re.compile(r"f[\"'](https://github\.com/nlohmann/json/releases/download/\{version\}/include\.zip)[\"']")
# Proton is off in every prbench build (see the module docstring).
_NO_PROTON = {"TRITON_BUILD_PROTON": "OFF"}


def triton_downloads(tree: Path, platform: str, *, machine: str = "x86_64",
                     glibc: str = "2.35") -> list[Download]:
    """Triton's downloads for a build on ``platform`` ("cuda" adds the NVIDIA tools; "rocm"/"cpu" do not), read
    from the source tree ``tree`` (an exported commit). ``machine`` and ``glibc`` are the image's (they pick the
    LLVM build, as the download code does with ``platform.machine()`` and ``platform.libc_ver()``)."""
    if platform not in PLATFORMS:
        raise UserError(f"triton downloads: platform {platform!r}: expected one of {', '.join(PLATFORMS)}")
    setup = _setup_file(tree)
    setup_text = setup.read_text(encoding="utf-8")
    if "TRITON_BUILD_PROTON" not in setup_text:
        raise UserError(f"{setup}: no TRITON_BUILD_PROTON switch (Triton 3.0 and newer have one); prbench builds "
                        "Triton without its profiler and knows the downloads of 3.0 and newer only")
    code, text, llvm_base = _download_code(tree, setup)
    switches = _switches(setup_text, text, code, platform)
    downloads = [_llvm(tree, code, text, llvm_base, _llvm_system(machine, glibc, centos="centos-x64" in text),
                       switches)]
    if _json_outside_proton(text, code):
        downloads.append(_json(tree, code, text))
    if "get_pybind11_package_info" in text:
        downloads.append(_pybind11(tree, code, text))
    if platform == "cuda":
        downloads += _nvidia(tree, code, text, machine)
    return downloads


def _setup_file(tree: Path) -> Path:
    """The setup.py pip runs: the root one, else python/setup.py (Triton <= 3.3), as prbench.images.build picks
    the install directory."""
    for candidate in (tree / "setup.py", tree / "python" / "setup.py"):
        if candidate.is_file():
            return candidate
    raise UserError(f"{tree}: no Triton setup.py (looked for setup.py and python/setup.py); is this a Triton "
                    "source tree?")


def _download_code(tree: Path, setup: Path) -> tuple[Path, str, str]:
    """The file that fetches, its text and its LLVM base URL."""
    candidates = dict.fromkeys([setup, tree / "python" / "build_helpers.py"])
    for candidate in candidates:
        if candidate.is_file():
            text = candidate.read_text(encoding="utf-8")
            base = _LLVM_BASE.search(text)
            if base is not None:
                return candidate, text, base.group(1)
    looked = " or ".join(str(path.relative_to(tree)) for path in candidates)
    raise UserError(f"{tree}: no LLVM download of the form prbench knows in {looked} (Triton 3.0-3.5 and main's "
                    "'.../llvm-builds/{name}.tar.gz'); this Triton's downloads are not supported yet")


def _read(tree: Path, relative: str) -> str:
    path = tree / relative
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise UserError(f"{path}: missing from the Triton tree (its build reads it)") from None


def _read_json(tree: Path, relative: str) -> dict[str, Any]:
    try:
        data = json.loads(_read(tree, relative))
    except json.JSONDecodeError as exc:
        raise UserError(f"{tree / relative}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise UserError(f"{tree / relative}: expected a JSON object")
    return data


def _llvm_system(machine: str, glibc: str, *, centos: bool) -> str:
    if machine in ("aarch64", "arm64"):
        return "ubuntu-arm64"
    if machine != "x86_64":
        raise UserError(f"triton downloads: no prebuilt LLVM for machine {machine!r} (x86_64 or aarch64)")
    match = re.fullmatch(r"([0-9]+)\.([0-9]+)", glibc)
    if match is None:
        raise UserError(f"triton downloads: glibc version {glibc!r}: expected MAJOR.MINOR, e.g. 2.35")
    version = int(match.group(1)) * 100 + int(match.group(2))
    if version > 228:
        return "ubuntu-x64"
    return "centos-x64" if centos and version <= 217 else "almalinux-x64"


def _llvm(tree: Path, code: Path, text: str, base: str, system: str, switches: dict[str, str]) -> Download:
    sha256 = ""
    if "llvm-info.json" in text:
        relative = "cmake/llvm-info.json"
        info = _read_json(tree, relative)
        llvm_hash, build_number, sums = info.get("llvm_hash"), info.get("build_number"), info.get("sha256sum")
        if not (isinstance(llvm_hash, str) and isinstance(build_number, int) and isinstance(sums, dict)):
            raise UserError(f"{tree / relative}: expected llvm_hash (a commit), build_number (an integer) and "
                            "sha256sum (by system)")
        revision, values = llvm_hash[:8], {"build_number": str(build_number)}
        sha256 = sums.get(system, "")
        if not (isinstance(sha256, str) and re.fullmatch(r"[0-9a-f]{64}", sha256)):
            raise UserError(f"{tree / relative}: no sha256sum for {system!r} (the LLVM build this image needs)")
    elif "llvm-hash.txt" in text:
        relative = "cmake/llvm-hash.txt"
        revision, values = _read(tree, relative)[:8], {}
    else:
        raise UserError(f"{code}: its LLVM download reads neither cmake/llvm-hash.txt nor cmake/llvm-info.json")
    if not re.fullmatch(r"[0-9a-f]{8}", revision):
        raise UserError(f"{tree / relative}: expected an LLVM commit hash, found {revision!r}")
    template = _LLVM_NAME.search(text)
    if template is None:
        raise UserError(f"{code}: its LLVM download has no name = f\"llvm-...\" prbench can read")
    values |= {"rev": revision, "system_suffix": system}
    name = _fill(template.group(1), values, code)
    return Download("llvm", f"{base}/{name}.tar.gz", {"LLVM_SYSPATH": f"{{path}}/{name}", **switches},
                          tool=f"LLVM {revision}", key="llvm", sha256=sha256)


def _fill(template: str, values: dict[str, str], code: Path) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(1) not in values:
            raise UserError(f"{code}: a download name with a part prbench cannot fill in ({{{match.group(1)}}})")
        return values[match.group(1)]

    return re.sub(r"\{(\w+)\}", one, template)


def _json_outside_proton(text: str, code: Path) -> bool:
    """Whether the build asks for nlohmann/json with Proton off: a ``get_json_package_info()`` call outside every
    function whose name mentions proton (3.0–3.5 call it only in ``get_proton_cmake_args``)."""
    module = ast.parse(text, filename=str(code))
    proton = [(node.lineno, node.end_lineno or node.lineno) for node in ast.walk(module)
              if isinstance(node, ast.FunctionDef) and "proton" in node.name.lower()]
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
               and node.func.id == "get_json_package_info"
               and not any(start <= node.lineno <= end for start, end in proton) for node in ast.walk(module))


def _json(tree: Path, code: Path, text: str) -> Download:
    template = _JSON_URL.search(text)
    if template is None or "json-version.txt" not in text:
        raise UserError(f"{code}: its nlohmann/json download is not main's (a URL from cmake/json-version.txt)")
    version = _read(tree, "cmake/json-version.txt")
    return Download("json", template.group(1).replace("{version}", version), {"JSON_SYSPATH": "{path}"},
                          tool=f"nlohmann/json {version}", key="json")


def _pybind11(tree: Path, code: Path, text: str) -> Download:
    template = re.search(r"f[\"'](https://github\.com/pybind/pybind11/archive/[^\"']*\{version\}[^\"']*)[\"']", text)
    if template is None:
        raise UserError(f"{code}: its pybind11 download has no URL prbench can read")
    version = _read(tree, "cmake/pybind11-version.txt")
    return Download("pybind11", template.group(1).replace("{version}", version),
                          {"PYBIND11_SYSPATH": f"{{path}}/pybind11-{version}"}, tool=f"pybind11 {version}",
                          key="pybind11")


def _switches(setup_text: str, text: str, code: Path, platform: str) -> dict[str, str]:
    """The environment that keeps the build from fetching anything else (see the module docstring)."""
    if platform == "cuda":
        if "TRITON_APPEND_CMAKE_ARGS" in setup_text and "TRITON_BUILD_UT" in setup_text:
            return {**_NO_PROTON, "TRITON_APPEND_CMAKE_ARGS": "-DTRITON_BUILD_UT=OFF"}
        return dict(_NO_PROTON)
    if "def is_offline_build" in setup_text:
        return {**_NO_PROTON, "TRITON_OFFLINE_BUILD": "1"}
    variables = {}
    for call in _download_calls(text, code):
        if not call.variable:
            raise UserError(f"{code}: a download_and_copy call without the variable that skips it, and setup.py "
                            "has no offline switch")
        variables[call.variable] = f"unused-on-{platform}"
    return {**_NO_PROTON, **variables}


@dataclass(frozen=True)
class _Call:
    """One ``download_and_copy(...)`` of the download code."""

    name: str  # its directory under $TRITON_HOME/.triton/nvidia
    variable: str  # the environment variable that skips it ("" on main, which takes override_path instead)
    version_key: str  # the key in nvidia-toolchain-version.json; "": the .txt file's one version (3.0)
    url: ast.JoinedStr  # the f-string of url_func


def _download_calls(text: str, code: Path) -> list[_Call]:
    calls = []
    for node in ast.walk(ast.parse(text, filename=str(code))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "download_and_copy"):
            continue
        keywords = {keyword.arg: keyword.value for keyword in node.keywords}
        try:
            name = _constant(keywords["name"])
            variable = _constant(keywords["variable"]) if "variable" in keywords else ""
            version = keywords["version"]
            url = keywords["url_func"]
        except (KeyError, ValueError):
            raise UserError(f"{code}:{node.lineno}: a download_and_copy call prbench cannot read") from None
        if isinstance(version, ast.Subscript) and isinstance(version.slice, ast.Constant):
            key = str(version.slice.value)
        elif isinstance(version, ast.Name):
            key = ""
        else:
            raise UserError(f"{code}:{node.lineno}: download_and_copy's version is not a toolchain-file entry")
        if not (isinstance(url, ast.Lambda) and isinstance(url.body, ast.JoinedStr)):
            raise UserError(f"{code}:{node.lineno}: download_and_copy's url_func is not a lambda of an f-string")
        calls.append(_Call(name, variable, key, url.body))
    return sorted(calls, key=lambda call: call.url.lineno)


def _constant(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise ValueError(ast.dump(node))


def _arch_map(text: str) -> dict[str, str]:
    """The machine → URL arch mapping inside the code's download_and_copy (``{"arm64": "sbsa", ...}``)."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == "download_and_copy":
            for inner in ast.walk(node):
                if isinstance(inner, ast.Dict) and inner.keys and all(
                        isinstance(key, ast.Constant) for key in inner.keys):
                    keys = [_constant(key) for key in inner.keys if key is not None]
                    if "arm64" in keys or "aarch64" in keys or "x86_64" in keys:
                        return dict(zip(keys, [_constant(value) for value in inner.values], strict=True))
    return {}


_COMPARISONS: dict[type[ast.cmpop], Callable[[int, int], bool]] = {
    ast.GtE: operator.ge, ast.Gt: operator.gt, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Eq: operator.eq}


def _major_choices(text: str, versions: dict[str, Any]) -> dict[str, str]:
    """Names the download code chooses by a tool's major version, evaluated: main's
    ``crt = "crt" if int(nvidia_toolchain_version["cudacrt"].split(".")[0]) >= 13 else "nvcc"``."""
    chosen = {}
    for node in ast.walk(ast.parse(text)):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.IfExp)):
            continue
        test, choice = node.value.test, node.value
        keys = [inner.slice.value for inner in ast.walk(test) if isinstance(inner, ast.Subscript)
                and isinstance(inner.slice, ast.Constant) and isinstance(inner.slice.value, str)]
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _COMPARISONS
                and isinstance(test.comparators[0], ast.Constant) and isinstance(test.comparators[0].value, int)
                and len(keys) == 1 and isinstance(versions.get(keys[0]), str)
                and isinstance(choice.body, ast.Constant) and isinstance(choice.orelse, ast.Constant)):
            continue
        major = int(versions[keys[0]].split(".")[0])
        picked = _COMPARISONS[type(test.ops[0])](major, test.comparators[0].value)
        chosen[node.targets[0].id] = str(choice.body.value if picked else choice.orelse.value)
    return chosen


def _render(template: ast.JoinedStr, values: dict[str, str], code: Path) -> str:
    parts = []
    for part in template.values:
        if isinstance(part, ast.Constant):
            parts.append(str(part.value))
        elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name) and part.value.id in values:
            parts.append(values[part.value.id])
        else:
            raise UserError(f"{code}:{template.lineno}: a download URL with a part prbench cannot fill in "
                            f"({ast.unparse(part)})")
    return "".join(parts)


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _nvidia(tree: Path, code: Path, text: str, machine: str) -> list[Download]:
    calls = _download_calls(text, code)
    if not calls:
        return []
    if "nvidia-toolchain-version.json" in text:
        relative = "cmake/nvidia-toolchain-version.json"
        versions = _read_json(tree, relative)
    else:  # 3.0: one version for every tool, under the key "" its calls name
        relative = "cmake/nvidia-toolchain-version.txt"
        versions = {"": _read(tree, relative)}
    arch = _arch_map(text).get(machine, machine)
    chosen = _major_choices(text, versions)
    downloads: dict[tuple[str, str], Download] = {}
    for call in calls:
        version = versions.get(call.version_key)
        if not isinstance(version, str):
            raise UserError(f"{tree / relative}: no version for {call.version_key!r} (the build's {call.name} "
                            "download)")
        url = _render(call.url, {**chosen, "system": "linux", "arch": arch, "version": version}, code)
        downloads.setdefault((url, call.name), Download(
            "nvidia-toolchain", url, {"TRITON_HOME": "{path}"}, unpack_under=f"{_CACHE}/nvidia/{call.name}",
            tool=f"{call.name} {version}", key=_key(f"nvidia-{call.name}-{version}")))
    return list(downloads.values())
