"""The Docker path of the main job on a CPU-only machine: ``invoke compare --recipe cpu-docker`` builds the base
image from the pinned torch wheel and the PR as an overlay layer on it, runs every stage in containers without
network, writes the report on the host from the two images' locks, and builds nothing the second time.

The wheels come from the store only: pip may not reach any index during these tests (``PIP_NO_INDEX``). The
session's own store (tests never build from the user's) is seeded with the wheels of the user's store, which CI
fills beforehand with ``invoke store fetch --recipe`` (see .ci/run); elsewhere the tests skip until it holds them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from prbench.images.content_store import DEFAULT_STORE, Store
from prbench.images.wheels import image_wheel_target, recipe_contents
from prbench.sides.recipes import load_recipe
from tests.support.docker_support import (
    PROJECT,
    VEC_ISA_OK,
    base_image_id,
    invoke,
    require_engine,
    skip_unless_ci,
    stage_containers,
)

# Under ``pytest -n``, the module's tests share one worker (and its module fixtures: one compare, one image build);
# its images' tags are its own, so it may run beside the other docker tests.
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker-compare")]

EXAMPLE = PROJECT / "examples" / "cpu-prefer-256bit-vectors.patch"
SHIPPED = PROJECT / "recipes" / "cpu-docker.toml"
# One tiny model, the quickest to compile: this module proves the Docker path (images, locks, containers, every
# stage); several models, and kernels shared between them, are the suite's and the kernel stage's tests.
MODELS = "DistilBertForMaskedLM"
OFFLINE = {"PIP_NO_INDEX": "1"}


@pytest.fixture(scope="module")
def client():
    return require_engine()


@pytest.fixture(scope="module")
def recipe(tmp_path_factory: pytest.TempPathFactory, client) -> Path:
    """The shipped recipe, pinned to this machine's base image (a local base is pinned by its image id, which
    ``docker import`` makes anew on every machine), with the tests' Inductor ISA setting in its environment."""
    text = SHIPPED.read_text(encoding="utf-8")
    text = re.sub(r'(?m)^digest = "sha256:[0-9a-f]{64}"', f'digest = "{base_image_id(client)}"', text)
    # The ISA probe the tests skip on the host (tests/conftest.py) is skipped in the stage containers too.
    text = text.replace("[env]\n", f'[env]\n{VEC_ISA_OK} = "{os.environ[VEC_ISA_OK]}"\n', 1)
    path = tmp_path_factory.mktemp("recipes") / "cpu-docker.toml"
    path.write_text(text, encoding="utf-8")
    _wheels_from_the_users_store(path, client)
    fetched = invoke("store", "fetch", "--recipe", str(path), env=OFFLINE)
    if fetched.returncode != 0:
        skip_unless_ci(f"the store lacks the wheels of {SHIPPED.name} and pip may not download them during tests: "
                       f"run `invoke store fetch --recipe` on a copy pinned to this machine's base "
                       f"({(fetched.stderr.strip().splitlines() or ['no output'])[-1][:200]})")
    return path


def _wheels_from_the_users_store(recipe: Path, client) -> None:
    """Copy the wheels a build of ``recipe`` takes from the user's store (read only) into the session's: its pins and
    ``[pip] extra`` with their dependencies, each hashed again on the way. Only those: a user's store may hold
    gigabytes of other recipes' wheels (CUDA's), which every session would hash and copy for nothing."""
    users, session = Store(DEFAULT_STORE.expanduser()), Store.at()
    target = image_wheel_target(client, base_image_id(client))
    for item in recipe_contents(users, load_recipe(str(recipe), recipe.parent), target).closure.items():
        if users.object_path(item.sha256).is_file():
            session.add_file(users.path(item), kind=item.kind, name=item.name, origin=item.origin)


# Three rounds, the fewest an interval over rounds accepts: each side's round files and an interval; more would
# prove nothing more here.
EXAMPLE_RUN, WRONG_RUN = "docker-e2e", "docker-wrong"


def _compare_args(recipe: Path, runs: Path, run_id: str = EXAMPLE_RUN, pr: Path = EXAMPLE) -> list[str]:
    return ["compare", "--recipe", str(recipe), "--base=installed", f"--pr={pr}", "--models", MODELS,
            "--runs-dir", str(runs), "--run", run_id, "--iterations", "10", "--warmup", "3",
            "--kernel-iterations", "10", "--rounds", "3", "--passes", "1",
            *(["--profile"] if run_id == EXAMPLE_RUN else [])]  # the second user's run needs no profile stage


def _compare(recipe: Path, runs: Path):
    return invoke(*_compare_args(recipe, runs), env=OFFLINE, timeout=1800)


WRONG = PROJECT / "examples" / "wrong-numerics.patch"
# A hang guard, not a measure: the two compares at once ran past 35 min on the 2-core development VM under a load
# of 18-24 (other jobs); one compare alone took 10 min there at a load near 10, 27 min near 20.
TOGETHER_S = 5400


