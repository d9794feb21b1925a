"""What Triton's build downloads by itself, read from the Triton tree being built: a user building Triton 3.0, 3.2,
3.4, 3.5 or main for CUDA or ROCm gets each URL the build would fetch and the environment that makes it use the
stored copy, with Proton and the C++ unit tests switched off.

The trees are the stand-ins of tests/support/triton_trees.py: the files Triton's build reads (cmake/llvm-hash.txt or
cmake/llvm-info.json, the NVIDIA toolchain versions, json-version.txt, pybind11-version.txt) and a setup.py (and on
main python/build_helpers.py) with the same shape of download code as the real trees.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from foundation.errors import UserError
from prbench.images.build_context import fill_context
from prbench.images.build_plan import BuildPlan
from prbench.images.content_store import Store, StoreItem, WheelTarget, triton_downloads
from prbench.images.downloads import Download
from tests.support.triton_trees import JSON_URL, LLVM_BASE, REDIST, triton_tree


def by_what(downloads: list[Download], what: str) -> list[Download]:
    return [download for download in downloads if download.what == what]


@pytest.mark.parametrize("version", ["3.0", "3.2", "3.4"])
def test_llvm_is_the_prebuilt_tarball_of_the_pinned_hash_used_through_llvm_syspath(tmp_path, version) -> None:
    tree = triton_tree(tmp_path / "triton", version)

    [llvm] = by_what(triton_downloads(tree, "rocm"), "llvm")

    assert llvm.url == f"{LLVM_BASE}/llvm-b5cc222d-ubuntu-x64.tar.gz"
    assert llvm.env["LLVM_SYSPATH"] == "{path}/llvm-b5cc222d-ubuntu-x64"
    assert llvm.sha256 == ""  # llvm-hash.txt names no checksum: the store records the first fetch


def test_the_llvm_build_follows_the_images_machine_and_glibc(tmp_path) -> None:
    tree = triton_tree(tmp_path / "triton", "3.4")

    def llvm_url(**image: str) -> str:
        return by_what(triton_downloads(tree, "cuda", **image), "llvm")[0].url

    assert llvm_url(glibc="2.28").endswith("/llvm-b5cc222d-almalinux-x64.tar.gz")
    assert llvm_url(glibc="2.17").endswith("/llvm-b5cc222d-centos-x64.tar.gz")
    assert llvm_url(machine="aarch64").endswith("/llvm-b5cc222d-ubuntu-arm64.tar.gz")
    with pytest.raises(UserError, match="no prebuilt LLVM for machine 'riscv64'"):
        llvm_url(machine="riscv64")


# --- Triton 3.5 (PyTorch 2.9's pin) and main ----------------------------------------------------------------------

NVIDIA_3_5 = [  # (URL, where setup.py looks for it before downloading), in setup.py's order
    (f"{REDIST}/cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-12.8.93-archive.tar.xz", ".triton/nvidia/nvcc"),
    (f"{REDIST}/cuda_cuobjdump/linux-x86_64/cuda_cuobjdump-linux-x86_64-12.8.55-archive.tar.xz",
     ".triton/nvidia/cuobjdump"),
    (f"{REDIST}/cuda_nvdisasm/linux-x86_64/cuda_nvdisasm-linux-x86_64-12.8.55-archive.tar.xz",
     ".triton/nvidia/nvdisasm"),
    (f"{REDIST}/cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-12.8.61-archive.tar.xz", ".triton/nvidia/nvcc"),
    (f"{REDIST}/cuda_cudart/linux-x86_64/cuda_cudart-linux-x86_64-12.8.57-archive.tar.xz", ".triton/nvidia/cudart"),
    (f"{REDIST}/cuda_cupti/linux-x86_64/cuda_cupti-linux-x86_64-12.8.90-archive.tar.xz", ".triton/nvidia/cupti"),
]
NVIDIA_MAIN = [
    (f"{REDIST}/cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-12.9.86-archive.tar.xz", ".triton/nvidia/nvcc"),
    (f"{REDIST}/cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-13.3.33-archive.tar.xz",
     ".triton/nvidia/nvcc-blackwell"),
    (f"{REDIST}/cuda_cuobjdump/linux-x86_64/cuda_cuobjdump-linux-x86_64-13.1.80-archive.tar.xz",
     ".triton/nvidia/cuobjdump"),
    (f"{REDIST}/cuda_nvdisasm/linux-x86_64/cuda_nvdisasm-linux-x86_64-13.1.80-archive.tar.xz",
     ".triton/nvidia/nvdisasm"),
    # CUDA 13 moved the CRT headers out of nvcc: main picks cuda_crt by the cudacrt major version
    (f"{REDIST}/cuda_crt/linux-x86_64/cuda_crt-linux-x86_64-13.1.80-archive.tar.xz", ".triton/nvidia/nvcc-crt"),
    (f"{REDIST}/cuda_cudart/linux-x86_64/cuda_cudart-linux-x86_64-13.1.80-archive.tar.xz", ".triton/nvidia/cudart"),
    (f"{REDIST}/cuda_cupti/linux-x86_64/cuda_cupti-linux-x86_64-12.8.90-archive.tar.xz", ".triton/nvidia/cupti"),
    (f"{REDIST}/cuda_cupti/linux-x86_64/cuda_cupti-linux-x86_64-13.3.35-archive.tar.xz",
     ".triton/nvidia/cupti-blackwell"),
]
LLVM_3_5 = f"{LLVM_BASE}/llvm-7d5de303-ubuntu-x64.tar.gz"
LLVM_MAIN = f"{LLVM_BASE}/llvm-941a04e6-ubuntu-x64-1.tar.gz"  # llvm-info.json: hash, system, build number
LLVM_MAIN_SHA256 = "6da421dd5fe5eda50bb4abf679a86ed8cf7543fd0dbace7398a10828dc7ae2aa"  # its sha256sum["ubuntu-x64"]


def test_a_rocm_build_of_3_5_fetches_llvm_only_and_builds_offline_without_proton(tmp_path) -> None:
    downloads = triton_downloads(triton_tree(tmp_path / "t", "3.5"), "rocm")

    assert [(d.key, d.url) for d in downloads] == [("llvm", LLVM_3_5)]
    # Offline: setup.py fails instead of fetching and skips the NVIDIA tools and googletest; no Proton: it would
    # need the CUPTI headers of those tools (and nlohmann/json, which 3.5 fetches for Proton only).
    assert downloads[0].env == {"LLVM_SYSPATH": "{path}/llvm-7d5de303-ubuntu-x64", "TRITON_OFFLINE_BUILD": "1",
                                "TRITON_BUILD_PROTON": "OFF"}


def test_a_cuda_build_of_3_5_lays_each_nvidia_archive_in_tritons_cache_and_turns_the_unit_tests_off(tmp_path) -> None:
    downloads = triton_downloads(triton_tree(tmp_path / "t", "3.5"), "cuda")

    assert [d.key for d in downloads] == ["llvm", "nvidia-nvcc-12-8-93", "nvidia-cuobjdump-12-8-55",
                                          "nvidia-nvdisasm-12-8-55", "nvidia-nvcc-12-8-61", "nvidia-cudart-12-8-57",
                                          "nvidia-cupti-12-8-90"]  # cupti: include and lib from one archive
    assert [(d.url, d.unpack_under) for d in by_what(downloads, "nvidia-toolchain")] == NVIDIA_3_5
    assert {tuple(d.env.items()) for d in by_what(downloads, "nvidia-toolchain")} == {(("TRITON_HOME", "{path}"),)}
    [llvm] = by_what(downloads, "llvm")
    assert llvm.url == LLVM_3_5
    # Not offline (that would skip copying the tools into the backend); no unit tests, no Proton: on 3.5 Proton's
    # C++ tests are added whenever Proton is built, and they need googletest.
    assert llvm.env == {"LLVM_SYSPATH": "{path}/llvm-7d5de303-ubuntu-x64", "TRITON_BUILD_PROTON": "OFF",
                        "TRITON_APPEND_CMAKE_ARGS": "-DTRITON_BUILD_UT=OFF"}


def test_main_pins_llvm_in_llvm_info_json_with_its_build_number_and_checksum(tmp_path) -> None:
    tree = triton_tree(tmp_path / "t", "main")

    [llvm] = by_what(triton_downloads(tree, "rocm"), "llvm")

    assert (llvm.url, llvm.sha256) == (LLVM_MAIN, LLVM_MAIN_SHA256)
    assert llvm.env["LLVM_SYSPATH"] == "{path}/llvm-941a04e6-ubuntu-x64-1"
    # main dropped the CentOS build: an old glibc gets the AlmaLinux one, with that build's checksum
    [old] = by_what(triton_downloads(tree, "rocm", glibc="2.17"), "llvm")
    assert old.url == f"{LLVM_BASE}/llvm-941a04e6-almalinux-x64-1.tar.gz"
    assert old.sha256 == "a01e6c491a807af198959300f1020d18f27a56d40961b9d90e0785cd8ad28143"


def test_a_rocm_build_of_main_fetches_llvm_and_json_and_builds_offline_without_proton(tmp_path) -> None:
    downloads = triton_downloads(triton_tree(tmp_path / "t", "main"), "rocm")

    # main's CMake resolves json for every build, Proton or not
    assert [(d.key, d.url, d.env) for d in downloads] == [
        ("llvm", LLVM_MAIN, {"LLVM_SYSPATH": "{path}/llvm-941a04e6-ubuntu-x64-1", "TRITON_OFFLINE_BUILD": "1",
                             "TRITON_BUILD_PROTON": "OFF"}),
        ("json", JSON_URL, {"JSON_SYSPATH": "{path}"}),
    ]


def test_a_cuda_build_of_main_gets_every_nvidia_archive_of_build_helpers(tmp_path) -> None:
    downloads = triton_downloads(triton_tree(tmp_path / "t", "main"), "cuda")

    assert [d.key for d in downloads] == [
        "llvm", "json", "nvidia-nvcc-12-9-86", "nvidia-nvcc-blackwell-13-3-33", "nvidia-cuobjdump-13-1-80",
        "nvidia-nvdisasm-13-1-80", "nvidia-nvcc-crt-13-1-80", "nvidia-cudart-13-1-80", "nvidia-cupti-12-8-90",
        "nvidia-cupti-blackwell-13-3-35"]
    assert [(d.url, d.unpack_under) for d in by_what(downloads, "nvidia-toolchain")] == NVIDIA_MAIN
    assert by_what(downloads, "llvm")[0].env == {
        "LLVM_SYSPATH": "{path}/llvm-941a04e6-ubuntu-x64-1", "TRITON_BUILD_PROTON": "OFF",
        "TRITON_APPEND_CMAKE_ARGS": "-DTRITON_BUILD_UT=OFF"}


def test_mains_crt_archive_follows_the_cudacrt_major_version(tmp_path) -> None:
    tree = triton_tree(tmp_path / "t", "main")
    versions = tree / "cmake" / "nvidia-toolchain-version.json"
    versions.write_text(versions.read_text().replace('"cudacrt": "13.1.80"', '"cudacrt": "12.9.86"'))

    [crt] = [d for d in triton_downloads(tree, "cuda") if d.unpack_under == ".triton/nvidia/nvcc-crt"]

    assert crt.url == f"{REDIST}/cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-12.9.86-archive.tar.xz"


def test_3_0_to_3_5_fetch_json_only_for_proton_which_is_off_and_main_from_json_version_txt(tmp_path) -> None:
    for version in ("3.0", "3.2", "3.4", "3.5"):
        assert by_what(triton_downloads(triton_tree(tmp_path / version, version), "cuda"), "json") == [], version
    tree = triton_tree(tmp_path / "main", "main")
    (tree / "cmake" / "json-version.txt").write_text("v3.12.0\n")

    [json_download] = by_what(triton_downloads(tree, "cuda"), "json")

    assert json_download.url == "https://github.com/nlohmann/json/releases/download/v3.12.0/include.zip"


def test_pybind11_is_fetched_by_triton_3_0_only(tmp_path) -> None:
    [pybind11] = by_what(triton_downloads(triton_tree(tmp_path / "a", "3.0"), "rocm"), "pybind11")

    assert pybind11.url == "https://github.com/pybind/pybind11/archive/refs/tags/v2.11.1.tar.gz"
    assert pybind11.env == {"PYBIND11_SYSPATH": "{path}/pybind11-2.11.1"}
    for version in ("3.4", "3.5", "main"):
        assert by_what(triton_downloads(triton_tree(tmp_path / version, version), "rocm"), "pybind11") == []


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


@pytest.mark.parametrize("version", ["3.2", "3.4", "3.5", "main"])
@pytest.mark.parametrize("platform", ["rocm", "cpu"])
def test_a_rocm_or_cpu_build_fetches_no_nvidia_tool_and_tells_setup_it_is_offline(tmp_path, version,
                                                                                  platform) -> None:
    downloads = triton_downloads(triton_tree(tmp_path / "t", version), platform)

    assert by_what(downloads, "nvidia-toolchain") == []
    assert by_what(downloads, "llvm")[0].env["TRITON_OFFLINE_BUILD"] == "1"


def test_a_rocm_build_of_3_0_sets_every_nvidia_variable_instead(tmp_path) -> None:
    """3.0 has no offline switch: its setup fetches the NVIDIA tools at import unless each variable is set."""
    [llvm] = by_what(triton_downloads(triton_tree(tmp_path / "t", "3.0"), "rocm"), "llvm")

    assert {key for key in llvm.env if key.startswith("TRITON_")} == {
        "TRITON_PTXAS_PATH", "TRITON_CUDACRT_PATH", "TRITON_CUPTI_PATH", "TRITON_BUILD_PROTON"}


@pytest.mark.parametrize("version", ["3.0", "3.2", "3.4", "3.5", "main"])
@pytest.mark.parametrize("platform", ["rocm", "cuda"])
def test_every_build_switches_proton_off(tmp_path, version, platform) -> None:
    [llvm] = by_what(triton_downloads(triton_tree(tmp_path / "t", version), platform), "llvm")

    assert llvm.env["TRITON_BUILD_PROTON"] == "OFF"


def test_a_tree_whose_downloads_prbench_does_not_know_is_one_line(tmp_path) -> None:
    tree = triton_tree(tmp_path / "triton", "main")
    # a later main that fetches from somewhere else: no LLVM URL of the known form in either file
    helpers = tree / "python" / "build_helpers.py"
    helpers.write_text(helpers.read_text().replace("/llvm-builds/{name}.tar.gz", "/llvm/{name}.tar.zst"))

    with pytest.raises(UserError, match=r"^\S+: no LLVM download of the form prbench knows in setup\.py or "
                                        r"python/build_helpers\.py .*not supported yet$"):
        triton_downloads(tree, "cuda")
    with pytest.raises(UserError, match=r"no Triton setup\.py"):
        triton_downloads(tmp_path / "empty", "cuda")
    (tmp_path / "old" / "setup.py").parent.mkdir()
    (tmp_path / "old" / "setup.py").write_text("# Triton 2.x: no Proton switch\n")
    with pytest.raises(UserError, match=r"setup\.py: no TRITON_BUILD_PROTON switch"):
        triton_downloads(tmp_path / "old", "rocm")


@pytest.mark.parametrize(("broken", "message"), [
    ({"build_number": "one"}, r"llvm-info\.json: expected llvm_hash \(a commit\), build_number"),
    ({"sha256sum": {"macos-arm64": "0" * 64}}, r"llvm-info\.json: no sha256sum for 'ubuntu-x64'"),
])
def test_a_malformed_llvm_info_json_is_named(tmp_path, broken, message) -> None:
    tree = triton_tree(tmp_path / "t", "main")
    info = tree / "cmake" / "llvm-info.json"
    info.write_text(json.dumps({**json.loads(info.read_text()), **broken}))

    with pytest.raises(UserError, match=message):
        triton_downloads(tree, "rocm")


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


@pytest.mark.parametrize(("version", "platform"), [("3.0", "cuda"), ("3.2", "cuda"), ("3.4", "cuda"), ("3.0", "rocm"),
                                                   ("3.5", "cuda"), ("main", "cuda"), ("main", "rocm")])
def test_each_download_has_a_key_of_its_own_for_the_lock(tmp_path, version, platform) -> None:
    downloads = triton_downloads(triton_tree(tmp_path / "t", version), platform)

    keys = [download.key for download in downloads]
    assert len(set(keys)) == len(keys) and all(re.fullmatch(r"[a-z0-9-]+", key) for key in keys), keys
    assert keys[0] == "llvm"


# --- through the build plan: the store items an image build of 3.5 or main takes ---------------------------------

TARGET = WheelTarget("3.11", ("manylinux_2_36_x86_64", "linux_x86_64"), abi="cp311")  # the image: x86_64, glibc 2.36
NVIDIA_KEYS_3_5 = ["nvcc-12-8-93", "cuobjdump-12-8-55", "nvdisasm-12-8-55", "nvcc-12-8-61", "cudart-12-8-57",
                   "cupti-12-8-90"]
NVIDIA_KEYS_MAIN = ["nvcc-12-9-86", "nvcc-blackwell-13-3-33", "cuobjdump-13-1-80", "nvdisasm-13-1-80",
                    "nvcc-crt-13-1-80", "cudart-13-1-80", "cupti-12-8-90", "cupti-blackwell-13-3-35"]
EXPECTED = {  # every download of a build, as (the lock's used_as, URL), in build-context order
    ("3.5", "rocm"): [("downloads/llvm", LLVM_3_5)],
    ("3.5", "cuda"): [("downloads/llvm", LLVM_3_5)] + [
        (f"downloads/nvidia-{key}", url) for key, (url, _) in zip(NVIDIA_KEYS_3_5, NVIDIA_3_5, strict=True)],
    ("main", "rocm"): [("downloads/llvm", LLVM_MAIN), ("downloads/json", JSON_URL)],
    ("main", "cuda"): [("downloads/llvm", LLVM_MAIN), ("downloads/json", JSON_URL)] + [
        (f"downloads/nvidia-{key}", url) for key, (url, _) in zip(NVIDIA_KEYS_MAIN, NVIDIA_MAIN, strict=True)],
}


def _plan(tmp_path: Path, version: str, platform: str, llvm_sha256: str = LLVM_MAIN_SHA256) -> BuildPlan:
    """A source build plan of the stand-in PyTorch pinning a Triton clone with the real layout of ``version``
    (main's llvm-info.json naming ``llvm_sha256`` for the image's LLVM build)."""
    import git

    from prbench.images.build import plan_build
    from prbench.sides.recipes import load_recipe
    from tests.support.docker_support import ZERO_DIGEST, commit_all, make_pytorch, write_recipe

    triton = triton_tree(tmp_path / "triton", version)
    if version == "main":
        info = triton / "cmake" / "llvm-info.json"
        info.write_text(info.read_text().replace(LLVM_MAIN_SHA256, llvm_sha256))
    triton_commit = commit_all(git.Repo.init(triton), f"triton {version} layout")
    _, pytorch_commit = make_pytorch(tmp_path / "pytorch", triton_commit)
    recipe = write_recipe("bookworm-rocm-path.toml", tmp_path, digest=ZERO_DIGEST, pytorch_commit=pytorch_commit)
    if platform == "cuda":
        recipe.write_text(recipe.read_text().replace('platform = "rocm"', 'platform = "cuda"')
                          .replace('arch = ["gfx942", "gfx950"]', 'arch = ["9.0"]'))
    return plan_build(load_recipe(str(recipe), tmp_path), pytorch_src=tmp_path / "pytorch", triton_src=triton)


def _stored(tmp_path: Path, store: Store, urls: list[str]) -> dict[str, StoreItem]:
    """Each URL's file in the store, as a store fetched elsewhere and imported (``invoke store import``) has it."""
    items = {}
    for url in urls:
        archive = tmp_path / "fetched" / url.rsplit("/", 1)[1]
        archive.parent.mkdir(exist_ok=True)
        archive.write_bytes(f"the file of {url}".encode())
        items[url] = store.add_file(archive, kind="download", name=archive.name, origin=url)
    return items


