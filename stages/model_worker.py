"""Model worker: keeps compiled suite models alive and times their compiled step on request.

    python -m stages.model_worker --worker --result-fd N        (started by ``stages.paired``)

Jobs, one JSON line each (``stages.support.worker_process`` protocol); every reply is ``{"results": {model: ...}}``:

* ``{"kind": "prepare", "model": M, "size", "mode", "dtype", "device", "backend", "warmup", "timeout_s",
  "later": [M2, ...]}``: build M as the suite does (``stages.support.hf_models.build``, seeded), and first the models
  of ``later`` (those this worker prepares after M) not built yet, then ``torch.compile`` M with ``backend`` and
  warm it up with ``warmup`` calls. The worker runs with its side's ``TORCHINDUCTOR_CACHE_DIR``, which the suite
  left warm, so compiling loads that side's kernels instead of generating new ones. Reply
  ``{M: {"compile_s": first call in s, "build_s": building the model, "warmup_s": the other warm-up calls}}``.
* ``{"kind": "time", "model": M, "warmup": w, "iterations": n, "timeout_s"}``: ``w`` untimed then ``n`` timed
  compiled steps of a prepared M; reply ``{M: {"samples": [ms, ...]}}``.

Several models stay alive side by side, so dynamo's per-code-object recompile limit is raised: models of one
class (or sharing a frame after a graph break) must not fall back to eager because another model came first;
and each model is compiled without the shape history of the ones before it (`forget_automatic_dynamic`), so
its graph is the one the suite compiled and the worker loads it from the warm cache.

Every model of the worker is built before the first is compiled: building a model of a new class adds to a
transformers registry whose size the compiled graphs' guards check (``len(_CAN_RECORD_REGISTRY)``), so a model
compiled before another was built failed its guards at its first timed visit and was compiled again, with the
other models' input sizes marked dynamic (another graph than the suite's, so a cold compile). Measured in README
command 1 (8 models, 2 cores, loaded): the first pass of round 1 took 149 s (T5Small's visit 34.5 s), of later
rounds 15-30 s, against 2-3 s for the other passes; three graphs per side that the suite never compiled.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stages.entry import StageArgumentParser, run_as_script
from stages.support.worker_process import JobHandler, serve, watch_lifeline

RECOMPILE_LIMIT = 64


@dataclass
class Prepared:
    step: Callable[[], Any]  # one compiled step on the model's inputs
    device: str


class ModelWorker:
    def __init__(self) -> None:
        self.models: dict[str, Prepared] = {}
        self.built: dict[str, Any] = {}  # built and not yet compiled, by model

    def handle(self, job: dict[str, Any]) -> dict[str, Any]:
        if job["kind"] == "prepare":
            return {"results": {job["model"]: self.prepare(job)}}
        if job["kind"] == "time":
            return {"results": {job["model"]: self.time(job)}}
        raise ValueError(f"unknown job kind {job['kind']!r}")

    def prepare(self, job: dict[str, Any]) -> dict[str, Any]:
        import torch

        from stages.suite import dtype_and_autocast, timed_step
        from stages.support import timing
        from stages.support.hf_models import build

        started = time.monotonic()
        forget_automatic_dynamic(torch)
        device = job["device"]
        weights_dtype, _ = dtype_and_autocast(job["dtype"], device)
        for name in job.get("later", []):
            if name not in self.built:
                # A model that fails to build here is built again by its own prepare, which reports why.
                with contextlib.suppress(Exception):
                    self.built[name] = build(name, size=job["size"], mode=job["mode"], dtype=weights_dtype,
                                             device=device)
        built = self.built.pop(job["model"], None) or build(job["model"], size=job["size"], mode=job["mode"],
                                                            dtype=weights_dtype, device=device)
        step = timed_step(built.model, job["mode"], job["dtype"], device, job["backend"])  # the suite's, compiled whole

        def run() -> Any:
            return step.compiled(built.model, built.inputs)

        build_s = time.monotonic() - started
        compile_s = timing.time_call_s(run, device)
        started = time.monotonic()
        for _ in range(job["warmup"] - 1):
            run()
        self.models[job["model"]] = Prepared(run, device)
        return {"compile_s": compile_s, "build_s": round(build_s, 3), "warmup_s": round(time.monotonic() - started, 3)}

    def time(self, job: dict[str, Any]) -> dict[str, Any]:
        from stages.support import timing

        prepared = self.models.get(job["model"])
        if prepared is None:
            raise KeyError(f"{job['model']} was not prepared in this worker")
        for _ in range(job["warmup"]):
            prepared.step()
        return {"samples": [timing.time_call_ms(prepared.step, prepared.device) for _ in range(job["iterations"])]}


def forget_automatic_dynamic(torch: Any) -> None:
    """Compile the next model as a fresh process would: with no shape history from the models compiled before.

    Dynamo keeps, per code object, the input sizes it has seen, and a recompile whose sizes differ marks them
    dynamic ("automatic dynamic"). Models of different classes share code objects (transformers wraps every
    ``forward`` in the same decorator), so in a worker that keeps its models alive the third model, T5Small after
    BertForMaskedLM and GPT2ForSequenceClassification, was compiled with ``labels`` dynamic: another graph than
    the suite's (which resets dynamo before each model), so both caches missed and round 1 compiled it cold
    (26-41 s here, against 4.8 s from the warm cache once the history is forgotten). Only that history is
    cleared (``torch._dynamo.pgo``, torch 2.6+): the models already compiled keep their graphs and guards.
    """
    pgo = getattr(torch._dynamo, "pgo", None)
    if pgo is not None and hasattr(pgo, "reset_code_state"):
        pgo.reset_code_state()


def worker_main(result_fd: int) -> int:
    watch_lifeline()  # before the seconds of imports: a worker never outlives its stage
    return serve(result_fd, worker_setup()())


def worker_setup() -> Callable[[], JobHandler]:
    """This process made ready to be a model worker (torch, dynamo and transformers imported, Inductor prepared);
    returns what makes the worker's job handler (a process forked after the setup makes one of its own:
    ``benchmarks/forked_workers.py``)."""
    from stages.suite import hub_offline

    hub_offline()  # before transformers is imported
    import torch._dynamo
    import transformers

    from stages.support.environment import prepare_inductor

    prepare_inductor()
    if os.environ.get("TRITON_INTERPRET") == "1":
        from stages.support import triton_cpu

        triton_cpu.install()
    transformers.logging.set_verbosity_error()
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # older torch
    setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))
    return lambda: ModelWorker().handle


def build_parser() -> argparse.ArgumentParser:
    parser = StageArgumentParser(prog="python -m stages.model_worker", description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help="run as a worker (the only mode)")
    parser.add_argument("--result-fd", type=int, required=True, help="pipe the replies are written to")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return worker_main(args.result_fd)


if __name__ == "__main__":
    run_as_script(main)
