"""The report: its inputs (``inputs``), what it computes for the reader (verdict line, gates, projection,
time decomposition, resources, kernel details), and how it is written (``render``: xlsx, csv, plots; ``markdown``:
report.md; ``summary``: summary.json; ``pr_comment``).

May import: the rest of analysis (base, formats, stats, kernels, models, traces). Nothing imports it but the host.
"""
