"""Stand-in Triton trees with the real layout of every file prbench.images.triton_setup reads, for Triton 3.0, 3.2,
3.4, 3.5 (release/3.5.x, the Triton PyTorch 2.9 pins) and main (August 2026, 3.8 development).

Written here, not copied: each file has the real name, place and format, and only the lines the parser reads
(the download functions, their URL f-strings and keyword calls, the switches, the pin files). The pins are the
real ones of those trees: 3.5's LLVM 7d5de303 and CUDA 12.8 tools, main's llvm-info.json (LLVM 941a04e6, build 1,
its sha256sum keys) and its CUDA 12.9/13.x tools.
"""

from __future__ import annotations

import json
from pathlib import Path

VERSIONS = ("3.0", "3.2", "3.4", "3.5", "main")

LLVM_HASH = "b5cc222d7429fe6f18c787f633d5262fac2e676f\n"
LLVM_HASH_3_5 = "7d5de3033187c8a3bb4d2e322f5462cdaf49808f\n"
LLVM_BASE = "https://oaitriton.blob.core.windows.net/public/llvm-builds"
JSON_URL = "https://github.com/nlohmann/json/releases/download/v3.11.3/include.zip"
REDIST = "https://developer.download.nvidia.com/compute/cuda/redist"

# --- Triton 3.0-3.5: everything in setup.py ---------------------------------------------------------------------

COMMON = f'''
def get_json_package_info():
    url = "{JSON_URL}"
    return Package("json", "", url, "JSON_INCLUDE_DIR", "", "JSON_SYSPATH")


def get_llvm_package_info():
    if vglibc > 228:
        system_suffix = "ubuntu-x64"
    elif vglibc > 217:
        system_suffix = "almalinux-x64"
    else:
        system_suffix = "centos-x64"
    with open(os.path.join(get_base_dir(), "cmake", "llvm-hash.txt")) as f:
        rev = f.read(8)
    name = f"llvm-{{rev}}-{{system_suffix}}"
    url = f"{LLVM_BASE}/{{name}}.tar.gz"
    return Package("llvm", name, url, "LLVM_INCLUDE_DIRS", "LLVM_LIBRARY_DIR", "LLVM_SYSPATH")
'''

# Proton asks for json (and 3.0 for pybind11 too) only in get_proton_cmake_args.
PROTON = '''

class CMakeBuild(build_ext):

    def get_proton_cmake_args(self):
        cmake_args = get_thirdparty_packages([get_json_package_info()])
        return cmake_args

    def build_extension(self, ext):
        thirdparty_cmake_args = get_thirdparty_packages([get_llvm_package_info()])
        if check_env_flag("TRITON_BUILD_PROTON", "ON"):  # Default ON
            cmake_args += self.get_proton_cmake_args()
'''

# Triton 3.0: python/setup.py, pybind11 fetched too, NVIDIA conda packages from one .txt version, no offline switch.
SETUP_3_0 = COMMON + PROTON.replace("[get_json_package_info()]",
                                    "[get_json_package_info(), get_pybind11_package_info()]") + '''

def get_pybind11_package_info():
    version = open(os.path.join(get_base_dir(), "cmake", "pybind11-version.txt")).read().strip()
    url = f"https://github.com/pybind/pybind11/archive/refs/tags/v{version}.tar.gz"
    return Package("pybind11", f"pybind11-{version}", url, "PYBIND11_INCLUDE_DIR", "", "PYBIND11_SYSPATH")


def download_and_copy(name, src_path, variable, version, url_func):
    if variable in os.environ:
        return
    arch = {"x86_64": "64", "arm64": "aarch64", "aarch64": "aarch64"}[platform.machine()]
    url = url_func(arch, version)


NVIDIA_TOOLCHAIN_VERSION = open(os.path.join(get_base_dir(), "cmake", "nvidia-toolchain-version.txt")).read().strip()
download_and_copy(name="ptxas", src_path="bin/ptxas", variable="TRITON_PTXAS_PATH", version=NVIDIA_TOOLCHAIN_VERSION,
    url_func=lambda arch, version: f"https://anaconda.org/nvidia/cuda-nvcc/{version}/download/linux-{arch}/cuda-nvcc-{version}-0.tar.bz2")
download_and_copy(name="cudacrt", src_path="include", variable="TRITON_CUDACRT_PATH", version=NVIDIA_TOOLCHAIN_VERSION,
    url_func=lambda arch, version: f"https://anaconda.org/nvidia/cuda-nvcc/{version}/download/linux-{arch}/cuda-nvcc-{version}-0.tar.bz2")
download_and_copy(name="cupti", src_path="include", variable="TRITON_CUPTI_PATH", version=NVIDIA_TOOLCHAIN_VERSION,
    url_func=lambda arch, version: f"https://anaconda.org/nvidia/cuda-cupti/{version}/download/linux-{arch}/cuda-cupti-{version}-0.tar.bz2")
'''


