"""The command line: the invoke tasks, one module per command family, each holding its ``@task`` and
its body, the shared flag helpers (``flags``), the error boundary and run flags (``cli``); ``ns`` is the
invoke Collection that tasks.py hands to invoke.
"""

from __future__ import annotations

from invoke import Collection

from prbench.commands import bisect, compare, images, ir, kernel_compare, publish, repro, status, steps, traces


def _namespace() -> Collection:
    ns = Collection()
    ns.add_task(compare.compare)
    ns.add_task(compare.doctor)
    ns.add_task(compare.modes)
    ns.add_task(images.build)
    ns.add_task(images.rebuild)
    ns.add_task(images.verify)
    ns.add_task(images.store_task)
    ns.add_task(bisect.bisect)
    ns.add_task(ir.ir)
    ns.add_task(repro.repro)
    ns.add_task(steps.suite)
    ns.add_task(steps.organize)
    ns.add_task(steps.kernels)
    ns.add_task(steps.profile)
    ns.add_task(steps.report)
    ns.add_task(status.status)
    ns.add_task(publish.publish)
    ns.add_task(traces.perf_report)
    ns.add_task(traces.trace_diff)
    ns.add_task(kernel_compare.compare_kernels)
    return ns


ns = _namespace()
