"""Reviewer's tools: from a verdict to its culprit.

``bisect_command`` is ``invoke bisect`` (a paired compare per step, `analysis.bisect`), ``repro_command`` is
``invoke repro`` (a self-contained folder that runs one kernel pair both ways), ``ir_command`` is ``invoke ir``
(the Triton IR of a run's changed pairs, compiled for a named target).

May import: analysis, prbench base, prbench.runs, prbench.compare.driver. Never stages.
"""
