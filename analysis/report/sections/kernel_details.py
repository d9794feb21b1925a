"""The report's collapsed block per kernel pair: its numbers, the models it runs in, its launch configuration and
the diff of its normalised code (`analysis.kernels.source`), for the top regressions and improvements and for the
kernels a user names with ``invoke report --kernel``.

Blocks are made once per pair and kept (`KernelDetails`), because the Markdown is rendered several times while it
is fitted under GitHub's limit; only the number of diff lines shown changes between renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analysis.kernels.compare import KernelComparison
from analysis.kernels.ir import IR_FORMS, KernelIR, ir_diff, summary_rows
from analysis.kernels.source import KernelDetail, pair_detail
from analysis.rendering import (
    Column,
    ci_text,
    code_fence,
    fmt_num,
    fmt_time,
    fmt_x,
    html_text,
    markdown_table,
    md_code,
    md_text,
)
from foundation.errors import UserError


class KernelDetails:
    """The detail blocks of one comparison; ``shown`` is the display table of its pairs (with ``where``)."""

    def __init__(self, base_organized: Path | None, pr_organized: Path | None, kc: KernelComparison | None,
                 shown: pd.DataFrame | None) -> None:
        self.organized = (base_organized, pr_organized)
        self.kc = kc
        self.shown = shown
        self.made: dict[int, KernelDetail] = {}

    def detail(self, row: dict[str, Any], index: int) -> KernelDetail:
        if index not in self.made:
            summary = (f"{fmt_x(row['speedup'])} (CI {ci_text(row['ci_low'], row['ci_high'])}), {row['verdict']}; "
                       f"{fmt_time(row['base_median_ms'])} → {fmt_time(row['pr_median_ms'])} × "
                       f"{fmt_num(row['base_calls'])} launches; in {row['where']}")
            self.made[index] = pair_detail(row, *self.organized, summary)
        return self.made[index]

    def blocks(self, frame: pd.DataFrame, limit: int, lines: int) -> list[str]:
        """The first ``limit`` rows of ``frame`` (rows of the display table) as blocks of ``lines`` diff lines."""
        return [render_detail(self.detail(row, int(index)), lines)
                for index, row in zip(frame.index[:limit], frame.head(limit).to_dict("records"), strict=True)]

    def _rows(self, name: str) -> pd.DataFrame | None:
        if self.shown is None:
            return None
        return self.shown[(self.shown["base_name"] == name) | (self.shown["pr_name"] == name)]

    def asked_blocks(self, names: tuple[str, ...], lines: int) -> list[str]:
        out = []
        for name in names:
            hit = self._rows(name)
            if hit is not None and len(hit):
                out.extend(self.blocks(hit, len(hit), lines))
            elif self.kc is not None:
                out.append(f"{md_code(name)}: {unpaired_note(self.kc, name)}\n")
        return out

    def asked_texts(self, names: tuple[str, ...]) -> list[str]:
        """Plain text with the whole diff, for a terminal."""
        texts = []
        for name in names:
            hit = self._rows(name)
            if hit is None or not len(hit):
                if self.kc is not None:
                    texts.append(f"{name}: {unpaired_note(self.kc, name)}")
                continue
            for index, row in zip(hit.index, hit.to_dict("records"), strict=True):
                d = self.detail(row, int(index))
                body = d.missing if d.diff is None else (d.diff.text or "identical normalised code")
                rows = summary_rows(d.ir[0].summary, d.ir[1].summary) if d.ir else []
                ir = "".join(f"  {what}: {b} → {p}\n" for what, b, p in rows)
                texts.append(f"{d.title}: {d.summary}\nwhat changed: {d.what_changed}\nlaunch, base: {d.base_launch}\n"
                             f"launch, PR:   {d.pr_launch}\n" + (f"Triton IR (base → PR):\n{ir}" if ir else "")
                             + f"{body}\n")
        return texts


def render_detail(detail: KernelDetail, lines: int) -> str:
    """A collapsed block: the pair's numbers and models in the summary, its launch and its code diff inside."""
    if detail.diff is None:
        body, changed = f"_{md_text(detail.missing)}_", "source not available"
    elif detail.diff.identical:
        body, changed = "_The normalised code is identical on both sides (only names or comments differ)._", \
            "identical code"
    else:
        diff_lines = detail.diff.text.splitlines()
        more = len(diff_lines) - lines
        shown = "\n".join(diff_lines[:lines])
        opening, closing = code_fence(shown, "diff")
        tail = (f"\n_{more} more diff lines: `invoke report RUN --kernel NAME` prints the whole diff._"
                if more > 0 else "")
        body = f"{opening}\n{shown}\n{closing}{tail}"
        changed = f"{detail.diff.changed_lines} lines changed"
    summary = html_text(f"{detail.summary}; {changed}")
    what = f"- what changed: {md_text(detail.what_changed)}\n" if detail.what_changed else ""
    ir = render_ir(*detail.ir, lines) if detail.ir else ""
    return (f"<details><summary><code>{html_text(detail.title)}</code>: {summary}</summary>\n\n{what}"
            f"- launch, base: {md_code(detail.base_launch)}\n- launch, PR: {md_code(detail.pr_launch)}\n\n{ir}{body}"
            f"\n\n</details>\n")


IR_COLUMNS = [Column("what", "Triton IR"), Column("base", "base", rule="---:"), Column("pr", "PR", rule="---:")]


def render_ir(base: KernelIR, pr: KernelIR, lines: int) -> str:
    """The pair's IR summary table, then each intermediate form's diff collapsed (``lines`` lines of each)."""
    table = markdown_table(pd.DataFrame(summary_rows(base.summary, pr.summary), columns=["what", "base", "pr"]),
                           IR_COLUMNS)
    blocks = []
    for form in IR_FORMS:
        text = ir_diff(base, pr, form)
        if not text:
            continue
        diff_lines = text.splitlines()
        shown = "\n".join(diff_lines[:lines])
        opening, closing = code_fence(shown, "diff")
        more = f"\n_{len(diff_lines) - lines} more lines in each side's ir/ directory._" if len(diff_lines) > lines \
            else ""
        blocks.append(f"<details><summary>{html_text(form.upper())} diff</summary>\n\n{opening}\n{shown}\n{closing}"
                      f"{more}\n\n</details>\n")
    return f"{table}\n{''.join(blocks)}\n"


def unpaired_note(kc: KernelComparison, name: str) -> str:
    """Why an asked-for kernel has no diff: it is on one side only, or not in the run at all."""
    for side, frame in (("base", kc.only_base), ("the PR", kc.only_pr)):
        if (frame["kernel_name"] == name).any():
            return f"only in {side}: it has no partner to diff with; see the fusion changes"
    # `analysis.report.inputs.check_kernels_asked` refuses unknown names before anything is rendered.
    raise UserError(f"--kernel {name}: no kernel of this name in the run (see kernels_compare.csv for the names)")
