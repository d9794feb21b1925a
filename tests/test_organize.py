"""A user points organize at an Inductor cache (directory or archive) and gets standalone kernels + index.csv."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from foundation.errors import UserError
from foundation.formats.kernel_index import INDEX_COLUMNS, read_index
from foundation.formats.stage_records import INDUCTOR_CONFIG_ENV
from stages.organize import organize
from tests.support.cli_support import invoke_in_process

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "kernels"


def make_cache(root: Path) -> Path:
    """A cache laid out like TORCHINDUCTOR_CACHE_DIR: <2 chars>/c<hash>.py, with the fixture files."""
    files = {
        "za/cza3bux56.py": "triton213/triton_poi_fused_add_relu_sin_0.py",
        "4o/c4o7lqz4j.py": "triton213/triton_poi_fused_add_t_0.py",
        "cj/ccjmegdfx.py": "triton213/triton_per_fused__softmax_0.py",
        "q7/cq7pq34hl.py": "triton213/triton_red_fused_sum_0.py",
        "b7/cb75tw57a.py": "triton213/graph_softmax_wrapper.py",
        "ef/cefjjqgg2.py": "cpp213/graph_cpp_wrapper.py",
        "h4/ch4old24.py": "handwritten/torch24_red_def_triton.py",
    }
    for target, fixture in files.items():
        (root / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / fixture, root / target)
    (root / "fxgraph" / "ab").mkdir(parents=True)
    (root / "fxgraph" / "ab" / "entry").write_bytes(b"\x00pickled")
    return root


def test_every_kernel_lands_in_its_category_with_an_index_row(tmp_path: Path) -> None:
    cache, out = make_cache(tmp_path / "cache"), tmp_path / "organized"
    rows = organize(cache, out)
    by_name = {r.kernel_name: r for r in rows}
    assert set(by_name) == {
        "triton_poi_fused_add_relu_sin_0", "triton_poi_fused_add_t_0", "triton_per_fused__softmax_0",
        "triton_red_fused_sum_0", "triton_red_fused_sum_3", "cpp_fused__softmax_gelu_mul_native_layer_norm_sin_sum_0",
    }
    for row in rows:
        assert (out / row.path).is_file()
        assert row.path.startswith(f"{row.category}/")
    assert by_name["triton_red_fused_sum_3"].path == "reduction/triton_red_fused_sum_3.py"
    assert by_name["cpp_fused__softmax_gelu_mul_native_layer_norm_sin_sum_0"].path.startswith("cpp/")
    with open(out / "index.csv", newline="") as handle:
        assert tuple(csv.DictReader(handle).fieldnames or ()) == INDEX_COLUMNS
    assert read_index(out / "index.csv") == sorted(rows, key=lambda r: (r.category, r.kernel_name, r.path))


def test_calls_and_graphs_come_from_the_graph_modules(tmp_path: Path) -> None:
    out = tmp_path / "organized"
    rows = {r.kernel_name: r for r in organize(make_cache(tmp_path / "cache"), out)}
    softmax = rows["triton_per_fused__softmax_0"]
    assert (softmax.calls, softmax.graphs) == (1, "1_inference_b75tw57a")
    assert softmax.source == "cj/ccjmegdfx.py"  # the kernel file, not the copy embedded in the graph
    cpp = rows["cpp_fused__softmax_gelu_mul_native_layer_norm_sin_sum_0"]
    assert (cpp.calls, cpp.backend, cpp.source) == (1, "cpp", "graphs/0_inference_efjjqgg2.py")
    assert rows["triton_red_fused_sum_3"].calls == 0  # no graph of this cache launches it
    assert sorted(p.name for p in (out / "graphs").iterdir()) == ["0_inference_efjjqgg2.py", "1_inference_b75tw57a.py"]


def test_organized_files_are_rewritten_for_running(tmp_path: Path) -> None:
    out = tmp_path / "organized"
    organize(make_cache(tmp_path / "cache"), out, rep=100, warmup=10)
    old = (out / "reduction" / "triton_red_fused_sum_3.py").read_text()
    assert old.startswith("# KERNEL CALLS: 0\n")
    assert "ms = do_bench(lambda: call(args), rep=100, warmup=10)" in old
    assert "cuda:3" not in old and "cuda:0" in old
    new = (out / "pointwise" / "triton_poi_fused_add_relu_sin_0.py").read_text()
    assert "ms = benchmarker.benchmark(lambda: call(args), device='cpu', rep=100, warmup=10)" in new


def test_identical_bodies_are_stored_once_and_same_names_kept_apart(tmp_path: Path) -> None:
    cache = make_cache(tmp_path / "cache")
    # The same kernel in a second cache file, and a different kernel that reuses a name.
    (cache / "zz").mkdir()
    shutil.copy(FIXTURES / "triton213/triton_per_fused__softmax_0.py", cache / "zz" / "czzcopy.py")
    other = (FIXTURES / "triton213/triton_poi_fused_add_relu_sin_0.py").read_text()
    other = other.replace("tl_math.sin", "tl_math.cos")
    (cache / "yy").mkdir()
    (cache / "yy" / "cyyother.py").write_text(other)
    rows = organize(cache, tmp_path / "organized")
    assert sum(r.kernel_name == "triton_per_fused__softmax_0" for r in rows) == 1
    same_name = sorted(r.path for r in rows if r.kernel_name == "triton_poi_fused_add_relu_sin_0")
    assert len(same_name) == 2 and same_name[0] != same_name[1]


def test_archive_input_is_extracted(tmp_path: Path) -> None:
    cache = make_cache(tmp_path / "cache")
    archive = tmp_path / "inductor-cache.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(cache, arcname="tmp/torchinductor_root")
    rows = organize(archive, tmp_path / "organized")
    assert len(rows) == 6


@pytest.mark.parametrize("has_data_filter", [True, False], ids=["python-3.11.4+", "older-python"])
def test_an_archive_reaching_out_of_its_tree_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        has_data_filter: bool) -> None:
    # Images built on Debian bookworm run Python 3.11.2, whose tarfile has no "data" filter: the same checks hold.
    if not has_data_filter:
        monkeypatch.delattr(tarfile, "data_filter")
    for name, kind in (("../escaped.py", tarfile.REGTYPE), ("link", tarfile.SYMTYPE)):
        archive = tmp_path / f"{kind!r}.tar"
        with tarfile.open(archive, "w") as tar:
            member = tarfile.TarInfo(name)
            member.type = kind
            member.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
            tar.addfile(member, io.BytesIO(b""))
        with pytest.raises(UserError, match="cannot read archive"):
            organize(archive, tmp_path / "organized")
        assert not (tmp_path / "escaped.py").exists()
    cache = make_cache(tmp_path / "cache")
    good = tmp_path / "good.tar.gz"
    with tarfile.open(good, "w:gz") as tar:
        tar.add(cache, arcname="tmp/torchinductor_root")
    assert len(organize(good, tmp_path / "organized-good")) == 6


def test_malformed_kernel_file_is_kept_for_a_failure_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = make_cache(tmp_path / "cache")
    (cache / "mm").mkdir()
    (cache / "mm" / "cbroken.py").write_text("@triton_heuristics.pointwise(\n@triton.jit\ndef (:\n")
    rows = organize(cache, tmp_path / "organized")
    broken = [r for r in rows if r.kernel_name.startswith("unparsed_")]
    assert len(broken) == 1 and broken[0].category == "pointwise"
    assert "kept unparsed" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["missing", "empty", "not-an-archive", "truncated"])
def test_bad_cache_is_one_line_user_error(tmp_path: Path, kind: str) -> None:
    if kind == "missing":
        cache = tmp_path / "nope"
    elif kind == "empty":
        cache = tmp_path / "empty"
        cache.mkdir()
    elif kind == "not-an-archive":
        cache = tmp_path / "cache.tar.gz"
        cache.write_text("this is not gzip")
    else:
        good = tmp_path / "good.tar.gz"
        with tarfile.open(good, "w:gz") as tar:
            tar.add(make_cache(tmp_path / "c"), arcname="c")
        cache = tmp_path / "cut.tar.gz"
        cache.write_bytes(good.read_bytes()[:200])
    with pytest.raises(UserError) as info:
        organize(cache, tmp_path / "out")
    assert "\n" not in str(info.value) and str(cache) in str(info.value)
    assert not (tmp_path / "out" / "index.csv").exists()


@pytest.mark.parametrize("kind", ["empty", "not-an-archive"])
def test_invoke_organize_reports_bad_input_in_one_line(tmp_path: Path, kind: str) -> None:
    if kind == "empty":
        cache = tmp_path / "empty"
        cache.mkdir()
    else:
        cache = tmp_path / "cache.tar.gz"
        cache.write_text("garbage")
    result = invoke_in_process("organize", "--cache", str(cache), "--out", str(tmp_path / "out"))
    output = (result.stdout + result.stderr).strip()
    assert result.returncode != 0
    assert len(output.splitlines()) == 1, output
    assert "Traceback" not in output and str(cache) in output


@pytest.mark.integration
def test_the_stage_organizes_without_importing_torch_whatever_inductor_config_the_variant_sets(tmp_path: Path) -> None:
    """Importing torch to set a config organize never reads cost every organize stage 4-5 s."""
    cache = make_cache(tmp_path / "cache")
    code = ("import sys; from stages.organize import main; code = main(sys.argv[1:]); "
            "print('torch imported' if 'torch' in sys.modules else 'no torch'); sys.exit(code)")
    result = subprocess.run(
        [sys.executable, "-c", code, "--cache", str(cache), "--out", str(tmp_path / "out")], cwd=ROOT,
        env={**os.environ, INDUCTOR_CONFIG_ENV: json.dumps({"cpp.enable_kernel_profile": True})},
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "no torch"
    assert len(read_index(tmp_path / "out" / "index.csv")) >= 4


@pytest.mark.integration
def test_stage_cli_exits_non_zero_with_one_error_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "not_a_kernel.py").write_text("x = 1\n")
    result = subprocess.run(
        [sys.executable, "-m", "stages.organize", "--cache", str(empty), "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: --cache") and len(result.stderr.strip().splitlines()) == 1


def test_calls_count_the_graph_launches_not_the_embedded_harness() -> None:
    from foundation.formats.kernel_index import launch_counts

    wrapper = (FIXTURES / "triton213/graph_softmax_wrapper.py").read_text()
    launch = "        triton_per_fused__softmax_0.run(buf3, arg0_1, 8, 64, stream=raw_streamNone)\n"
    twice = wrapper.replace(launch, launch + launch)
    assert launch_counts(twice, ["triton_per_fused__softmax_0"])["triton_per_fused__softmax_0"] == 2


# --- a cut-short graph module, and errors that must leave --out as it was ---


def _truncated_cpp_graph(cache: Path) -> str:
    """Cut the C++ graph module in the middle of its kernel's source (a full disk, an interrupted copy)."""
    module = cache / "ef" / "cefjjqgg2.py"
    text = module.read_text()
    module.write_text(text[: text.index("tmp_acc0 = tmp_acc0 + at::vec")])
    return "cpp_fused__softmax_gelu_mul_native_layer_norm_sin_sum_0"


