"""A wheel side installs what its wheel requires, Triton included, and says so: a user compares two torch releases,
and the newer PyPI wheel requires its own Triton (and CUDA library wheels). Small stand-in wheels play them here:
a fake ``torch`` whose METADATA requires a fake ``triton``, an ``nvidia-*`` wheel, and a macOS-only helper that must
not be brought on the image's Linux. Read from the wheels' metadata, the closure names which requirement brought
each wheel; the image's check keeps that Triton (a source build's "absent" rule is unchanged); the lock records
every installed distribution with what brought it; and before the build, and in `invoke doctor`, the user reads
what the image will contain and how large it is."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from prbench.compare import doctor
from prbench.compare.doctor import DoctorInputs, Machine, Session
from prbench.images.build import plan_build, render_dockerfile
from prbench.images.build_context import fill_context
from prbench.images.build_plan import UsedItem, read_used_items
from prbench.images.content_store import Store, StoreItem, WheelTarget
from prbench.images.image_lock import FROM_BASE, LOCK_VERSION, installed_distributions, read_lock
from prbench.images.wheels import (
    BROUGHT_BY,
    brought_by_record,
    contents_block,
    recipe_contents,
    size_text,
    wheel_contents,
)
from prbench.sides.recipes import load_recipe
from tests.support.store_support import write_wheel

TARGET = WheelTarget("3.11", ("manylinux_2_36_x86_64", "linux_x86_64"), abi="cp311")
DIGEST = "sha256:" + "0" * 64
PLATFORM_TAG = "cp311-cp311-manylinux_2_28_x86_64"
# What the PyPI torch wheel's METADATA says, in small: its Triton on Linux x86_64, a CUDA library, and a requirement
# whose marker holds on no Linux image.
TORCH_REQUIRES = ('triton==3.8.0; platform_system == "Linux" and platform_machine == "x86_64"',
                  'nvidia-cublas-cu12==12.8.4.1; platform_system == "Linux"',
                  'macos-helper==1.0; sys_platform == "darwin"')
CHECK_SCRIPT = Path(__file__).resolve().parents[1] / "docker" / "check_environment.py"


def _add(store: Store, tmp_path: Path, name: str, version: str, requires: tuple[str, ...] = (),
         tag: str = "py3-none-any") -> StoreItem:
    wheel = write_wheel(tmp_path / "house", name, version, requires=requires, tag=tag)
    return store.add_file(wheel, kind="wheel", name=wheel.name, origin=f"pip download {name}=={version}")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """The store after `invoke store fetch` of the two releases: CPU torch 2.13.0 (no requirement), torch 2.14.1 with
    its Triton and CUDA library, and the macOS helper (which a resolver that ignored markers would take)."""
    store = Store(tmp_path / "store")
    _add(store, tmp_path, "torch", "2.13.0+cpu", tag=PLATFORM_TAG)
    _add(store, tmp_path, "torch", "2.14.1", TORCH_REQUIRES, tag=PLATFORM_TAG)
    _add(store, tmp_path, "triton", "3.8.0", tag=PLATFORM_TAG)
    _add(store, tmp_path, "nvidia_cublas_cu12", "12.8.4.1", tag="py3-none-manylinux_2_27_x86_64")
    _add(store, tmp_path, "macos_helper", "1.0")
    return store


def _recipe(tmp_path: Path, store: Store, version: str, extra: tuple[str, ...] = ()):
    pinned = next(i for i in store.items() if i.name.startswith(f"torch-{version}-"))
    path = tmp_path / "wheels-sides.toml"
    extras = f"[pip]\nextra = {json.dumps(list(extra))}\n" if extra else ""
    path.write_text(f'platform = "cpu"\nrunner = "docker"\n[base_image]\nname = "prbench-test/bookworm:base"\n'
                    f'digest = "{DIGEST}"\n[pytorch]\nwheel = "torch=={version}"\nsha256 = "{pinned.sha256}"\n{extras}')
    return load_recipe(str(path), tmp_path)


def _check_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_environment", CHECK_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _site(tmp_path: Path, installed: dict[str, str]) -> list[str]:
    """A site-packages holding these distributions (name → version), as an image's would after pip install."""
    site = tmp_path / "site-packages"
    for name, version in installed.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return [str(site)]


# --- the closure, read from the wheels' metadata ------------------------------------------------------------------


