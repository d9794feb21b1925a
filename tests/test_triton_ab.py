"""A user compares two Triton commits with one PyTorch: ``invoke compare --triton-src ~/triton --triton-base A
--triton-pr B`` (or a PyTorch PR that only moves PyTorch's Triton pin). Both images build the same PyTorch first and
each side's Triton on top, the lock and the report name both Triton commits and the LLVM each pins, every kernel
pairs by its Inductor source and the Triton ones count as changed, and on the CPU the headline says that no Triton
code was compared.

The clones are stand-ins with the real layout of the files read: PyTorch's pin file
``.ci/docker/ci_commit_pins/triton.txt`` (a commit and a newline) and, in Triton, ``cmake/llvm-hash.txt`` (3.0-3.5:
a commit and a newline) or ``cmake/llvm-info.json`` (main: ``llvm_hash`` among its keys).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from analysis.kernels.compare import compare_kernels
from analysis.report.render import load_report_inputs, render_report
from foundation.formats.triton_ab import FLAGS, PIN_BUMP
from prbench.compare.variant_plan import plan_docker
from prbench.images.build import build_image, plan_build
from prbench.images.build_plan import (
    LABEL_CLONES,
    LABEL_OVERLAY,
    LABEL_RECIPE_PATH,
    LABEL_RECIPE_TOML,
    LABEL_TRITON_PATCH,
)
from prbench.images.image_lock import LOCK_VERSION
from prbench.sides.pins import TritonPin
from prbench.sides.recipes import load_recipe
from tests.support.cli_support import invoke_in_process, one_line
from tests.support.compare_data import kernel_specs, kernels_frame
from tests.support.docker_support import (
    base_image_id,
    commit_all,
    make_pytorch,
    make_triton,
    require_engine,
    write_recipe,
)
from tests.support.triton_trees import LLVM_HASH_3_5, LLVM_INFO_MAIN

ROOT = Path(__file__).resolve().parents[1]
PIN_FILE = ".ci/docker/ci_commit_pins/triton.txt"
README_RUN = Path(__file__).parent / "fixtures" / "readme_run" / "readme1-a.tar.gz"


@dataclass(frozen=True)
class Clones:
    pytorch: Path
    triton: Path
    pytorch_base: str  # pins triton_old
    bump: str  # only moves the pin to triton_new
    mixed: str  # moves the pin and changes Inductor
    triton_old: str  # a 3.5 tree: cmake/llvm-hash.txt
    triton_new: str  # a main tree: cmake/llvm-info.json


@pytest.fixture
def clones(tmp_path: Path) -> Clones:
    triton_repo, _ = make_triton(tmp_path / "triton")
    (tmp_path / "triton" / "cmake").mkdir()
    (tmp_path / "triton" / "cmake" / "llvm-hash.txt").write_text(LLVM_HASH_3_5)
    old = commit_all(triton_repo, "3.5: LLVM pinned in llvm-hash.txt")
    (tmp_path / "triton" / "cmake" / "llvm-hash.txt").unlink()
    (tmp_path / "triton" / "cmake" / "llvm-info.json").write_text(json.dumps(LLVM_INFO_MAIN, indent=2) + "\n")
    (tmp_path / "triton" / "triton" / "backend_defaults.py").write_text("NUM_STAGES = 3\n")
    new = commit_all(triton_repo, "main: LLVM pinned in llvm-info.json, another default")
    pytorch_repo, base = make_pytorch(tmp_path / "pytorch", old)
    (tmp_path / "pytorch" / PIN_FILE).write_text(new + "\n")
    bump = commit_all(pytorch_repo, "[triton] update the pin")
    (tmp_path / "pytorch" / "torch" / "_inductor" / "config.py").write_text('"""Changed Inductor config."""\n')
    mixed = commit_all(pytorch_repo, "update the pin and Inductor")
    return Clones(tmp_path / "pytorch", tmp_path / "triton", base, bump, mixed, old, new)


def _rocm():
    return load_recipe("rocm7-mi300", ROOT / "recipes")


def _images(clones: Clones, plan) -> list:
    return [plan_build(_rocm(), pytorch_src=clones.pytorch, triton_src=clones.triton, pytorch_ref=side.pytorch_ref,
                       pin=side.triton, pytorch_first=plan.triton_ab is not None) for side in (plan.base, plan.pr)]


def test_a_triton_ab_builds_one_pytorch_below_two_tritons_and_the_locks_name_both(clones: Clones) -> None:
    plan = plan_docker(clones.pytorch_base, clones.pytorch_base, _rocm(), clones.pytorch, triton_src=clones.triton,
                       triton_pr=clones.triton_new[:10])
    assert plan.base.pytorch_ref == plan.pr.pytorch_ref == clones.pytorch_base
    assert plan.base.triton == TritonPin(clones.triton_old, PIN_FILE)  # --triton-base left out: the pinned one
    assert plan.pr.triton == TritonPin(clones.triton_new, "--triton-pr")
    ab = plan.triton_ab
    assert ab is not None and ab.reason == FLAGS and (ab.base, ab.pr) == (clones.triton_old, clones.triton_new)
    assert (ab.base_llvm, ab.pr_llvm) == (LLVM_HASH_3_5.strip(), LLVM_INFO_MAIN["llvm_hash"])

    base_image, pr_image = _images(clones, plan)
    # One Dockerfile text for both (commits live in labels and in the build context): PyTorch's steps first.
    assert base_image.dockerfile == pr_image.dockerfile
    text = base_image.dockerfile
    assert text.index("COPY src/pytorch") < text.index("pip install --no-index --no-build-isolation -v -e .") \
        < text.index("COPY src/triton")
    assert base_image.inputs()["build"]["layers"] == "pytorch-first"
    assert base_image.tag != pr_image.tag
    # What lock.json copies from each image's inputs: its Triton commit and the LLVM that tree pins.
    assert [(i.inputs()["sources"]["triton"]["commit"], i.inputs()["sources"]["triton"]["llvm"])
            for i in (base_image, pr_image)] == [(clones.triton_old, ab.base_llvm), (clones.triton_new, ab.pr_llvm)]
    assert base_image.inputs()["sources"]["pytorch"] == pr_image.inputs()["sources"]["pytorch"]

    # An A/B of PyTorch keeps Triton's layers below PyTorch's (shared across PyTorch PRs).
    pytorch_ab = plan_docker(clones.pytorch_base, clones.mixed, _rocm(), clones.pytorch, triton_src=clones.triton)
    assert pytorch_ab.triton_ab is None
    text = _images(clones, pytorch_ab)[0].dockerfile
    assert text.index("COPY src/triton") < text.index("COPY src/pytorch")
    assert "layers" not in _images(clones, pytorch_ab)[0].inputs()["build"]


def test_a_pytorch_pr_that_only_moves_the_triton_pin_is_a_triton_ab_of_the_base_pytorch(clones: Clones) -> None:
    plan = plan_docker(clones.pytorch_base, clones.bump, _rocm(), clones.pytorch, triton_src=clones.triton)
    ab = plan.triton_ab
    assert ab is not None and ab.reason == PIN_BUMP and ab.pin_file == PIN_FILE
    assert (ab.base, ab.pr, ab.pytorch) == (clones.triton_old, clones.triton_new, clones.pytorch_base)
    # PyTorch is built once: the PR side builds the base commit (the pin file is all that differs).
    assert plan.pr.pytorch_ref == clones.pytorch_base
    assert plan.pr.triton == TritonPin(clones.triton_new, PIN_FILE)
    assert ab.headline(3).startswith(f"**Triton A/B** (the PR only moves PyTorch's Triton pin ({PIN_FILE})): "
                                     f"Triton {clones.triton_old[:12]} (LLVM {LLVM_HASH_3_5[:12]}) → "
                                     f"{clones.triton_new[:12]} (LLVM 941a04e69ee8)")

    # A PR that also changes PyTorch stays an A/B of PyTorch, each side with its own pin.
    mixed = plan_docker(clones.pytorch_base, clones.mixed, _rocm(), clones.pytorch, triton_src=clones.triton)
    assert mixed.triton_ab is None and mixed.pr.pytorch_ref == clones.mixed
    # With --triton-ref the pin decides nothing: both sides build that Triton, so the bump is no Triton A/B.
    fixed = plan_docker(clones.pytorch_base, clones.bump, _rocm(), clones.pytorch, triton_src=clones.triton,
                        triton_ref=clones.triton_old)
    assert fixed.triton_ab is None


PATCH = """\
--- a/triton/backend_defaults.py
+++ b/triton/backend_defaults.py
@@ -1 +1 @@
-NUM_STAGES = 3
+NUM_STAGES = 2
"""


def test_a_triton_patch_as_the_pr_is_built_on_the_base_triton_and_named_with_its_checksum(clones: Clones,
                                                                                         tmp_path: Path) -> None:
    patch = tmp_path / "fewer-stages.patch"
    patch.write_text(PATCH)
    plan = plan_docker(clones.pytorch_base, clones.pytorch_base, _rocm(), clones.pytorch, triton_src=clones.triton,
                       triton_base=clones.triton_new, triton_pr=str(patch))
    assert plan.base.triton == plan.pr.triton == TritonPin(clones.triton_new, "--triton-base")
    assert plan.pr.triton_patch == patch and plan.base.triton_patch is None
    ab = plan.triton_ab
    sha = hashlib.sha256(PATCH.encode()).hexdigest()
    assert ab is not None and ab.commits() == (f"Triton {clones.triton_new[:12]} (LLVM 941a04e69ee8) → "
                                               f"{clones.triton_new[:12]} (LLVM 941a04e69ee8) + fewer-stages.patch "
                                               f"sha256:{sha[:12]}")
    image = plan_build(_rocm(), pytorch_src=clones.pytorch, triton_src=clones.triton, pytorch_ref=clones.pytorch_base,
                       pin=plan.pr.triton, pytorch_first=True, triton_patch=patch)
    assert image.inputs()["sources"]["triton"]["patch_sha256"] == sha
    assert image.labels()["dev.prbench.triton-patch"] == PATCH  # what a rebuild from the lock applies again

    # A patch that does not fit the base's Triton is one line before anything is built.
    runs = tmp_path / "runs"
    patch.write_text(PATCH.replace("NUM_STAGES = 3", "NUM_STAGES = 4"))
    result = invoke_in_process("compare", "--recipe", "rocm7-mi300", "--pytorch-src", str(clones.pytorch),
                               "--triton-src", str(clones.triton), "--base", clones.pytorch_base, "--triton-base",
                               clones.triton_new, "--triton-pr", str(patch), "--runs-dir", str(runs))
    assert one_line(result) == (f"error: --triton-pr {patch}: does not apply to Triton {clones.triton_new[:12]} "
                                 "(error: patch failed: triton/backend_defaults.py:1)")
    assert not runs.exists()


@pytest.mark.parametrize("extra, expected", [
    (("--triton-pr", "HEAD"),
     "error: --triton-pr: a Triton A/B builds both Triton commits from a local clone; give it with --triton-src "
     "(recipe rocm7-mi300 builds Triton from https://github.com/triton-lang/triton.git)"),
    (("--triton-src", "{triton}", "--triton-pr", "HEAD", "--pr", "{mixed}"),
     "error: --pr {mixed}: a Triton A/B (--triton-pr) keeps PyTorch the same on both sides; leave --pr out (or "
     "give the --base commit), and compare PyTorch changes in a run of their own"),
    (("--triton-src", "{triton}", "--triton-base", "HEAD", "--pr", "{mixed}"),
     "error: --triton-base: a Triton A/B also needs --triton-pr (the PR side's Triton commit)"),
    (("--triton-src", "{triton}", "--triton-pr", "HEAD", "--triton-ref", "HEAD"),
     "error: --triton-ref: builds one Triton on both sides; a Triton A/B (--triton-pr) names each side's "
     "(--triton-base, default the pinned one): leave --triton-ref out"),
    (("--triton-src", "{triton}", "--triton-pr", "no-such-branch"),
     "error: --triton-pr: commit no-such-branch is not in the clone {triton} (fetch it there first: builds never "
     "fetch sources)"),
])
def test_the_triton_ab_flags_are_checked_at_the_door(clones: Clones, tmp_path: Path, extra: tuple[str, ...],
                                                     expected: str) -> None:
    runs = tmp_path / "runs"
    values = {"triton": str(clones.triton), "mixed": clones.mixed}
    result = invoke_in_process("compare", "--recipe", "rocm7-mi300", "--pytorch-src", str(clones.pytorch),
                               "--base", clones.pytorch_base, "--runs-dir", str(runs),
                               *(arg.format(**values) for arg in extra))
    assert one_line(result) == expected.format(**values)
    assert not runs.exists()


def test_a_triton_ab_where_no_triton_is_built_is_refused(clones: Clones, tmp_path: Path) -> None:
    # (a local recipe takes a patch as an overlay on the installed Triton: tests/test_triton_overlay.py)
    result = invoke_in_process("compare", "--recipe", "cpu-venv", "--triton-pr", "HEAD", "--runs-dir",
                               str(tmp_path / "runs"))
    assert one_line(result).startswith("error: --triton-pr: recipe cpu-venv runs an installed torch; it builds "
                                        "no Triton")


def test_every_kernel_pairs_by_its_source_and_the_triton_ones_are_what_changed() -> None:
    specs = kernel_specs(8, seed=11)
    base, base_samples = kernels_frame(specs, seed=1)
    # The PR's Triton makes kernel 0 30 % slower; Inductor's source is the same on both sides.
    pr, pr_samples = kernels_frame(specs, seed=2, factor={0: 1 / 0.7})
    pr["body_hash"] = base["body_hash"]
    for frame in (base, pr):  # half of them are C++ kernels, which no Triton compiles
        frame.loc[frame.index % 2 == 1, "backend"] = "cpp"
    ab = compare_kernels(base, pr, base_samples, pr_samples, compiled_by="triton")
    assert ab.pairing.by_method["body_hash+shape_key"] == ab.pairing.paired == 8
    assert ab.summary.compiled_anew == 4 and ab.summary.code_identical == 4  # the C++ ones are the control
    slower = ab.table[ab.table["base_name"] == specs[0].name].iloc[0]
    assert bool(slower["code_changed"]) and slower["verdict"] == "regressed"

    # Read as an A/B of PyTorch, the same tables would hide the change in the control.
    pytorch_ab = compare_kernels(base, pr, base_samples, pr_samples)
    assert pytorch_ab.summary.code_changed == 0
    assert not pytorch_ab.table["code_changed"].any()


def test_on_the_cpu_a_triton_ab_says_no_triton_code_was_compared(tmp_path: Path) -> None:
    with tarfile.open(README_RUN) as archive:
        archive.extractall(tmp_path, filter="data")
    run = tmp_path / "readme1-a"
    # README command 1's run on the CPU recipe, read as a Triton A/B's: every kernel it timed is C++.
    manifest = json.loads((run / "manifest.json").read_text())
    record = {"format_version": 1, "base": "a" * 40, "pr": "b" * 40, "base_llvm": LLVM_HASH_3_5.strip(),
              "pr_llvm": None, "reason": FLAGS, "pin_file": None, "pytorch": "c" * 40, "pr_patch": None}
    manifest["settings"]["triton_ab"] = record
    (run / "manifest.json").write_text(json.dumps(manifest))
    paths = render_report(load_report_inputs(run), run / "report")
    verdict = next(line for line in paths.report_md.read_text().splitlines() if line.startswith("**Verdict:**"))
    assert verdict.startswith(
        f"**Verdict:** **Triton A/B** (--triton-base/--triton-pr): Triton aaaaaaaaaaaa (LLVM {LLVM_HASH_3_5[:12]}) → "
        "bbbbbbbbbbbb, PyTorch cccccccccccc the same on both sides (built once). **No Triton code was compared**: "
        "Inductor generated no kernel Triton compiles (on the CPU it generates C++ kernels)"), verdict
    summary = json.loads(paths.summary_json.read_text())
    assert summary["triton_ab"] == record and summary["verdict"] == verdict


@pytest.mark.docker
@pytest.mark.xdist_group("docker-standins")
def test_the_second_triton_builds_on_the_cached_pytorch_layers(tmp_path: Path) -> None:
    client = require_engine()
    fresh = uuid.uuid4().hex  # trees no earlier build cached: what is cached below, this test built
    triton_repo, old = make_triton(tmp_path / "standin-triton")
    (tmp_path / "standin-triton" / "triton" / "backend_defaults.py").write_text(f"NUM_STAGES = 3  # {fresh}\n")
    new = commit_all(triton_repo, "another default")
    pytorch_repo, _ = make_pytorch(tmp_path / "standin-pytorch", old)
    (tmp_path / "standin-pytorch" / "torch" / "_inductor" / "config.py").write_text(f'"""Inductor {fresh}."""\n')
    pytorch = commit_all(pytorch_repo, "this test's PyTorch")
    recipe_path = write_recipe("bookworm-cpu.toml", tmp_path, digest=base_image_id(client), pytorch_commit=pytorch)
    recipe = load_recipe(str(recipe_path), tmp_path)
    plan = plan_docker(pytorch, pytorch, recipe, None, triton_pr=new)
    patch = tmp_path / "knob.patch"  # --triton-pr as a patch on the base's Triton
    patch.write_text(f"--- /dev/null\n+++ b/triton/knob.py\n@@ -0,0 +1 @@\n+KNOB = '{fresh}'\n")
    patched = plan_docker(pytorch, pytorch, recipe, None, triton_pr=str(patch))
    assert plan.triton_ab is not None and patched.triton_ab is not None
    logs, tags = [], []
    for side in (plan.base, plan.pr, patched.pr):
        image = plan_build(recipe, pytorch_ref=side.pytorch_ref, pin=side.triton, pytorch_first=True,
                           triton_patch=side.triton_patch)
        out = io.StringIO()
        build_image(image, client, stream=out, emit=lambda _: None, force=True)
        logs.append(out.getvalue())
        tags.append(image.tag)
        assert client.images.get(image.tag).labels["dev.prbench.triton.commit"] == side.triton.commit
    knob = client.containers.run(tags[2], ["python3", "-c", "import triton.knob as k; print(k.KNOB)"], remove=True,
                                 network_mode="none")
    assert knob.decode().split() == [fresh]  # the patched Triton was built and installed
    base_log, pr_log, patched_log = logs
    patched_torch = patched_log[patched_log.index("pip install --no-index --no-build-isolation -v -e ."):]
    assert patched_torch.split("\n", 2)[1].strip() == "---> Using cache"
    built_torch = base_log[base_log.index("pip install --no-index --no-build-isolation -v -e ."):]
    assert built_torch.split("\n", 2)[1].strip() != "---> Using cache"  # the base side built PyTorch ...
    torch_step = pr_log[pr_log.index("pip install --no-index --no-build-isolation -v -e ."):]
    assert torch_step.split("\n", 2)[1].strip() == "---> Using cache"  # ... and the PR side reused it
    triton_step = pr_log[pr_log.index("COPY src/triton"):]
    assert triton_step.split("\n", 2)[1].strip() != "---> Using cache"  # the PR's Triton was built


def _lock_as_built(image) -> dict:
    """What ``lock_for_image`` reads from the built image's labels, for a rebuild (no engine: contents left out)."""
    labels = image.labels()
    return {"lock_version": LOCK_VERSION, **image.inputs(), "store": [], "contents": {"pip": {}, "image_env": {}},
            "provenance": {"recipe_path": labels[LABEL_RECIPE_PATH], "recipe_toml": labels[LABEL_RECIPE_TOML],
                           "clones": json.loads(labels[LABEL_CLONES]), "overlay_patch": labels.get(LABEL_OVERLAY),
                           **({"triton_patch": labels[LABEL_TRITON_PATCH]} if LABEL_TRITON_PATCH in labels else {}),
                           "image": {"tag": image.tag, "id": "sha256:" + "1" * 64}, "host": {}}}


