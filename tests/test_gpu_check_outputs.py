"""What benchmarks/gpu_check.sh brings back from a lent GPU machine, read on the CPU: each step's one summary line
(benchmarks/gpu_check_summary.py) and the Triton IR it keeps (benchmarks/triton_ir_fixtures.py).

The inputs are real GPU outputs already in tests/fixtures (an H200's float16 compare and A/A, an H100's BERT
kernels) and real sm_90 / gfx942 IR of one of those kernel pairs (tests/fixtures/triton_ir), laid out as a GPU
run's Triton caches hold it. A new run's fixtures join the GPU_RUNS and AA_FILES lists below.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest

from analysis.kernels.ir import read_kernel_ir, what_changed
from foundation.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
H200_FP16 = FIXTURES / "gpu_h200" / "fp16"
H100 = FIXTURES / "gpu_h100"
IR = FIXTURES / "triton_ir"
LAYER_NORM = ("triton_per_fused_add_addmm_native_layer_norm_view_6",
              "triton_red_fused_add_addmm_native_layer_norm_view_6")
GPU_RUNS = [H200_FP16]  # compare runs brought back from a GPU (manifest.json, report/summary.json, organized/)
AA_FILES = [FIXTURES / "gpu_h200" / "aa" / f"run-{n}" / "aa_noise.json" for n in (1, 2)]

sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_busy_by_stage  # noqa: E402
import gpu_check_summary  # noqa: E402
import triton_ir_fixtures  # noqa: E402


def _line(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert gpu_check_summary.main(list(argv)) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out  # one line per step
    return out.strip()


# --- the compare's line --------------------------------------------------------------------------------------


@pytest.mark.parametrize("run", GPU_RUNS, ids=lambda p: p.parent.name + "/" + p.name)
def test_the_compare_line_has_the_models_kernels_per_side_wall_per_phase_and_verdicts(
        capsys: pytest.CaptureFixture[str], run: Path) -> None:
    """Given a GPU compare's run directory, the step's line names its models at their size, mode and dtype, the kernels
    per side as organize indexed them, the wall time of every phase as the manifest recorded it, and each
    family's verdict and interval as the report wrote them."""
    line = _line(capsys, "compare", str(run))

    manifest = json.loads((run / "manifest.json").read_text())
    suite = manifest["settings"]["suite"]
    assert line.startswith(f"compare {run.name}: {suite['models']} ({suite['size']}, {suite['mode']}, "
                           f"{suite['dtype']}); ")
    for side in ("base", "pr"):
        with (run / side / "organized" / "index.csv").open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        triton = sum(r["backend"] == "triton" for r in rows)
        assert f"{side} {len(rows)} ({triton} triton)" in line
    stages = manifest["stages"]
    suites = "/".join(f"{stages[f'{side}/suite']['duration_s']:.0f}" for side in ("base", "pr"))
    assert f"suite {suites} s" in line
    for kind in ("models", "kernels"):
        rounds = [s["duration_s"] for name, s in stages.items() if name.startswith(f"pair/{kind}-round-")]
        assert f"{kind} rounds {len(rounds)} x " in line and f"(sum {sum(rounds):.0f} s)" in line
    summary = json.loads((run / "report" / "summary.json").read_text())
    for family in ("kernels", "models"):
        block = summary[family]
        assert (f"{family} {block['verdict']}: geomean {block['geomean']:.3f}x "
                f"(CI {block['ci_low']:.3f}x-{block['ci_high']:.3f}x)") in line


def test_the_h200_float16_compare_line_reads_as_the_validation_notes_state_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    line = _line(capsys, "compare", str(H200_FP16))

    assert line.startswith("compare fp16: GPT2ForSequenceClassification (tiny, inference, float16); "
                           "kernels base 11 (11 triton), pr 11 (11 triton); wall suite 28/25 s")
    assert "kernels inconclusive: geomean 1.028x (CI 0.905x-1.169x), 3 rounds, n 11" in line
    assert "numerics not recorded" in line  # the run predates the numerical A/B