def test_a_torch_wheel_brings_the_triton_it_requires_and_not_what_a_marker_rules_out(store: Store) -> None:
    closure = store.wheel_closure(["torch==2.14.1"], TARGET, "pinned")

    brought = {entry.project: (entry.version, entry.by) for entry in closure.brought}
    assert brought == {
        "torch": ("2.14.1", "pinned torch==2.14.1"),
        "triton": ("3.8.0", 'torch 2.14.1 requires triton==3.8.0; platform_system == "Linux" and '
                            'platform_machine == "x86_64"'),
        "nvidia-cublas-cu12": ("12.8.4.1", 'torch 2.14.1 requires nvidia-cublas-cu12==12.8.4.1; '
                                           'platform_system == "Linux"'),
    }
    assert closure.complete
    # the CPU release requires nothing: its closure is torch alone
    assert [e.project for e in store.wheel_closure(["torch==2.13.0+cpu"], TARGET, "pinned").brought] == ["torch"]


def test_what_no_stored_wheel_satisfies_is_listed_as_what_pip_will_fetch(store: Store, tmp_path: Path) -> None:
    _add(store, tmp_path, "torch", "2.15.0", ("triton==3.9.0", "filelock"), tag=PLATFORM_TAG)

    contents = wheel_contents(store, [(["torch==2.15.0"], "pinned")], TARGET)

    assert contents.closure.missing == ("torch 2.15.0 requires triton==3.9.0", "torch 2.15.0 requires filelock")
    assert not contents.closure.complete
    block = contents_block("image prbench/wheels-sides:abc", contents)
    assert block[-1].startswith("  not in the store yet (2; pip download fetches them and what they require, size "
                                "unknown): torch 2.15.0 requires triton==3.9.0; torch 2.15.0 requires filelock")
    # and a side whose wheel is not fetched at all says so rather than inventing its contents
    nothing = wheel_contents(store, [(["torch==2.16.0"], "pinned")], TARGET)
    assert nothing.closure.brought == () and nothing.closure.missing == ("pinned torch==2.16.0",)
    assert contents_block("image c", nothing)[1:3] == ["  torch: none in the store (see what pip fetches, below)",
                                                       "  Triton: none in the store (see what pip fetches, below)"]
    assert nothing.line() == ("Triton not known until the missing wheels are fetched, 0 B in the image, "
                              "1 requirement(s) not in the store yet (size unknown)")


def test_before_the_build_the_block_names_torch_triton_the_cuda_libraries_and_the_size(store: Store,
                                                                                        tmp_path: Path) -> None:
    pr = recipe_contents(store, _recipe(tmp_path, store, "2.14.1"), TARGET)
    base = recipe_contents(store, _recipe(tmp_path, store, "2.13.0+cpu"), TARGET)

    block = contents_block("image prbench/wheels-sides:abc", pr)

    assert block[:4] == [
        "image prbench/wheels-sides:abc will contain:",
        "  torch: torch 2.14.1 (pinned torch==2.14.1)",
        '  Triton: triton 3.8.0 (torch 2.14.1 requires triton==3.8.0; platform_system == "Linux" and '
        'platform_machine == "x86_64")',
        f"  CUDA libraries: 1 wheels (nvidia-cublas-cu12), {size_text(pr.libraries('CUDA')[0].item.size)}",
    ]
    assert pr.installed_bytes is not None and pr.image_bytes == pr.wheel_bytes + pr.installed_bytes
    assert block[4] == (f"  3 wheels in the store: {size_text(pr.wheel_bytes)}, "
                        f"{size_text(pr.installed_bytes)} installed")
    assert (size_text(999), size_text(1173), size_text(2_900_000_000)) == ("999 B", "1.2 kB", "2.9 GB")
    assert len(block) == 5  # nothing left for pip to fetch
    assert contents_block("image b", base)[1:3] == ["  torch: torch 2.13.0+cpu (pinned torch==2.13.0+cpu)",
                                                    "  Triton: none"]


# --- the image's check: a wheel's Triton is kept, a source build's rule is unchanged ------------------------------


