"""Locks (``lock.json``): everything needed to rebuild an image months later and to prove it equal.

A lock has two kinds of fields:

* **compared** — the inputs (recipe hash, base digest, every commit and where the Triton pin came from, or the
  wheel pins with their sha256, patches' sha256, build args, templates and code hashes, env), the store items the
  build consumed (``store``: kind, name, sha256, size, origin and where each went in the build context) and the
  contents read from inside the image (``pip list``, the dpkg list, Python, torch's own git commit, the ROCm/CUDA
  version files). ``verify`` reports each difference. A saved base image (``used_as: base``) and the source
  archives are listed in ``store`` too but compared through the base digest and the commits that pin them.
* **installed** — every distribution installed in the image (``contents.pip``) with what brought it
  (``installed_distributions``): the requirement that brought a wheel of the build's wheelhouse (its ``store``
  entry's ``brought_by``), the source tree a distribution was built from, or the base image. Derived from compared
  fields, so not compared itself; a lock of version 1 has none and is still read.
* **provenance** — facts that legitimately differ after a faithful rebuild and are shown, not compared:
  the image id (layer timestamps change it; its meaning also depends on the image store), the host that
  built it (driver, GPU, kernel), the clone paths, the recipe's text and the time.

The inputs come from the image's own labels, so any prbench image can be locked, and a rebuild never
consults a moving tag: the base is pinned by digest, every source by full commit SHA, every file by sha256. A
rebuild takes exactly the lock's store items (``prbench.images.build_context``): no clone, no index, no URL.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform as host_platform
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

import prbench
from foundation import atomic_io
from foundation.errors import UserError
from foundation.formats.run_layout import LOCK_JSON
from foundation.records import describe, read_json
from prbench.images.build import BuildResult, build_image, plan_build
from prbench.images.build_plan import (
    BASE_USE,
    LABEL_CLONES,
    LABEL_INPUTS,
    LABEL_OVERLAY,
    LABEL_RECIPE_PATH,
    LABEL_RECIPE_TOML,
    LABEL_STORE,
    LABEL_TRITON_PATCH,
    PYTORCH_FIRST,
    BuildPlan,
    UsedItem,
    read_used_items,
)
from prbench.images.content_store import Store
from prbench.images.docker_engine import image_present, resolve_base
from prbench.sides.pins import SourceTree, TritonPin
from prbench.sides.recipes import WheelPin, parse_recipe

LOCK_VERSION = 2
# Version 1 lacks ``installed``; rebuild and verify read it all the same.
READABLE_VERSIONS = (1, 2)
COMPARED = ("recipe", "base", "sources", "patches", "overlay_sha256", "build", "env", "store", "contents")

# Image environment variables worth recording. An allow-list, so a token baked into a base image by
# someone else can never end up in a lock file that gets attached to a public PR.
_ENV_ALLOWED_PREFIXES = ("PYTORCH_", "TORCH", "TRITON_", "ROCM", "HIP_", "HSA_", "AMD", "CUDA", "NVIDIA_",
                         "NV_", "USE_", "PYTHON", "CONDA_", "MAX_JOBS", "PATH", "LD_LIBRARY_PATH", "LANG",
                         "OMP_", "MIOPEN_", "CMAKE_", "PIP_")
_ENV_DENIED_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "_KEY", "API_KEY")

# Run inside the image (stdlib only): Python, installed distributions, dpkg list, ROCm/CUDA versions.
FACTS_SCRIPT = r"""
import json, subprocess, sys, importlib.metadata as md
from pathlib import Path
def pip_list():
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "list", "--format=json"], capture_output=True,
                             text=True, check=True).stdout
        return {"via": "pip", "packages": {d["name"].lower(): d["version"] for d in json.loads(out)}}
    except Exception:
        pkgs = {(d.metadata["Name"] or "").lower(): d.version for d in md.distributions() if d.metadata["Name"]}
        return {"via": "importlib.metadata", "packages": pkgs}
def dpkg():
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Version}\n"], capture_output=True,
                             text=True, check=True).stdout
    except Exception:
        return {}
    return dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
def read(path):
    p = Path(path)
    return p.read_text(errors="replace").strip() if p.is_file() else None
def torch_git():
    # torch/version.py, read rather than imported (seconds, and a GPU build may complain without a GPU)
    import importlib.util, re
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    text = read(Path(list(spec.submodule_search_locations)[0]) / "version.py") or ""
    found = re.search(r"^git_version\s*=\s*['\"]([0-9a-f]{7,40})['\"]", text, re.M)
    return found.group(1) if found else None
