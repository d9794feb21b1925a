"""Models: the suite's per-model comparison (speedups, compile time, memory, paired rounds) and the
numerical A/B of their outputs (``numerics``: base vs PR, each side vs eager, against a float64 reference).

May import: the analysis base, foundation.formats, analysis.stats. Not report.
"""
