"""How busy the GPU was during each stage of a run: `nvidia-smi` utilization samples matched to the run's stage times.

    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -lms 200 > util.csv &
    ...  # invoke compare / benchmarks/aa_noise.py --measure
    python benchmarks/gpu_busy_by_stage.py --utilization util.csv RUN_DIR [RUN_DIR ...]

A sample's utilization is the share of its period in which a kernel ran (nvidia-smi's definition), so the mean
over a stage's samples is the share of the stage's wall time the GPU was busy. Stage times come from the run's
``manifest.json`` (whole seconds), so a stage shorter than a few seconds gets a rough number; it is printed with
its sample count. The paired kernel rounds are also summed as one line, "kernel stage": the must-show of the GPU
check is that they keep the GPU busy.
"""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prbench.commands.cli import OneLineParser  # noqa: E402

KERNEL_ROUND = "pair/kernels-round-"
KERNEL_STAGE = "kernel stage (all kernel rounds)"  # the paired kernel rounds summed as one row


@dataclass(frozen=True)
class Sample:
    at: float  # POSIX seconds
    utilization: float  # percent


@dataclass(frozen=True)
class StageBusy:
    stage: str
    seconds: float
    samples: int
    busy_percent: float | None


def read_samples(path: Path) -> list[Sample]:
    """``timestamp, utilization.gpu, memory.used`` lines (nvidia-smi's csv,noheader); unreadable lines skipped."""
    samples = []
    with path.open(newline="") as handle:
        for fields in csv.reader(handle):
            if len(fields) < 2:
                continue
            try:
                at = datetime.strptime(fields[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC)
                samples.append(Sample(at.timestamp(), float(fields[1].strip().rstrip("%").strip())))
            except ValueError:
                continue
    return samples


def stage_spans(run: Path) -> list[tuple[str, float, float]]:
    """(stage, start, end) in POSIX seconds for every stage of the run that ran, in start order.

    The end is the start plus the stage's duration: a round's ``finished`` is rewritten when the last round ends.
    """
    return manifest_spans(json.loads((run / "manifest.json").read_text()))


def manifest_spans(manifest: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(stage, start, end) of a run's manifest (already read), as `stage_spans`."""
    spans = []
    for name, stage in manifest.get("stages", {}).items():
        if stage.get("started") and isinstance(stage.get("duration_s"), int | float):
            start = datetime.fromisoformat(stage["started"]).timestamp()
            spans.append((name, start, start + float(stage["duration_s"])))
    return sorted(spans, key=lambda span: span[1])


def busy(samples: list[Sample], spans: list[tuple[float, float]]) -> tuple[int, float | None]:
    inside = [s.utilization for s in samples if any(start <= s.at <= end for start, end in spans)]
    return len(inside), (sum(inside) / len(inside) if inside else None)


def run_busy(run: Path, samples: list[Sample]) -> list[StageBusy]:
    spans = stage_spans(run)
    rows = []
    for name, start, end in spans:
        count, percent = busy(samples, [(start, end)])
        rows.append(StageBusy(name, end - start, count, percent))
    rounds = [(start, end) for name, start, end in spans if name.startswith(KERNEL_ROUND)]
    if rounds:
        count, percent = busy(samples, rounds)
        rows.append(StageBusy(KERNEL_STAGE, sum(e - s for s, e in rounds), count, percent))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--utilization", type=Path, required=True, help="nvidia-smi samples (csv, noheader)")
    parser.add_argument("runs", type=Path, nargs="+", help="run directories (each with manifest.json)")
    args = parser.parse_args(argv)
    if not args.utilization.is_file():
        parser.error(f"--utilization {args.utilization}: no such file")
    for run in args.runs:
        if not (run / "manifest.json").is_file():
            parser.error(f"{run}: no manifest.json (not a run directory)")
    samples = read_samples(args.utilization)
    if not samples:
        parser.error(f"--utilization {args.utilization}: no samples (expected nvidia-smi csv,noheader lines)")
    for run in args.runs:
        print(f"{run.name}:")
        for row in run_busy(run, samples):
            shown = "no samples" if row.busy_percent is None else f"{row.busy_percent:5.1f} % busy"
            print(f"  {row.stage:<36} {row.seconds:7.1f} s  {shown} ({row.samples} samples)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
