"""The IR diff of a Triton kernel pair: the H100 run's layer-norm reduction, persistent on base and looped in the PR,
compiled for sm_90 and gfx942 on this CPU-only machine (tests/fixtures/triton_ir), summarized and shown in the
report's kernel detail block under a one-line "what changed"."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.kernels.ir import parse_target, read_kernel_ir, summary_rows, what_changed
from analysis.kernels.source import pair_detail
from analysis.report.sections.kernel_details import render_detail
from foundation.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
IR = ROOT / "tests" / "fixtures" / "triton_ir"
H100 = ROOT / "tests" / "fixtures" / "gpu_h100"
BASE = "triton_per_fused_add_addmm_native_layer_norm_view_6"
PR = "triton_red_fused_add_addmm_native_layer_norm_view_6"


def _pair(target: str):
    base = read_kernel_ir(IR / target / "base" / BASE, BASE)
    pr = read_kernel_ir(IR / target / "pr" / PR, PR)
    assert base is not None and pr is not None
    return base, pr


def test_the_sm90_summary_says_the_looped_kernel_needs_more_registers_shared_memory_and_instructions() -> None:
    base, pr = _pair("cuda-90")
    rows = {what: (b, p) for what, b, p in summary_rows(base.summary, pr.summary)}
    assert rows["target"] == ("cuda sm_90", "cuda sm_90")
    assert rows["num_warps"] == ("2", "2") and rows["num_stages"] == ("1", "1")
    assert rows["registers"] == ("18", "32")  # ptxas -v, as the driver would report them on load
    assert rows["spills (bytes)"] == ("0", "0")
    assert rows["shared memory"] == ("8 B", "512 B")
    assert rows["vector width (elements per thread)"] == ("1", "2")
    assert rows["widest global access"] == ("32 bits", "64 bits")  # ld.global.v2.b32 in the looped kernel
    assert rows["instructions"] == ("85", "192")
    assert rows["instructions: float math"] == ("24", "91")
    assert what_changed("persistent_reduction", "reduction", "", "", base.summary, pr.summary) == (
        "persistent → looped reduction; vector width 1 → 2; widest global access 32 → 64 bits; registers 18 → 32; "
        "shared memory 8 → 512 B; instructions 85 → 192")


def test_the_gfx942_summary_reads_vgprs_and_spills_from_the_amdgcn_metadata() -> None:
    base, pr = _pair("hip-gfx942")
    rows = {what: (b, p) for what, b, p in summary_rows(base.summary, pr.summary)}
    assert rows["target"] == ("hip gfx942", "hip gfx942")
    assert rows["registers (VGPR)"] == ("7", "24")
    assert rows["spills (registers)"] == ("0", "0")
    assert rows["instructions"] == ("102", "247")
    assert "ptx" not in base.texts and "amdgcn" in base.texts


def test_a_directory_without_ttgir_has_no_ir_and_a_bad_target_is_one_line(tmp_path: Path) -> None:
    assert read_kernel_ir(tmp_path, BASE) is None
    (tmp_path / f"{BASE}.ttgir").write_text("module {}\n", encoding="utf-8")
    (tmp_path / f"{BASE}.json").write_text("[1]", encoding="utf-8")
    with pytest.raises(UserError, match="not Triton's kernel metadata"):
        read_kernel_ir(tmp_path, BASE)
    assert parse_target("hip:gfx942") == ("hip", "gfx942", 64)
    with pytest.raises(UserError, match="--target 'sm90'"):
        parse_target("sm90")


def test_a_cpp_pair_of_the_example_patch_says_its_short_reductions_went_scalar() -> None:
    """The README example's layer-norm kernel keeps vector step 16 in its launch line on both sides; the line
    says which loops went scalar."""
    pairs = ROOT / "tests" / "fixtures" / "cpp_scalar_reductions"
    name = "cpp_fused_add_native_layer_norm_view_1"
    row = {"base_name": name, "pr_name": name, "base_path": f"cpp/{name}.cpp", "pr_path": f"cpp/{name}.cpp"}
    detail = pair_detail(row, pairs / "base", pairs / "pr", "")
    assert detail.base_launch == detail.pr_launch and "vector step 16" in detail.base_launch
    assert detail.ir is None
    assert detail.what_changed == "vectorized loops 4 → 2; scalar loops 3 → 5; vector loads 9 → 5"
    block = render_detail(detail, 10)
    assert "- what changed: vectorized loops 4 → 2; scalar loops 3 → 5; vector loads 9 → 5\n" in block


def test_without_ir_the_line_still_says_what_the_launch_configurations_change() -> None:
    assert what_changed("cpp", "cpp", "C++ (one call); vector step 16; OpenMP x", "C++ (one call); vector step 8; "
                        "OpenMP x") == "vector step 16 → vector step 8"
    assert what_changed("pointwise", "pointwise", "grid Grid1D", "grid Grid1D") == "same launch configuration"


def _side(tmp_path: Path, side: str, name: str, category: str, target: str) -> Path:
    organized = tmp_path / side / "organized"
    (organized / category).mkdir(parents=True)
    shutil.copy(H100 / side / "organized" / category / f"{name}.py", organized / category)
    shutil.copytree(IR / target / side / name, tmp_path / side / "ir" / name)
    return organized


def test_the_report_block_reads_the_cause_before_the_diffs(tmp_path: Path) -> None:
    """Given a run whose sides keep the pair's IR in <side>/ir/, the kernel's collapsed block opens with what
    changed, then the IR summary table, then each intermediate form's diff collapsed, all escaped."""
    base_org = _side(tmp_path, "base", BASE, "persistent_reduction", "cuda-90")
    pr_org = _side(tmp_path, "pr", PR, "reduction", "cuda-90")
    row = {"base_name": BASE, "pr_name": PR, "base_path": f"persistent_reduction/{BASE}.py",
           "pr_path": f"reduction/{PR}.py"}
    detail = pair_detail(row, base_org, pr_org, "0.80× (CI 0.78–0.82), regressed")
    block = render_detail(detail, 20)
    lines = block.splitlines()
    changed = next(i for i, line in enumerate(lines) if line.startswith("- what changed: "))
    table = lines.index("| Triton IR | base | PR |")
    first_ir = next(i for i, line in enumerate(lines) if line == "<details><summary>TTIR diff</summary>")
    assert changed < table < first_ir
    assert "persistent → looped reduction" in lines[changed] and "registers 18 → 32" in lines[changed]
    assert "| registers | 18 | 32 |" in lines
    for form in ("TTIR", "TTGIR", "LLIR", "PTX"):
        assert f"<details><summary>{form} diff</summary>" in lines
    assert "AMDGCN diff" not in block
    assert block.count("<details>") == block.count("</details>")


