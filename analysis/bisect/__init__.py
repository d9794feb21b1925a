"""Bisect: which commit made it slower. ``search`` picks the next commit and states the result from step
outcomes (good, bad, undecided, skipped; ``git bisect skip`` semantics); ``report`` reads a step's verdict for its
target and writes bisect.json (versioned) and bisect.md.

May import: the analysis base, foundation.formats, analysis.stats, analysis.kernels. Not report.
"""
