"""A side's first process probes the CPU's vector instruction sets; every later process of the side reuses its answer.

Every model worker, kernel worker and ``launch_cost`` of a comparison used to compile and load Inductor's test
programs again before its first C++ kernel (1.26 s per process here, round after round). These tests run the
probe for real (g++ and the installed torch), with the tests' own skip of it turned off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.docker_support import VEC_ISA_OK

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]

# What a stage process does first, then what Inductor would pick for its first C++ kernel; the probes it ran.
PROCESS = """
import json
from torch._inductor import config, cpu_vec_isa

probes = []
real_probe = cpu_vec_isa.VecISA._probe_load
def counted(self, path):
    probes.append(str(self))
    return real_probe(self, path)
cpu_vec_isa.VecISA._probe_load = counted

from stages.support.environment import prepare_inductor
prepare_inductor({})
picked = cpu_vec_isa.pick_vec_isa()
print(json.dumps({"usable": [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()], "picked": str(picked),
                  "probes": probes, "vec_isa_ok": config.cpp.vec_isa_ok}))
"""


def stage_process(cache: Path, tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TRITON_"))}
    env.update({VEC_ISA_OK: "", "TORCHINDUCTOR_CACHE_DIR": str(cache), "TMPDIR": str(tmp)})
    result = subprocess.run([sys.executable, "-c", PROCESS], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_second_process_of_a_side_picks_what_the_first_probed_without_loading_a_program(tmp_path: Path) -> None:
    cache, tmp = tmp_path / "inductor-cache", tmp_path / "tmp"
    tmp.mkdir()

    first = stage_process(cache, tmp)
    second = stage_process(cache, tmp)

    assert first["probes"], "the side's first process load-tests its programs"
    record = json.loads((cache / "prbench-vec-isa.json").read_text())
    assert record["format_version"] == 1 and len(record["loaded"]) == len(first["probes"])
    assert second["probes"] == []
    assert (second["usable"], second["picked"]) == (first["usable"], first["picked"])
    assert second["vec_isa_ok"] is None  # Inductor's own switch (part of the FX graph cache key) is left alone


def test_a_record_made_on_another_cpu_is_not_trusted(tmp_path: Path) -> None:
    cache, tmp = tmp_path / "inductor-cache", tmp_path / "tmp"
    tmp.mkdir()
    first = stage_process(cache, tmp)
    record_path = cache / "prbench-vec-isa.json"
    record = json.loads(record_path.read_text())
    record["key"]["cpu"] = {"model name": "another CPU", "flags": "sse2"}
    record_path.write_text(json.dumps(record))

    again = stage_process(cache, tmp)

    assert again["probes"] == first["probes"]
    assert json.loads(record_path.read_text())["key"]["cpu"]["model name"] != "another CPU", "written anew"
