"""What the report explains to a PR reviewer: which models and graphs each kernel runs in, what changed in the code
of the kernels that moved (a normalised diff and the launch configuration), which base kernels the PR replaced by
which PR kernels, where the model's time went (changed code, identical code, fusion changes, remainder), and the
compile-time and memory verdicts per model.

The run is small but real-ish: the kernel sources are real organized C++ kernels of a comparison of the README's
example patch (tests/fixtures/kernel_pairs), the timings are drawn per round as the paired stage records them.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.kernels.identity import identify_cpp
from analysis.kernels.results import KERNEL_COLUMNS
from analysis.kernels.source import code_diff, launch_config
from analysis.report.render import load_report_inputs, render_report
from foundation.errors import UserError
from foundation.formats.launch_cost import GraphLaunchCost, LaunchCost, read_launch_cost, write_launch_cost
from foundation.formats.paired_rounds import RoundRecord, round_file, write_round
from tests.support.cli_support import invoke_in_process
from tests.support.compare_data import model_rounds, round_draws, suite_frame, write_variant

ROOT = Path(__file__).resolve().parents[1]
PAIRS = Path(__file__).parent / "fixtures" / "kernel_pairs"
BERT, GPT2 = "BertForMaskedLM", "GPT2ForSequenceClassification"
# The graph of a model gets a different cache name on each side; `model/<aot id>` is what they share.
GRAPHS = {"base": {BERT: f"{BERT}/0_inference_fe3242fy", GPT2: f"{GPT2}/1_inference_ai6wdtfx"},
          "pr": {BERT: f"{BERT}/0_inference_zagk2ssq", GPT2: f"{GPT2}/1_inference_s3sxgce4"}}
GELU, TANH = "cpp_fused_gelu_view_2", "cpp_fused_add_mul_pow_tanh_view_4"
RELU = "cpp_fused__unsafe_view_relu_3"
LOG_BASE = "cpp_fused__log_softmax_nll_loss_forward_view_4"
LOG_PR = "cpp_fused__log_softmax__unsafe_view_nll_loss_forward_view_3"


def renumbered(text: str) -> str:
    """The same kernel compiled into another graph: only its profiler line's graph ordinal differs."""
    return re.sub(r"graph_\d+_", "graph_5_", text)


# name on each side, the file each side's text comes from, models, launches per step, true ms base → PR
KERNELS = [
    (GELU, GELU, f"base/cpp/{GELU}.cpp", f"pr/cpp/{GELU}.cpp", [BERT], 2, 0.0097, 0.0164),
    (TANH, TANH, f"base/cpp/{TANH}.cpp", f"pr/cpp/{TANH}.cpp", [GPT2], 4, 0.0219, 0.0381),
    # Identical code in both sides (the in-run control), renumbered in the PR.
    (RELU, "cpp_fused__unsafe_view_relu_5", f"base/cpp/{RELU}.cpp", "renumbered", [BERT, GPT2], 2, 0.0050, 0.0050),
    (LOG_BASE, None, f"base/cpp/{LOG_BASE}.cpp", None, [BERT], 1, 0.0313, None),
    (None, LOG_PR, None, f"pr/cpp/{LOG_PR}.cpp", [BERT], 1, None, 0.0460),
    ("cpp_fused_argmax_9", None, None, None, [GPT2], 1, 0.0010, None),  # removed: no PR kernel names its ops
]
MODELS = {BERT: 0.70, GPT2: 0.50}


