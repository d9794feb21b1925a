"""The report a reviewer reads, on the real data of README command 1 (tests/fixtures/readme_run/README.md).

Given the quick start's run, re-rendered as `invoke report` does: the headline leads with the models and never
calls summed kernel time "the step"; the same-named kernels of different models are paired within their own
models; every numerics row shows its own pair's speedup; the comment form fits a PR comment whole; one
confidence level outside the method (the selection-adjusted ones said once, in it); one direction; times with
three significant digits; capped q-values; the dashboard's compile time and each side's graph-cache hits and
misses; a failed control or gate named in the headline (made to fail by a minimal, stated perturbation of the
same data); the control's flagged pairs counted alike in every table; and the order a reviewer reads.
"""

from __future__ import annotations

import json
import math
import re
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from analysis.kernels.compare import PLACE, pair_kernels
from analysis.kernels.cpp_build import CPP_BUILD_RECORD, write_cpp_build
from analysis.markdown_fit import outside_code
from analysis.rendering import cell, fmt_x
from analysis.report.markdown import COMMENT_LIMIT
from analysis.report.render import load_report_inputs, render_report
from foundation.formats.kernel_index import where_launched
from foundation.formats.run_layout import SIDES, RunLayout

FIXTURE = Path(__file__).parent / "fixtures" / "readme_run" / "readme1-a.tar.gz"
LAYER_NORM = "cpp_fused_add_native_layer_norm_view_1"
BART = frozenset({"BartForCausalLM"})
ENCODERS = frozenset({"AlbertForMaskedLM", "BertForMaskedLM", "DistilBertForMaskedLM", "ElectraForCausalLM",
                      "RobertaForCausalLM"})


# How a side of this run compiles C++ kernels, as its launch_cost records it (analysis.kernels.cpp_build): both sides
# ran the installed torch with the same flags (the PR patches Python only). The archive leaves the caches out.
CPP_COMMAND = ("/usr/bin/g++ /tmp/x/kernel.cpp -D TORCH_INDUCTOR_CPP_WRAPPER -O3 -DNDEBUG -ffast-math "
               "-fno-finite-math-only -fno-unsafe-math-optimizations -ffp-contract=off -march=native -fopenmp "
               "-I/opt/venv/include -shared -fPIC -o /tmp/x/kernel.so")
HEADERS = "9f" * 32


def _record_cpp_build(run: Path, side: str, torch_build: str) -> None:
    write_cpp_build(RunLayout(run).variant(side).inductor_cache, [CPP_COMMAND], torch_build, HEADERS)


def _copy(tmp: Path) -> Path:
    """The run directory, extracted where the test may write (its report goes into it, as `invoke report`'s), with
    each side's record of its C++ build."""
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(tmp, filter="data")
    run = tmp / "readme1-a"
    for side in SIDES:
        RunLayout(run).variant(side).inductor_cache.mkdir(parents=True)
        _record_cpp_build(run, side, "2.13.0+cpu")
    return run


def _render(run: Path) -> dict[str, object]:
    paths = render_report(load_report_inputs(run), run / "report")
    return {"paths": paths, "md": paths.report_md.read_text(encoding="utf-8"),
            "comment": paths.comment_md.read_text(encoding="utf-8"),
            "kernels": pd.read_csv(paths.kernels_csv, keep_default_na=False, na_values=[""]),
            "summary": json.loads(paths.summary_json.read_text(encoding="utf-8"))}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    return _render(_copy(tmp_path_factory.mktemp("readme_run")))


def _verdict(md: str) -> str:
    return next(line for line in md.splitlines() if line.startswith("**Verdict:**"))


def _models(graphs: str) -> frozenset[str]:
    return frozenset(e.split("/")[0] for e in str(graphs).split(";") if "/" in e)


def _body(md: str) -> str:
    """What a reader sees before the collapsed sections: up to the control and caveats' end."""
    head, control = md.split("## Control and caveats", 1)
    return head + control.split("<details>", 1)[0]


