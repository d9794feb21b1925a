"""Formats: the files the stages and the host exchange, torch-free, imported by both sides.

``run_layout`` is where every file of a run and of a variant lives; ``stage_records`` the records a stage reads
(kernel jobs, the paired plan, worker pinning, environment variable names); ``suite_request`` / ``suite_options``
what the suite is asked for; ``dynamo_csv``, ``paired_rounds``, ``round_shards``, ``suite_shard_records``,
``launch_cost`` and ``cache_archive`` the formats of the files themselves.

May import: the analysis base (errors, records, atomic_io, io_errors, flag_values) and other formats modules only.
"""
