"""Publishing: the report leaves the machine (``invoke publish``).

``publish_command`` posts or updates the PR comment and attaches the report, ``github_api`` is the REST client
(deadlines, errors as one line), ``report_archive`` packs a run's report with its lock and manifest.

May import: analysis, prbench base, prbench.runs (to read a run). Never stages.
"""
