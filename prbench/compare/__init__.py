"""Comparisons: ``invoke compare`` (``driver``) and the capabilities it drives.

``variant_plan`` resolves base and PR into variants; ``suite_stage`` / ``suite_shards`` run the suite (spread over
an executor), ``kernel_stages`` / ``kernel_shards`` organize and time kernels, ``paired_plan`` writes the paired
timing plans (``foundation.formats.stage_records.Plan``) and ``shard_rounds`` runs their rounds in shards;
``doctor`` is ``invoke doctor`` (the checks ``driver`` runs first), ``kernel_compare_command`` is
``invoke compare-kernels``, ``node_replay_command`` the perf report's node replay.

May import: analysis, prbench base, prbench.images.build, prbench.runs, prbench.executors, prbench.runners. Never
stages.
"""
