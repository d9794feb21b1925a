"""A whole ``invoke compare`` of a Triton-only A/B on the CPU: ``invoke compare --recipe <cpu docker recipe>
--triton-pr B`` with PyTorch the same on both sides. The report's headline says that no Triton code was compared
(Inductor generates C++ kernels on the CPU) and the run's lock.json names both Triton commits and the LLVM each pins.

Everything a user's run does is real here (the door, the plan of the A/B from stand-in clones with the real layout
of the files read, each side's image plan, the run directory, every stage on real torch, the report) except the
engine: each side's image is the one the plan names, its lock written from the plan's inputs (what the image's
labels carry), and its stages run on this interpreter's torch as the local runner runs them, since no image of
a real torch can be built without the network. The image builds themselves are tests/test_triton_ab.py's docker
test.
"""

from __future__ import annotations

import json
import sys

import pytest

from prbench.compare import doctor, driver
from prbench.executors import RunnerSpec
from prbench.images.build import plan_build
from prbench.images.image_lock import LOCK_VERSION, read_lock, write_lock
from prbench.runners.local import LocalRunner
from tests.support.cli_support import invoke_in_process
from tests.support.docker_support import commit_all, make_pytorch, make_triton, write_recipe
from tests.support.triton_trees import LLVM_HASH_3_5, LLVM_INFO_MAIN

MODEL = "ElectraForCausalLM"
FLAGS = ("--models", MODEL, "--iterations", "10", "--warmup", "3", "--kernel-iterations", "10", "--rounds", "3",
         "--passes", "2")


def _image_as_planned(side, request, compare_plan, run):
    """The side's image as the driver plans it, its lock from the plan's inputs, its stages on this torch."""
    image = plan_build(request.recipe, pytorch_src=request.pytorch_src, triton_src=request.triton_src,
                       pytorch_ref=side.pytorch_ref, pin=side.triton,
                       pytorch_first=compare_plan.triton_ab is not None)
    lock = {"lock_version": LOCK_VERSION, **image.inputs(), "store": [], "contents": {"pip": {}, "image_env": {}},
            "provenance": {"recipe_path": "", "recipe_toml": "", "clones": {}, "overlay_patch": None,
                           "image": {"tag": image.tag, "id": "stand-in: not built"}, "host": {}}}
    path = run.layout.variant(side.name).lock
    write_lock(lock, path)
    return (LocalRunner(python=sys.executable), read_lock(path),
            RunnerSpec("local", platform=request.recipe.platform, python=sys.executable))


@pytest.mark.integration
def test_a_triton_only_ab_on_the_cpu_says_no_triton_code_was_compared_and_locks_both_tritons(tmp_path, monkeypatch):
    triton_repo, _ = make_triton(tmp_path / "standin-triton")
    (tmp_path / "standin-triton" / "cmake").mkdir()
    (tmp_path / "standin-triton" / "cmake" / "llvm-hash.txt").write_text(LLVM_HASH_3_5)
    old = commit_all(triton_repo, "3.5: LLVM pinned in llvm-hash.txt")
    (tmp_path / "standin-triton" / "cmake" / "llvm-hash.txt").unlink()
    (tmp_path / "standin-triton" / "cmake" / "llvm-info.json").write_text(json.dumps(LLVM_INFO_MAIN) + "\n")
    new = commit_all(triton_repo, "main: LLVM pinned in llvm-info.json")
    _, pytorch = make_pytorch(tmp_path / "standin-pytorch", old)
    recipe = write_recipe("bookworm-cpu.toml", tmp_path, digest="sha256:" + "ab" * 32, pytorch_commit=pytorch)
    monkeypatch.setattr(driver, "_environment", _image_as_planned)
    monkeypatch.setattr(driver, "_no_containers_left", lambda run, request, console: _Nothing())
    monkeypatch.setattr(doctor, "preflight", lambda inputs, console, machine=None: None)  # the engine's checks

    runs = tmp_path / "runs"
    result = invoke_in_process("compare", "--recipe", str(recipe), "--triton-pr", new[:10], *FLAGS,
                               "--runs-dir", str(runs), "--run", "triton-ab")

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (f"a Triton A/B: Triton {old[:12]} (LLVM {LLVM_HASH_3_5[:12]}) → {new[:12]} (LLVM "
            f"{LLVM_INFO_MAIN['llvm_hash'][:12]})") in " ".join(result.stdout.split())  # as wrapped to the terminal
    run = runs / "triton-ab"
    verdict = next(line for line in (run / "report" / "report.md").read_text().splitlines()
                   if line.startswith("**Verdict:**"))
    assert verdict.startswith(f"**Verdict:** **Triton A/B** (--triton-base/--triton-pr): Triton {old[:12]} (LLVM "
                              f"{LLVM_HASH_3_5[:12]}) → {new[:12]} (LLVM {LLVM_INFO_MAIN['llvm_hash'][:12]}), PyTorch "
                              f"{pytorch[:12]} the same on both sides (built once). **No Triton code was compared**"
                              ), verdict
    lock = json.loads((run / "lock.json").read_text())
    assert [(lock[side]["sources"]["triton"]["commit"], lock[side]["sources"]["triton"]["llvm"])
            for side in ("base", "pr")] == [(old, LLVM_HASH_3_5.strip()), (new, LLVM_INFO_MAIN["llvm_hash"])]
    assert lock["base"]["sources"]["pytorch"] == lock["pr"]["sources"]["pytorch"]
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert (summary["triton_ab"]["base"], summary["triton_ab"]["pr"]) == (old, new)
    assert summary["kernels"]["code_identical"] > 0 and summary["kernels"]["code_changed"] == 0  # C++: the control


class _Nothing:
    """No containers to remove: the stages ran on this interpreter."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
