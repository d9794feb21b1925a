"""The report as GitHub shows it: rendered with GitHub's own renderer (cmark-gfm), every table keeps its columns
and renders as a table, the collapsed blocks are balanced, and every link or image resolves to a file of the
report or is absolute; the PR comment made from it has no local link at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.report.pr_comment import CommentSources, comment_marker, pr_comment
from analysis.report.render import ReportInputs, render_report
from tests.support.compare_data import kernel_specs, kernels_frame, model_rounds, suite_frame
from tests.support.gfm_check import gfm_problems, render_gfm, source_tables

MODELS = {"BertForMaskedLM": 40.0, "GPT2": 30.0, "T5Small": 60.0}
TRACE_DIFF = """### Per category

| category | base ms | PR ms | delta |
|---|---|---|---|
| gemm | 1.000 | 1.100 | +10.0 % |
| elementwise | 0.500 | 0.450 | −10.0 % |
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """Every section of the report: kernels paired and unpaired (a fusion changed), models with paired rounds and
    gates, the projection, the lock, a trace diff, and more kernels than the tables show."""
    specs = kernel_specs(700, seed=31, models=tuple(MODELS))
    base, bs = kernels_frame(specs[:-2], seed=32)
    pr, ps = kernels_frame(specs[2:], seed=33, factor={5: 0.7, 9: 1.4})
    suite_b, ssb = suite_frame(MODELS, seed=34)
    suite_p, ssp = suite_frame(MODELS, seed=35, factor={"GPT2": 1.1})
    # An environment value with pipes, long enough to be shortened in its cell.
    env = {"torch": {"commit": "1" * 40}, "stage_env": {"TORCHINDUCTOR_FLAGS": "a|b|" * 40 + "zz"}}
    out = tmp_path_factory.mktemp("gfm") / "report"
    paths = render_report(ReportInputs(base, pr, bs, ps, suite_b, suite_p, ssb, ssp, base_env=env,
                                       pr_env={**env, "torch": {"commit": "2" * 40}},
                                       base_model_rounds=model_rounds(MODELS, seed=36),
                                       pr_model_rounds=model_rounds(MODELS, seed=37, factor={"GPT2": 1.1}),
                                       lock={"base": {"image": {"digest": "sha256:" + "d" * 64}}},
                                       trace_diff_md=TRACE_DIFF), out)
    return paths.report_md.read_text(encoding="utf-8"), out


def test_the_report_renders_on_github_with_every_table_details_block_and_link_whole(rendered: tuple[str, Path]) -> None:
    text, report_dir = rendered

    assert gfm_problems(text, report_dir) == []
    html = render_gfm(text)
    assert html.count("<table>") == len(source_tables(text)) >= 12
    # collapsed: compile/memory, projection, kernel summary (with the diffs of the top regressions and
    # improvements), trace diff, method, environment, all pairs, only base, only PR, all models
    assert html.count("<details>") == html.count("</details>") == 12
    # the plots, next to report.md: the two forest plots, the waterfall, per category, the distribution
    assert html.count("<img src=") == 5
    assert "more rows in kernels_compare.csv" in text  # the tables were cut, and stayed well formed


def test_the_pr_comment_of_the_report_renders_and_links_nothing_local(rendered: tuple[str, Path]) -> None:
    _, report_dir = rendered
    form = (report_dir / "comment.md").read_text(encoding="utf-8")

    comment = pr_comment(form, comment_marker("report"), CommentSources(run_id="r1", archive_name="report.tar.gz"))

    assert gfm_problems(comment, files_in=None) == []  # no report dir: any relative link would be a problem
    assert "<img" not in render_gfm(comment) and comment.count("](") == 0
    assert len(form) <= 20_000 and comment.endswith("in run `r1`.</sub>\n")


@pytest.mark.parametrize(("markdown", "problem"), [
    ("| a | b |\n|---|---|\n| 1 | x|y |\n", "line 3: 3 cell(s) under a 2-column header"),
    ("| a | b |\n|---|---|\n| 1 | 2 |\nOnly in base: x.\n", "line 4: 1 cell(s) under a 2-column header"),
    ("<details><summary>all</summary>\n| a |\n|---|\n| 1 |\n</details>\n", "1 table(s) in the source, 0 rendered"),
    ("<details><summary>all</summary>\n\n| a |\n|---|\n| 1 |\n", "1 <details> never closed"),
    ("<details>\n\ntext\n</details>\n", "a <details> that starts with text, not <summary>"),
    ("![plot](missing.png)\n", "link target 'missing.png' is neither absolute nor a file of the report"),
    ("[up](../secret.txt)\n", "link target '../secret.txt' is neither absolute nor a file of the report"),
])
def test_the_check_sees_what_github_would_show_broken(tmp_path: Path, markdown: str, problem: str) -> None:
    (tmp_path.parent / "secret.txt").write_text("x")
    problems = gfm_problems(markdown, tmp_path)
    assert any(p.startswith(problem) for p in problems), problems


def test_the_check_accepts_escaped_pipes_anchors_and_absolute_links(tmp_path: Path) -> None:
    (tmp_path / "plot.png").write_bytes(b"png")
    markdown = ("| a | b |\n|---|---|\n| `x\\|y` | 2 |\n\n[top](#top) [gh](https://github.com/o/r) "
                "![p](plot.png)\n\n```\n| not | a table |\n|---|\n```\n")
    assert gfm_problems(markdown, tmp_path) == []
