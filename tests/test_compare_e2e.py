"""The user's main job, end to end on the embedded default: ``invoke compare`` with the example PR."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.support.cli_support import invoke_in_process
from tests.support.electra_compare import ELECTRA_FLAGS, invoke

# The run is the session's ``electra_compare`` (tests/conftest.py), shared with test_compare_ray.py: on one worker
# under ``pytest -n``, so that it runs once.
pytestmark = pytest.mark.xdist_group("electra-compare")


@pytest.fixture
def compared(electra_compare):
    return electra_compare


@pytest.mark.integration
def test_compare_writes_a_pr_ready_report(compared):
    run, proc = compared
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (run / "report" / "report.md").read_text(encoding="utf-8")
    assert report.startswith("# ") and "**Verdict:**" in report
    # The file may be any size; the comment form that `invoke publish` posts fits a PR comment.
    assert len((run / "report" / "comment.md").read_text(encoding="utf-8")) <= 20_000
    # The example PR computes the same results (its 256-bit kernels round alike, within a few ULP), every changed
    # kernel run on base's recorded inputs; kernels whose code did not change (none on an AVX-512 machine, where
    # every kernel changes its lane count) gave bit-identical outputs. Passing numerics are one sentence of the
    # headline, after the models and before the control; the details follow in the body.
    verdict = report.split("\n\n")[1]
    assert verdict.startswith("**Verdict:** Models") and "Numerics: 1 of 1 models" in verdict
    assert "Models: **1 of 1 passed**" in report
    numerics = json.loads((run / "report" / "summary.json").read_text())["numerics"]
    assert numerics["models"]["failed"] == 0 and numerics["kernels"]["failed"] == 0
    assert numerics["kernels"]["compared"] > 0 and numerics["kernels"]["not_compared"] == 0
    assert numerics["kernels"]["identical_code_bit_identical"] == numerics["kernels"]["identical_code_compared"]
    for name in ("kernels_compare.csv", "report.xlsx", "speedup_distribution.png", "category_speedups.png"):
        assert (run / "report" / name).stat().st_size > 0, name
    pairs = pd.read_csv(run / "report" / "kernels_compare.csv")
    assert len(pairs) > 0 and (pairs["category"] == "cpp").all()
    manifest = json.loads((run / "manifest.json").read_text())
    stages = ("suite", "organize", "launch_cost", "models", "kernels")
    for key in [f"{side}/{stage}" for side in ("base", "pr") for stage in stages
                ] + [f"pair/{kind}-round-{n}" for kind in ("models", "kernels") for n in (1, 2, 3)] + ["report"]:
        assert manifest["stages"][key]["status"] == "done", key
    # What explains the numbers: each kernel row names its model, the time decomposition prices launches with
    # the cost measured on each side's graphs, and each model round recorded its compiles.
    added = report.split("## Kernels by the time they add", 1)[1].split("\n## ", 1)[0]
    assert "ElectraForCausalLM/" in added or "_none_" in added
    for side in ("base", "pr"):
        cost = json.loads((run / side / "launch_cost.json").read_text())
        # Measured, not assumed: a number for each side. It may be 0: the tiny model's graph spends ~200 µs a pass
        # in its kernels and ~1 µs in its 9 launches, so on a loaded machine the kernels' profiled passes can take
        # longer than the timed ones (a CI run saw wall 271.2 µs, kernels 279.8 µs) and the cost is clipped at 0.
        assert cost["backend"] == "cpp" and cost["per_launch_us"] >= 0
    assert "Cost of one launch: " in report and "µs per launch" in report
    parts = pd.read_csv(run / "report" / "time_decomposition.csv")
    components = parts[["changed_code_ms", "identical_code_ms", "fusion_ms", "remainder_ms"]].fillna(0).sum(axis=1)
    assert (components - parts["measured_delta_ms"]).abs().max() < 1e-9
    resources = pd.read_csv(run / "report" / "model_resources.csv")
    assert resources.loc[0, "base_repeat_s"].endswith("3 compiles)")
    # Base and PR are timed item by item in each round, ABBA, the first side alternating between blocks, rounds
    # and passes.
    for kind in ("models", "kernels"):
        rounds = [json.loads((run / "pair" / kind / f"round-00{n}.json").read_text()) for n in (1, 2, 3)]
        for record in rounds:
            assert record["sides"] == ["base", "pr"] and not [v for v in record["visits"] if v["error"]], kind
            paired = {(v["pass_index"], v["block"]) for v in record["visits"] if v["position"] == 1}
            first = {(v["pass_index"], v["block"]): v["side"] for v in record["visits"]
                     if v["position"] == 0 and (v["pass_index"], v["block"]) in paired}
            assert {p for p, _ in first} == {0, 1}
            assert all(side == ("base" if (block + record["round"] + p) % 2 == 0 else "pr")
                       for (p, block), side in first.items())
            assert record["workers"]["base"]["cpus"] == record["workers"]["pr"]["cpus"]
            # The round's stage only merged what its shard timed: `invoke status` shows when the shard ran and for
            # how long, not the merge's instant.
            (shard,) = record["shards"]
            stage = manifest["stages"][f"pair/{kind}-round-{record['round']}"]
            assert stage["started"] == shard["started_at"] and shard["wall_s"] <= stage["duration_s"] < \
                shard["wall_s"] + 5
    samples = json.loads((run / "base" / "kernel_samples.json").read_text())
    assert samples and all(len(rounds) == 3 for rounds in samples.values())
    paired = json.loads((run / "pr" / "suite" / "paired_samples.json").read_text())
    # two passes of two visits (A B B A) of 10 timed steps each
    assert [len(r) for r in paired["ElectraForCausalLM"]] == [40, 40, 40]


@pytest.mark.integration
def test_the_pr_side_really_ran_the_patched_inductor(compared):
    run, _ = compared
    env = json.loads((run / "pr" / "env.json").read_text())
    assert env["overlay_files"] == ["torch/_inductor/cpu_vec_isa.py"]
    base_index = pd.read_csv(run / "base" / "organized" / "index.csv")
    pr_index = pd.read_csv(run / "pr" / "organized" / "index.csv")
    # The patch changes the vector width, so kernel bodies differ while names stay (on an AVX-512 machine);
    # without AVX-512 the code is identical. Either way every kernel keeps its name and shape.
    assert sorted(base_index["legacy_key"]) == sorted(pr_index["legacy_key"])
    if _has_avx512():
        assert set(base_index["body_hash"]).isdisjoint(set(pr_index["body_hash"]))


@pytest.mark.integration
def test_running_again_redoes_nothing_and_report_rerenders(compared):
    run, _ = compared
    again = invoke("compare", *ELECTRA_FLAGS, "--runs-dir", str(run.parent), "--run", run.name)
    assert again.returncode == 0, again.stderr[-2000:]
    stages = [k for k in json.loads((run / "manifest.json").read_text())["stages"] if k != "report"]
    assert len(stages) == 16
    for key in stages:
        assert f"{key}: done earlier with the same inputs, skipped" in again.stdout, key
    rendered = invoke("report", run.name, "--runs-dir", str(run.parent))
    assert rendered.returncode == 0, rendered.stderr
    assert (run / "report" / "report.md").exists()


def test_a_pr_touching_compiled_code_is_refused_before_anything_is_written(tmp_path):
    patch = tmp_path / "native.patch"
    patch.write_text(
        "diff --git a/aten/src/ATen/native/Foo.cpp b/aten/src/ATen/native/Foo.cpp\n"
        "--- a/aten/src/ATen/native/Foo.cpp\n+++ b/aten/src/ATen/native/Foo.cpp\n@@ -1 +1 @@\n-a\n+b\n"
    )
    proc = invoke_in_process("compare", "--base=installed", f"--pr={patch}", "--runs-dir", str(tmp_path / "runs"))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Foo.cpp" in lines[0] and "Docker recipe" in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "runs").exists()


def test_a_git_ref_without_a_pytorch_clone_is_a_clear_error(tmp_path):
    proc = invoke_in_process("compare", "--base=installed", "--pr=abc1234", "--runs-dir", str(tmp_path / "runs"))
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        "error: --pr=abc1234: not 'installed' nor an existing patch file; a git ref needs --pytorch-src"
    ]


def _has_avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