def redist_call(name: str, tool: str, inside: str, variable: str, key: str) -> str:
    """One download_and_copy call of the redist kind, as 3.2 to 3.5 write them."""
    archive = f"cuda_{tool}-{{system}}-{{arch}}-{{version}}-archive"
    return (f'    download_and_copy(name="{name}", src_func=lambda system, arch, version: f"{archive}/{inside}",\n'
            f'        dst_path="{inside}", variable="{variable}", version=NVIDIA_TOOLCHAIN_VERSION["{key}"],\n'
            f'        url_func=lambda system, arch, version:\n'
            f'        f"{REDIST}/cuda_{tool}/{{system}}-{{arch}}/{archive}.tar.xz")\n')


REDIST_CALLS = """
def is_offline_build():
    return check_env_flag("TRITON_OFFLINE_BUILD", "")


def download_and_copy(name, src_func, dst_path, variable, version, url_func):
    if is_offline_build():
        return
    arch = {"arm64": "sbsa", "aarch64": "sbsa"}.get(platform.machine(), platform.machine())


def build_extension():
    if is_offline_build():
        cmake_args += ["-DTRITON_BUILD_UT=OFF"]
    extra = os.getenv("TRITON_APPEND_CMAKE_ARGS")


def download_and_copy_dependencies():
    with open(os.path.join(get_base_dir(), "cmake", "nvidia-toolchain-version.json")) as f:
        NVIDIA_TOOLCHAIN_VERSION = json.load(f)
""" + "".join([
    redist_call("nvcc", "nvcc", "bin/ptxas", "TRITON_PTXAS_PATH", "ptxas"),
    redist_call("nvcc", "nvcc", "include", "TRITON_CUDACRT_PATH", "cudacrt"),
    redist_call("cupti", "cupti", "include", "TRITON_CUPTI_INCLUDE_PATH", "cupti"),
    redist_call("cupti", "cupti", "lib", "TRITON_CUPTI_LIB_PATH", "cupti"),
])

# Triton 3.2: python/setup.py, per-tool versions from JSON (with a Blackwell ptxas), an offline switch.
SETUP_3_2 = COMMON + PROTON + REDIST_CALLS + redist_call("nvcc", "nvcc", "bin/ptxas", "TRITON_PTXAS_PATH",
                                                         "ptxas-blackwell")

# Triton 3.4: setup.py at the repository root, the same download code.
SETUP_3_4 = COMMON + PROTON + REDIST_CALLS

# Triton 3.5: the same layout as 3.4, with cuobjdump, nvdisasm and the CUDA runtime headers fetched too (in the
# order setup.py fetches them).
SETUP_3_5 = COMMON + PROTON + REDIST_CALLS.split("    download_and_copy(name=")[0] + "".join([
    redist_call("nvcc", "nvcc", "bin/ptxas", "TRITON_PTXAS_PATH", "ptxas"),
    redist_call("cuobjdump", "cuobjdump", "bin/cuobjdump", "TRITON_CUOBJDUMP_PATH", "cuobjdump"),
    redist_call("nvdisasm", "nvdisasm", "bin/nvdisasm", "TRITON_NVDISASM_PATH", "nvdisasm"),
    redist_call("nvcc", "nvcc", "include", "TRITON_CUDACRT_PATH", "cudacrt"),
    redist_call("cudart", "cudart", "include", "TRITON_CUDART_PATH", "cudart"),
    redist_call("cupti", "cupti", "include", "TRITON_CUPTI_INCLUDE_PATH", "cupti"),
    redist_call("cupti", "cupti", "lib", "TRITON_CUPTI_LIB_PATH", "cupti"),
])

VERSIONS_3_2 = {"ptxas": "12.4.99", "ptxas-blackwell": "12.8.61", "cuobjdump": "12.4.99", "nvdisasm": "12.4.99",
                "cudacrt": "12.4.99", "cudart": "12.4.99", "cupti": "12.4.99"}