def test_a_truncated_graph_module_is_a_warning_and_its_kernels_keep_their_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = make_cache(tmp_path / "cache")
    kernel = _truncated_cpp_graph(cache)

    rows = organize(cache, tmp_path / "organized")

    warning = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "ef/cefjjqgg2.py: compiled graph module cannot be parsed" in warning[0]
    assert kernel in warning[0] and "failure rows" in warning[0]
    cpp = [r for r in rows if r.backend == "cpp"]
    assert [r.kernel_name for r in cpp] == [kernel]
    assert (tmp_path / "organized" / cpp[0].path).is_file()
    assert (tmp_path / "organized" / "graphs" / f"{cpp[0].graphs}.py").is_file()


@pytest.mark.integration
def test_the_kernel_runner_gives_each_kernel_of_a_truncated_graph_module_a_failure_row(tmp_path: Path) -> None:
    cache = make_cache(tmp_path / "cache")
    kernel = _truncated_cpp_graph(cache)
    organize(cache, tmp_path / "organized")

    result = subprocess.run(
        [sys.executable, "-m", "stages.kernels", "--dir", str(tmp_path / "organized"), "--filter", "^cpp/",
         "--devices", "cpu"], cwd=ROOT, capture_output=True, text=True, timeout=300)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "warning: graph module graphs/0_inference_efjjqgg2.py cannot be parsed" in result.stdout
    with open(tmp_path / "kernels.csv", newline="") as handle:
        rows = {r["kernel_name"]: r for r in csv.DictReader(handle)}
    assert rows[kernel]["status"] == "fail"
    assert rows[kernel]["error"].startswith("graph module graphs/0_inference_efjjqgg2.py cannot be parsed")