def test_a_wheel_side_keeps_the_triton_its_torch_requires_and_names_the_requirement(store: Store,
                                                                                     tmp_path: Path) -> None:
    plan = plan_build(_recipe(tmp_path, store, "2.14.1"))
    context = tmp_path / "context"

    used = fill_context(plan, store, context, lambda: TARGET, emit=lambda _: None)

    assert {u.item.name.split("-")[0]: u.brought_by for u in used} == {
        "torch": "pinned torch==2.14.1",
        "triton": 'torch 2.14.1 requires triton==3.8.0; platform_system == "Linux" and platform_machine == "x86_64"',
        "nvidia_cublas_cu12": 'torch 2.14.1 requires nvidia-cublas-cu12==12.8.4.1; platform_system == "Linux"'}
    record = context / "wheels" / "pytorch" / BROUGHT_BY
    assert json.loads(record.read_text()) == brought_by_record("pytorch", used)
    # the image's last check keeps what that record lists instead of refusing every Triton
    last = [line for line in plan.dockerfile.splitlines() if line.startswith("RUN ")][-1]
    assert last.endswith(f"--version torch==2.14.1 --keep-tritons /opt/prbench/wheels/pytorch/{BROUGHT_BY}")

    check = _check_script()
    site = _site(tmp_path, {"torch": "2.14.1", "triton": "3.8.0", "nvidia-cublas-cu12": "12.8.4.1"})
    problems, kept = check.check_keep_tritons(str(record), [], path=site)
    assert problems == []
    assert kept == ['triton 3.8.0 kept: torch 2.14.1 requires triton==3.8.0; platform_system == "Linux" and '
                    'platform_machine == "x86_64"']


def test_a_triton_only_an_extra_pin_brought_is_refused_naming_it(store: Store, tmp_path: Path) -> None:
    _add(store, tmp_path, "kernels_lib", "1.0", ("triton==3.8.0",))
    plan = plan_build(_recipe(tmp_path, store, "2.13.0+cpu", extra=("kernels-lib==1.0",)))
    context = tmp_path / "context"
    fill_context(plan, store, context, lambda: TARGET, emit=lambda _: None)
    check = _check_script()

    problems, kept = check.check_keep_tritons(str(context / "wheels" / "pytorch" / BROUGHT_BY),
                                              [str(context / "wheels" / "extra" / BROUGHT_BY)],
                                              path=_site(tmp_path, {"torch": "2.13.0+cpu", "triton": "3.8.0"}))

    assert kept == []
    assert problems == ["triton ['3.8.0'] is installed, but no pinned wheel requires it, it came with "
                        "kernels-lib 1.0 requires triton==3.8.0"]
    last = [line for line in plan.dockerfile.splitlines() if line.startswith("RUN ")][-1]
    assert last.endswith(f"--keep-tritons /opt/prbench/wheels/pytorch/{BROUGHT_BY} "
                         f"--brought-by /opt/prbench/wheels/extra/{BROUGHT_BY}")


def test_a_source_build_carrying_a_triton_is_still_refused(tmp_path: Path) -> None:
    """The base layer's rule: the base image's torch and Triton must all be gone before ours is installed."""
    check = _check_script()
    site = _site(tmp_path, {"triton": "3.8.0"})

    assert check.check_absent(["torch", "triton", "pytorch-triton"], path=site) == [
        "triton ['3.8.0'] is still installed"]
    assert check.check_absent(["torch", "pytorch-triton"], path=site) == []
    recipe = load_recipe("cuda-h100", Path(__file__).resolve().parents[1] / "recipes")
    from prbench.sides.pins import SourceTree

    text = render_dockerfile(recipe, SourceTree("pytorch", Path("/p"), "0" * 40),
                             SourceTree("triton", Path("/t"), "1" * 40))
    base_check = next(line for line in text.splitlines() if "--absent" in line)
    assert base_check.endswith("--absent torch torchvision torchaudio triton pytorch-triton pytorch-triton-rocm "
                               "triton-rocm")
    assert "--keep-tritons" not in text


# --- the lock -----------------------------------------------------------------------------------------------------