def _side(run: Path, side: str, rounds: int, seed: int) -> tuple[pd.DataFrame, dict]:
    rng = np.random.default_rng(seed)
    rows, samples = [], {}
    organized = run / side / "organized"
    for base_name, pr_name, base_file, pr_file, models, calls, base_ms, pr_ms in KERNELS:
        name, file, ms = (base_name, base_file, base_ms) if side == "base" else (pr_name, pr_file, pr_ms)
        if name is None:
            continue
        if file == "renumbered":
            text = renumbered((PAIRS / base_file).read_text())
        else:
            text = (PAIRS / file).read_text() if file else f'// KERNEL CALLS: {calls}\nextern "C" void kernel() {{}}\n'
        path = f"cpp/{name}.cpp"
        (organized / path).parent.mkdir(parents=True, exist_ok=True)
        (organized / path).write_text(text)
        ident = identify_cpp(name, text)
        grid = round_draws(rng, ms, rounds, 20, 0.02, 0.005, None)
        samples[path] = grid.tolist()
        rows.append({"category": "cpp", "kernel_name": name, "body_hash": ident.body_hash,
                     "shape_key": ident.shape_key, "legacy_key": ident.legacy_key, "path": path, "calls": calls,
                     "graphs": ";".join(GRAPHS[side][m] for m in models), "backend": "cpp",
                     "source": "graphs/x.py", "n": grid.size, "median_ms": float(np.median(np.median(grid, axis=1))),
                     "mean_ms": float(grid.mean()), "std_ms": float(grid.std()), "min_ms": float(grid.min()),
                     "gb": "", "gb_per_s": "", "status": "ok", "error": ""})
    return pd.DataFrame(rows, columns=list(KERNEL_COLUMNS)), samples


def make_run(root: Path, launch_cost_us: float | None = 2.0, compiles: bool = True) -> Path:
    """A finished comparison of two models: the PR slows GELU and tanh (8-wide vectors), renames the log-softmax
    kernel, drops an argmax kernel; GPT2's step is 10 % slower, Bert's 5 %; GPT2 compiles 1.2× longer."""
    run = root / "runs" / "r1"
    rounds = 5
    factor = {BERT: 1.05, GPT2: 1.10}
    for side, seed in (("base", 1), ("pr", 2)):
        kernels, samples = _side(run, side, rounds, seed)
        suite, suite_samples = suite_frame(MODELS, seed=seed + 10, factor={GPT2: 1.2} if side == "pr" else None)
        suite["eager_peak_mem"], suite["dynamo_peak_mem"] = 0.001110, 0.0008521
        suite["compression_ratio"] = 0.001110 / 0.0008521
        write_variant(run / side, kernels, samples, suite, suite_samples,
                      model_samples=model_rounds(MODELS, seed=seed + 20, rounds=rounds, round_cv=0.002,
                                                 factor=factor if side == "pr" else None))
        if launch_cost_us is not None:
            write_launch_cost(run / side / "launch_cost.json",
                              LaunchCost("cpp", [GraphLaunchCost("0_inference", 10, 100.0 + 10 * launch_cost_us,
                                                                 100.0)]))
    if compiles:
        for number in (1, 2, 3):
            write_round(round_file(run / "pair" / "models", number), RoundRecord(
                "models", number, ["base", "pr"], "now", 1.0,
                compiles={"base": {BERT: [9.0 + number / 10], GPT2: [3.0 + number / 10]},
                          "pr": {BERT: [9.05 + number / 10], GPT2: [3.02 + number / 10]}}))
    (run / "manifest.json").write_text(json.dumps({"run_id": "r1", "created": "now", "settings": {}, "stages": {}}))
    return run


def render(run: Path) -> tuple[str, Path]:
    paths = render_report(load_report_inputs(run), run / "report")
    return paths.report_md.read_text(encoding="utf-8"), run / "report"


def section(text: str, title: str) -> str:
    """The text under a heading (up to the next heading) or inside a collapsed block (up to its end)."""
    rest = text.split(title, 1)[1]
    if title.startswith("<summary>"):
        return rest.split("</details>", 1)[0]
    return rest.split("\n## ", 1)[0].split("\n### ", 1)[0]


def test_every_kernel_row_names_its_models_and_graphs(tmp_path: Path) -> None:
    text, _ = render(make_run(tmp_path))

    rows = [line for line in section(text, "<summary>All kernel pairs").splitlines() if line.startswith("| `cpp_")]
    assert len(rows) == 4  # the renamed log-softmax is a pair (renamed in place)
    assert all(re.search(rf"{BERT}/0_inference|{GPT2}/1_inference", row) for row in rows)
    shared = next(row for row in rows if row.startswith(f"| `{RELU} → cpp_fused__unsafe_view_relu_5` |"))
    assert f"{BERT}/0_inference, {GPT2}/1_inference" in shared  # both models, each graph once (not per side)
    only_base = section(text, "<summary>Kernels only in base")
    assert f"| `cpp_fused_argmax_9` | `{GPT2}/1_inference` |" in only_base


