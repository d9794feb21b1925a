"""What PyTorch's own build downloads, and the variables of its build step: a user building PyTorch v2.9.0 or
main for ROCm (MI300 gfx942, MI350 gfx950) or CUDA gets every file the build would fetch as a store item, the
build pointed at the stored copy, and the network off.

The PyTorch trees are stand-ins with the layout of the file the logic reads, cmake/External/aotriton.cmake, as
v2.9.0 (AOTriton 0.11b, one literal release URL) and main (0.14, a base URL its environment may replace) write
it; the sha256 lists are those of the stand-in archives, so the store can hold the files the lists name.
"""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import tarfile
import textwrap
from pathlib import Path

import git
import pytest

from foundation.errors import UserError
from prbench.images.build import plan_build
from prbench.images.build_context import fill_context
from prbench.images.content_store import Store, WheelTarget
from prbench.images.pytorch_setup import JOB_MEMORY_BYTES, build_jobs
from prbench.sides.pins import SourceTree
from prbench.sides.recipes import load_recipe
from tests.support.docker_support import ZERO_DIGEST, commit_all, make_standins, write_recipe
from tests.support.recipe_support import load_error

TARGET = WheelTarget("3.10", ("manylinux_2_35_x86_64", "linux_x86_64"), abi="cp310")
RELEASES = "https://github.com/ROCm/aotriton/releases/download/"
PREFIX = "/opt/prbench/pytorch-downloads/aotriton/aotriton"

# (version, ROCm releases with a runtime, image families), as each tree lists them.
LAYOUTS = {
    "v2.9.0": ("0.11b", ("rocm6.2", "rocm6.3", "rocm6.4", "rocm7.0"),
               ("amd-gfx90a", "amd-gfx942", "amd-gfx950", "amd-gfx11xx", "amd-gfx120x")),
    "main": ("0.14.50tp", ("rocm6.4", "rocm7.0", "rocm7.1", "rocm7.2", "rocm7.14", "rocm7.15", "rocm7.16"),
             ("amd-gfx90a", "amd-gfx942", "amd-gfx950", "amd-gfx110x", "amd-gfx115x", "amd-gfx120x", "amd-gfx1250")),
}


