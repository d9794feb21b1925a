"""prbench command line: thin invoke tasks over the prbench, stages and analysis packages.

Run ``invoke --list`` for the tasks and ``invoke --help TASK`` for every flag.

The tasks live in prbench/commands/ (one module per command family); this file hands their
Collection to invoke.
"""

from prbench.commands import ns

__all__ = ["ns"]
