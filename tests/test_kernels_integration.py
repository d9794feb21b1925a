"""End to end on real caches compiled here from builtin-suite models (torch 2.13 on CPU)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.kernels.identity import identify_triton, is_triton_kernel_source
from foundation.formats.kernel_index import IndexRow, embedded_kernels, is_graph_wrapper
from stages.organize import organize
from tests.support.docker_support import VEC_ISA_OK

# Under ``pytest -n`` the module's tests share one worker, and so the caches its session fixtures compile.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("kernels-integration")]

ROOT = Path(__file__).resolve().parents[1]
MAKER = Path(__file__).parent / "support" / "make_kernel_cache.py"
THREE_MODELS = "BertForMaskedLM,DistilBertForMaskedLM,GPT2ForSequenceClassification"


def compile_cache(root: Path, backend: str, models: str, shifted: bool = False) -> Path:
    cache, tmp = root / "cache", root / "tmp"
    tmp.mkdir(parents=True)
    # Inductor's and Triton's settings of the session are left out, but not the skipped ISA probe (this compile
    # of BERT on cpp: 31 s without the probe, 45 s with it).
    env = {k: v for k, v in os.environ.items() if k == VEC_ISA_OK or not k.startswith(("TORCHINDUCTOR_", "TRITON_"))}
    env.update(TMPDIR=str(tmp), OMP_NUM_THREADS="1")
    argv = [sys.executable, str(MAKER), "--cache", str(cache), "--backend", backend, "--models", models]
    result = subprocess.run(argv + (["--shifted"] if shifted else []), cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return cache


@pytest.fixture(scope="session")
def triton_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_cache(tmp_path_factory.mktemp("triton3"), "triton", THREE_MODELS)


@pytest.fixture(scope="session")
def cpp_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_cache(tmp_path_factory.mktemp("cpp"), "cpp", "BertForMaskedLM")


def test_index_accounts_for_every_triton_kernel_in_the_cache(triton_cache: Path, tmp_path: Path) -> None:
    rows = organize(triton_cache, tmp_path / "organized")
    by_key = {(r.category, r.body_hash, r.shape_key): r for r in rows}
    kernel_files = wrappers = 0
    for path in triton_cache.rglob("*.py"):
        text = path.read_text()
        sources = [k.source for k in embedded_kernels(text)] if is_graph_wrapper(text) else (
            [text] if is_triton_kernel_source(text) else [])
        wrappers += is_graph_wrapper(text)
        kernel_files += is_triton_kernel_source(text) and not is_graph_wrapper(text)
        for source in sources:
            identity = identify_triton(source)
            row = by_key[identity.match_key]
            prefix = {"pointwise": "triton_poi_", "persistent_reduction": "triton_per_", "reduction": "triton_red_"}
            assert row.kernel_name.startswith(prefix[row.category]), row
            assert f"@triton_heuristics.{row.category}(" in (tmp_path / "organized" / row.path).read_text()
    assert wrappers == 3 and kernel_files >= 10
    assert all(r.calls >= 1 and r.graphs for r in rows)  # every kernel is launched by some graph
    assert {r.category for r in rows} >= {"pointwise", "persistent_reduction"}


def test_body_hash_pairs_kernels_that_renumbering_renamed(triton_cache: Path, tmp_path: Path) -> None:
    shifted_cache = compile_cache(tmp_path / "shifted", "triton", "BertForMaskedLM", shifted=True)
    base = [r for r in organize(triton_cache, tmp_path / "base") if _in_first_graph(r)]
    shifted = organize(shifted_cache, tmp_path / "pr")
    by_identity = {(r.category, r.body_hash, r.shape_key) for r in shifted}
    by_name = {r.kernel_name for r in shifted}
    identity_share = sum((r.category, r.body_hash, r.shape_key) in by_identity for r in base) / len(base)
    name_share = sum(r.kernel_name in by_name for r in base) / len(base)
    print(f"pairing: body_hash+shape_key {identity_share:.0%}, names {name_share:.0%} of {len(base)} kernels")
    assert len(shifted) == len(base) + 1  # the extra kernel
    assert identity_share >= 0.95
    assert name_share < identity_share


def _in_first_graph(row: IndexRow) -> bool:
    """BertForMaskedLM was compiled first, so its graph is 0_inference."""
    return any(graph.startswith("0_inference") for graph in row.graphs.split(";"))


def test_cpu_default_gives_one_timed_row_per_cpp_kernel(cpp_cache: Path, tmp_path: Path) -> None:
    archive = tmp_path / "inductor-cache.tar.gz"
    subprocess.run(["tar", "-czf", str(archive), "-C", str(cpp_cache), "."], check=True)
    organized = tmp_path / "organized"
    invoke = [sys.executable, "-m", "invoke"]
    env = {**os.environ, "TMPDIR": str(cpp_cache.parent / "tmp")}
    done = subprocess.run([*invoke, "organize", "--cache", str(archive), "--out", str(organized)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run([*invoke, "kernels", "--dir", str(organized), "--cache-dir", str(cpp_cache),
                           "--warmup", "3", "--iterations", "10"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(tmp_path / "kernels.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    with open(organized / "index.csv", newline="") as handle:
        index = list(csv.DictReader(handle))
    assert len(rows) == len(index) >= 3
    for row in rows:
        assert (row["category"], row["status"], row["n"]) == ("cpp", "ok", str(10 * int(row["calls"])))
        assert 0 < float(row["min_ms"]) <= float(row["median_ms"])


# Run in a fresh process (torch and a compiled graph): a worker's prepare of one real C++ graph of the cache, then
# every kernel run once from each copy of its code on the recorded values, and the copies twenty visits drew.
COPIES_CHECK = r'''
import json, random, sys
import torch
from stages.kernels import LOAD, Job, KernelWorker, WallTimer, load_module
from stages.support import cpp_replay

path, kernels = sys.argv[1], json.loads(sys.argv[2])
worker = KernelWorker(WallTimer())
job = Job(0, LOAD, path, kernels, 1, 3, 60.0)
launches = worker.launches(job, load_module(path, "graph_under_test"), keep=True)
report = {}
for kernel in kernels:
    own = [la for la in launches if la.kernel == kernel]
    outputs = []
    # One pass first: a launch may read what another launch of its kernel writes, as the replays leave it.
    for function in (own[0].function,) + own[0].copies:
        for launch in own:
            launch.restore()
            function(*launch.args)
        outputs.append([live.clone() for la in own for live, _ in la.saved])
    outputs = outputs[1:]
    rng = random.Random(0)
    drawn = {cpp_replay.placed(own, rng)[0].function for _ in range(20)}
    report[kernel] = {"files": sorted({f.__self__.__file__ for f in own[0].copies}),
                      "same": all(torch.equal(a, b) for out in outputs for a, b in zip(outputs[0], out)),
                      "drawn": len(drawn & set(own[0].copies)), "copies": len(own[0].copies)}
print(json.dumps(report))
'''


def test_a_worker_runs_each_cpp_kernel_from_several_copies_of_its_library_and_each_computes_the_same(
        cpp_cache: Path, tmp_path: Path) -> None:
    """Where a process maps a kernel's code moved its time (docs/cost-model.md): the user's compare times each C++
    kernel from copies of its shared library, drawn per visit, so a process's mapping is no offset between the
    sides. Every copy is another file, and on the recorded values it writes what the compiled kernel writes; none
    is left on disk once loaded (a worker ends by SIGKILL, past any clean-up at exit)."""
    import json

    from stages.support.cpp_replay import CODE_COPIES

    organized = tmp_path / "organized"
    rows = [r for r in organize(cpp_cache, organized) if r.backend == "cpp" and _in_first_graph(r)]
    path = next(p for p in (organized / "graphs").glob("0_inference*.py"))
    kernels = {r.kernel_name: r.path for r in rows}
    worker_tmp = tmp_path / "tmp"
    worker_tmp.mkdir()
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cpp_cache), "TMPDIR": str(worker_tmp)}
    done = subprocess.run([sys.executable, "-c", COPIES_CHECK, str(path), json.dumps(kernels)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(report) == len(kernels) >= 3, path
    for kernel, seen in report.items():
        assert seen["copies"] == len(seen["files"]) == CODE_COPIES, kernel
        assert seen["same"], f"{kernel}: a copy of its code wrote other values"
        assert seen["drawn"] >= 3, f"{kernel}: twenty visits drew only {seen['drawn']} of its copies"
        copies = [f for f in seen["files"] if f.startswith(str(worker_tmp))]
        assert len(copies) == CODE_COPIES - 1 and not any(map(os.path.exists, copies)), kernel
    assert not any(worker_tmp.rglob("*.so")), sorted(worker_tmp.rglob("*"))