@pytest.mark.parametrize(("version", "platform"), list(EXPECTED))
def test_a_build_plan_takes_every_download_from_the_store_and_fetches_nothing(tmp_path, version, platform) -> None:
    store = Store(tmp_path / "store")
    stored = _stored(tmp_path, store, [url for _, url in EXPECTED[version, platform]])
    plan = _plan(tmp_path, version, platform, llvm_sha256=stored[LLVM_MAIN].sha256 if version == "main" else "")
    context = tmp_path / "context"

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(urllib.request, "urlopen", _refuse)
        used = fill_context(plan, store, context, lambda: TARGET, emit=lambda _: None)

    downloads = [(u.used_as, u.item.origin, u.item.sha256) for u in used if u.used_as.startswith("downloads/")]
    assert downloads == [(use, url, stored[url].sha256) for use, url in EXPECTED[version, platform]]
    env = (context / "downloads" / "env.sh").read_text()
    assert "export TRITON_BUILD_PROTON=OFF" in env
    assert ("export TRITON_OFFLINE_BUILD=1" in env) == (platform == "rocm")
    assert ("export TRITON_HOME=/opt/prbench/downloads/nvidia-toolchain" in env) == (platform == "cuda")
    llvm = (LLVM_3_5 if version == "3.5" else LLVM_MAIN).rsplit("/", 1)[1]
    assert f"tar -xf /opt/prbench/downloads/llvm/{llvm} -C /opt/prbench/downloads/llvm" in (
        context / "downloads" / "place.sh").read_text()


def test_a_stored_llvm_that_is_not_the_one_llvm_info_json_names_is_not_used(tmp_path) -> None:
    store = Store(tmp_path / "store")
    _stored(tmp_path, store, [url for _, url in EXPECTED["main", "rocm"]])  # bytes that are not LLVM_MAIN_SHA256's
    plan = _plan(tmp_path, "main", "rocm")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(AssertionError, match=r"fetched .*llvm-941a04e6"):
        patch.setattr(urllib.request, "urlopen", _refuse)
        fill_context(plan, store, tmp_path / "context", lambda: TARGET, emit=lambda _: None)


def _refuse(url, *args, **kwargs):
    raise AssertionError(f"the build fetched {getattr(url, 'full_url', url)}: the network is off")