def test_the_lock_names_what_brought_every_installed_distribution(store: Store, tmp_path: Path) -> None:
    plan = plan_build(_recipe(tmp_path, store, "2.14.1"))
    used = fill_context(plan, store, tmp_path / "context", lambda: TARGET, emit=lambda _: None)
    label = json.loads(json.dumps([u.to_json() for u in used]))  # the image's dev.prbench.store label
    pip = {"torch": "2.14.1", "triton": "3.8.0", "nvidia-cublas-cu12": "12.8.4.1", "pip": "23.0.1"}

    installed = installed_distributions(pip, label, plan.sources())

    assert installed == {
        "nvidia-cublas-cu12": {"version": "12.8.4.1", "brought_by": 'torch 2.14.1 requires nvidia-cublas-cu12=='
                                                                    '12.8.4.1; platform_system == "Linux" '
                                                                    "(wheels/pytorch)"},
        "pip": {"version": "23.0.1", "brought_by": FROM_BASE},
        "torch": {"version": "2.14.1", "brought_by": "pinned torch==2.14.1 (wheels/pytorch)"},
        "triton": {"version": "3.8.0", "brought_by": 'torch 2.14.1 requires triton==3.8.0; platform_system == '
                                                     '"Linux" and platform_machine == "x86_64" (wheels/pytorch)'},
    }
    # the store entries carry it too, and read back as they were written
    assert read_used_items(label, "store") == used
    # a source build's torch and Triton are the trees it built
    source = installed_distributions({"torch": "2.9.0a0", "triton": "3.5.0"}, [],
                                     {"pytorch": {"commit": "a" * 40}, "triton": {"commit": "b" * 40}})
    assert source["triton"]["brought_by"] == f"built from source: triton {'b' * 40}"


def test_a_lock_written_before_the_installed_records_is_still_read(tmp_path: Path) -> None:
    assert LOCK_VERSION == 2
    old = {"lock_version": 1, "recipe": {"name": "cpu-docker"}, "base": {"digest": DIGEST}, "sources": {},
           "patches": {}, "overlay_sha256": None, "build": {"args": {}}, "env": {},
           "store": [{"kind": "wheel", "name": "torch-2.13.0+cpu-py3-none-any.whl", "sha256": "ab" * 32, "size": 1,
                      "origin": "pip download", "used_as": "wheels/pytorch"}],
           "contents": {"pip": {"torch": "2.13.0+cpu"}},
           "provenance": {"recipe_path": "cpu-docker.toml", "recipe_toml": "", "clones": {}, "overlay_patch": None,
                          "image": {"tag": "prbench/cpu-docker:abc"}, "host": {}}}
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(old))

    lock = read_lock(path)

    assert lock["lock_version"] == 1 and "installed" not in lock
    assert read_used_items(lock["store"], "store")[0].brought_by is None
    assert UsedItem(read_used_items(lock["store"], "store")[0].item, "wheels/pytorch").to_json() == old["store"][0]


# --- invoke doctor ------------------------------------------------------------------------------------------------


class _Engine:
    def __init__(self, root: Path) -> None:
        self.root = root

    def info(self) -> dict[str, str]:
        return {"DockerRootDir": str(self.root)}


def _doctor(store: Store, tmp_path: Path, base: str, pr: str) -> Session:
    session = Session(DoctorInputs(recipe=_recipe(tmp_path, store, "2.13.0+cpu"), runs_dir=tmp_path / "runs",
                                   base=base, pr=pr, store=store.root), Machine())
    session.target, session.client = TARGET, _Engine(tmp_path)
    return session


def test_doctor_says_what_each_image_will_contain_and_warns_when_the_disk_is_short(
        store: Store, tmp_path: Path) -> None:
    session = _doctor(store, tmp_path, "installed", "torch==2.14.1")
    pr = wheel_contents(store, [(["torch==2.14.1"], "pinned")], TARGET)
    assert pr.image_bytes is not None

    result = doctor.check_image_contents(session)

    assert result.status == "ok"
    assert result.detail.startswith("base: torch 2.13.0+cpu, no Triton, ")
    assert "; pr: torch 2.14.1, triton 3.8.0 (torch 2.14.1 requires triton==3.8.0; platform_system == \"Linux\" " \
           "and platform_machine == \"x86_64\"), 1 CUDA library wheels, " in result.detail
    # The Docker data root holds less than both images take: a warning naming the need, before any build.
    free = pr.image_bytes // 2
    session.machine = Machine(free_bytes=lambda path: free)

    short = doctor.check_image_contents(session)

    assert short.status == "warn"
    assert short.detail.startswith(result.detail + "; short of disk: ")
    assert f"docker data root {tmp_path}" in short.detail and f"{free / 1e9:.1f} GB free, needs ~" in short.detail
    # a patch as the PR is a layer on base's image: one image to weigh
    patch = doctor.check_image_contents(_doctor(store, tmp_path, "installed", str(tmp_path / "pr.patch")))
    assert patch.detail.startswith("base: torch 2.13.0+cpu") and "pr:" not in patch.detail