def test_the_numerics_line_of_a_run_without_outputs_says_so_and_one_without_a_report_is_an_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert _line(capsys, "numerics", str(H200_FP16)) == (
        "numerics fp16: GPT2ForSequenceClassification (tiny, inference, float16); numerics not recorded")
    run = tmp_path / "cut-off"
    run.mkdir()
    shutil.copy(H200_FP16 / "manifest.json", run / "manifest.json")

    assert gpu_check_summary.main(["numerics", str(run)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {run / 'report' / 'summary.json'}: not found (the run has no report)\n"


def test_a_compare_cut_at_its_limit_counts_only_the_rounds_that_finished(capsys: pytest.CaptureFixture[str]) -> None:
    """The CPU rehearsal of the seed's experiment (tests/fixtures/cpu_rehearsal_training): the compare was cut at
    its limit in its third model round; the line gives the two finished rounds and names the one cut off."""
    run = FIXTURES / "cpu_rehearsal_training" / "gpu-compare"

    line = _line(capsys, "compare", str(run))

    assert line.startswith("compare gpu-compare: BertForMaskedLM (tiny, training, amp); kernels base 23 (0 triton), "
                           "pr 23 (0 triton); wall suite 171/155 s, organize+launch cost 30 s, "
                           "models rounds 2 x 153 s (sum 307 s), run 690 s; no report")
    assert line.endswith("not done: pair/models-round-3")


def test_the_numerics_line_of_a_float16_ab_counts_what_the_report_compared(capsys: pytest.CaptureFixture[str]) -> None:
    """The rehearsal's float16 A/B on the CPU (tests/fixtures/cpu_rehearsal): the line is the report's own
    numerics block, with the float16 tolerance, and the compare line of the same run says the same."""
    run = FIXTURES / "cpu_rehearsal" / "gpu-numerics"
    numerics = json.loads((run / "report" / "summary.json").read_text())["numerics"]

    line = _line(capsys, "numerics", str(run))

    assert numerics["tolerances"]["float16"] == {"rtol": 0.01, "atol": 0.01}
    assert line == ("numerics gpu-numerics: GPT2ForSequenceClassification (tiny, inference, float16), "
                    "rtol 0.01 atol 0.01; "
                    "numerics models 1/1 passed; kernels 9/9 passed (9/9 identical-code pairs bit-identical)")
    compare = _line(capsys, "compare", str(run))
    assert "kernels base 9 (0 triton), pr 9 (0 triton)" in compare
    assert compare.endswith("numerics models 1/1 passed; kernels 9/9 passed (9/9 identical-code pairs bit-identical)")


def test_the_numerics_text_names_each_family_and_its_worst_failure() -> None:
    """A float16 A/B's summary block (the keys analysis.models.numerics and analysis.kernels.numerics write)."""
    summary = {"numerics": {
        "models": {"compared": 2, "passed": 1, "failed": 1, "not_compared": [],
                   "worst": {"name": "GPT2ForSequenceClassification", "check": "PR vs base", "output": "logits",
                             "max_abs": 0.031}, "failed_items": []},
        "kernels": {"compared": 11, "passed": 11, "failed": 0, "not_compared": 0,
                    "identical_code_bit_identical": 4, "identical_code_compared": 4, "worst": None,
                    "failed_items": []}}}

    assert gpu_check_summary.numerics_text(summary) == (
        "numerics models 1/2 passed, worst GPT2ForSequenceClassification PR vs base logits max abs 0.031; "
        "kernels 11/11 passed (4/4 identical-code pairs bit-identical)")


# --- round cost, GPU busy share, the A/A -------------------------------------------------------------------------


@pytest.mark.parametrize("run", GPU_RUNS, ids=lambda p: p.parent.name + "/" + p.name)
def test_the_round_cost_line_gives_each_kinds_rounds_and_wall_per_round(
        capsys: pytest.CaptureFixture[str], run: Path) -> None:
    line = _line(capsys, "round-cost", str(run))

    import round_cost

    costs = round_cost.run_costs(run)
    for kind in sorted({c.kind for c in costs}):
        walls = sorted(c.wall_s for c in costs if c.kind == kind)
        median = walls[len(walls) // 2]
        assert f"{kind} {len(walls)} rounds, {median:.1f} s per round ({walls[0]:.1f}-{walls[-1]:.1f}): " in line


def test_the_busy_line_is_the_kernel_stage_share_the_stage_table_computes(capsys: pytest.CaptureFixture[str]) -> None:
    """The H200 compare: the kernel rounds kept the GPU busy 3.0 % of their wall time (docs/gpu-validation.md)."""
    utilization = H200_FP16 / "gpu-utilization.csv"
    line = _line(capsys, "busy", str(utilization), str(H200_FP16))

    rows = {r.stage: r for r in gpu_busy_by_stage.run_busy(H200_FP16, gpu_busy_by_stage.read_samples(utilization))}
    kernel = rows[gpu_busy_by_stage.KERNEL_STAGE]
    assert line.startswith(f"busy: fp16 kernel stage {kernel.busy_percent:.1f} % ({kernel.samples} samples), "
                           "all stages ")
    assert "kernel stage 3.0 %" in line


@pytest.mark.parametrize("path", AA_FILES, ids=lambda p: p.parent.name)
def test_the_aa_line_gives_each_repeats_geomean_deviation_ci_and_flagged_share(
        capsys: pytest.CaptureFixture[str], path: Path) -> None:
    line = _line(capsys, "aa", str(path))

    data = json.loads(path.read_text())
    assert line.startswith(f"aa: {len(data['repeats'])} repeats; ")
    for family in ("kernels", "models"):
        side = data["repeats"][0]["aa"][family]
        deviation = (side["geomean"] - 1) * 100
        assert (f"{side['geomean']:.3f}x ({deviation:+.1f} %, CI {side['ci_low']:.3f}x-{side['ci_high']:.3f}x, "
                f"flagged {side['flagged_share']:.0%} of {side['n']})") in line
    assert line.endswith(f"verdict lines saying faster/slower 0/{len(data['repeats'])}")


def test_a_step_that_wrote_nothing_gets_one_error_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert gpu_check_summary.main(["aa", str(tmp_path / "aa.json")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'aa.json'}: not found (the step wrote nothing there)\n"


# --- the Triton IR kept from a GPU run's caches -------------------------------------------------------------------


def _gpu_run_with_caches(tmp_path: Path) -> Path:
    """The H100 compare's kernel tables, and each side's Triton caches as a GPU run leaves them: the layer-norm
    kernel compiled for sm_90 in the suite's cache and for gfx942 in the kernel workers' cache, and the sm_90 one
    a second time under another key (the same TTGIR: one version)."""
    run = tmp_path / "gpu-compare"
    for index, side in enumerate(("base", "pr")):
        (run / side).mkdir(parents=True)
        shutil.copy(H100 / side / "kernels.csv", run / side / "kernels.csv")
        name = LAYER_NORM[index]
        work = run / side / "work"
        shutil.copytree(IR / "cuda-90" / side / name, work / "triton-cache" / f"SM90{side.upper()}KEY")
        shutil.copytree(IR / "cuda-90" / side / name, work / "triton-cache" / f"SM90{side.upper()}COPY")
        shutil.copytree(IR / "hip-gfx942" / side / name, work / "kernels" / "paired" / "triton" / "GFX942KEY")
    return run


def test_the_ir_step_keeps_every_compiled_version_of_a_changed_pair_as_invoke_ir_reads_it(tmp_path: Path) -> None:
    run = _gpu_run_with_caches(tmp_path)
    out = tmp_path / "ir"

    kept = triton_ir_fixtures.keep(run, out, limit=4)

    assert (kept.run, kept.changed) == ("gpu-compare", 6)  # six reductions changed; only one has IR in the caches
    assert [(p.base, p.pr) for p in kept.pairs] == [LAYER_NORM]
    pair = kept.pairs[0]
    assert pair.base_versions == ("GFX942KEY", "SM90BASECOPY") and pair.pr_versions == ("GFX942KEY", "SM90PRCOPY")
    assert triton_ir_fixtures.read_kept_pairs(out) == kept
    base = read_kernel_ir(out / "base" / LAYER_NORM[0] / "SM90BASECOPY", LAYER_NORM[0])
    pr = read_kernel_ir(out / "pr" / LAYER_NORM[1] / "SM90PRCOPY", LAYER_NORM[1])
    assert base is not None and pr is not None
    assert sorted(p.suffix for p in (out / "base" / LAYER_NORM[0] / "SM90BASECOPY").iterdir()) == [
        ".json", ".llir", ".ptx", ".ttgir", ".ttir"]  # the cache's own files: no ptxas log, no binaries
    assert what_changed("persistent_reduction", "reduction", "", "", base.summary, pr.summary).startswith(
        "persistent → looped reduction; vector width 1 → 2; widest global access 32 → 64 bits")
    amd = read_kernel_ir(out / "pr" / LAYER_NORM[1] / "GFX942KEY", LAYER_NORM[1])
    assert amd is not None and "amdgcn" in amd.texts


def test_the_ir_line_counts_pairs_and_versions(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    triton_ir_fixtures.keep(_gpu_run_with_caches(tmp_path), tmp_path / "ir", limit=4)

    line = _line(capsys, "ir", str(tmp_path / "ir"))

    assert line.startswith("ir gpu-compare: 1 of 6 changed Triton pairs kept, 4 compiled versions, ")


def test_a_run_whose_caches_hold_no_changed_pair_is_one_line(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    run = tmp_path / "no-caches"
    for side in ("base", "pr"):
        (run / side).mkdir(parents=True)
        shutil.copy(H100 / side / "kernels.csv", run / side / "kernels.csv")

    assert triton_ir_fixtures.main(["--run", str(run), "--out", str(tmp_path / "ir")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --run no-caches: none of its 6 changed Triton pairs has IR in both sides' caches")
    assert err.count("\n") == 1


def test_pairs_are_chosen_one_kind_at_a_time() -> None:
    pairs = [("triton_per_a_1", "triton_red_a_1"), ("triton_per_b_2", "triton_red_b_2"),
             ("triton_poi_c_3", "triton_poi_c_3x"), ("triton_red_d_4", "triton_red_d_4x")]

    assert triton_ir_fixtures.choose(pairs, 3) == [pairs[0], pairs[2], pairs[3]]
    assert triton_ir_fixtures.choose(pairs, 10) == [pairs[0], pairs[2], pairs[3], pairs[1]]


def test_a_kept_list_of_a_newer_format_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pairs.json").write_text(json.dumps({"format_version": 2, "run": "r", "changed": 0, "pairs": []}))

    with pytest.raises(UserError, match=r"pairs\.json: format_version 2"):
        triton_ir_fixtures.read_kept_pairs(tmp_path)
