"""Pure data and reporting: kernel identity, tables, matching, statistics, traces and reports.

Nothing here starts a process or talks to Docker, so stages can import it inside any environment.
"""
