"""Timing rounds for the executors' tests: a plan of fake kernel or model jobs (``tests.support.fake_paired_worker``),
its rounds cut into shards, and what a merged round file holds, to compare executors by."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from foundation.formats.paired_rounds import read_round
from foundation.formats.stage_records import Plan, SidePlan, write_plan
from prbench.compare.round_sharding import RoundShards, SideRunner, round_shards
from prbench.executors import RunnerSpec

ROOT = Path(__file__).resolve().parents[2]
FAKE = "tests.support.fake_paired_worker"


def kernel_block(name: str, **job: Any) -> dict[str, Any]:
    def side(ms: float) -> dict[str, Any]:
        return {"path": f"/organized/{name}.py", "kernels": {name: f"pointwise/{name}.py"}, "ms": ms,
                "iterations": 3, "timeout_s": 60.0, **job}

    return {"base": side(1.0), "pr": side(2.0)}


def model_block(name: str) -> dict[str, Any]:
    job = {"kind": "time", "model": name, "iterations": 3, "timeout_s": 60.0}
    return {"base": job, "pr": job}


def write_fake_plan(directory: Path, blocks: list[dict[str, Any]], kind: str = "kernels") -> Path:
    prepare = [{"kind": "prepare", "model": b["base"]["model"], "timeout_s": 60.0} for b in blocks] \
        if kind == "models" else []
    sides = {side: SidePlan(env={"PYTHONPATH": str(ROOT)}, log=str(directory / f"{side}-workers.log"),
                            prepare=list(prepare)) for side in ("base", "pr")}
    path = directory / "plan.json"
    write_plan(path, Plan(kind=kind, worker=FAKE, device="cpu", sides=sides, blocks=blocks, passes=2,
                          platform="cpu"))
    return path


def shards_of(run_dir: Path, plan: Path, blocks: int, shard_size: int, rounds: int = 1,
              kind: str = "kernels") -> list[RoundShards]:
    local = RunnerSpec("local", platform="cpu", python=sys.executable)
    sides = [SideRunner("base", local), SideRunner("pr", local)]
    return [round_shards(kind, n, "inputs0", run_dir / "pair" / kind, plan, blocks, shard_size, sides, apart=False,
                         logs=run_dir / "pair" / "logs") for n in range(1, rounds + 1)]


def round_shape(path: Path) -> dict[str, Any]:
    """What must not depend on the executor: the sides, and per visit its side, item, block, pass and position."""
    record = read_round(path)
    return {"kind": record.kind, "round": record.round, "sides": record.sides,
            "visits": sorted((v.side, v.item, v.block, v.pass_index, v.position, len(v.samples), v.error)
                             for v in record.visits)}