def test_an_archive_without_kernels_is_named_in_the_error_not_its_temporary_copy(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "not_a_kernel.py").write_text("x = 1\n")
    archive = tmp_path / "cache.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "c", arcname="c")

    with pytest.raises(UserError) as err:
        organize(archive, tmp_path / "out")

    assert str(err.value).startswith(f"--cache {archive}: no Inductor kernels")
    assert "prbench-cache-" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_an_error_while_writing_leaves_an_earlier_organized_tree_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stages.organize as stage

    cache, out = make_cache(tmp_path / "cache"), tmp_path / "organized"
    organize(cache, out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    written = []

    def fail_on_third(kernel: object, rep: int, warmup: int) -> str:
        written.append(kernel)
        if len(written) == 3:
            raise UserError("disk full (simulated)")
        return "changed\n"

    monkeypatch.setattr(stage, "kernel_file_text", fail_on_third)
    with pytest.raises(UserError, match="simulated"):
        organize(cache, out, rep=7)

    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".organized.")] == []


@pytest.mark.integration
def test_invoke_organize_of_an_archive_without_kernels_leaves_no_log_in_out(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "not_a_kernel.py").write_text("x = 1\n")
    archive = tmp_path / "cache.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "c", arcname="c")

    result = invoke_in_process("organize", "--cache", str(archive), "--out", str(tmp_path / "out"))

    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2 and output == (
        f"error: --cache {archive}: no Inductor kernels or compiled graphs found (expected <xx>/c<hash>.py files "
        "from TORCHINDUCTOR_CACHE_DIR)")
    assert not (tmp_path / "out").exists()


