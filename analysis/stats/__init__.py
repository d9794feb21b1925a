"""Statistics of the verdict: per-item intervals and verdicts (``verdict``), their settings
(``verdict_settings``), the noise rules, adaptive stopping of the timing rounds (``sequential``), and the
numerical A/B's tolerances per dtype (``numeric_tolerance``).

May import: the analysis base and foundation.formats. Not kernels/models/report.
"""
