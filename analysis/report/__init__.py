"""The report: its inputs (``inputs``), what it computes for the reader (the verdict line: ``headline``, the kernels
that add the time; gates, projection, time decomposition, resources, kernel details), and how it is written
(``render``: xlsx, csv, plots; ``markdown``: report.md and its comment form; ``summary``: summary.json;
``pr_comment``).

May import: the rest of analysis (base, formats, stats, kernels, models, traces). Nothing imports it but the host.
"""