def test_the_top_regressions_expand_to_a_normalised_code_diff_and_their_launch(tmp_path: Path) -> None:
    text, _ = render(make_run(tmp_path))

    regressions = text.split("Top regressions", 1)[1].split("Top improvements", 1)[0]
    block = regressions.split(f"<details><summary><code>{GELU}</code>", 1)[1].split("</details>", 1)[0]
    assert "regressed" in block.split("</summary>")[0] and f"in {BERT}/0_inference" in block
    diff = block.split("```diff\n", 1)[1].split("\n```", 1)[0]
    assert "-for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(8192L); " \
           "x0+=static_cast<int64_t>(16L))" in diff
    assert "+for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(8192L); " \
           "x0+=static_cast<int64_t>(8L))" in diff
    # The graph ordinal of the profiler line differs between the files, but it is not code: not in the diff.
    assert "RAIIAtenRecordFunctionHandle" not in diff and "KERNEL CALLS" not in diff
    assert "- launch, base: `C++ (one call, no grid/warps/stages); vector step 16;" in block
    assert "- launch, PR: `C++ (one call, no grid/warps/stages); vector step 8;" in block
    assert f"<details><summary><code>{TANH}</code>" in regressions


def test_a_kernel_renamed_in_place_is_a_pair_and_a_removed_one_a_fusion_change(tmp_path: Path) -> None:
    text, report = render(make_run(tmp_path))

    pairs = pd.read_csv(report / "kernels_compare.csv")
    renamed = pairs[pairs["base_name"] == LOG_BASE].iloc[0]
    assert renamed["pr_name"] == LOG_PR and renamed["matched_by"] == "graphs+shape_key"  # same graph, same shapes
    fusion = pd.read_csv(report / "fusion_changes.csv")
    removed = fusion[fusion["base_kernels"] == "cpp_fused_argmax_9"].iloc[0]
    assert pd.isna(removed["pr_kernels"]) and removed["change"].startswith("removed")
    assert len(fusion) == 1
    table = text.split("Fusion changes (base-only", 1)[1].split("Per category", 1)[0]
    assert f"| 1 | `{GPT2}/1_inference` | `cpp_fused_argmax_9` |" in table


def test_where_the_time_went_adds_up_to_the_measured_change(tmp_path: Path) -> None:
    text, report = render(make_run(tmp_path))

    parts = pd.read_csv(report / "time_decomposition.csv").set_index("model")
    known = ["changed_code_ms", "identical_code_ms", "fusion_ms", "remainder_ms"]
    for model, row in parts.iterrows():
        total = sum(0.0 if math.isnan(row[c]) else row[c] for c in known)
        assert total == pytest.approx(row["measured_delta_ms"], abs=1e-12), model
    # The measured change is the paired estimate: Bert 5 % and GPT2 10 % slower.
    assert parts.loc[BERT, "measured_delta_ms"] == pytest.approx(0.05 * 0.70, rel=0.15)
    assert parts.loc[GPT2, "measured_delta_ms"] == pytest.approx(0.10 * 0.50, rel=0.15)
    # Changed code: GELU's two launches and the log-softmax renamed in place in Bert; tanh's four in GPT2.
    assert parts.loc[BERT, "changed_code_ms"] == pytest.approx(2 * (0.0164 - 0.0097) + 0.0460 - 0.0313, rel=0.1)
    assert parts.loc[GPT2, "changed_code_ms"] == pytest.approx(4 * (0.0381 - 0.0219), rel=0.1)
    # The identical kernel runs in both models: its share in each is ~0, the in-run control.
    assert abs(parts.loc[BERT, "identical_code_ms"]) < 0.001 and abs(parts.loc[GPT2, "identical_code_ms"]) < 0.001
    # GPT2 lost the argmax launch: one launch fewer × 2 µs; Bert kept its count.
    assert (parts.loc[GPT2, "base_launches"], parts.loc[GPT2, "pr_launches"]) == (6, 5)
    assert parts.loc[GPT2, "launch_ms"] == pytest.approx(-0.002)
    assert parts.loc[BERT, "launch_ms"] == 0.0
    assert parts.loc[BERT, "fusion_kernels_ms"] == 0.0 and parts.loc[GPT2, "fusion_kernels_ms"] < 0  # argmax gone
    assert "(all models)" in parts.index
    assert "Cost of one launch: 2.000 µs per launch (base 2.000 µs, PR 2.000 µs" in text
    assert "![where the PR's time went](time_waterfall.png)" in text
    assert (report / "time_waterfall.png").stat().st_size > 1000
    # Each model's kernels were timed in five paired rounds: the kernels' sum and the remainder have intervals.
    for model, row in parts.iterrows():
        assert row["remainder_low_ms"] < row["remainder_ms"] < row["remainder_high_ms"], model
        kernels = row["changed_code_ms"] + row["identical_code_ms"] + row["fusion_kernels_ms"]
        assert row["kernels_low_ms"] < kernels < row["kernels_high_ms"], model
        # the remainder's range holds both the measured change's spread and the kernels'
        assert row["remainder_high_ms"] - row["remainder_low_ms"] >= row["measured_high_ms"] - row["measured_low_ms"]
    assert re.search(r"\| remainder range \|", text)
    projection = pd.read_csv(report / "projection.csv").set_index("model")
    for model, row in projection.iterrows():
        assert row["projected_low"] < row["projected_speedup"] < row["projected_high"], model