VERSIONS_3_4 = {"ptxas": "12.8.93", "cuobjdump": "12.8.55", "nvdisasm": "12.8.55", "cudacrt": "12.8.61",
                "cudart": "12.8.57", "cupti": "12.8.57"}
VERSIONS_3_5 = {"ptxas": "12.8.93", "cuobjdump": "12.8.55", "nvdisasm": "12.8.55", "cudacrt": "12.8.61",
                "cudart": "12.8.57", "cupti": "12.8.90"}

# --- main: setup.py passes the switches to CMake, which runs python/build_helpers.py to fetch --------------------

SETUP_MAIN = '''
def is_offline_build() -> bool:
    return check_env_flag("TRITON_OFFLINE_BUILD", "")


class CMakeBuild(build_ext):

    def build_extension(self, ext):
        passthrough_args = ["TRITON_BUILD_PROTON", "TRITON_OFFLINE_BUILD", "LLVM_SYSPATH", "JSON_SYSPATH"]
        if check_env_flag("TRITON_BUILD_PROTON", "ON"):  # Default ON
            cmake_args += self.get_proton_cmake_args()
        if is_offline_build():
            cmake_args += ["-DTRITON_BUILD_UT=OFF"]
        cmake_args_append = os.getenv("TRITON_APPEND_CMAKE_ARGS")
'''


def main_call(name: str, tool: str, inside: str, override: str, key: str) -> str:
    """One download_and_copy call as main's python/build_helpers.py writes them (an override path, no variable)."""
    archive = f"cuda_{tool}-{{system}}-{{arch}}-{{version}}-archive"
    return (f'    download_and_copy(\n        name="{name}",\n'
            f'        src_func=lambda system, arch, version: f"{archive}/{inside}",\n'
            f'        dst_path="{inside}",\n        override_path=helper_args.{override},\n'
            f'        version=nvidia_toolchain_version["{key}"],\n        url_func=lambda system, arch, version:\n'
            f'        f"{REDIST}/cuda_{tool}/{{system}}-{{arch}}/{archive}.tar.xz",\n'
            f'        helper_args=helper_args,\n    )\n')


BUILD_HELPERS_MAIN = f'''
def get_json_package_info():
    json_version_path = os.path.join(get_base_dir(), "cmake", "json-version.txt")
    with open(json_version_path, "r") as json_version_file:
        version = json_version_file.read().strip()
    url = f"https://github.com/nlohmann/json/releases/download/{{version}}/include.zip"
    return Package("json", "", url, "JSON_INCLUDE_DIR", "", "JSON_SYSPATH")


def get_llvm_package_info(helper_args: BuildHelperArgs):
    if vglibc > 228:
        system_suffix = "ubuntu-x64"
    else:
        system_suffix = "almalinux-x64"
    llvm_info_path = os.path.join(get_base_dir(), "cmake", "llvm-info.json")
    with open(llvm_info_path, "r") as llvm_info_file:
        llvm_info = json.load(llvm_info_file)
    rev = llvm_info["llvm_hash"][:8]
    build_number = llvm_info["build_number"]
    name = f"llvm-{{rev}}-{{system_suffix}}-{{build_number}}"
    url = f"{LLVM_BASE}/{{name}}.tar.gz"
    sha256sum = llvm_info["sha256sum"][system_suffix]


def get_thirdparty_cmake_vars(packages: list[str], helper_args: BuildHelperArgs):
    for package in packages:
        if package == "llvm":
            package_infos.append(get_llvm_package_info(helper_args))
        elif package == "json":
            package_infos.append(get_json_package_info())


def download_and_copy(name, src_func, dst_path, override_path, version, url_func, helper_args: BuildHelperArgs):
    if helper_args.offline_build:
        return
    arch = {{"arm64": "sbsa", "aarch64": "sbsa"}}.get(arch, arch)


def download_and_copy_dependencies(helper_args: BuildHelperArgs):
    nvidia_version_path = os.path.join(get_base_dir(), "cmake", "nvidia-toolchain-version.json")
    with open(nvidia_version_path, "r") as nvidia_version_file:
        nvidia_toolchain_version = json.load(nvidia_version_file)
''' + "".join([
    main_call("nvcc", "nvcc", "bin/ptxas", "ptxas_path", "ptxas"),
    main_call("nvcc-blackwell", "nvcc", "bin/ptxas", "ptxas_blackwell_path", "ptxas-blackwell"),
    main_call("cuobjdump", "cuobjdump", "bin/cuobjdump", "cuobjdump_path", "cuobjdump"),
    main_call("nvdisasm", "nvdisasm", "bin/nvdisasm", "nvdisasm_path", "nvdisasm"),
    '    crt = "crt" if int(nvidia_toolchain_version["cudacrt"].split(".")[0]) >= 13 else "nvcc"\n',
    main_call("nvcc-crt", "{crt}", "include", "cudacrt_path", "cudacrt"),
    main_call("cudart", "cudart", "include", "cudart_path", "cudart"),
    main_call("cupti", "cupti", "include", "cupti_include_path", "cupti"),
    main_call("cupti", "cupti", "lib", "cupti_lib_path", "cupti"),
    main_call("cupti-blackwell", "cupti", "lib", "cupti_lib_blackwell_path", "cupti-blackwell"),
])