# --- the headline ------------------------------------------------------------------------------------------------


def test_the_headline_names_the_models_first_then_the_time_in_inductor_kernels(rendered: dict) -> None:
    verdict = _verdict(rendered["md"])

    assert verdict.startswith("**Verdict:** Models **")
    assert verdict.index("Models **") < verdict.index("Time in Inductor kernels **")
    assert rendered["summary"]["verdict"] == verdict  # summary.json says what the report says
    assert _verdict(rendered["comment"]) == verdict


def test_summed_kernel_time_is_never_called_the_step(rendered: dict) -> None:
    for text in (rendered["md"], rendered["comment"]):
        assert "the step" not in text.lower()


def test_the_kernels_adding_most_time_are_named_by_time_renamed_ones_included(rendered: dict) -> None:
    verdict = _verdict(rendered["md"])
    contributors = pd.read_csv(rendered["paths"].out_dir / "kernel_contributors.csv")
    adds = bool(contributors["delta_ms_per_step"].sum() > 0)
    top = contributors.iloc[0]

    assert f"most of the {'added' if adds else 'saved'} time: `{top['kernel']}`" in verdict
    # sorted by the time each adds, in the direction of the total change
    deltas = contributors["delta_ms_per_step"].to_numpy()
    assert list(deltas) == sorted(deltas, reverse=adds)


# --- pairing -----------------------------------------------------------------------------------------------------


def test_same_named_kernels_of_different_models_are_paired_within_their_own_models(rendered: dict) -> None:
    rows = rendered["kernels"][rendered["kernels"]["base_name"] == LAYER_NORM]

    assert len(rows) == 2
    assert {_models(g) for g in rows["base_graphs"]} == {BART, ENCODERS}
    for base_graphs, pr_graphs in zip(rows["base_graphs"], rows["pr_graphs"], strict=True):
        assert _models(base_graphs) == _models(pr_graphs)