def test_without_a_measured_launch_cost_the_report_says_so(tmp_path: Path) -> None:
    text, report = render(make_run(tmp_path, launch_cost_us=None))

    assert "Cost of one launch: not measured (no launch_cost.json in this run" in text
    assert (pd.read_csv(report / "time_decomposition.csv")["launch_ms"] == 0).all()


def test_compile_time_and_memory_verdicts_per_model(tmp_path: Path) -> None:
    text, report = render(make_run(tmp_path))

    resources = pd.read_csv(report / "model_resources.csv").set_index("model")
    assert resources.loc[GPT2, "compile_ratio"] == pytest.approx(1.2)
    # The suite's single cold compile says 1.2×; the three compiles the rounds repeated say 1.006×: the gate's
    # rule reads the repeats.
    assert resources.loc[GPT2, "compile_verdict"].startswith("within 1.15×: repeated compiles 1.01× (CI ")
    assert resources.loc[GPT2, "compile_verdict"].endswith("the suite's single compile 1.20×")
    assert resources.loc[BERT, "compile_verdict"].startswith("within 1.15×")
    assert resources.loc[GPT2, "base_repeat_s"] == "3.20 s (3.10–3.30, 3 compiles)"
    assert resources.loc[BERT, "base_peak"] == "852 kB" and resources.loc[BERT, "memory_verdict"] == "within 0.9×"
    assert "| mean peak memory, compiled | 852 kB | 852 kB |" in text
    assert "0.0008521" not in text


def test_a_report_of_a_run_without_sources_or_repeats_still_renders(tmp_path: Path) -> None:
    run = make_run(tmp_path, compiles=False)
    for side in ("base", "pr"):
        for path in (run / side / "organized").rglob("*.cpp"):
            path.unlink()

    text, report = render(run)

    assert "_source not available: base/organized/cpp/" in text
    assert pd.read_csv(report / "model_resources.csv")["base_repeat_s"].eq("–").all()


def test_invoke_report_kernel_prints_the_whole_diff(tmp_path: Path) -> None:
    make_run(tmp_path)
    runs = str(tmp_path / "runs")

    result = invoke_in_process("report", "r1", "--runs-dir", runs, "--kernel", TANH)

    assert result.returncode == 0, result.stderr
    assert f"--- base/{TANH}\n+++ pr/{TANH}" in result.stdout
    assert "launch, base: C++" in result.stdout
    text = (tmp_path / "runs" / "r1" / "report" / "report.md").read_text(encoding="utf-8")
    assert "Kernels asked for (`--kernel`):" in text
    missing = invoke_in_process("report", "r1", "--runs-dir", runs, "--kernel", "nope")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        "error: --kernel nope: no kernel of this name in the run (see kernels_compare.csv for the names)"]
    # The typo cost nothing: the report rendered before is still there, current.
    assert (tmp_path / "runs" / "r1" / "report" / "report.md").read_text(encoding="utf-8") == text