def test_both_sides_name_an_identical_kernel_after_the_same_models_graph_whatever_order_their_caches_list_it(
        tmp_path: Path) -> None:
    """The same C++ kernel compiled into GPT2's graph (aot id 1) and Albert's (aot id 5), under other names there;
    the two sides' caches list the two graph modules in opposite orders. Both sides name the kernel as Albert's
    graph does and list that graph first: the graph its timing replays (``plan_jobs``), the same model's on both."""
    wrapper = (FIXTURES / "cpp213" / "graph_cpp_wrapper.py").read_text()
    kernel = "cpp_fused__softmax_gelu_mul_native_layer_norm_sin_sum_0"

    def graph(aot: int, number: int) -> str:
        return (wrapper.replace("# AOT ID: ['0_inference']", f"# AOT ID: ['{aot}_inference']")
                .replace(f"graph_0_{kernel}", f"graph_{aot}_{kernel[:-2]}_{number}")
                .replace(kernel, f"{kernel[:-2]}_{number}"))

    rows = {}
    for side, (gpt2_file, albert_file) in {"base": ("aa/caaaa1111", "zz/czzzz2222"),
                                           "pr": ("zz/czzzz3333", "aa/caaaa4444")}.items():
        cache = tmp_path / side / "cache"
        for name, text in ((gpt2_file, graph(1, 4)), (albert_file, graph(5, 2))):
            (cache / name).parent.mkdir(parents=True, exist_ok=True)
            (cache / f"{name}.py").write_text(text)
        models = {Path(gpt2_file).name: ["GPT2ForSequenceClassification"],
                  Path(albert_file).name: ["AlbertForMaskedLM"]}
        (row,) = organize(cache, tmp_path / side / "organized", graph_models=models)
        rows[side] = row

    assert [r.kernel_name for r in rows.values()] == [f"{kernel[:-2]}_2"] * 2
    assert [r.graphs.split(";")[0].split("_")[0] for r in rows.values()] == ["AlbertForMaskedLM/5"] * 2
