"""Markdown cut to a size limit stays Markdown: whole lines, code fences and collapsed blocks closed, the least
important blocks dropped first, and a note that says what was cut and where the whole text is."""

from __future__ import annotations

from analysis.markdown_fit import cut_markdown, details_blocks, fit_markdown, outside_code
from tests.support.gfm_check import gfm_problems

TABLE = "| kernel | ms |\n|---|---|\n" + "".join(f"| k{i} | {i} |\n" for i in range(200))
REPORT = (f"# Report\n\n## Kernels\n\n{TABLE}\n"
          f"<details><summary>All kernel pairs (200)</summary>\n\n{TABLE}\n</details>\n\n"
          f"## Method\n\nRounds.\n\n"
          f"<details><summary>All models (30)</summary>\n\n| model |\n|---|\n" + "| GPT2 |\n" * 30 + "\n</details>\n")


def test_text_under_the_limit_is_left_alone() -> None:
    assert fit_markdown(REPORT, len(REPORT), "x") == REPORT
    assert cut_markdown(REPORT, len(REPORT), "x") == REPORT


def test_collapsed_blocks_go_first_last_one_first_and_the_note_names_them() -> None:
    fitted = fit_markdown(REPORT, len(REPORT) - 100, "`report.tar.gz`")

    assert "<summary>All models (30)" not in fitted and "<summary>All kernel pairs (200)" in fitted
    assert "## Method" in fitted
    assert fitted.endswith("_Cut to fit the size limit: the collapsed “All models (30)”. The whole text is in "
                           "`report.tar.gz`._\n")
    assert gfm_problems(fitted) == []


def test_when_dropping_blocks_is_not_enough_the_tail_is_cut_inside_a_table_at_a_row() -> None:
    fitted = fit_markdown(REPORT, 1500, "`report.tar.gz`")

    assert len(fitted) <= 1500
    assert "_Cut to fit the size limit: the collapsed “All kernel pairs (200)”, “All models (30)” and the text from " \
           "part-way through “Kernels” on." in fitted
    assert "## Method" not in fitted and gfm_problems(fitted) == []


def test_a_cut_inside_a_collapsed_block_or_a_code_fence_closes_it() -> None:
    text = "<details><summary>diff</summary>\n\n```diff\n" + "".join(f"-x{i}\n+y{i}\n" for i in range(500)) + \
           "```\n\n</details>\n"

    cut = cut_markdown(text, 800, "_cut_")

    assert len(cut) <= 800 and cut.endswith("```\n\n</details>\n\n_cut_\n")
    assert gfm_problems(cut) == []


def test_details_blocks_are_found_at_top_level_with_their_summaries() -> None:
    lines = ["<details><summary>outer **one**</summary>", "", "<details><summary>inner</summary>", "x",
             "</details>", "</details>", "", "```", "<details>", "```", "<details><summary>two</summary>", "y",
             "</details>"]
    assert [(b.start, b.end, b.summary) for b in details_blocks(lines)] == [(0, 5, "outer one"), (10, 12, "two")]


def test_outside_code_leaves_code_spans_and_fences_untouched() -> None:
    text = "see [a](b) and `k[grid](x)`\n\n```python\nkernel[grid](args)\n```\n[c](d)\n"
    assert outside_code(text, lambda s: s.replace("](", "]<")) == \
        "see [a]<b) and `k[grid](x)`\n\n```python\nkernel[grid](args)\n```\n[c]<d)\n"