def test_a_renumbered_kernel_has_no_diff_and_triton_launch_facts_come_from_the_file() -> None:
    gelu = (PAIRS / "base" / "cpp" / f"{GELU}.cpp").read_text()

    assert code_diff(gelu, renumbered(gelu), "cpp", "a", "b").identical
    assert code_diff(gelu, (PAIRS / "pr" / "cpp" / f"{GELU}.cpp").read_text(), "cpp", "a", "b").changed_lines == 4
    triton = (ROOT / "tests" / "fixtures" / "kernels" / "triton213" / "triton_poi_fused_add_t_0.py").read_text()
    assert launch_config(triton, "triton") == ("grid Grid2D; size_hints {'y': 64, 'x': 64}; YBLOCK, XBLOCK autotuned "
                                               "at run time; num_warps autotuned at run time; num_stages autotuned "
                                               "at run time")
    fixed = triton.replace("min_elem_per_thread=0", "min_elem_per_thread=0, num_warps=4, num_stages=2, XBLOCK=64")
    assert "XBLOCK=64; YBLOCK autotuned at run time; num_warps=4; num_stages=2" in launch_config(fixed, "triton")


def test_a_damaged_launch_cost_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "launch_cost.json"
    path.write_text(json.dumps({"format": 1, "backend": "cpp", "graphs": [{"graph": "g", "launches": "many"}]}))

    with pytest.raises(UserError, match=r"launch_cost\.json: graphs\[0\]\.launches: expected a finite number"):
        read_launch_cost(path)


def test_a_large_run_with_long_diffs_still_fits_a_pr_comment(tmp_path: Path) -> None:
    """Hundreds of changed kernels with long bodies: the comment form shows one diff, shortened, and fits."""
    from analysis.report.render import COMMENT_LIMIT, ReportInputs

    rng = np.random.default_rng(3)
    body = "\n".join(f"    auto tmp{i} = at::vec::Vectorized<float>::loadu(in_ptr0 + x{i % 7}, {{w}});"
                     for i in range(400))
    frames = {}
    for side, width, ms in (("base", 16, 0.01), ("pr", 8, 0.02)):
        rows, samples = [], {}
        for k in range(300):
            text = f"// KERNEL CALLS: 1\nextern \"C\" void kernel(float* in_ptr0)\n{{\n{body.format(w=width)}\n}}\n"
            path = f"cpp/cpp_fused_op{k}_{k}.cpp"
            (tmp_path / side / "organized" / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / side / "organized" / path).write_text(text)
            ident = identify_cpp(f"cpp_fused_op{k}_{k}", text)
            grid = round_draws(rng, ms, 3, 5, 0.01, 0.002, None)
            samples[path] = grid.tolist()
            rows.append({"category": "cpp", "kernel_name": f"cpp_fused_op{k}_{k}", "body_hash": ident.body_hash,
                         "shape_key": "x0_8192", "legacy_key": f"cpp_fused_op{k}_x8192_r0", "path": path,
                         "calls": 1, "graphs": f"{BERT}/0_inference_{side}", "backend": "cpp", "source": "g",
                         "n": 15, "median_ms": ms, "mean_ms": ms, "std_ms": 0.0, "min_ms": ms, "gb": "",
                         "gb_per_s": "", "status": "ok", "error": ""})
        frames[side] = (pd.DataFrame(rows, columns=list(KERNEL_COLUMNS)), samples)

    paths = render_report(ReportInputs(base_kernels=frames["base"][0], pr_kernels=frames["pr"][0],
                                       base_kernel_samples=frames["base"][1], pr_kernel_samples=frames["pr"][1],
                                       base_organized=tmp_path / "base" / "organized",
                                       pr_organized=tmp_path / "pr" / "organized"), tmp_path / "report")

    text = paths.comment_md.read_text(encoding="utf-8")
    assert len(text) <= COMMENT_LIMIT
    assert text.count("```diff") == 1 and "more diff lines: `invoke report RUN --kernel NAME`" in text
    assert text.count("<details>") == text.count("</details>")
