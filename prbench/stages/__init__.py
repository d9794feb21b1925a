"""The host side of each stage, one module per ``stages/<name>.py``: its command line (``command_lines``), how
the host plans, shards and collects it (``suite``, ``suite_shards``, ``kernels``, ``paired``), and the report
step (``report``; a run of several modes: ``modes_report``). Never imports the ``stages`` package itself (it
runs in another environment).
"""