facts = {
    "python": {"version": sys.version.split()[0], "executable": sys.executable, "prefix": sys.prefix},
    "pip": pip_list(),
    "dpkg": dpkg(),
    "versions": {"rocm": read("/opt/rocm/.info/version"), "cuda": read("/usr/local/cuda/version.json"),
                 "torch_git": torch_git()},
}
print(json.dumps(facts, sort_keys=True))
"""


@dataclass(frozen=True)
class Difference:
    field: str
    locked: Any
    actual: Any

    def line(self, actual: str = "image") -> str:
        return f"{self.field}: lock has {_short(self.locked)}, {actual} has {_short(self.actual)}"


# --- making a lock ---------------------------------------------------------------------------------------


def lock_for_image(client: Any, image_ref: str) -> dict[str, Any]:
    """Read a built prbench image (labels + contents) into a lock dict."""
    image = image_present(client, image_ref)
    if image is None:
        raise UserError(f"lock: image {image_ref} is not present locally")
    labels = image.labels or {}
    if LABEL_INPUTS not in labels:
        raise UserError(f"lock: image {image_ref} has no {LABEL_INPUTS} label; was it built by 'invoke build'?")
    inputs = json.loads(labels[LABEL_INPUTS])
    info = client.info()
    store = json.loads(labels.get(LABEL_STORE, "[]"))
    contents = image_contents(client, image.id)
    return {
        "lock_version": LOCK_VERSION,
        **inputs,
        "store": store,
        "contents": {**contents, "image_env": allowed_env(image.attrs["Config"].get("Env"))},
        "installed": installed_distributions(contents["pip"], store, inputs.get("sources", {})),
        "provenance": {
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "prbench_version": prbench.__version__,
            "image": {
                "tag": next((t for t in image.tags if t.startswith("prbench/")), image_ref),
                "id": image.id,
                # Image.id is the config digest in the classic store but the manifest digest in the
                # containerd store: an id is only comparable with one from the same kind of store.
                "store": image_store(info),
                "docker_version": client.version().get("Version", ""),
            },
            "base_repo_digests": _base_repo_digests(client, inputs["base"]),
            "recipe_toml": labels.get(LABEL_RECIPE_TOML, ""),
            "recipe_path": labels.get(LABEL_RECIPE_PATH, ""),
            "clones": json.loads(labels.get(LABEL_CLONES, "{}")),
            "overlay_patch": labels.get(LABEL_OVERLAY),
            **({"triton_patch": labels[LABEL_TRITON_PATCH]} if LABEL_TRITON_PATCH in labels else {}),
            "host": host_facts(info),
        },
    }


# What brought a distribution the build did not install (no wheel of its wheelhouse, no source tree of it).
FROM_BASE = "the base image (or its apt packages): no install step of the build brought it"
# A wheel of an image built before the locks named the requirement that brought each wheel.
UNRECORDED = "a requirement not recorded (the image was built before prbench recorded them)"


def installed_distributions(pip: dict[str, str], store: list[dict[str, Any]],
                            sources: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Every installed distribution (``pip``: name → version) with what brought it: a wheel of the build's
    wheelhouse names its requirement and install step, a tree built from source its commit, else the base image."""
    wheels: dict[tuple[str, str], str] = {}
    for entry in store:
        if isinstance(entry, dict) and entry.get("kind") == "wheel":
            try:
                project, wheel_version, _, _ = parse_wheel_filename(str(entry.get("name")))
            except InvalidWheelFilename:
                continue
            wheels[(str(project), str(wheel_version))] = f"{entry.get('brought_by') or UNRECORDED} " \
                                                         f"({entry.get('used_as')})"
    built = {name: f"built from source: {key} {sources[key]['commit']}" for key, name in (("pytorch", "torch"),
                                                                                          ("triton", "triton"))
             if isinstance(sources.get(key), dict) and "commit" in sources[key]}
    out = {}
    for name, version in sorted(pip.items()):
        canonical = str(canonicalize_name(name))
        by = wheels.get((canonical, _normal_version(version))) or built.get(canonical) or FROM_BASE
        out[name] = {"version": version, "brought_by": by}
    return out


def _normal_version(text: str) -> str:
    try:
        return str(Version(text))
    except InvalidVersion:
        return text


