"""What the trace commands write: the perf report, the trace diff, the node replay's files and the
vendors' benchmark lines, and the ``--format`` flag they share.
"""