@pytest.mark.integration
def test_triton_compiles_an_organized_kernel_for_gfx942_on_this_cpu_as_the_fixture_holds(tmp_path: Path) -> None:
    """No GPU: the stage compiles the H100 run's persistent kernel for MI300X and its summary is the fixture's."""
    proc = subprocess.run([sys.executable, "-m", "stages.triton_ir", "--organized", str(H100 / "base" / "organized"),
                           "--target", "hip:gfx942", "--out", str(tmp_path), "--kernel", BASE],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRITON_DEFAULT_FP_FUSION": "1"})
    assert proc.returncode == 0, proc.stderr
    made = read_kernel_ir(tmp_path / BASE, BASE)
    kept, _ = _pair("hip-gfx942")
    assert made is not None and made.summary == kept.summary


@pytest.mark.integration
def test_a_scan_kernel_whose_file_defines_its_combine_function_first_compiles(tmp_path: Path) -> None:
    """GPT-2's cumsum kernel from the H200 run: the file's first function is the scan's combine helper, the kernel
    comes after it."""
    organized = ROOT / "tests" / "fixtures" / "gpu_h200" / "fp16" / "base" / "organized"
    name = "triton_per_fused_add_arange_cat_cumsum_expand_ne_slice_sub_unsqueeze_1"
    proc = subprocess.run([sys.executable, "-m", "stages.triton_ir", "--organized", str(organized),
                           "--target", "cuda:90", "--out", str(tmp_path), "--kernel", name],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRITON_DEFAULT_FP_FUSION": "1"})

    assert proc.returncode == 0, proc.stderr
    made = read_kernel_ir(tmp_path / name, name)
    assert made is not None and "tt.scan" in made.texts["ttir"]
