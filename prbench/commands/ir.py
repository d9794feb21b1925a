"""``invoke ir``: the Triton IR of a run's changed kernel pairs, for the report's IR summary and diffs.

Each side's Triton kernels whose code changed (paired by identity as the report pairs them, matched other than by
identical code) are compiled for a named target by ``stages.triton_ir`` in that side's environment, without a GPU,
into ``<side>/ir/<kernel name>/`` (`foundation.formats.run_layout.VariantLayout.ir`); ``invoke report`` then shows each
pair's IR summary, its one-line "what changed" and the collapsed diffs of every intermediate form.
"""

from __future__ import annotations

from pathlib import Path

from analysis.kernels.ir import parse_target
from foundation.errors import UserError
from foundation.formats.run_layout import SIDES, RunLayout
from prbench.commands.cli import holds_run, task, user_facing
from prbench.commands.flags import runs_dir_from
from prbench.commands.repro import in_side_environment
from prbench.stages.command_lines import run_stage, triton_ir_command


def changed_triton_pairs(run_dir: Path) -> list[tuple[str, str]]:
    """(base name, PR name) of every paired Triton kernel whose code changed."""
    # pandas, imported here: at module level every ``invoke`` command would pay for it at start (about 0.4 s).
    from analysis.kernels.compare import IDENTICAL_CODE, pair_kernels, read_kernels_csv

    base, pr = (read_kernels_csv(RunLayout(run_dir).variant(side).kernels_csv) for side in SIDES)
    pairing = pair_kernels(base, pr)
    return [(str(base.at[b, "kernel_name"]), str(pr.at[p, "kernel_name"]))
            for b, p, how in pairing.pairs.itertuples(index=False)
            if how != IDENTICAL_CODE and base.at[b, "backend"] == "triton"]


def finished_changed_pairs(run_dir: Path, none_means: str) -> list[tuple[str, str]]:
    """The changed Triton pairs of a finished comparison; a UserError naming the run where it is not finished or
    has none (``none_means``: what that leaves undone)."""
    for side in SIDES:
        if not (csv := RunLayout(run_dir).variant(side).kernels_csv).is_file():
            raise UserError(f"{csv}: not found (--run must name a finished comparison)")
    pairs = changed_triton_pairs(run_dir)
    if not pairs:
        raise UserError(f"--run {run_dir.name}: no paired Triton kernel changed its code ({none_means})")
    return pairs


def write_run_ir(run_dir: Path, target: str) -> list[tuple[str, str]]:
    """Compile the changed Triton pairs of the run for ``target`` into each side's ``ir/``; returns the pairs."""
    parse_target(target)
    pairs = finished_changed_pairs(run_dir, "nothing to compile")
    for index, side in enumerate(SIDES):
        names = sorted({pair[index] for pair in pairs})
        files = RunLayout(run_dir).variant(side)
        command = triton_ir_command(files.organized, target, files.ir, names)
        run_stage(in_side_environment(run_dir, side, command))
    return pairs


@task(help={"run": "Run id of a finished comparison under the runs directory",
            "target": "GPU target to compile for, no GPU needed: cuda:<capability> (cuda:90) or hip:<arch> "
                      "(hip:gfx942)",
            "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)"})
@user_facing
@holds_run(runs_dir_from)
def ir(ctx, run, target, runs_dir=None):
    """Compile a run's changed Triton kernel pairs for a target into <side>/ir/; then `invoke report` shows them."""
    from prbench.runs.run_store import RunStore

    with RunStore(runs_dir_from(ctx, runs_dir)).open(run, write=True) as opened:
        pairs = write_run_ir(opened.root, target)
    print(f"ir: {len(pairs)} changed Triton pairs compiled for {target} into base/ir/ and pr/ir/; "
          f"render them with: invoke report --run {run}")