@dataclass(frozen=True)
class Together:
    runs: Path
    done: dict[str, subprocess.CompletedProcess]  # each compare's exit and output
    leftover: dict[str, list]  # each run's stage containers, looked for as soon as it ended


@pytest.fixture(scope="module")
def together(tmp_path_factory: pytest.TempPathFactory, recipe: Path, client) -> Together:
    """The module's compare of the example PR and, at the same time on the same engine, store and runs directory,
    a second user's compare of a PR that computes wrong results. Each test of the example's run below asserts
    what that run shows alone, so the one pair of compares proves the Docker path and two users at once."""
    runs, logs = tmp_path_factory.mktemp("runs"), tmp_path_factory.mktemp("logs")
    running = {run_id: _start(recipe, runs, run_id, pr, logs) for run_id, pr in ((EXAMPLE_RUN, EXAMPLE),
                                                                                 (WRONG_RUN, WRONG))}
    done: dict[str, subprocess.CompletedProcess] = {}
    leftover: dict[str, list] = {}
    deadline = time.monotonic() + TOGETHER_S
    try:
        while running and time.monotonic() < deadline:
            for run_id, process in list(running.items()):
                if process.poll() is None:
                    continue
                del running[run_id]
                done[run_id] = subprocess.CompletedProcess(process.args, process.returncode,
                                                           (logs / f"{run_id}.out").read_text(),
                                                           (logs / f"{run_id}.err").read_text())
                # Looked at as soon as it ends, while the other may still run stages in the same base image.
                leftover[run_id] = _leftover_containers(client, runs / run_id) if process.returncode == 0 else []
            time.sleep(1)
        assert not running, f"still running after {TOGETHER_S} s: {sorted(running)}"
    finally:
        for process in running.values():  # a failed test leaves no compare behind (SIGTERM stops its container)
            process.terminate()
            process.wait(timeout=120)
    return Together(runs, done, leftover)


@pytest.fixture(scope="module")
def compared(together: Together):
    return together.runs / EXAMPLE_RUN, together.done[EXAMPLE_RUN]


def _leftover_containers(client, run: Path) -> list:
    """Stage containers of this run in its two images (other compares run stages of the same images meanwhile)."""
    locks = json.loads((run / "lock.json").read_text())
    images = {locks[side]["provenance"]["image"]["id"] for side in ("base", "pr")}
    return [c for image in sorted(images) for c in stage_containers(client, image, run)]


def test_compare_through_docker_writes_a_report_from_both_images(compared, client) -> None:
    run, proc = compared
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    report = (run / "report" / "report.md").read_text(encoding="utf-8")
    assert "**Verdict:**" in report
    manifest = json.loads((run / "manifest.json").read_text())
    for key in [f"{side}/{stage}" for side in ("base", "pr")
                for stage in ("suite", "organize", "models", "kernels", "profile")
                ] + [f"pair/{kind}-round-{n}" for kind in ("models", "kernels") for n in (1, 2)] + ["report"]:
        assert manifest["stages"][key]["status"] == "done", key
    # one side per image: each round wrote one file per side
    assert sorted(p.name for p in (run / "pair" / "kernels").glob("round-001-*.json")) == [
        "round-001-base.json", "round-001-pr.json"]
    assert (run / "base" / "profiles" / "profile_index.csv").is_file()
    assert _leftover_containers(client, run) == []

    locks = json.loads((run / "lock.json").read_text())
    base, pr = locks["base"], locks["pr"]
    torch_pin = base["sources"]["pytorch"]
    assert torch_pin == pr["sources"]["pytorch"]
    assert torch_pin["wheel"] == "torch==2.13.0+cpu" and len(torch_pin["sha256"]) == 64
    assert base["contents"]["pip"]["torch"] == "2.13.0+cpu"
    assert re.fullmatch(r"[0-9a-f]{40}", base["contents"]["versions"]["torch_git"])  # read inside the image
    assert base["build"]["network_mode"] == "none"
    wheels = {entry["name"]: entry["sha256"] for entry in base["store"] if entry["kind"] == "wheel"}
    assert wheels[next(n for n in wheels if n.startswith("torch-2.13.0+cpu"))] == torch_pin["sha256"]
    assert any(name.startswith("transformers-") for name in wheels)
    # the PR is the base image plus an overlay layer: another image, the same wheels
    assert pr["overlay_sha256"] and base["overlay_sha256"] is None
    assert pr["provenance"]["image"]["id"] != base["provenance"]["image"]["id"]

    # the report's environment table (collapsed under the one-line environment) shows both images and the wheel
    # checksums
    environment = report.split("<summary>Environment: every setting of both sides</summary>", 1)[1].split(
        "</details>", 1)[0]
    for side in (base, pr):
        assert side["provenance"]["image"]["id"] in environment
    assert base["base"]["digest"] in environment
    assert f"| lock.torch wheel sha256 | {torch_pin['sha256']} | {torch_pin['sha256']} |" in environment