LLVM_INFO_MAIN = {
    "llvm_hash": "941a04e69ee8fe4c7a162b2f1e215aa8df867534",
    "build_number": 1,
    "sha256sum": {
        "almalinux-arm64": "9dc8c436259c595683af88ce522593d1d8fdd2580458a405c1a0b01540c304ae",
        "almalinux-x64": "a01e6c491a807af198959300f1020d18f27a56d40961b9d90e0785cd8ad28143",
        "macos-arm64": "055906a91eca4565b8d0b04a0c97bf122faded02daa9a4f1edb6d2f43c2ad996",
        "macos-x64": "35162b654e2780dd99f31eb7dc9ce6fe2833407b1a40a7afa021e4cf5fe3f767",
        "ubuntu-arm64": "ee561d72b97474c7a78909dce74853d972c1fd0b561bd4b0943af6e87e77ac9d",
        "ubuntu-x64": "6da421dd5fe5eda50bb4abf679a86ed8cf7543fd0dbace7398a10828dc7ae2aa",
        "windows-x64": "983d1453841523e889a5caa3921fa5f002ed3144ee7ce98c6bcca28d111f4d2f",
    },
}
VERSIONS_MAIN = {"ptxas-blackwell": "13.3.33", "ptxas": "12.9.86", "cuobjdump": "13.1.80", "nvdisasm": "13.1.80",
                 "cudacrt": "13.1.80", "cudart": "13.1.80", "cupti": "12.8.90", "cupti-blackwell": "13.3.35"}


def triton_files(version: str) -> dict[str, str]:
    """The stand-in's files (path relative to the tree → text) for ``version`` (one of ``VERSIONS``)."""
    if version == "main":
        return {"setup.py": SETUP_MAIN, "python/build_helpers.py": BUILD_HELPERS_MAIN,
                "cmake/llvm-info.json": json.dumps(LLVM_INFO_MAIN, indent=2) + "\n",
                "cmake/json-version.txt": "v3.11.3\n",
                "cmake/nvidia-toolchain-version.json": json.dumps(VERSIONS_MAIN, indent=2) + "\n"}
    if version == "3.5":
        return {"setup.py": SETUP_3_5, "cmake/llvm-hash.txt": LLVM_HASH_3_5,
                "cmake/nvidia-toolchain-version.json": json.dumps(VERSIONS_3_5, indent=2) + "\n"}
    files = {"cmake/llvm-hash.txt": LLVM_HASH}
    if version == "3.0":
        return files | {"python/setup.py": SETUP_3_0, "cmake/nvidia-toolchain-version.txt": "12.4.99\n",
                        "cmake/pybind11-version.txt": "2.11.1\n"}
    if version == "3.2":
        return files | {"python/setup.py": SETUP_3_2, "cmake/nvidia-toolchain-version.json": json.dumps(VERSIONS_3_2)}
    assert version == "3.4", version
    return files | {"setup.py": SETUP_3_4, "python/setup.py": "# moved to the repository root\n",
                    "cmake/nvidia-toolchain-version.json": json.dumps(VERSIONS_3_4, indent=2)}


def triton_tree(root: Path, version: str) -> Path:
    """Write the stand-in of ``version`` under ``root`` (created) and return ``root``."""
    for relative, text in triton_files(version).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root