def archive(member: str) -> bytes:
    """A .tar.gz with one file under aotriton/, as AOTriton's release archives are laid out."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        info = tarfile.TarInfo(f"aotriton/{member}")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"data"))
    return out.getvalue()


def aotriton_files(layout: str) -> dict[str, bytes]:
    version, rocms, images = LAYOUTS[layout]
    files = {f"aotriton-{version}-manylinux_2_28_x86_64-{rocm}-shared.tar.gz": archive(f"lib/libaotriton_v2.so.{rocm}")
             for rocm in rocms}
    files.update({f"aotriton-{version}-images-{image}.tar.gz": archive(f"lib/aotriton.images/{image}/__signature__")
                  for image in images})
    return files


def aotriton_cmake(layout: str, files: dict[str, bytes]) -> str:
    version, rocms, images = LAYOUTS[layout]

    def sha(name: str) -> str:
        return hashlib.sha256(files[name]).hexdigest()

    def listed(values: list[str], comments: tuple[str, ...]) -> str:
        return "\n".join(f'      "{v}"  # {c}' for v, c in zip(values, comments, strict=True))

    runtimes = [f"aotriton-{version}-manylinux_2_28_x86_64-{rocm}-shared.tar.gz" for rocm in rocms]
    base = ('  set(__AOTRITON_BASE_URL "https://github.com/ROCm/aotriton/releases/download/")  # @lint-ignore'
            if layout == "v2.9.0" else
            '  set(__AOTRITON_BASE_URL "$ENV{PYTORCH_AOTRITON_BASE_URL}")\n  if(NOT __AOTRITON_BASE_URL)\n'
            '    set(__AOTRITON_BASE_URL "https://github.com/ROCm/aotriton/releases/download/")  # @lint-ignore\n'
            '  endif()')
    return textwrap.dedent("""\
        if(NOT __AOTRITON_INCLUDED)
          set(__AOTRITON_INCLUDED TRUE)
          # AOTriton package information from GitHub Release Pages
          set(__AOTRITON_VER "{version}")
          set(__AOTRITON_MANYLINUX_LIST
        {manylinux}
              )
          set(__AOTRITON_ROCM_LIST
        {rocm_list}
              )
          set(__AOTRITON_CI_COMMIT "972223c501ffc22068bb035ac5d64cf54318d895")
          set(__AOTRITON_SHA256_LIST
        {shas}
              )
          set(__AOTRITON_IMAGE_LIST
        {image_list}
             )
          set(__AOTRITON_IMAGE_SHA256_LIST
        {image_shas}
             )
        {base}
          set(__AOTRITON_Z "gz")
        endif() # __AOTRITON_INCLUDED
        """).format(
        version=version, base=base,
        manylinux=listed(["manylinux_2_28"] * len(rocms), rocms),
        rocm_list="\n".join(f'      "{rocm}"' for rocm in rocms),
        shas=listed([sha(name) for name in runtimes], rocms),
        image_list="\n".join(f'      "{image}"' for image in images),
        image_shas=listed([sha(f"aotriton-{version}-images-{image}.tar.gz") for image in images], images))


def standin_recipe(tmp_path: Path, layout: str, platform: str, arch: str, build: str = "") -> tuple[Path, dict]:
    """Stand-in clones (PyTorch with the layout's aotriton.cmake) and a recipe naming them."""
    standins = make_standins(tmp_path)
    files = aotriton_files(layout)
    cmake = standins.pytorch / "cmake" / "External" / "aotriton.cmake"
    cmake.parent.mkdir(parents=True)
    cmake.write_text(aotriton_cmake(layout, files), encoding="utf-8")
    commit = commit_all(git.Repo(standins.pytorch), f"aotriton.cmake as {layout} writes it")
    recipe = write_recipe("bookworm-rocm-path.toml", tmp_path, digest=ZERO_DIGEST, pytorch_commit=commit)
    text = recipe.read_text(encoding="utf-8").replace('arch = ["gfx942", "gfx950"]', f'arch = ["{arch}"]')
    recipe.write_text(text.replace('platform = "rocm"', f'platform = "{platform}"') + build, encoding="utf-8")
    return recipe, files


def stored(store: Store, files: dict[str, bytes], tmp_path: Path) -> None:
    """What `invoke store fetch` leaves: every release file of the layout, by URL, with its bytes."""
    version = next(name.split("-")[1] for name in files)
    for name, data in files.items():
        path = tmp_path / "fetched" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        store.add_file(path, kind="download", name=name, origin=f"{RELEASES}{version}/{name}")


def no_rocm() -> str:
    raise AssertionError("the image's ROCm version was asked for, but this build downloads no AOTriton")


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("layout", ["v2.9.0", "main"])
def test_a_rocm_build_takes_aotriton_from_the_store_and_points_cmake_at_it(tmp_path: Path, layout: str,
                                                                           arch: str) -> None:
    recipe, files = standin_recipe(tmp_path, layout, "rocm", arch)
    plan = plan_build(load_recipe(str(recipe), tmp_path))
    store = Store(tmp_path / "store")
    stored(store, files, tmp_path)
    context = tmp_path / "context"

    used = fill_context(plan, store, context, lambda: TARGET, emit=lambda _: None, rocm_version=lambda: "7.0")

    version = LAYOUTS[layout][0]
    runtime = f"aotriton-{version}-manylinux_2_28_x86_64-rocm7.0-shared.tar.gz"
    images = f"aotriton-{version}-images-amd-{arch}.tar.gz"
    downloads = [(u.used_as, u.item.name, u.item.sha256) for u in used if u.used_as.startswith("downloads/")]
    assert downloads == [
        ("downloads/aotriton-runtime-rocm7-0", runtime, hashlib.sha256(files[runtime]).hexdigest()),
        (f"downloads/aotriton-images-amd-{arch}", images, hashlib.sha256(files[images]).hexdigest()),
    ]
    assert sorted(p.name for p in (context / "pytorch-downloads" / "aotriton").iterdir()) == sorted([runtime, images])
    place = (context / "pytorch-downloads" / "place.sh").read_text()
    assert f"tar -xf /opt/prbench/pytorch-downloads/aotriton/{runtime} -C /opt/prbench/pytorch-downloads/aotriton" \
        in place
    assert f"AOTRITON_INSTALLED_PREFIX={PREFIX}" in (context / "pytorch-downloads" / "env.sh").read_text()
    # the PyTorch step reads that env.sh before it builds, and the build has no network
    assert "RUN unset CMAKE_PREFIX_PATH \\\n && . /opt/prbench/pytorch-downloads/env.sh \\\n" in plan.dockerfile
    assert plan.network_mode == "none"


@pytest.mark.parametrize("layout", ["v2.9.0", "main"])
def test_a_rebuild_from_the_lock_finds_every_download_in_the_store_with_the_network_off(tmp_path: Path,
                                                                                     layout: str) -> None:
    recipe, files = standin_recipe(tmp_path, layout, "rocm", "gfx942")
    plan = plan_build(load_recipe(str(recipe), tmp_path))
    store = Store(tmp_path / "store")
    stored(store, files, tmp_path)
    used = fill_context(plan, store, tmp_path / "first", lambda: TARGET, emit=lambda _: None,
                        rocm_version=lambda: "7.0")
    trees = (SourceTree("pytorch", None, plan.pytorch.commit), SourceTree("triton", None, plan.triton.commit))
    locked = plan_build(plan.recipe, trees=trees, pin=plan.triton_pin, locked=tuple(used))

    again = fill_context(locked, Store(store.root), tmp_path / "second", lambda: TARGET, emit=lambda _: None,
                         rocm_version=lambda: "7.0")

    assert again == used
    assert locked.inputs() == plan.inputs()


def test_an_image_rocm_without_an_aotriton_runtime_is_one_line_naming_the_file(tmp_path: Path) -> None:
    recipe, _ = standin_recipe(tmp_path, "v2.9.0", "rocm", "gfx942")
    plan = plan_build(load_recipe(str(recipe), tmp_path))

    with pytest.raises(UserError) as refused:
        fill_context(plan, Store(tmp_path / "store"), tmp_path / "ctx", lambda: TARGET, emit=lambda _: None,
                     rocm_version=lambda: "7.1")

    message = str(refused.value)
    assert "\n" not in message and "aotriton.cmake" in message
    assert "no runtime for the image's ROCm 7.1 (it has rocm6.2, rocm6.3, rocm6.4, rocm7.0)" in message


@pytest.mark.parametrize("layout", ["v2.9.0", "main"])
def test_a_cuda_build_downloads_nothing_and_switches_nccl_and_nnpack_off(tmp_path: Path, layout: str) -> None:
    recipe, _ = standin_recipe(tmp_path, layout, "cuda", "9.0")
    plan = plan_build(load_recipe(str(recipe), tmp_path))
    context = tmp_path / "context"

    used = fill_context(plan, Store(tmp_path / "store"), context, lambda: TARGET, emit=lambda _: None,
                        rocm_version=no_rocm)

    assert [u for u in used if u.used_as.startswith("downloads/")] == []
    assert "export" not in (context / "pytorch-downloads" / "env.sh").read_text()
    assert {"USE_NCCL": "0", "USE_NNPACK": "0", "BUILD_TEST": "0"}.items() <= plan.inputs()["build"]["env"].items()


def pytorch_step(dockerfile: str) -> list[str]:
    line = " ".join(part.rstrip("\\") for part in dockerfile.split("RUN unset CMAKE_PREFIX_PATH")[1].split(
        "\n")[:40] if part)
    return shlex.split(line.split("-e .")[0])


def test_build_variables_reach_both_build_steps_over_the_defaults_and_into_the_lock(tmp_path: Path) -> None:
    recipe, _ = standin_recipe(tmp_path, "v2.9.0", "rocm", "gfx942",
                               build='\n[build.env]\nUSE_ROCM_CK_GEMM = "1"\nCCACHE_MAXSIZE = "20G"\n')

    plan = plan_build(load_recipe(str(recipe), tmp_path))

    words = pytorch_step(plan.dockerfile)
    for default in ("BUILD_TEST=0", "USE_NNPACK=0", "USE_ROCM_CK_SDPA=0", "USE_MSLK=0", "USE_FBGEMM=0"):
        assert default in words
    assert "USE_ROCM_CK_GEMM=1" in words and "USE_ROCM_CK_GEMM=0" not in words  # the recipe's value wins
    assert "CCACHE_MAXSIZE=20G" in words
    triton = next(line for line in plan.dockerfile.split("\nRUN ") if line.startswith(". /opt/prbench/downloads/"))
    assert "export USE_ROCM_CK_GEMM=1" in triton and "export CCACHE_MAXSIZE=20G" in triton
    assert "BUILD_TEST" not in triton  # PyTorch's defaults are PyTorch's
    assert plan.inputs()["build"]["env"]["USE_ROCM_CK_GEMM"] == "1"
    assert json.loads(plan.labels()["dev.prbench.inputs"])["build"]["args"]["MAX_JOBS"] == "3"


def test_a_build_variable_that_would_download_is_refused_naming_the_key(tmp_path: Path) -> None:
    recipe, _ = standin_recipe(tmp_path, "v2.9.0", "rocm", "gfx942", build='\n[build.env]\nUSE_NNPACK = "ON"\n')

    with pytest.raises(UserError) as refused:
        plan_build(load_recipe(str(recipe), tmp_path))

    message = str(refused.value)
    assert "\n" not in message and str(recipe) in message and "'build.env.USE_NNPACK'" in message


@pytest.mark.parametrize(("table", "fragments"), [
    ('[build.env]\nMSG = "two\\nlines"\n', ["'build.env.MSG'", "control characters"]),
    ('[build.env]\n"BAD-NAME" = "1"\n', ["'build.env.BAD-NAME'", "environment variable name"]),
    ('[build.env]\nFLAG = true\n', ["'build.env.FLAG'", "string or number"]),
    ('[build.env]\nPYTORCH_ROCM_ARCH = "gfx90a"\n', ["'build.env.PYTORCH_ROCM_ARCH'", "prbench sets"]),
    ('[build]\nenv = "BUILD_TEST=0"\n', ["'build.env'", "expected a table"]),
], ids=["control character", "bad name", "boolean", "reserved name", "not a table"])
def test_a_bad_build_variable_is_one_line_naming_the_recipe_key(tmp_path: Path, table: str,
                                                                fragments: list[str]) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('platform = "cpu"\n' + table, encoding="utf-8")

    message = load_error(path)

    assert all(fragment in message for fragment in fragments), message


def test_without_a_job_count_the_build_takes_this_machines_and_the_tag_stays_the_same(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    from prbench.images import build

    recipe, _ = standin_recipe(tmp_path, "v2.9.0", "rocm", "gfx942")
    recipe.write_text(recipe.read_text(encoding="utf-8").replace("max_jobs = 3", ""), encoding="utf-8")
    tags = set()
    for jobs in (2, 64):  # a laptop and a build server plan the same recipe
        monkeypatch.setattr(build, "host_build_jobs", lambda jobs=jobs: jobs)
        plan = plan_build(load_recipe(str(recipe), tmp_path))
        assert "MAX_JOBS" not in plan.inputs()["build"]["args"]
        assert build.docker_build_args(plan) == {"MAX_JOBS": str(jobs)}
        tags.add(plan.tag)
    assert len(tags) == 1


@pytest.mark.parametrize(("cores", "gib", "jobs"), [(128, 512, 128), (128, 256, 64), (16, 2, 1), (4, 1000, 4)])
def test_the_default_job_count_is_bounded_by_cores_and_by_memory_per_job(cores: int, gib: int, jobs: int) -> None:
    assert JOB_MEMORY_BYTES == 4 << 30
    assert build_jobs(cores, gib << 30) == jobs


class _Served(io.BytesIO):
    """One file as urllib.request.urlopen answers it (a context manager with headers)."""

    @property
    def headers(self) -> dict[str, str]:
        return {"Content-Length": str(len(self.getvalue()))}


def test_store_fetch_takes_every_download_of_a_source_build_so_that_the_build_runs_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user about to build on a machine without network runs `invoke store fetch --recipe R --pytorch-src P
    --triton-src T --base B` once where the network is: afterwards the build context is filled with the network off."""
    import urllib.request

    from prbench.commands import images as store_command
    from prbench.images import wheels

    recipe_path, files = standin_recipe(tmp_path, "v2.9.0", "rocm", "gfx942")
    recipe = load_recipe(str(recipe_path), tmp_path)
    version = LAYOUTS["v2.9.0"][0]
    served = {f"{RELEASES}{version}/{name}": data for name, data in files.items()}
    asked: list[str] = []

    def serve(url: str, timeout: float) -> _Served:
        asked.append(url)
        return _Served(served[url])

    monkeypatch.setattr(urllib.request, "urlopen", serve)
    monkeypatch.setattr(wheels, "base_image_target", lambda recipe, store: lambda: TARGET)
    monkeypatch.setattr(store_command, "_base_rocm_version", lambda recipe, store: "7.0")
    store_dir = tmp_path / "store"
    sides = store_command.SourceSides(refs=(recipe.pytorch.commit, "installed"))  # the clones are the recipe's

    store_command.run_store_action("fetch", store_dir=str(store_dir), file=None, lock=None, recipe=recipe,
                                   sides=sides)

    runtime = f"aotriton-{version}-manylinux_2_28_x86_64-rocm7.0-shared.tar.gz"
    images = f"aotriton-{version}-images-amd-gfx942.tar.gz"
    assert sorted(url.rsplit("/", 1)[1] for url in asked) == sorted([runtime, images]), "each file fetched once"
    kept = {item.name: item.sha256 for item in Store(store_dir).items() if item.kind == "download"}
    assert kept == {name: hashlib.sha256(files[name]).hexdigest() for name in (runtime, images)}

    def offline(url: str, timeout: float) -> _Served:
        raise AssertionError(f"the build fetched {url}")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    used = fill_context(plan_build(recipe), Store(store_dir), tmp_path / "context", lambda: TARGET,
                        emit=lambda _: None, rocm_version=lambda: "7.0")
    assert {u.item.name for u in used if u.used_as.startswith("downloads/")} == {runtime, images}