def test_the_pr_image_runs_the_patched_inductor(compared, client) -> None:
    run, proc = compared
    assert proc.returncode == 0
    pr_image = json.loads((run / "pr" / "lock.json").read_text())["provenance"]["image"]["id"]
    code = ("import importlib.util, pathlib; "
            "print(pathlib.Path(importlib.util.find_spec('torch._inductor.cpu_vec_isa').origin).read_text())")
    source = client.containers.run(pr_image, ["python3", "-c", code], remove=True, network_mode="none").decode()
    assert "Prefer 256-bit vectors when nothing is requested" in source


def test_a_second_run_builds_nothing_and_redoes_no_stage(compared, recipe: Path, client) -> None:
    run, first = compared
    assert first.returncode == 0
    again = _compare(recipe, run.parent)

    assert again.returncode == 0, again.stderr[-3000:]
    assert "Step 1/" not in again.stdout
    assert again.stdout.count("nothing to build") == 2
    stages = [k for k in json.loads((run / "manifest.json").read_text())["stages"] if k != "report"]
    for key in stages:
        assert f"{key}: done earlier with the same inputs, skipped" in again.stdout, key
    assert _leftover_containers(client, run) == []


def _start(recipe: Path, runs: Path, run_id: str, pr: Path, logs: Path) -> subprocess.Popen[bytes]:
    """``invoke compare`` started, not waited for; its output goes to files (two pipes read one after the other
    would stall the second process once its pipe filled, and the two would no longer run at once)."""
    with open(logs / f"{run_id}.out", "wb") as out, open(logs / f"{run_id}.err", "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "invoke", *_compare_args(recipe, runs, run_id, pr)],
                                cwd=PROJECT, env={**os.environ, **OFFLINE}, stdout=out, stderr=err)


def _stage_times(run: Path) -> list[tuple[float, float]]:
    stages = json.loads((run / "manifest.json").read_text())["stages"].values()
    return [(datetime.fromisoformat(s["started"]).timestamp(), datetime.fromisoformat(s["finished"]).timestamp())
            for s in stages if s["started"] and s["finished"]]


def _what_the_patch_did(run: Path) -> dict:
    """The parts of a report's verdict its timings cannot move: which kernels changed their code, and whether the
    PR computes the base's results (the speed verdicts of three rounds on a shared 2-core machine can)."""
    summary = json.loads((run / "report" / "summary.json").read_text())
    kernels, numerics = summary["kernels"], summary["numerics"]
    return {"kernels": {key: kernels[key] for key in ("code_changed", "code_identical", "only_base", "only_pr")},
            "numerics": {family: {key: numerics[family][key] for key in ("compared", "passed", "failed")}
                         for family in ("models", "kernels")}}


def test_two_compares_of_different_prs_at_once_share_one_engine_and_one_store(together: Together, client) -> None:
    """Two users of one machine compare two PRs at the same time, with one Docker engine, one store (the session's)
    and one runs directory: both finish, each report says what it says when its compare runs alone (the example's:
    the tests above; the wrong PR's: the verdict tests/test_numerics_example.py reads from its run alone), the
    store still hashes right, and neither run removed an image or a container of the other."""
    for run_id, proc in together.done.items():
        assert proc.returncode == 0, run_id + proc.stdout[-4000:] + proc.stderr[-3000:]
        assert together.leftover[run_id] == [], run_id
    example, wrong = together.runs / EXAMPLE_RUN, together.runs / WRONG_RUN
    # They ran at the same time: a stage of one overlaps a stage of the other (no lock made them take turns).
    assert any(a0 < b1 and b0 < a1 for a0, a1 in _stage_times(example) for b0, b1 in _stage_times(wrong))

    example_report = (example / "report" / "report.md").read_text(encoding="utf-8")
    assert example_report.split("\n\n")[1].startswith("**Verdict:** Models")
    assert _what_the_patch_did(example)["numerics"]["models"]["failed"] == 0
    wrong_report = (wrong / "report" / "report.md").read_text(encoding="utf-8")
    assert wrong_report.split("\n\n")[1].startswith(
        "**Verdict:** numerics **FAILED**: 1 of 1 model(s) compute other results")
    assert _what_the_patch_did(wrong)["numerics"]["models"]["failed"] == 1

    verified = invoke("store", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert re.search(r"all [0-9]+ item\(s\) hash to their names", verified.stdout)
    store = Store.at()
    assert list((store.root / "incoming").iterdir()) == []  # no writer's staged file left behind
    for run in (example, wrong):  # every image either used is still there
        locks = json.loads((run / "lock.json").read_text())
        for side in ("base", "pr"):
            assert client.images.get(locks[side]["provenance"]["image"]["id"])