def write_lock(lock: dict[str, Any], path: Path) -> None:
    atomic_io.write_json(path, lock)


# in a run's lock.json: {node: {devices, shards, facts}} (prbench.compare.round_sharding.node_summary)
RUN_NODES = "nodes"


def read_lock(path: Path) -> dict[str, Any]:
    """An image's lock (``<runs>/images/<recipe>-<hash>/lock.json`` or a run side's ``<run>/<side>/lock.json``)."""
    return _checked(_load(path), str(path))


def read_locks(path: Path) -> list[tuple[str | None, dict[str, Any]]]:
    """The image locks in ``path``: an image's lock (side None), or both sides of a run's ``lock.json``."""
    data = _load(path)
    # A run's lock.json: both sides' image locks, and (``nodes``) where its timing rounds ran, which is no image.
    if isinstance(data, dict) and data and "lock_version" not in data and set(data) - {RUN_NODES} <= {"base", "pr"}:
        sides: list[tuple[str | None, dict[str, Any]]] = []
        for side, lock in data.items():
            if side == RUN_NODES:
                continue
            if isinstance(lock, dict) and lock.get("runner") == "local":
                raise UserError(f"--lock: {path} is the lock of a run on the local runner ({side} side: the "
                                "installed torch); there is no image to rebuild or verify")
            sides.append((side, _checked(lock, f"{path} ({side} side)")))
        return sides
    return [(None, _checked(data, str(path)))]


def _load(path: Path) -> Any:
    if not Path(path).exists():
        raise UserError(f"--lock: {path} does not exist")
    try:  # a regular file of bounded size, nesting and number length (foundation.records)
        return read_json(path, "a prbench lock (JSON)")
    except UserError as exc:
        raise UserError(f"--lock: {exc}") from None


# The fields rebuild and verify read, each with the types it may have (its presence is checked by `_checked` for
# the top-level fields): a hand-edited or damaged lock is one line naming the field, not a traceback deep inside a
# rebuild.
_SHAPE: tuple[tuple[str, tuple[type, ...]], ...] = (
    ("recipe", (dict,)), ("recipe.name", (str,)), ("base", (dict,)), ("base.digest", (str,)),
    ("sources", (dict,)), ("sources.pytorch", (dict,)), ("sources.triton", (dict,)), ("patches", (dict,)),
    ("build", (dict,)), ("build.args", (dict,)), ("store", (list,)), ("provenance", (dict,)),
    ("provenance.recipe_path", (str,)), ("provenance.recipe_toml", (str,)), ("provenance.clones", (dict,)),
    ("provenance.overlay_patch", (str, type(None))),
    ("provenance.triton_patch", (str, type(None))), ("provenance.image", (dict,)), ("provenance.host", (dict,)),
)
_TYPE_NAMES = {dict: "an object", list: "a list", str: "text", type(None): "null"}


def _check_shape(data: dict[str, Any], where: str) -> None:
    for dotted, types in _SHAPE:
        parent: Any = data
        *outer, last = dotted.split(".")
        for key in outer:
            parent = parent.get(key, {})
        if last in parent and not isinstance(parent[last], types):
            expected = " or ".join(_TYPE_NAMES[t] for t in types)
            raise UserError(f"--lock: {where}: {dotted} is {describe(parent[last])}; expected {expected}")
    for name, sha in data["patches"].items():
        if not isinstance(sha, str):
            raise UserError(f"--lock: {where}: patches.{name} is {describe(sha)}; expected a sha256 (text)")
    if "MAX_JOBS" in data["build"].get("args", {}):
        jobs = data["build"]["args"]["MAX_JOBS"]
        if isinstance(jobs, bool) or not (str(jobs).isdigit() and 1 <= int(str(jobs)[:7]) < 10**6):
            raise UserError(f"--lock: {where}: build.args.MAX_JOBS is {describe(jobs)}; expected a whole number ≥ 1")


