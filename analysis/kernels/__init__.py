"""Kernels: identity (what makes two generated kernels the same), the organized index, timing results,
sources, the base/PR comparison and fusion changes, the benchmark line a kernel file is run with, the paired
kernels' numerical A/B (``numerics``), a pair's reproducer folder (``repro``) and its Triton IR summary (``ir``).

May import: the analysis base, foundation.formats, analysis.stats. Not report.
"""
