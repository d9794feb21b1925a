"""What Triton's build downloads by itself, read from the Triton tree being built: a user building Triton 3.0, 3.2
or 3.4 for CUDA or ROCm gets each URL the build would fetch and the environment that makes it use the stored copy.

The trees are stand-ins written here: the files Triton's setup reads (cmake/llvm-hash.txt, the NVIDIA toolchain
versions, pybind11-version.txt) and a setup.py with the same shape of download code as the release's own.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from analysis.errors import UserError
from prbench.images.content_store import TritonDownload, triton_downloads

LLVM_HASH = "b5cc222d7429fe6f18c787f633d5262fac2e676f\n"
LLVM_BASE = "https://oaitriton.blob.core.windows.net/public/llvm-builds"
JSON_URL = "https://github.com/nlohmann/json/releases/download/v3.11.3/include.zip"
REDIST = "https://developer.download.nvidia.com/compute/cuda/redist"

COMMON = f'''
def get_json_package_info():
    return Package("json", "", "{JSON_URL}", "JSON_INCLUDE_DIR", "", "JSON_SYSPATH")


def get_llvm_package_info():
    with open(os.path.join(get_base_dir(), "cmake", "llvm-hash.txt")) as f:
        rev = f.read(8)
    name = f"llvm-{{rev}}-{{system_suffix}}"
    url = f"{LLVM_BASE}/{{name}}.tar.gz"
    return Package("llvm", name, url, "LLVM_INCLUDE_DIRS", "LLVM_LIBRARY_DIR", "LLVM_SYSPATH")
'''

# Triton 3.0: python/setup.py, pybind11 fetched too, NVIDIA conda packages from one .txt version, no offline switch.
SETUP_3_0 = COMMON + '''
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
    """One download_and_copy call of the redist kind, as 3.2 and 3.4 write them."""
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
SETUP_3_2 = COMMON + REDIST_CALLS + redist_call("nvcc", "nvcc", "bin/ptxas", "TRITON_PTXAS_PATH", "ptxas-blackwell")

# Triton 3.4: setup.py at the repository root, the same download code.
SETUP_3_4 = COMMON + REDIST_CALLS

VERSIONS_3_2 = {"ptxas": "12.4.99", "ptxas-blackwell": "12.8.61", "cuobjdump": "12.4.99", "nvdisasm": "12.4.99",
                "cudacrt": "12.4.99", "cudart": "12.4.99", "cupti": "12.4.99"}
VERSIONS_3_4 = {"ptxas": "12.8.93", "cuobjdump": "12.8.55", "nvdisasm": "12.8.55", "cudacrt": "12.8.61",
                "cudart": "12.8.57", "cupti": "12.8.57"}


def triton_tree(root: Path, version: str) -> Path:
    files: dict[str, str] = {"cmake/llvm-hash.txt": LLVM_HASH}
    if version == "3.0":
        files |= {"python/setup.py": SETUP_3_0, "cmake/nvidia-toolchain-version.txt": "12.4.99\n",
                  "cmake/pybind11-version.txt": "2.11.1\n"}
    elif version == "3.2":
        files |= {"python/setup.py": SETUP_3_2, "cmake/nvidia-toolchain-version.json": json.dumps(VERSIONS_3_2)}
    else:
        files |= {"setup.py": SETUP_3_4, "python/setup.py": "# moved to the repository root\n",
                  "cmake/nvidia-toolchain-version.json": json.dumps(VERSIONS_3_4, indent=2)}
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def by_what(downloads: list[TritonDownload], what: str) -> list[TritonDownload]:
    return [download for download in downloads if download.what == what]


@pytest.mark.parametrize("version", ["3.0", "3.2", "3.4"])
def test_llvm_is_the_prebuilt_tarball_of_the_pinned_hash_used_through_llvm_syspath(tmp_path, version) -> None:
    tree = triton_tree(tmp_path / "triton", version)

    [llvm] = by_what(triton_downloads(tree, "rocm"), "llvm")

    assert llvm.url == f"{LLVM_BASE}/llvm-b5cc222d-ubuntu-x64.tar.gz"
    assert llvm.env["LLVM_SYSPATH"] == "{path}/llvm-b5cc222d-ubuntu-x64"


def test_the_llvm_build_follows_the_images_machine_and_glibc(tmp_path) -> None:
    tree = triton_tree(tmp_path / "triton", "3.4")

    def llvm_url(**image: str) -> str:
        return by_what(triton_downloads(tree, "cuda", **image), "llvm")[0].url

    assert llvm_url(glibc="2.28").endswith("/llvm-b5cc222d-almalinux-x64.tar.gz")
    assert llvm_url(glibc="2.17").endswith("/llvm-b5cc222d-centos-x64.tar.gz")
    assert llvm_url(machine="aarch64").endswith("/llvm-b5cc222d-ubuntu-arm64.tar.gz")
    with pytest.raises(UserError, match="no prebuilt LLVM for machine 'riscv64'"):
        llvm_url(machine="riscv64")


@pytest.mark.parametrize("version", ["3.0", "3.2", "3.4"])
def test_json_comes_from_the_url_in_setup_py(tmp_path, version) -> None:
    [json_download] = by_what(triton_downloads(triton_tree(tmp_path / "t", version), "cuda"), "json")

    assert json_download.url == JSON_URL and json_download.env == {"JSON_SYSPATH": "{path}"}


def test_pybind11_is_fetched_by_triton_3_0_only(tmp_path) -> None:
    [pybind11] = by_what(triton_downloads(triton_tree(tmp_path / "a", "3.0"), "rocm"), "pybind11")

    assert pybind11.url == "https://github.com/pybind/pybind11/archive/refs/tags/v2.11.1.tar.gz"
    assert pybind11.env == {"PYBIND11_SYSPATH": "{path}/pybind11-2.11.1"}
    assert by_what(triton_downloads(triton_tree(tmp_path / "b", "3.4"), "rocm"), "pybind11") == []


def test_a_cuda_build_of_3_4_gets_each_nvidia_archive_laid_in_tritons_own_cache(tmp_path) -> None:
    downloads = triton_downloads(triton_tree(tmp_path / "t", "3.4"), "cuda")

    nvidia = by_what(downloads, "nvidia-toolchain")
    assert [(download.url, download.unpack_under) for download in nvidia] == [
        (f"{REDIST}/cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-12.8.93-archive.tar.xz", ".triton/nvidia/nvcc"),
        (f"{REDIST}/cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-12.8.61-archive.tar.xz", ".triton/nvidia/nvcc"),
        (f"{REDIST}/cuda_cupti/linux-x86_64/cuda_cupti-linux-x86_64-12.8.57-archive.tar.xz", ".triton/nvidia/cupti"),
    ]  # the cupti archive feeds two copies (include and lib) and is fetched once
    assert [download.key for download in nvidia] == [
        "nvidia-nvcc-12-8-93", "nvidia-nvcc-12-8-61", "nvidia-cupti-12-8-57"]
    assert {tuple(download.env.items()) for download in nvidia} == {(("TRITON_HOME", "{path}"),)}
    [llvm] = by_what(downloads, "llvm")
    # Setting TRITON_PTXAS_PATH or TRITON_OFFLINE_BUILD would skip copying the tools into the backend.
    assert "TRITON_OFFLINE_BUILD" not in llvm.env and "TRITON_PTXAS_PATH" not in llvm.env
    assert llvm.env["TRITON_APPEND_CMAKE_ARGS"] == "-DTRITON_BUILD_UT=OFF"


def test_a_cuda_build_of_3_2_also_fetches_the_blackwell_ptxas(tmp_path) -> None:
    tree = triton_tree(tmp_path / "t", "3.2")
    nvidia = by_what(triton_downloads(tree, "cuda", machine="aarch64"), "nvidia-toolchain")

    urls = [download.url for download in nvidia]
    assert f"{REDIST}/cuda_nvcc/linux-sbsa/cuda_nvcc-linux-sbsa-12.8.61-archive.tar.xz" in urls
    assert f"{REDIST}/cuda_nvcc/linux-sbsa/cuda_nvcc-linux-sbsa-12.4.99-archive.tar.xz" in urls


def test_a_cuda_build_of_3_0_fetches_conda_packages_of_the_one_toolchain_version(tmp_path) -> None:
    nvidia = by_what(triton_downloads(triton_tree(tmp_path / "t", "3.0"), "cuda"), "nvidia-toolchain")

    assert [(download.url, download.unpack_under) for download in nvidia] == [
        ("https://anaconda.org/nvidia/cuda-nvcc/12.4.99/download/linux-64/cuda-nvcc-12.4.99-0.tar.bz2",
         ".triton/nvidia/ptxas"),
        ("https://anaconda.org/nvidia/cuda-nvcc/12.4.99/download/linux-64/cuda-nvcc-12.4.99-0.tar.bz2",
         ".triton/nvidia/cudacrt"),
        ("https://anaconda.org/nvidia/cuda-cupti/12.4.99/download/linux-64/cuda-cupti-12.4.99-0.tar.bz2",
         ".triton/nvidia/cupti"),
    ]


@pytest.mark.parametrize("version", ["3.2", "3.4"])
def test_a_rocm_build_fetches_no_nvidia_tool_and_tells_setup_it_is_offline(tmp_path, version) -> None:
    downloads = triton_downloads(triton_tree(tmp_path / "t", version), "rocm")

    assert by_what(downloads, "nvidia-toolchain") == []
    assert by_what(downloads, "llvm")[0].env["TRITON_OFFLINE_BUILD"] == "1"


def test_a_rocm_build_of_3_0_sets_every_nvidia_variable_instead(tmp_path) -> None:
    """3.0 has no offline switch: its setup fetches the NVIDIA tools at import unless each variable is set."""
    [llvm] = by_what(triton_downloads(triton_tree(tmp_path / "t", "3.0"), "rocm"), "llvm")

    assert {key for key in llvm.env if key.startswith("TRITON_")} == {
        "TRITON_PTXAS_PATH", "TRITON_CUDACRT_PATH", "TRITON_CUPTI_PATH"}


def test_a_tree_whose_downloads_prbench_does_not_know_is_one_line(tmp_path) -> None:
    tree = tmp_path / "triton"
    (tree / "cmake").mkdir(parents=True)
    (tree / "cmake" / "llvm-info.json").write_text(json.dumps({"llvm_hash": "4611156032e1", "sha256sum": {}}))
    (tree / "setup.py").write_text("# downloads happen in CMake; llvm from cmake/llvm-info.json\n")

    with pytest.raises(UserError, match=r"setup\.py: no LLVM download of the form prbench knows"):
        triton_downloads(tree, "cuda")
    with pytest.raises(UserError, match=r"no Triton setup\.py"):
        triton_downloads(tmp_path / "empty", "cuda")


def test_a_missing_version_file_is_named(tmp_path) -> None:
    tree = triton_tree(tmp_path / "t", "3.4")
    (tree / "cmake" / "nvidia-toolchain-version.json").write_text(json.dumps({"ptxas": "12.8.93"}))

    with pytest.raises(UserError, match=r"nvidia-toolchain-version\.json: no version for 'cudacrt'"):
        triton_downloads(tree, "cuda")
    (tree / "cmake" / "llvm-hash.txt").unlink()
    with pytest.raises(UserError, match=r"cmake/llvm-hash\.txt: missing from the Triton tree"):
        triton_downloads(tree, "rocm")


def test_an_unknown_platform_is_refused(tmp_path) -> None:
    with pytest.raises(UserError, match="platform 'metal'"):
        triton_downloads(triton_tree(tmp_path / "t", "3.4"), "metal")


@pytest.mark.parametrize(("version", "platform"), [("3.0", "cuda"), ("3.2", "cuda"), ("3.4", "cuda"), ("3.0", "rocm")])
def test_each_download_has_a_key_of_its_own_for_the_lock(tmp_path, version, platform) -> None:
    downloads = triton_downloads(triton_tree(tmp_path / "t", version), platform)

    keys = [download.key for download in downloads]
    assert len(set(keys)) == len(keys) and all(re.fullmatch(r"[a-z0-9-]+", key) for key in keys), keys
    assert keys[0] == "llvm"