def _indexes(run: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    return tuple(pd.read_csv(run / side / "organized" / "index.csv", dtype=str, keep_default_na=False)
                 for side in ("base", "pr"))  # type: ignore[return-value]


def _pairs_of(base: pd.DataFrame, pr: pd.DataFrame, name: str) -> list[tuple[frozenset[str], frozenset[str]]]:
    pairing = pair_kernels(base, pr)
    return [(_models(base.at[b, "graphs"]), _models(pr.at[p, "graphs"]))
            for b, p in zip(pairing.pairs["base_row"], pairing.pairs["pr_row"], strict=True)
            if base.at[b, "kernel_name"] == name]


def test_same_named_kernels_stay_in_their_models_whatever_the_file_order(rendered: dict) -> None:
    """Perturbation: the two base layer-norm files swap names (which one organize met first, and so which got the
    `.<hash>` suffix), as on the VM where the issue was found; their contents and graphs are untouched."""
    base, pr = _indexes(rendered["paths"].out_dir.parent)
    rows = base.index[base["kernel_name"] == LAYER_NORM]
    base.loc[rows, "path"] = base.loc[rows[::-1], "path"].to_numpy()

    pairs = _pairs_of(base, pr, LAYER_NORM)

    assert sorted(pairs, key=lambda pair: len(pair[0])) == [(BART, BART), (ENCODERS, ENCODERS)]


def test_a_fallback_key_never_pairs_kernels_of_other_models(rendered: dict) -> None:
    """Perturbation: base keeps only Bart's layer norm and the PR only the encoders' (each side's other one
    removed): the name and shapes still match, the models do not, so they stay unpaired."""
    base, pr = _indexes(rendered["paths"].out_dir.parent)
    base = base[~((base["kernel_name"] == LAYER_NORM) & base["graphs"].map(_models).eq(ENCODERS))]
    pr = pr[~((pr["kernel_name"] == LAYER_NORM) & pr["graphs"].map(_models).eq(BART))]

    assert _pairs_of(base.reset_index(drop=True), pr.reset_index(drop=True), LAYER_NORM) == []


def test_the_renamed_log_softmax_kernel_is_paired_in_place(rendered: dict) -> None:
    renamed = rendered["kernels"][rendered["kernels"]["matched_by"] == PLACE]

    assert len(renamed) == 1
    row = renamed.iloc[0]
    assert "log_softmax" in row["base_name"] and "log_softmax" in row["pr_name"]
    assert row["base_name"] != row["pr_name"] and _models(row["base_graphs"]) == _models(row["pr_graphs"])


def test_every_numerics_row_shows_its_own_pairs_speedup(rendered: dict) -> None:
    def shown(text: str, width: int) -> str:  # as the table's cell shows a name: shortened in the middle
        return cell(text, width, code=True).strip("`")

    kernels = rendered["kernels"].assign(
        name=lambda t: [shown(b if b == p else f"{b} → {p}", 60) for b, p in zip(t["base_name"], t["pr_name"],
                                                                                   strict=True)],
        where=lambda t: [shown(where_launched(f"{b};{p}"), 72) for b, p in zip(t["base_graphs"], t["pr_graphs"],
                                                                                 strict=True)])
    section = rendered["md"].split("Kernels (base and PR kernel on identical inputs", 1)[1].split("\n\n", 2)[1]
    rows = [[c.strip().strip("`") for c in line.strip("|").split(" | ")] for line in section.splitlines()[2:]]

    assert rows
    for name, where, *_, speedup, _result in rows:
        pair = kernels[(kernels["name"] == name) & (kernels["where"] == where)]
        assert len(pair) == 1 and speedup == fmt_x(pair["speedup"].iloc[0]), (name, where, speedup)
    layer_norms = [row for row in rows if row[0] == LAYER_NORM]
    assert len(layer_norms) == 2 and layer_norms[0][-2] != layer_norms[1][-2]  # each its own pair's speedup
    assert not any("differ in number or shape" in row[-1] for row in layer_norms)


# --- one convention ----------------------------------------------------------------------------------------------


def test_the_body_states_one_confidence_level(rendered: dict) -> None:
    for text in (rendered["md"], rendered["comment"]):
        levels = set(re.findall(r"(\d+(?:\.\d+)?) % (?:CI|intervals?)", _body(text)))
        assert len(levels) == 1, levels


# A confidence level as the report states one: "95 % CI", "95.7 % intervals", "at 91.4 %", "level 95 %".
_LEVEL = re.compile(r"(\d{2}(?:\.\d+)?) % (?:CI|intervals?|Student|level|confidence)|(?:level|at) (\d{2}(?:\.\d+)?) %")


def _method(md: str) -> tuple[str, str]:
    """The collapsed Method section, and everything else."""
    start = md.index("<details><summary>Method</summary>")
    end = md.index("</details>", start)
    return md[start:end], md[:start] + md[end:]


def _levels(text: str) -> list[str]:
    return [a or b for a, b in _LEVEL.findall(text)]


def test_one_level_outside_the_method_and_the_selection_adjusted_ones_once_inside(rendered: dict) -> None:
    """Every level the report states outside its method, collapsed sections included, is the one of the tables
    (the run's confidence); the levels the selected items' verdicts rest on are said once, in the method."""
    level = f"{100 * rendered['summary']['settings']['confidence']:g}"
    method, rest = _method(rendered["md"])
    selected = re.findall(r"rest on intervals at (\d+(?:\.\d+)?) %", method)

    assert selected and level not in selected  # this run has selection-adjusted levels ...
    assert set(_levels(rest)) == {level}, set(_levels(rest))  # ... and no other level outside the method
    assert set(_levels(rendered["comment"])) == {level}
    for other in selected:
        assert rendered["md"].count(f"{other} %") == 1 and f"{other} %" not in rendered["comment"]


_TIME = re.compile(r"^[+−]?(\d+(?:\.\d+)?) (ns|µs|ms|s)$")


def _significant(number: str) -> int:
    digits = number.replace(".", "").lstrip("0")
    return len(digits) if "." in number else len(number.rstrip("0")) or 1


def test_times_are_shown_with_three_significant_digits(rendered: dict) -> None:
    cells = [c.strip() for line in rendered["md"].splitlines() if line.startswith("| ")
             for c in line.strip("|").split("|")]
    times = [m for m in (_TIME.match(c) for c in cells) if m]

    assert len(times) > 50
    assert all(_significant(m.group(1)) == 3 or float(m.group(1)) >= 100 for m in times), \
        [m.group(0) for m in times if _significant(m.group(1)) != 3 and float(m.group(1)) < 100]
    assert "0.0000" not in rendered["md"]


def test_q_values_are_capped(rendered: dict) -> None:
    assert (rendered["kernels"]["q_value"].dropna() < 1e-4).any()  # the run has such q-values ...
    q_cells = []
    for table in _tables(rendered["md"]):
        header = [c.strip() for c in table[0].strip("|").split(" | ")]
        if "q" in header:
            q_cells += [row.strip("|").split(" | ")[header.index("q")].strip() for row in table[2:]]
    assert "&lt; 0.0001" in q_cells  # ... shown capped ("< 0.0001" as GitHub shows it)
    assert all(c == "–" or c == "&lt; 0.0001" or float(c) >= 1e-4 for c in q_cells)


# --- the comment form --------------------------------------------------------------------------------------------


def _tables(text: str) -> list[list[str]]:
    blocks, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    return blocks + ([current] if current else [])


def test_each_models_base_and_pr_times_divide_to_its_speedup(rendered: dict) -> None:
    """A cold reader divided 1.70 ms by 3.90 ms, got 0.44× and found 0.591× beside it: the row must agree."""
    units = {"ns": 1e-6, "µs": 1e-3, "ms": 1.0, "s": 1e3}
    table = next(t for t in _tables(rendered["comment"]) if t[0].startswith("| model | base | PR | speedup"))
    for row in table[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        (base, base_unit), (pr, pr_unit) = cells[1].split(), cells[2].split()
        ratio = float(base) * units[base_unit] / (float(pr) * units[pr_unit])
        assert ratio == pytest.approx(float(cells[3].rstrip("×")), rel=0.01), row


def test_the_comment_form_fits_shows_no_local_image_and_no_table_is_cut(rendered: dict) -> None:
    comment = rendered["comment"]
    links: list[str] = []
    outside_code(comment, lambda prose: links.extend(re.findall(r"!?\[[^\]]*\]\(([^)\s]+)", prose)) or prose)

    assert len(comment) <= COMMENT_LIMIT
    assert not [t for t in links if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]  # no relative image or link
    assert "**The full report**" in comment and "adds:" in comment
    for table in _tables(comment):  # every table whole: a header, its rule, rows of as many cells
        widths = {len(re.split(r"(?<!\\)\|", row.strip())) for row in table}
        assert re.fullmatch(r"\|(---\|)+", table[1].replace(" ", "")) and len(widths) == 1, table[:3]
    assert "cut to fit" not in comment


def test_the_file_has_the_forest_plots(rendered: dict) -> None:
    out = rendered["paths"].out_dir
    for name in ("kernel_forest.png", "model_forest.png"):
        assert f"]({name})" in rendered["md"] and (out / name).stat().st_size > 5000


# --- the dashboard's compile time ---------------------------------------------------------------------------------


def _suite(run: Path, side: str) -> pd.DataFrame:
    return pd.read_csv(run / side / "suite" / "suite.csv")


def test_compile_time_is_the_dashboards_mean_of_cold_compiles(rendered: dict) -> None:
    gate = next(g for g in rendered["summary"]["gates"] if g["name"] == "compile time ratio")
    base, pr = (_suite(rendered["paths"].out_dir.parent, side) for side in ("base", "pr"))
    ok = (base["status"] == "ok") & (pr["status"] == "ok")

    assert gate["value"] == pytest.approx(pr.loc[ok, "compilation_latency"].mean()
                                          / base.loc[ok, "compilation_latency"].mean())
    assert gate["ci_low"] < gate["value"] < gate["ci_high"] and "worst model" in gate["detail"]


def _dashboard(md: str, label: str) -> list[str]:
    row = next(line for line in md.split("## Dashboard summary", 1)[1].splitlines() if line.startswith(f"| {label}"))
    return [c.strip() for c in row.strip("|").split("|")][1:]


def test_the_dashboard_shows_each_sides_graph_cache_hits_and_misses(tmp_path: Path) -> None:
    """This run's suite.csv predates the cache columns: the row says so. Perturbation: the columns added to both
    sides' suite.csv (base: every graph missed; PR: one model's two graphs hit), nothing else."""
    def per_model(out: Path) -> dict[str, tuple[str, str]]:  # the collapsed compile table's cells, as its CSV
        table = pd.read_csv(out / "model_resources.csv", keep_default_na=False)
        return {m: (b, p) for m, b, p in zip(table["model"], table["base_graph_cache"], table["pr_graph_cache"],
                                             strict=True)}

    run = _copy(tmp_path)
    label = "FX-graph cache hits / misses in those compiles"
    before = _render(run)
    assert _dashboard(before["md"], label) == ["not recorded", "not recorded"]
    assert set(per_model(before["paths"].out_dir).values()) == {("–", "–")}

    for side, hits in (("base", [0] * 8), ("pr", [2] + [0] * 7)):
        suite = _suite(run, side)
        suite["fxgraph_cache_hits"], suite["fxgraph_cache_misses"] = hits, [2 - h for h in hits]
        suite.to_csv(run / side / "suite" / "suite.csv", index=False)
    after = _render(run)

    assert _dashboard(after["md"], label) == ["0 / 16", "2 / 14"]
    first = _suite(run, "pr")["name"].iloc[0]
    cells = per_model(after["paths"].out_dir)
    assert cells.pop(first) == ("0 / 2", "2 / 0") and set(cells.values()) == {("0 / 2", "0 / 2")}
    assert "| graph cache hits / misses base | PR |" in after["md"]


def test_a_failed_compile_gate_is_in_the_headline(tmp_path: Path) -> None:
    """Perturbation: every model's PR cold compile made 1.3× base's in pr/suite/suite.csv, nothing else."""
    run = _copy(tmp_path)
    base, pr = _suite(run, "base"), _suite(run, "pr")
    pr["compilation_latency"] = base.set_index("name").loc[pr["name"], "compilation_latency"].to_numpy() * 1.3
    pr.to_csv(run / "pr" / "suite" / "suite.csv", index=False)

    verdict = _verdict(_render(run)["md"])

    assert "Dashboard checks **failed**: " in verdict and "compile time ratio 1.300× fail (> 1.15×; worst " in verdict


# --- the control ---------------------------------------------------------------------------------------------------


def test_the_failed_control_names_its_kernel_its_cut_off_and_what_it_leaves_standing(rendered: dict) -> None:
    """This run's kernel control failed (an identical kernel ran ~1.10×): the headline says which kernel, the
    cut-off below which kernel claims are withheld, and that the models' verdict stands."""
    assert rendered["summary"]["control"]["kernels"]["passed"] is False
    verdict = _verdict(rendered["md"])
    found = re.search(r"In-run control \*\*failed\*\*: kernel claims under (\d+\.\d) % withheld: identical "
                      r"`(\w+)` ran (\d\.\d{3})×", verdict)

    assert found, verdict
    cut, kernel, speedup = float(found.group(1)), found.group(2), float(found.group(3))
    row = rendered["kernels"][rendered["kernels"]["base_name"] == kernel].iloc[0]
    assert not row["code_changed"] and fmt_x(row["speedup"]) == f"{speedup:.3f}×"
    assert cut == pytest.approx(100 * (max(speedup, 1 / speedup) - 1), abs=0.1)  # the cut-off is what it produced
    assert "the model verdict is unaffected" in verdict


def test_identical_source_the_sides_compile_otherwise_is_changed_code_not_the_control(
        rendered: dict, tmp_path: Path) -> None:
    """The same run as if its sides had compiled against other torch builds (the Docker release A/B 2.13.0+cpu
    against 2.14.1): every kernel's binary changed, so the identical-source pairs count as changed code, with the
    reason where the report says what the PR changed, and the control falls back to the split-half."""
    same = rendered["summary"]["kernels"]
    assert same["code_identical"] > 0 and same["compiled_otherwise"] is None
    assert rendered["summary"]["control"]["kernels"]["kind"] == "identical kernels"

    run = _copy(tmp_path)
    _record_cpp_build(run, "pr", "2.14.1+cpu")
    other = _render(run)

    kernels = other["summary"]["kernels"]
    assert kernels["code_identical"] == 0
    assert kernels["code_changed"] == same["code_changed"] + same["code_identical"]
    assert kernels["compiled_otherwise"] == {"pairs": same["code_identical"], "reason": "the torch build differs"}
    assert other["summary"]["control"]["kernels"]["kind"] == "split-half"
    assert not other["kernels"]["control"].any() and other["kernels"]["code_changed"].all()
    row = _table_row(other["md"], "what the PR changed")[1]
    assert (f"({same['code_identical']} of them identical source, compiled otherwise: the torch build differs), "
            "0 are identical (the control)") in row


def test_a_side_without_a_record_of_its_cpp_build_has_no_identical_code(tmp_path: Path) -> None:
    """A side that recorded no C++ build (a run made before the record, or one whose commands could not be made):
    its identical source is not known to be identical code."""
    run = _copy(tmp_path)
    (RunLayout(run).variant("base").inductor_cache / CPP_BUILD_RECORD).unlink()

    kernels = _render(run)["summary"]["kernels"]

    assert kernels["code_identical"] == 0
    assert kernels["compiled_otherwise"]["reason"] == f"base recorded no C++ build ({CPP_BUILD_RECORD})"


def _table_row(md: str, first_cells: str) -> list[str]:
    row = next(line for line in md.splitlines() if line.startswith(f"| {first_cells}"))
    return [c.strip() for c in row.strip("|").split("|")]


def test_the_control_table_and_the_kernel_summary_count_the_same_flagged_pairs(rendered: dict) -> None:
    """The control table's "flagged" and the kernel summary's identical-pair counts are one judgement: the
    control's, before claims under its cut-off were withheld (this run's control flagged one identical pair)."""
    *_, flagged, result = _table_row(rendered["md"], "kernels | identical kernels")
    counts = _table_row(rendered["md"], "identical pairs (control)")[1].split(" / ")
    improved, regressed, equivalent, inconclusive = map(int, counts)
    control = rendered["summary"]["control"]["kernels"]

    n = int(flagged.split()[0])
    assert n >= 1 and result == "**failed**"
    assert improved + regressed == n and improved + regressed + equivalent + inconclusive == control["n"]
    assert control["false_positive_share"] == pytest.approx(n / control["n"])
    assert rendered["summary"]["kernels"]["control_verdicts"] == {
        "improved": improved, "regressed": regressed, "equivalent": equivalent, "inconclusive": inconclusive}


# --- the order a reviewer reads ------------------------------------------------------------------------------------


def test_the_report_reads_verdict_environment_dashboard_models_kernels_time_control_then_all_else_collapsed(
        rendered: dict) -> None:
    md = rendered["md"]
    order = ["**Verdict:**", "**Environment:**", "## Dashboard summary", "## Models", "](model_forest.png)",
             "## Kernels by the time they add", "## Where the PR's time went", "## Control and caveats"]
    assert [md.index(mark) for mark in order] == sorted(md.index(mark) for mark in order)
    environment = next(line for line in md.splitlines() if line.startswith("**Environment:**"))
    for field in ("vector ISA", "cores", "device ", "load", "run ", "models ", "torch ", "Triton "):
        assert field in environment, field
    depth, outside = 0, []
    for line in ("<details>" + md.split("## Control and caveats", 1)[1].split("<details>", 1)[1]).splitlines():
        depth += line.count("<details>") - line.count("</details>")
        if depth == 0 and line.strip() and "</details>" not in line:
            outside.append(line)
    assert [line for line in outside if not line.startswith("Attached:")] == []  # everything else collapsed


def test_one_direction_percent_slower_is_pr_time_over_base(rendered: dict) -> None:
    """"N % slower" beside a speedup x (base / PR, > 1: the PR faster) is the PR's time over base's, as the
    tables' compile-time and memory columns: N = 100 (1/x − 1), "faster" when it is negative."""
    claims = re.findall(r"(\d+\.\d) % (slower|faster)[;(\s]+(?:geomean )?(\d+\.\d{3})×", _verdict(rendered["md"]))

    assert len(claims) == 2  # the models and the time in Inductor kernels
    for pct, word, x in claims:
        change = 100 * (1 / float(x) - 1)
        assert word == ("slower" if change > 0 else "faster")
        assert float(pct) == pytest.approx(abs(change), abs=0.06 / float(x) ** 2 + 0.05)


def test_a_failed_pass_rate_or_memory_check_is_in_the_headline(tmp_path: Path) -> None:
    """Perturbation: in pr/suite/suite.csv T5Small fails and every model's compression ratio is halved."""
    run = _copy(tmp_path)
    pr = _suite(run, "pr").astype({"error": object})
    pr.loc[pr["name"] == "T5Small", ["status", "error"]] = ["fail", "RuntimeError: boom"]
    pr["compression_ratio"] = pr["compression_ratio"] / 2
    pr.to_csv(run / "pr" / "suite" / "suite.csv", index=False)

    verdict = _verdict(_render(run)["md"])

    assert "Dashboard checks **failed**: " in verdict
    assert "pass rate 0.875× fail (< 1×)" in verdict and "peak-memory compression ratio 0.500× fail (< 0.9×)" in verdict


# --- how much of a step the kernels are --------------------------------------------------------------------------


def _model_cells(md: str, header: str) -> dict[str, str]:
    """The models table's ``header`` column per model."""
    lines = md.split("## Models", 1)[1].split("## Kernels", 1)[0].splitlines()
    head = next(line for line in lines if line.startswith("| model |"))
    col = [c.strip() for c in head.strip("|").split("|")].index(header)
    rows = (line for line in lines if line.startswith("| `"))
    return {cells[0].strip("`"): cells[col] for cells in ([c.strip() for c in r.strip("|").split("|")] for r in rows)}


def _ms_per_step(kernels: pd.DataFrame) -> float:
    ok = kernels[kernels["status"].fillna("ok").str.lower().isin(["ok", ""]) & (kernels["median_ms"] > 0)]
    return float((ok["median_ms"] * ok["calls"].where(ok["calls"] > 0, 1.0).fillna(1.0)).sum())


def test_each_model_states_its_kernel_share_and_the_tiny_run_says_it_is_low(rendered: dict) -> None:
    """At tiny size on the CPU the Inductor kernels are a small part of the step: each model's row says how small,
    and one line under the table says what that means for the PR and which size gives them more."""
    out = rendered["paths"].out_dir
    share = rendered["summary"]["kernel_share"]
    models = pd.read_csv(out / "models_compare.csv")
    base_kernels = pd.read_csv(out.parent / "base" / "kernels.csv", keep_default_na=False, na_values=[""])

    # one step of every model: Σ standalone kernel time × launches over Σ base compiled latency
    assert share["all_models"] == pytest.approx(_ms_per_step(base_kernels) / models["base_latency_ms"].sum())
    assert share["all_models"] < 0.10 and set(share["low"]) == set(models["model"])
    cells = _model_cells(rendered["md"], "kernel share")
    assert cells == {m: f"{100 * v:.1f} %" for m, v in share["models"].items()}
    assert share["models"]["T5Small"] < share["models"]["AlbertForMaskedLM"]
    line = (f"Inductor kernels are only {100 * share['all_models']:.0f} % of the compiled latency at tiny size; "
            "per model")
    assert line in _body(rendered["md"]) and line in rendered["comment"]
    assert "`--size small`, hidden size 256" in _body(rendered["md"])


def test_models_whose_kernels_are_a_large_share_get_no_warning_only_the_low_ones_are_named(tmp_path: Path) -> None:
    """Perturbation: every base kernel's median in base/kernels.csv (the share's numerator) made 6× longer,
    nothing else: one step of every model is then 33 % kernels, the encoders' 43-73 %, T5Small's 8 %."""
    run = _copy(tmp_path)
    kernels = pd.read_csv(run / "base" / "kernels.csv", keep_default_na=False, na_values=[""])
    kernels["median_ms"] = kernels["median_ms"] * 6
    kernels.to_csv(run / "base" / "kernels.csv", index=False)

    after = _render(run)
    share = after["summary"]["kernel_share"]

    assert share["all_models"] > 0.30 and share["low"] == ["T5Small"]
    assert "Inductor kernels are only" not in after["md"]
    assert (f"Inductor kernels are below 30 % of the compiled latency in 1 of 8 model(s) at tiny size: `T5Small` "
            f"{100 * share['models']['T5Small']:.0f} %") in _body(after["md"])


# --- the resolution ------------------------------------------------------------------------------------------------


def test_the_resolution_is_the_smallest_change_told_apart_from_none_whatever_the_threshold(
        tmp_path: Path, rendered: dict) -> None:
    """Each family's `detectable_pct` is its headline's resolution: (t(1 − alpha) + t(80 %)) standard errors of the
    log ratio over the rounds, as the stated interval gives them, not the threshold plus that; re-rendered at
    --threshold 5 % it does not move, and the kernel summary says from what change each threshold's claim is made
    with that power."""
    from dataclasses import replace

    from analysis.stats.verdict import t_quantile

    run = _copy(tmp_path)
    inputs = load_report_inputs(run)
    inputs.settings = replace(inputs.settings, stats=replace(inputs.settings.stats, threshold=0.05))
    paths = render_report(inputs, tmp_path / "at-5")
    at_5 = json.loads(paths.summary_json.read_text(encoding="utf-8"))

    for family, lead in (("kernels", "step"), ("models", None)):
        block = rendered["summary"][family]
        est = block[lead] if lead else block
        df = block["rounds"] - 1
        se = math.log(est["ci_high"] / est["ci_low"]) / (2 * t_quantile((1 + block["confidence"]) / 2, df))
        expected = 100 * math.expm1((t_quantile(1 - block["alpha"], df) + t_quantile(0.8, df)) * se)
        assert block["detectable_pct"] == pytest.approx(expected, rel=1e-3), family
        assert at_5[family]["detectable_pct"] == pytest.approx(block["detectable_pct"], rel=1e-9), family
    resolution = rendered["summary"]["kernels"]["detectable_pct"] / 100
    for md, threshold in ((rendered["md"], 0.02), (paths.report_md.read_text(encoding="utf-8"), 0.05)):
        row = _table_row(md, "its resolution: the smallest change this run tells apart from none")[1]
        assert row == (f"{100 * resolution:.1f} %; called improved/regressed beyond the {100 * threshold:g} % "
                       f"threshold from {100 * ((1 + threshold) * (1 + resolution) - 1):.1f} %")
