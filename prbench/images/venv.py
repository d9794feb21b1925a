"""Virtual environments as the sides of a comparison (recipes with ``runner = "venv"``): pinned wheels without Docker.

A venv side is ``python -m venv`` of the interpreter compare runs (``--python``), into which pip installs, with no
index and every file checked against its sha256, exactly the store's wheels for the side's pins and the recipe's
``[pip] extra``: the same wheelhouse as an image's (``prbench.images.build_context.wheel_groups``: hashed
requirements, the requirement that brought each wheel), checked by the same ``docker/check_environment.py``.

Its directory ``<runs>/venvs/<recipe>-<hash12>/`` is named by the hash of its inputs (`VenvPlan.inputs`: the recipe,
the interpreter, the wheel pins, the recipe's env): a second comparison with the same inputs finds it and builds
nothing. Our stages are not installed in it (they run from this checkout on PYTHONPATH,
``prbench.runners.local.LocalRunner``), so our code is not among its inputs.

A venv has no labels: ``venv.json`` beside it records what it was built from (inputs, store items, recipe text),
written before ``lock.json``, whose presence marks a finished venv. The lock has the shape of an image's
(``prbench.images.image_lock``: the same compared fields and ``installed``) with ``runner: "venv"``, so
``invoke rebuild --lock`` recreates the venv offline from the store, and ``invoke verify`` reads the venv's record
and its Python's view of what is installed and compares them field by field.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import prbench
from foundation import atomic_io
from foundation.errors import UserError
from foundation.formats.run_layout import LOCK_JSON
from prbench.images.build import CHECK_SCRIPT
from prbench.images.build_plan import UsedItem, read_used_items
from prbench.images.content_store import Store, WheelTarget
from prbench.images.image_lock import (
    FACTS_SCRIPT,
    LOCK_VERSION,
    Difference,
    compare,
    cpu_facts,
    cpu_model,
    gpu_names,
    installed_distributions,
    read_lock,
    write_lock,
)
from prbench.images.wheels import BROUGHT_BY, contents_block, python_wheel_target, recipe_contents
from prbench.sides.recipes import UNPINNED, Recipe, WheelPin, parse_recipe

VENV_RUNNER = "venv"
VENVS_DIR = "venvs"  # under the runs directory: one folder per venv, named by its inputs
RECORD = "venv.json"  # beside the venv: what it was built from (a venv's labels)
ENV_DIR = "env"  # the virtual environment itself, inside the venv's directory
INSTALL_LOG = "install.log"
_INSTALLER = "python -m venv, then pip install --no-index --require-hashes per wheel group"

Emit = Callable[[str], None]


@dataclass(frozen=True)
class Interpreter:
    """The Python a venv is made from: its path, full version and wheel tags."""

    python: str
    version: str  # "3.11.7"
    target: WheelTarget


def interpreter(python: str) -> Interpreter:
    target = python_wheel_target(python)
    proc = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                          text=True, check=False)
    return Interpreter(python, proc.stdout.strip() or target.python_version, target)


@dataclass(frozen=True)
class VenvPlan:
    """Everything a venv side is made of, resolved: the recipe with the side's wheel pins, the interpreter, and (a
    rebuild) exactly the store items of a lock."""

    recipe: Recipe
    recipe_text: str
    base: Interpreter
    locked: tuple[UsedItem, ...] | None = None

    def inputs(self) -> dict[str, Any]:
        """The compared inputs of the lock (the fields an image's lock has), hashed into the venv's name."""
        target = self.base.target
        return {
            "recipe": {"name": self.recipe.name, "hash": self.recipe.content_hash()},
            "base": {"python": self.base.version, "implementation": target.implementation, "abi": target.abi,
                     "platform": target.platforms[0]},
            "sources": {key: {"wheel": pin.requirement, "sha256": pin.sha256}
                        for key, pin in (("pytorch", self.recipe.pytorch_wheel), ("triton", self.recipe.triton_wheel))
                        if pin is not None},
            "patches": {},
            "overlay_sha256": None,  # a PR's patch runs as an overlay on the venv (the side's lock names it)
            "build": {"installer": _INSTALLER},
            "env": dict(sorted(self.recipe.env.items())),
        }

    @property
    def inputs_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.inputs(), sort_keys=True).encode()).hexdigest()

    def directory(self, venvs_dir: Path) -> Path:
        return venvs_dir / f"{self.recipe.name}-{self.inputs_hash[:12]}"


def plan(recipe: Recipe, python: str, *, recipe_text: str | None = None,
              locked: tuple[UsedItem, ...] | None = None) -> VenvPlan:
    if not recipe.is_venv:
        raise UserError(f"--recipe {recipe.name}: not a venv recipe (runner = '{recipe.runner}')")
    unpinned = [pin.requirement for pin in recipe.wheel_pins if pin.sha256 == UNPINNED]
    assert not unpinned, f"a side's wheels are pinned when it is planned: {unpinned}"
    text = recipe_text if recipe_text is not None else recipe.path.read_text(encoding="utf-8")
    return VenvPlan(recipe, text, interpreter(python), locked)


def pinned(recipe: Recipe, store: Store, python: str) -> Recipe:
    """``recipe`` with each wheel it leaves without a sha256 pinned by the store's wheel of that version for
    ``python`` (fetched first when the store has none: `prbench.images.wheels.resolve_wheel_spec`)."""
    from prbench.images.wheels import resolve_wheel_spec

    def pin(section: str, wheel: WheelPin | None) -> WheelPin | None:
        if wheel is None or wheel.sha256 != UNPINNED:
            return wheel
        return resolve_wheel_spec(wheel.requirement, f"{recipe.path}: key '{section}.wheel'", section, store,
                                  lambda: python_wheel_target(python))

    return recipe.with_wheels(pin("pytorch", recipe.pytorch_wheel), pin("triton", recipe.triton_wheel))


@dataclass(frozen=True)
class VenvOutcome:
    directory: Path
    python: Path  # the venv's interpreter: the stages run with it
    built: bool
    lock_path: Path


def venv_python(directory: Path) -> Path:
    return directory / ENV_DIR / "bin" / "python"


def build_and_lock(plan: VenvPlan, store: Store, venvs_dir: Path, *, lock_path: Path | None = None,
                   overlay: tuple[str, str] | None = None, emit: Emit = print) -> VenvOutcome:
    """Build the plan's venv unless it is there (finished: its lock written), then write the lock where asked.

    ``overlay`` (sha256, patch text): the side's PR as a Python overlay on the venv's torch, named in the side's
    lock (not in the venv's own, which a plain side shares)."""
    directory = plan.directory(venvs_dir)
    own_lock = directory / LOCK_JSON
    # Two compares of one venv build it once: the second waits for the first, then finds it.
    with store.held(f"venv-{directory.name}", f"waiting for another process building the venv {directory}", emit):
        built = not own_lock.is_file()
        if built:
            _build(plan, store, directory, emit)
            write_lock(lock_for_venv(directory), own_lock)
        else:
            emit(f"venv {directory} is present; nothing to build")
    lock = read_lock(own_lock)
    if overlay is not None:
        lock["overlay_sha256"], lock["provenance"]["overlay_patch"] = overlay
    target = lock_path or own_lock
    if target != own_lock:
        write_lock(lock, target)
    emit(f"wrote {target}" if built or target != own_lock else f"lock {target} is up to date")
    return VenvOutcome(directory, venv_python(directory), built, target)


def _build(plan: VenvPlan, store: Store, directory: Path, emit: Emit) -> None:
    """A fresh venv: the interpreter's venv, each wheel group installed from a wheelhouse taken from the store, the
    installed versions checked; a venv left half-built by an interrupted build is removed first."""
    from prbench.images.build_context import wheel_groups

    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    for line in contents_block(f"venv {directory}", recipe_contents(store, plan.recipe, plan.base.target)):
        emit(line)
    emit(f"building venv {directory} with {plan.base.python} (Python {plan.base.version})")
    log = directory / INSTALL_LOG
    with tempfile.TemporaryDirectory(prefix="wheelhouse-", dir=directory) as tmp:
        house = Path(tmp)
        used = wheel_groups(plan.recipe, plan.locked, store, house, lambda: plan.base.target, emit)
        _step(log, [plan.base.python, "-m", "venv", str(directory / ENV_DIR)], "create the venv")
        python = str(venv_python(directory))
        for group in ("pytorch", "extra"):
            wheels = house / "wheels" / group
            _step(log, [python, "-m", "pip", "install", "--no-index", "--disable-pip-version-check",
                        "--find-links", str(wheels), "--require-hashes", "-r", str(wheels / "requirements.txt")],
                  f"install the {group} wheels")
        check = _step(log, [python, str(CHECK_SCRIPT), *check_arguments(plan.recipe, house / "wheels")],
                      "check the installed wheels")
        for line in check.splitlines():
            emit(line)
    atomic_io.write_json(directory / RECORD, {
        "inputs": plan.inputs(), "store": [u.to_json() for u in used], "recipe_toml": plan.recipe_text,
        "recipe_path": str(plan.recipe.path.resolve()), "base_python": plan.base.python})
    emit(f"built venv {directory}; log: {log}")


def check_arguments(recipe: Recipe, wheels: Path) -> list[str]:
    """``check_environment.py``'s arguments for a wheel side (as an image of wheels runs it): exactly the pinned
    versions, one Triton where Triton is pinned, a Triton only where the pinned wheels require it."""
    args = [arg for pin in recipe.wheel_pins for arg in ("--version", f"{pin.name}=={pin.version}")]
    if len(recipe.wheel_pins) > 1:
        args.append("--one-triton")
    args += ["--keep-tritons", str(wheels / "pytorch" / BROUGHT_BY)]
    if recipe.pip_extra:
        args += ["--brought-by", str(wheels / "extra" / BROUGHT_BY)]
    return args


def _step(log: Path, argv: list[str], what: str) -> str:
    """Run one build step, its output appended to the log; a failure names the step, its last line and the log.

    pip reads nothing but its command line, as in an image: no configuration file and no ``PIP_*`` variable of
    this machine (an index, find-links or constraints there would make another machine's venv differ)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False, env=env)
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0:
        last = ([line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()] or ["no output"])[-1]
        raise UserError(f"venv: cannot {what}: {last.strip()[:300]}; log: {log}")
    return proc.stdout


# --- the lock ---------------------------------------------------------------------------------------------


def lock_for_venv(directory: Path) -> dict[str, Any]:
    """A venv's lock: its record (inputs, store items, recipe) and what its Python sees installed."""
    record = _record(directory)
    contents = venv_contents(venv_python(directory))
    return {
        "lock_version": LOCK_VERSION,
        "runner": VENV_RUNNER,
        **record["inputs"],
        "store": record["store"],
        "contents": contents,
        "installed": installed_distributions(contents["pip"], record["store"], {}),
        "provenance": {
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "prbench_version": prbench.__version__,
            "venv": {"path": str(directory.resolve()), "base_python": record.get("base_python")},
            "recipe_toml": record["recipe_toml"],
            "recipe_path": record["recipe_path"],
            "clones": {},
            "overlay_patch": None,
            # What the report's environment line names (the CPU, its vector ISA, cores, load), as a local side's.
            "host": {"cpu": cpu_model(), **cpu_facts(), "gpus": gpu_names()},
        },
    }


def _record(directory: Path) -> dict[str, Any]:
    path = directory / RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(f"venv {directory}: no readable {RECORD} (not a venv prbench built, or an unfinished one); "
                        "rebuild it with invoke rebuild --lock") from None
    if not isinstance(record, dict) or not {"inputs", "store", "recipe_toml", "recipe_path"} <= record.keys():
        raise UserError(f"venv {directory}: {RECORD} lacks inputs, store or the recipe; rebuild it")
    return record


def venv_contents(python: Path) -> dict[str, Any]:
    """What the venv's Python reads: its version, the installed distributions, the host's ROCm/CUDA versions (the
    venv runs on them). The host's Debian packages are not the venv's, and its paths are provenance."""
    proc = subprocess.run([str(python), "-c", FACTS_SCRIPT], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise UserError(f"venv {python}: cannot read what it has installed (exit {proc.returncode})")
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"python": {"version": facts["python"]["version"]}, "pip": facts["pip"]["packages"],
            "pip_via": facts["pip"]["via"], "versions": facts["versions"]}


def is_venv_lock(lock: dict[str, Any]) -> bool:
    return lock.get("runner") == VENV_RUNNER


def verify(lock: dict[str, Any]) -> tuple[list[Difference], list[str]]:
    """The venv the lock names (``provenance.venv.path``) against the lock, field by field."""
    directory = Path(lock["provenance"]["venv"]["path"])
    if not venv_python(directory).exists():
        raise UserError(f"verify: the venv {directory} the lock names is not there; rebuild it with "
                        "invoke rebuild --lock")
    actual = lock_for_venv(directory)
    # A PR's overlay is applied when its stages run, not installed: the lock names it, the venv cannot.
    actual["overlay_sha256"] = lock.get("overlay_sha256")
    notes = [f"host {key}: {lock['provenance']['host'].get(key)} → {actual['provenance']['host'][key]}"
             for key in actual["provenance"]["host"] if key != "load_1min"
             and lock["provenance"]["host"].get(key) != actual["provenance"]["host"][key]]
    return compare(lock, actual), notes


def plan_from_lock(lock: dict[str, Any], python: str | None = None) -> tuple[VenvPlan, list[str]]:
    """A VenvPlan with the lock's recipe text, wheel pins and store items, for the interpreter it was built with
    (or ``python``); also the input fields that differ from the lock's, which the caller shows."""
    prov = lock["provenance"]
    recipe = parse_recipe(tomllib.loads(prov["recipe_toml"]), Path(prov["recipe_path"] or
                                                                    f"{lock['recipe']['name']}.toml"))
    pins = []
    for key in ("pytorch", "triton"):
        entry = lock["sources"].get(key)
        pins.append(WheelPin(str(entry["wheel"]), str(entry["sha256"])) if isinstance(entry, dict) else None)
    base = python or (prov.get("venv") or {}).get("base_python") or sys.executable
    used = tuple(read_used_items(lock.get("store") or [], "--lock: store"))
    found = plan(recipe.with_wheels(pins[0], pins[1]), base, recipe_text=prov["recipe_toml"], locked=used)
    if found.base.version != lock["base"].get("python"):
        raise UserError(f"--lock: the venv was built with Python {lock['base'].get('python')}; {base} is "
                        f"Python {found.base.version}")
    inputs = found.inputs()
    drift = [d.field for d in compare({k: lock.get(k) for k in inputs}, inputs)]
    return found, drift
