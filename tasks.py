"""prbench command line: thin invoke tasks over the prbench, stages and analysis packages.

Run ``invoke --list`` for the tasks and ``invoke --help TASK`` for every flag.
"""

from __future__ import annotations

from invoke import task

from prbench.cli import config_value, resolve_path, user_facing


def _runs_dir(ctx, runs_dir: str | None):
    return resolve_path(runs_dir or config_value(ctx, "runs_dir", "runs"))


# --- run store -------------------------------------------------------------------------------------------


@task(help={"run": "Run id under the runs directory (default: the most recent run)",
            "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)"})
@user_facing
def status(ctx, run=None, runs_dir=None):
    """Show each stage of a run: status, duration, outputs and errors."""
    from prbench.runstore import RunStore
    from prbench.status_view import print_status

    store = RunStore(_runs_dir(ctx, runs_dir))
    print_status(store.open(run) if run else store.latest())