def test_a_rebuild_from_a_triton_ab_lock_applies_the_patch_again(clones: Clones, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from prbench.images import docker_engine, image_lock

    patch = tmp_path / "fewer-stages.patch"
    patch.write_text(PATCH)
    plan = plan_docker(clones.pytorch_base, clones.pytorch_base, _rocm(), clones.pytorch, triton_src=clones.triton,
                       triton_base=clones.triton_new, triton_pr=str(patch))
    images = [plan_build(_rocm(), pytorch_src=clones.pytorch, triton_src=clones.triton, pytorch_ref=side.pytorch_ref,
                         pin=side.triton, pytorch_first=True, triton_patch=side.triton_patch)
              for side in (plan.base, plan.pr)]
    run_lock = tmp_path / "lock.json"  # a run's lock.json: both sides' image locks
    run_lock.write_text(json.dumps({"base": _lock_as_built(images[0]), "pr": _lock_as_built(images[1])}))
    tags = [image.tag for image in images]
    patch.unlink()  # months later the patch file is gone: the lock holds its text
    rebuilt: list[tuple[str, str | None, bool]] = []

    def build_and_lock(plan, client, images_dir, **kw):
        text = plan.triton_patch.read_text() if plan.triton_patch else None  # the rebuild's context gets this
        rebuilt.append((plan.tag, text, plan.pytorch_first))
        return SimpleNamespace(result=SimpleNamespace(tag=plan.tag, image_id="sha256:" + "2" * 64),
                               lock_path=tmp_path / "rebuilt.json")

    monkeypatch.setattr(image_lock, "build_and_lock", build_and_lock)
    monkeypatch.setattr(docker_engine, "docker_client", lambda: None)
    result = invoke_in_process("rebuild", "--lock", str(run_lock), "--runs-dir", str(tmp_path / "runs"))

    assert result.returncode == 0, result.stdout + result.stderr
    assert "differs from the lock" not in result.stdout
    # the same two images (the tag is the inputs' hash, patch included), PyTorch first, the PR's patched again
    assert rebuilt == [(tags[0], None, True), (tags[1], PATCH, True)]
