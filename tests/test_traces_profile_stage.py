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
from analysis.traces.analyses.breakdown import kernels_per_step, top_kernels

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


# The profile stage's part: it shares its headers, lends them to a TMPDIR of its own, then runs a Python process
# there that imports no stage code (as each compiled graph's -p run does), which says where its Inductor looks.
LEND_THEN_ASK = """
import os, shutil, subprocess, sys
from pathlib import Path
from stages.support.environment import lend_precompiled_headers, prepare_inductor
tmpdir = Path(sys.argv[1])
prepare_inductor({})  # as the profile stage starts
lend_precompiled_headers(tmpdir)
ask = "import os; from torch._inductor import codecache as c; print(c._HEADER_DIR, os.path.realpath(c._HEADER_DIR))"
child = {k: v for k, v in os.environ.items() if k != "PRBENCH_INDUCTOR_HEADERS"}
print(subprocess.run([sys.executable, "-c", ask], env={**child, "TMPDIR": str(tmpdir)}, check=True,
                     capture_output=True, text=True).stdout.strip())
shutil.rmtree(tmpdir)
"""


@pytest.mark.integration
def test_a_graph_run_with_a_tmpdir_of_its_own_finds_the_stages_precompiled_headers(tmp_path: Path) -> None:
    headers, tmpdir = tmp_path / "inductor-headers", tmp_path / "graphs-tmp"
    tmpdir.mkdir()
    env = dict(os.environ, PRBENCH_INDUCTOR_HEADERS=str(headers), PYTHONPATH=str(ROOT))

    proc = subprocess.run([sys.executable, "-c", LEND_THEN_ASK, str(tmpdir)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    where, resolved = map(Path, proc.stdout.strip().splitlines()[-1].split())
    assert where.is_relative_to(tmpdir) and resolved == headers.resolve()
    assert headers.is_dir() and not tmpdir.exists()  # removing the graph runs' TMPDIR keeps the headers
