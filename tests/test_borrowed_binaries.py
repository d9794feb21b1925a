"""The PR's worker times an identical-code C++ pair from base's graph module: it must run base's compiled binary.

A side whose torch lives under another directory (the PR's overlay on the installed torch, another venv) computes
other Inductor cache keys for the same source, because the compile command carries the include directories; it
used to compile base's kernels again and time its own build. Here base compiles a small graph in one process, and
a second process reaching the same torch through another directory imports base's graph module as a kernel worker
does: it loads base's binaries and compiles nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stages.support.borrowed_binaries import BorrowedBinaries, index_sources

ROOT = Path(__file__).resolve().parents[1]

BASE_COMPILE = textwrap.dedent("""
    import torch
    import torch._inductor.config as inductor_config

    inductor_config.cpp.enable_kernel_profile = True

    def f(x):
        return (x * 2.0).sin().sum(dim=1) + x.cos().amax(dim=1)

    torch.compile(f)(torch.randn(64, 32))
""")

PR_IMPORT = textwrap.dedent("""
    import json, sys
    import torch
    from stages.kernels import LOAD, Job, KernelWorker, WallTimer

    graph, cache = sys.argv[1], sys.argv[2]
    KernelWorker(WallTimer()).execute(Job(0, LOAD, graph, {}, 1, 1, 60, cache_dir=cache))
    print(json.dumps({"torch": torch.__file__}))
""")


def binaries(cache: Path) -> set[Path]:
    return set(cache.glob("*/*.so"))


@pytest.mark.integration
def test_a_worker_with_torch_under_another_directory_runs_bases_binaries_and_compiles_nothing(tmp_path: Path) -> None:
    base_cache, pr_cache = tmp_path / "base-cache", tmp_path / "pr-cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", BASE_COMPILE], check=True, timeout=600,
                   env={**env, "TORCHINDUCTOR_CACHE_DIR": str(base_cache)})
    (graph,) = [p for p in base_cache.glob("*/*.py") if "cpp_pybinding" in p.read_text()]
    built = binaries(base_cache)
    assert built

    import torch

    other = tmp_path / "other-site"  # the same torch reached through another directory, as an overlay's is
    other.mkdir()
    (other / "torch").symlink_to(Path(torch.__file__).parent, target_is_directory=True)
    done = subprocess.run([sys.executable, "-c", PR_IMPORT, str(graph), str(base_cache)], check=True, timeout=600,
                          capture_output=True, text=True,
                          env={**env, "PYTHONPATH": f"{other}{os.pathsep}{ROOT}",
                               "TORCHINDUCTOR_CACHE_DIR": str(pr_cache)})

    assert json.loads(done.stdout.splitlines()[-1])["torch"].startswith(str(other))
    assert binaries(base_cache) == built, "the PR's worker compiled base's kernels again"
    assert not binaries(pr_cache)
    assert "compiled here" not in done.stderr


def test_a_source_the_other_side_built_gets_its_key_and_one_it_did_not_is_compiled_and_named(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "ab").mkdir(parents=True)
    (cache / "ab" / "cabkey.main.cpp").write_text("\nextern \"C\" void kernel() {}\n")
    (cache / "ab" / "cabkey.main.so").write_bytes(b"")
    (cache / "ab" / "cabnobinary.main.cpp").write_text("void never_built() {}")
    calls: list[tuple[str, str | None]] = []

    def write(content: str, extension: str, extra: str = "", key: str | None = None) -> tuple[str, str]:
        calls.append((extension, key))
        name = key or "cownkey"
        return name, str(cache / name[1:3] / f"{name}.{extension}")

    found = BorrowedBinaries(index_sources(cache))
    write_borrowed = found.writer(write)

    assert write_borrowed('extern "C" void kernel() {}', "main.cpp", extra="g++ -I/elsewhere")[0] == "cabkey"
    assert write_borrowed("void never_built() {}", "main.cpp")[0] == "cownkey"
    assert write_borrowed("graph = 1", "py")[0] == "cownkey"
    assert calls == [("main.cpp", "cabkey"), ("main.cpp", None), ("py", None)]
    assert (found.borrowed, found.compiled) == (["cabkey"], ["cownkey"])