def _checked(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise UserError(f"--lock: {where} is not a prbench lock (expected a JSON object)")
    data.setdefault("store", [])  # locks written before the store existed rebuild from the clones
    missing = [k for k in (*COMPARED, "provenance") if k not in data]
    if missing:
        raise UserError(f"--lock: {where} is not a prbench lock (version {LOCK_VERSION}; missing {', '.join(missing)})")
    version = data.get("lock_version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise UserError(f"--lock: {where} is not a prbench lock of this version (lock_version is {describe(version)}; "
                        f"expected {' or '.join(map(str, READABLE_VERSIONS))})")
    _check_shape(data, where)
    absent = [dotted for dotted in (_READ_VENV if data.get("runner") == "venv" else _READ)
              if _get(data, dotted) is None]
    if absent:
        raise UserError(f"--lock: {where}: {absent[0]} is missing; expected a lock written by invoke build")
    return data


# What rebuild and verify read without a default: a lock edited by hand may have lost any of them.
_READ = ("recipe.name", "base.digest", "provenance.recipe_path", "provenance.recipe_toml", "provenance.image.tag")
# A venv's lock (prbench.images.venv) names its interpreter and its directory instead of a base image and a tag.
_READ_VENV = ("recipe.name", "base.python", "provenance.recipe_path", "provenance.recipe_toml", "provenance.venv.path")


def _get(data: dict[str, Any], dotted: str) -> Any:
    node: Any = data
    for key in dotted.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node


def image_contents(client: Any, image_id: str) -> dict[str, Any]:
    """pip list, dpkg list, Python and ROCm/CUDA versions, read by a throwaway container (no network)."""
    import docker

    try:
        out = client.containers.run(image_id, ["python3", "-c", FACTS_SCRIPT], remove=True, network_mode="none",
                                    stdout=True, stderr=True, entrypoint=[])
    except docker.errors.ContainerError as exc:
        raise UserError(f"lock: cannot read the contents of {image_id[:19]}: {exc.stderr!r}"[:400]) from None
    facts = json.loads(out.decode().strip().splitlines()[-1])
    return {"python": facts["python"], "pip": facts["pip"]["packages"], "pip_via": facts["pip"]["via"],
            "dpkg": facts["dpkg"], "versions": facts["versions"]}


def allowed_env(env: list[str] | None) -> dict[str, str]:
    out = {}
    for item in env or []:
        name, _, value = item.partition("=")
        upper = name.upper()
        if upper.startswith(_ENV_ALLOWED_PREFIXES) and not any(w in upper for w in _ENV_DENIED_WORDS):
            out[name] = value
    return dict(sorted(out.items()))


def image_store(info: dict[str, Any]) -> str:
    status = dict(info.get("DriverStatus") or [])
    if "io.containerd.snapshotter" in str(status.get("driver-type", "")):
        return f"containerd ({info.get('Driver', '')})"
    return f"classic ({info.get('Driver', '')})"


def host_facts(info: dict[str, Any]) -> dict[str, Any]:
    """Facts about the machine that no rebuild can reproduce: recorded so runs from different hosts or
    drivers are never silently compared."""
    return {
        "kernel": host_platform.release(),
        "machine": host_platform.machine(),
        "cpu": cpu_model(),
        "amdgpu_driver": _read_first_line("/sys/module/amdgpu/version"),
        "nvidia_driver": _read_first_line("/proc/driver/nvidia/version"),
        "gpus": gpu_names(),
        "docker_os": info.get("OperatingSystem", ""),
        "docker_runtimes": sorted((info.get("Runtimes") or {}).keys()),
    }


def _base_repo_digests(client: Any, base: dict[str, str]) -> list[str]:
    image = image_present(client, f"{base['name'].rsplit(':', 1)[0]}@{base['digest']}") or image_present(
        client, base["digest"])
    return list(image.attrs.get("RepoDigests") or []) if image else []


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return host_platform.processor()


def cpu_facts() -> dict[str, Any]:
    """What the report's environment line names beside the CPU model: its widest vector instruction set (which
    decides the C++ kernels Inductor generates), the cores and the load when the run was planned."""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    isa = ("AVX-512" if "avx512f" in flags else "AVX2 (no AVX-512)" if "avx2" in flags
           else "NEON" if "asimd" in flags else "SVE" if "sve" in flags else "")
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    return {"vector_isa": isa, "cores": os.cpu_count(), "load_1min": load}


def _read_first_line(path: str) -> str | None:
    try:
        return Path(path).read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        return None


def gpu_names() -> list[str]:
    commands = [["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                ["rocm-smi", "--showproductname", "--csv"]]
    for argv in commands:
        if shutil.which(argv[0]):
            try:
                out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
            except (OSError, subprocess.TimeoutExpired):
                continue
            return [line.strip() for line in out.splitlines() if line.strip()]
    return []


# --- verifying -------------------------------------------------------------------------------------------


def compare(locked: dict[str, Any], actual: dict[str, Any]) -> list[Difference]:
    """Every compared field that differs, as dotted paths (``sources.triton.commit``, ``contents.pip.torch``)."""
    left = _flatten({k: _compared(locked, k) for k in COMPARED})
    right = _flatten({k: _compared(actual, k) for k in COMPARED})
    return [Difference(key, left.get(key), right.get(key))
            for key in sorted(left.keys() | right.keys()) if left.get(key) != right.get(key)]


def _compared(lock: dict[str, Any], key: str) -> Any:
    """The value of a compared field; ``store`` as ``{used_as/name: sha256}``, so a difference names the item.

    A saved base (transport, pinned by ``base.digest``) and the source archives (a reproducible function of
    ``sources.*.commit``) are compared through those fields, not twice."""
    value = lock.get(key)
    if key == "store" and isinstance(value, list):
        return {f"{entry.get('used_as')}/{entry.get('name')}": entry.get("sha256") for entry in value
                if isinstance(entry, dict) and entry.get("used_as") != BASE_USE
                and not str(entry.get("used_as")).startswith("src/")}
    return value


def provenance_notes(locked: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """What differs but is expected to after a rebuild or on another host (shown, never a failure)."""
    notes = []
    old, new = locked["provenance"], actual["provenance"]
    if old["image"]["id"] != new["image"]["id"]:
        notes.append(f"image id {old['image']['id'][:19]} → {new['image']['id'][:19]} "
                     "(expected after a rebuild: layer timestamps differ)")
    if old["image"]["store"] != new["image"]["store"]:
        notes.append(f"image store {old['image']['store']} → {new['image']['store']} (ids not comparable)")
    for key in sorted(old["host"].keys() | new["host"].keys()):
        if old["host"].get(key) != new["host"].get(key):
            notes.append(f"host {key}: {_short(old['host'].get(key))} → {_short(new['host'].get(key))}")
    return notes


def verify(client: Any, lock: dict[str, Any], image_ref: str | None = None) -> tuple[list[Difference], list[str]]:
    ref = image_ref or lock["provenance"]["image"]["tag"]
    actual = lock_for_image(client, ref)
    return compare(lock, actual), provenance_notes(lock, actual)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        if not value and prefix:
            out[prefix] = {}
        return out
    return {prefix: value}


def _short(value: Any) -> str:
    text = "(absent)" if value is None else json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."


# --- rebuilding ------------------------------------------------------------------------------------------


def plan_from_lock(lock: dict[str, Any], *, pytorch_src: Path | None = None, triton_src: Path | None = None,
                   overlay_dir: Path | None = None) -> tuple[BuildPlan, list[str]]:
    """A BuildPlan with every commit or wheel pin, the Triton pin, the base and the store items taken from the
    lock; also the input fields that differ from the lock's (e.g. the templates changed since), which the caller
    should show. With a ``store`` section nothing is read from a clone: the sources are the locked archives."""
    prov = lock["provenance"]
    recipe_path = Path(prov["recipe_path"] or f"{lock['recipe']['name']}.toml")
    recipe = parse_recipe(tomllib.loads(prov["recipe_toml"]), recipe_path)
    if recipe.base_image is None or recipe.base_image.digest != lock["base"]["digest"]:
        raise UserError(f"--lock: the recipe text in the lock does not pin the locked base {lock['base']['digest']}")
    clones = prov.get("clones", {})
    overlay = None
    if prov.get("overlay_patch"):
        overlay_dir = overlay_dir or Path.cwd()
        overlay = overlay_dir / "overlay.patch"
        atomic_io.write_text(overlay, prov["overlay_patch"])
    triton_patch = None
    if prov.get("triton_patch"):
        triton_patch = (overlay_dir or Path.cwd()) / "triton.patch"
        atomic_io.write_text(triton_patch, prov["triton_patch"])
    used = read_used_items(lock.get("store") or [], "--lock: store")
    locked = tuple(u for u in used if u.used_as != BASE_USE) or None
    base_item = next((u.item for u in used if u.used_as == BASE_USE), None)
    sources = lock["sources"]
    max_jobs = int(lock["build"]["args"]["MAX_JOBS"]) if "MAX_JOBS" in lock["build"]["args"] else None
    common: dict[str, Any] = {"overlay": overlay, "max_jobs": max_jobs, "recipe_text": prov["recipe_toml"],
                              "locked": locked, "base_item": base_item,
                              "pytorch_first": lock["build"].get("layers") == PYTORCH_FIRST,
                              "triton_patch": triton_patch}
    if "wheel" in sources.get("pytorch", {}):
        plan = plan_build(recipe.with_wheels(*(_locked_wheel(sources, key) for key in ("pytorch", "triton"))),
                          **common)
    else:
        triton = sources["triton"]
        pin = TritonPin(commit=triton["commit"], source=triton["pin_source"])
        if locked is not None:
            trees = (SourceTree("pytorch", pytorch_src or _existing(clones.get("pytorch")),
                                sources["pytorch"]["commit"]),
                     SourceTree("triton", triton_src or _existing(clones.get("triton")), triton["commit"],
                                install_dir=triton.get("install_dir", "."), llvm=triton.get("llvm")))
            plan = plan_build(recipe, trees=trees, pin=pin, merge_base=sources["pytorch"].get("merge_base"),
                              **common)
        else:  # a lock from before the store: the clones must still hold the commits
            plan = plan_build(recipe, pytorch_src=pytorch_src or _existing(clones.get("pytorch")),
                              triton_src=triton_src or _existing(clones.get("triton")),
                              pytorch_ref=sources["pytorch"]["commit"], pin=pin,
                              merge_base=sources["pytorch"].get("merge_base"), **common)
    for name, sha in lock["patches"].items():
        current = next((p.sha256 for p in plan.patches if p.name == name), None)
        if current != sha:
            raise UserError(f"--lock: patch {name} changed since the lock (sha256 {sha[:12]} locked, "
                            f"{(current or 'missing')[:12]} now); restore it to rebuild exactly")
    skipped = ("contents", "store")
    drift = [d.field for d in compare({k: lock.get(k) for k in COMPARED if k not in skipped},
                                      {k: plan.inputs().get(k) for k in COMPARED if k not in skipped})]
    return plan, drift


def _locked_wheel(sources: dict[str, Any], key: str) -> WheelPin | None:
    entry = sources.get(key)
    if not entry:
        return None
    try:
        return WheelPin(requirement=str(entry["wheel"]), sha256=str(entry["sha256"]))
    except (KeyError, TypeError):
        raise UserError(f"--lock: sources.{key} has no wheel and sha256") from None


def _existing(path: str | None) -> Path | None:
    return Path(path) if path and os.path.isdir(path) else None


# --- build + lock, as the tasks use them -----------------------------------------------------------------


@dataclass(frozen=True)
class BuildOutcome:
    result: BuildResult
    lock_path: Path


def build_and_lock(plan: BuildPlan, client: Any, images_dir: Path, *, lock_path: Path | None = None,
                   store: Store | None = None, save_base: bool = False, pull: bool = False, nocache: bool = False,
                   force: bool = False, emit: Callable[[str], None] = print) -> BuildOutcome:
    """Build (or find) the plan's image, then write its lock next to the build log unless told where.

    ``save_base``: ``docker save`` the base image into the store and list it in the lock, so a rebuild on a
    machine without it loads it from there (a rebuild keeps the saved base its lock lists).
    """
    store = store or Store.at()
    out_dir = images_dir / f"{plan.recipe.name}-{plan.inputs_hash[:12]}"
    result = build_image(plan, client, store=store, log_path=out_dir / "build.log", pull=pull, nocache=nocache,
                         force=force, emit=emit)
    base_entry = None
    if save_base:
        base = resolve_base(client, plan.base, pull, emit, store=store, saved=plan.base_item)
        name = f"base-{base.image_id.split(':')[-1][:12]}.tar"
        base_entry = UsedItem(store.add_image(client, base.image_id, name=name, emit=emit), BASE_USE).to_json()
    elif plan.base_item is not None:
        base_entry = UsedItem(plan.base_item, BASE_USE).to_json()
    lock_path = lock_path or out_dir / LOCK_JSON
    current = _read_quietly(lock_path)
    if not result.built and _locked_id(current) == result.image_id and (
            base_entry is None or base_entry in current.get("store", [])):
        emit(f"lock {lock_path} is up to date")
    else:
        lock = lock_for_image(client, result.image_id)
        if base_entry is not None:
            lock["store"].append(base_entry)
        write_lock(lock, lock_path)
        emit(f"wrote {lock_path}")
    return BuildOutcome(result=result, lock_path=lock_path)


def _read_quietly(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _locked_id(lock: dict[str, Any]) -> str | None:
    try:
        return lock["provenance"]["image"]["id"]
    except (KeyError, TypeError):
        return None
