"""Runs: the run directory and how stages run in it.

``run_store`` owns ``<runs>/<id>/manifest.json`` (stage status, input hashes, outputs; skip, resume, force);
``run_lock`` is the run's file lock (one writer); ``pipeline`` prepares variants and runs stage specs through a
runner; ``stage_commands`` builds every stage's command line (one builder per ``stages/<name>.py``); ``variants``
and ``overlay`` are what a side of a comparison is; ``status_command`` and ``report_command`` are ``invoke status``
and ``invoke report``. File paths come from ``foundation.formats.run_layout``.

May import: analysis, prbench base modules, prbench.runners, prbench.images.build (a run's environment). Never stages.
"""
