"""The profile stage on CPU: a tiny suite model gives a Kineto trace whose per-kernel table names Inductor's
C++ kernels, with one ProfilerStep window per profiled step."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.traces import read_trace
from analysis.traces.breakdown import kernels_per_step, top_kernels

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.integration
def test_profile_stage_writes_a_trace_with_cpp_kernels_and_steps(tmp_path: Path) -> None:
    suite_csv = tmp_path / "suite.csv"
    suite_csv.write_text("name,size,mode,dtype,status\nBertForMaskedLM,tiny,inference,float32,ok\n"
                         "T5Small,tiny,inference,float32,fail\n")
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp_path / "tmp"),
               OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    out = tmp_path / "profiles"

    proc = subprocess.run([sys.executable, "-m", "stages.profile", "--suite-csv", str(suite_csv), "--out", str(out),
                           "--steps", "2", "--warmup", "1", "--device", "cpu"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    index = list(csv.DictReader((out / "profile_index.csv").open()))
    assert [(r["name"], r["status"]) for r in index] == [("BertForMaskedLM", "ok")]  # failed suite rows skipped
    trace = read_trace(out / "BertForMaskedLM.json.gz")
    kernels = top_kernels(trace, n=None)
    assert (kernels["category"] == "cpp").sum() >= 3
    assert len(kernels_per_step(trace)) == 2
