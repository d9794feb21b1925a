"""``invoke repro``: one kernel pair of a finished comparison as a folder that runs outside prbench with torch alone,
times base and PR interleaved with the kernel stage's own timers and checks their outputs against each other."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.kernels.repro import find_pair
from foundation.errors import UserError
from prbench.commands.repro import TIMER_SOURCES, timer_module_text
from prbench.runs.run_store import RunStore
from tests.support.cli_support import invoke_in_process

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "tests" / "fixtures" / "gpu_h100"
PER = "triton_per_fused_add_addmm_native_layer_norm_view_6"
RED = "triton_red_fused_add_addmm_native_layer_norm_view_6"
POINTWISE = "triton_poi_fused_addmm_gelu_view_7"


def test_the_pair_is_found_by_either_sides_name_as_the_report_pairs_it() -> None:
    by_base, by_pr = find_pair(H100, PER), find_pair(H100, RED)
    assert by_base == by_pr
    assert (by_base.base.name, by_base.pr.name) == (PER, RED)
    assert by_base.base.path == f"persistent_reduction/{PER}.py" and by_base.base.backend == "triton"
    assert by_base.base.graph == ""
    assert find_pair(H100, POINTWISE).matched_by == "body_hash+shape_key"
    with pytest.raises(UserError, match="--kernel nope: no kernel of this name"):
        find_pair(H100, "nope")


def test_the_timer_module_is_the_kernel_stages_own_code_and_imports_nothing_of_prbench() -> None:
    text = timer_module_text()
    tree = ast.parse(text)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"prbench", "analysis", "foundation", "stages"}
    for rel, names in TIMER_SOURCES:
        source = (ROOT / rel).read_text(encoding="utf-8")
        for name in names:
            defined = next(n for n in tree.body if getattr(n, "name", None) == name
                           or (isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == name))
            assert ast.get_source_segment(text, defined) in source  # copied, not rewritten
    assert _undefined_names(tree) == set()  # every helper the copied code calls was copied too
    namespace: dict = {}
    exec(compile(text, "prbench_timer.py", "exec"), namespace)
    samples = namespace["WallTimer"]().time(lambda: sum(range(100)), 1, 3)
    assert len(samples) == 3 and all(s >= 0 for s in samples)


def _undefined_names(tree: ast.Module) -> set[str]:
    """Names the module reads that nothing in it binds and that are not builtins (coarse: a name bound anywhere in
    the module counts as defined everywhere)."""
    import builtins

    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return read - bound


def _fixture_run(runs: Path) -> str:
    """The H100 fixture as a run under ``runs`` (with the manifest the run store needs)."""
    run = runs / "h100"
    shutil.copytree(H100, run)
    RunStore(runs).create_or_open("h100", {"base": "installed", "pr": "looped-reductions.patch",
                                           "recipe": "cuda-local"}, "test").close()
    return "h100"


def test_an_out_folder_that_holds_files_is_refused_in_one_line(tmp_path: Path) -> None:
    run = _fixture_run(tmp_path / "runs")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("", encoding="utf-8")
    proc = invoke_in_process("repro", "--run", run, "--runs-dir", str(tmp_path / "runs"), "--kernel", PER,
                             "--out", str(tmp_path / "taken"))
    assert proc.returncode == 2
    assert "--out" in proc.stderr and "not an empty directory" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.integration
def test_a_triton_pairs_folder_is_made_on_a_cpu_and_says_it_needs_a_gpu_to_run(tmp_path: Path) -> None:
    """The H100 run's persistent → looped pair: the launch is drawn from get_args() on this CPU, the shapes and
    strides the kernel file names; run.py without a GPU stops with one line."""
    run = _fixture_run(tmp_path / "runs")
    out = tmp_path / "repro"
    proc = invoke_in_process("repro", "--run", run, "--runs-dir", str(tmp_path / "runs"), "--kernel", RED,
                             "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "base", "environment.json", "pr",
                                                     "prbench_timer.py", "run.py"]
    assert sorted(p.name for p in (out / "base").iterdir()) == ["kernel.py", "launch.json", "launch.pt", f"{PER}.py"]
    launch = json.loads((out / "base" / "launch.json").read_text(encoding="utf-8"))
    assert launch["kernel"] == PER and launch["backend"] == "triton"
    assert [(a.get("shape"), a.get("stride")) for a in launch["args"][:2]] == [([2, 32, 64], [2048, 64, 1]),
                                                                               ([64], [1])]
    assert [a.get("value") for a in launch["args"][5:]] == [64, 64]
    assert "python run.py" in (out / "README.md").read_text(encoding="utf-8")
    ran = subprocess.run([sys.executable, "-I", str(out / "run.py"), "--device", "cpu"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode != 0 and "a Triton kernel runs on a GPU" in ran.stderr


def _repro_and_run(run: Path, kernel: str, out: Path) -> subprocess.CompletedProcess:
    made = invoke_in_process("repro", "--run", run.name, "--runs-dir", str(run.parent), "--kernel", kernel,
                             "--out", str(out))
    assert made.returncode == 0, made.stderr
    return subprocess.run([sys.executable, "-I", "run.py", "--rounds", "2", "--iterations", "5"], cwd=out,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.integration
@pytest.mark.xdist_group("electra-compare")  # the session's compare is made once, on the worker of its group
def test_cpp_pairs_folders_run_isolated_outside_the_project_and_print_times_and_the_output_check(
        electra_compare: tuple[Path, subprocess.CompletedProcess], tmp_path: Path) -> None:
    """Given the README example's finished compare, the user makes a repro of a C++ kernel pair and runs it with
    ``python -I`` from the folder: base and PR times per round, their ratio, and the output check; the exit status
    is the check's."""
    run, proc = electra_compare
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(run / "report" / "kernels_compare.csv")
    kernel = table[table["base_path"].str.endswith(".cpp")]["base_name"].iloc[0]
    ran = _repro_and_run(run, kernel, tmp_path / "repro")
    lines = ran.stdout.splitlines()
    assert any(line.startswith("round 2: base ") and ", PR " in line for line in lines), (
        f"exit {ran.returncode}\n{ran.stdout}\n{ran.stderr}")
    assert any(line.startswith("base: median ") for line in lines)
    assert any(line.startswith("PR:   median ") for line in lines)
    check = next(line for line in lines if line.startswith("output check: "))
    # The example PR makes Inductor pick 256-bit vectors on an AVX-512 machine: each side's kernel is compiled for
    # its own pick, and the two compute the same values on the same launch.
    assert ran.returncode == 0 and check.startswith("output check: match: "), ran.stdout + ran.stderr
    assert "profiler_start" not in ran.stderr
    assert json.loads((tmp_path / "repro" / "environment.json").read_text())["omp_num_threads"] == "1"
