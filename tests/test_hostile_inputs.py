"""Hostile inputs, family by family: what a user may be handed (a CSV with crafted names, a FIFO where a file is
expected, a patch that makes a symbolic link, a lock edited by hand, a server that trickles bytes) either gives the
right output, names shown as text, or one ``error:`` line naming the file or flag, exit 2, no traceback, no hang.

To add a case, add one line to its family's list: the command after ``invoke`` (``{name}`` fields are the paths
the `world` fixture lays out) and what the one error line must contain. Every command runs in this process with an
alarm that fails the case after `HANG_S` seconds instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import math
import os
import shlex
import signal
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openpyxl import load_workbook

from analysis.kernels.results import KERNEL_COLUMNS, merge_result_files
from analysis.rendering import frame_table
from analysis.report.pr_comment import CommentSources, comment_marker, pr_comment
from analysis.report.render import ReportInputs, render_report
from foundation.errors import UserError
from foundation.formats.run_layout import MANIFEST
from prbench.executors import RunnerSpec, ShardTask, StageStep
from prbench.executors.local_pool import LocalPool
from prbench.publish import github_api
from prbench.publish.github_api import GitHub, PullRequest, Token
from prbench.runners import StageCommand, StageFailed
from tests.support.cli_support import invoke_in_process
from tests.support.compare_data import kernel_specs, kernels_frame, write_variant
from tests.support.gfm_check import gfm_problems, render_gfm
from tests.support.github_stub import FakeGitHub

ROOT = Path(__file__).resolve().parents[1]
# "No hang": a case answers in about a second of CPU on an idle machine (the first of a family imports its
# modules); a hang never ends. The guard counts the test process's CPU time, which load does not stretch: at load
# 20 on two cores a 30 s wall guard fired on a report that renders in 6 s idle. A hang that blocks (a read from a
# FIFO nobody writes) uses no CPU, so a wall limit of WALL_FACTOR times as long catches that one.
HANG_S = 60
WALL_FACTOR = 10


@dataclass(frozen=True)
class Case:
    command: str  # after `invoke`; {fields} are paths of the world
    expected: str  # what the one `error:` line contains (with exit 2), or the output (with exit 0)
    exit: int = 2


@contextlib.contextmanager
def hang_guard(seconds: int = HANG_S) -> Iterator[None]:
    """Fail instead of hanging: raises in the test after ``seconds`` of the process's CPU time (SIGPROF) or
    ``WALL_FACTOR`` × ``seconds`` of wall time (SIGALRM), whichever comes first."""
    def expire(signum: int, frame: Any) -> None:
        on_cpu = signum == signal.SIGPROF
        raise TimeoutError(f"still running after {seconds if on_cpu else seconds * WALL_FACTOR} s of "
                           f"{'CPU' if on_cpu else 'wall'} time")

    previous = {sig: signal.signal(sig, expire) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.alarm(seconds * WALL_FACTOR)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.alarm(0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_case(case: Case, world: dict[str, Path]) -> None:
    args = [arg.format(**world) for arg in shlex.split(case.command)]
    with hang_guard():
        proc = invoke_in_process(*args, cwd=ROOT)
    out = (proc.stdout + proc.stderr).strip()
    assert "Traceback" not in out, out
    if case.exit == 0:
        assert proc.returncode == 0 and case.expected in out, out
        return
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == case.exit and len(lines) == 1 and lines[0].startswith("error: "), out
    assert case.expected.format(**world) in lines[0], lines[0]


# --- the world the cases run in -------------------------------------------------------------------------------


def _kernel_pair(root: Path, *, base_status: str = "ok") -> None:
    specs = kernel_specs(6, 1)
    base, base_samples = kernels_frame(specs, 1)
    pr, pr_samples = kernels_frame(specs, 2, factor={0: 1.2})
    base["status"] = base_status
    write_variant(root / "base", base, base_samples if base_status == "ok" else None, None, None)
    write_variant(root / "pr", pr, pr_samples if base_status == "ok" else None, None, None)


def _run(runs: Path, run_id: str, *, base_status: str = "ok") -> Path:
    run = runs / run_id
    _kernel_pair(run, base_status=base_status)
    (run / MANIFEST).write_text(json.dumps({"run_id": run_id, "created": "now", "stages": {}}))
    return run


def _store_tar(path: Path, index: bytes, objects: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in {"index.json": index, **objects}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _lock(path: Path, **fields: Any) -> Path:
    from prbench.images.image_lock import COMPARED, LOCK_VERSION

    lock = {"lock_version": LOCK_VERSION, **{key: {} for key in COMPARED}, "store": [], "provenance": {}, **fields}
    path.write_text(json.dumps(lock))
    return path


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    w: dict[str, Path] = {"tmp": tmp_path, "fifo": tmp_path / "fifo"}
    os.mkfifo(w["fifo"])
    w["fifo_toml"] = tmp_path / "recipe.toml"
    os.mkfifo(w["fifo_toml"])
    _kernel_pair(tmp_path / "pair")
    w["base_csv"], w["pr_csv"] = tmp_path / "pair/base/kernels.csv", tmp_path / "pair/pr/kernels.csv"
    w["cut_csv"] = tmp_path / "cut.csv"
    text = w["base_csv"].read_text(encoding="utf-8")
    w["cut_csv"].write_text(text[: text.rindex(",", 0, len(text) - 30)], encoding="utf-8")  # cut mid-row
    w["fifo_traces"] = tmp_path / "traces"
    w["fifo_traces"].mkdir()
    os.mkfifo(w["fifo_traces"] / "rank_0.json")
    w["long_int"] = tmp_path / "long_int.json"
    w["long_int"].write_text('{"k": [[' + "1" * 5000 + "]]}")
    long_int = "9" * 5001  # json.dumps cannot write it: the documents are written as text
    event = '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": TS, "dur": 5}'
    w["trace_long_int"] = tmp_path / "trace_long_int.json"
    w["trace_long_int"].write_text(f'{{"traceEvents": [{event.replace("TS", "1")}, {event.replace("TS", long_int)}]}}')
    w["rocprof_long_int"] = tmp_path / "rocprof_long_int.json"
    w["rocprof_long_int"].write_text(f'{{"rocprofiler-sdk-tool": [{{"metadata": {{"init_time": {long_int}}}}}]}}')
    w["deep"] = tmp_path / "deep.json"
    w["deep"].write_text("[" * 100_000 + "]" * 100_000)
    # Runs: one whose kernel samples are a FIFO; a runs dir whose latest run's manifest is a FIFO.
    w["runs"] = tmp_path / "runs"
    fifo_run = _run(w["runs"], "fifo_samples")
    (fifo_run / "base" / "kernel_samples.json").unlink()
    os.mkfifo(fifo_run / "base" / "kernel_samples.json")
    w["status_runs"] = tmp_path / "status_runs"
    _run(w["status_runs"], "older")
    (w["status_runs"] / "newer").mkdir()
    os.mkfifo(w["status_runs"] / "newer" / MANIFEST)
    w["failed_runs"] = tmp_path / "failed_runs"
    _run(w["failed_runs"], "allfail", base_status="fail")
    # Patches, store tars and locks.
    w["symlink_patch"] = tmp_path / "symlink.patch"
    w["symlink_patch"].write_text("diff --git a/torch/evil.py b/torch/evil.py\nnew file mode 120000\n"
                                  "index 0000000..1111111\n--- /dev/null\n+++ b/torch/evil.py\n@@ -0,0 +1 @@\n"
                                  "+/etc/passwd\n\\ No newline at end of file\n")
    w["deep_tar"] = _store_tar(tmp_path / "deep.tar", b"[" * 100_000, {})
    w["long_int_tar"] = _store_tar(tmp_path / "long_int.tar", b'{"items": [' + b"1" * 5000 + b"]}", {})
    sha = "a" * 64
    item = {"kind": "wheel", "name": "x-1-py3-none-any.whl", "sha256": sha, "size": 12, "origin": "test"}
    w["bomb_tar"] = _store_tar(tmp_path / "bomb.tar", json.dumps({"format": 1, "items": [item]}).encode(),
                               {f"objects/aa/{sha}": b"0" * 4096})
    w["lock_provenance"] = _lock(tmp_path / "lock_provenance.json", provenance="x")
    w["lock_base"] = _lock(tmp_path / "lock_base.json", base=[])
    w["lock_jobs"] = _lock(tmp_path / "lock_jobs.json", build={"args": {"MAX_JOBS": "many"}})
    w["lock_long_int"] = tmp_path / "lock_long_int.json"
    w["lock_long_int"].write_text('{"lock_version": ' + "1" * 5000 + "}")
    w["lock_nan"] = _lock(tmp_path / "lock_nan.json", lock_version=math.nan)
    w["lock_bare"] = _lock(tmp_path / "lock_bare.json")
    return w


# --- family: files that are not regular, JSON beyond bounds ----------------------------------------------------

NOT_REGULAR = [
    Case("trace-diff {fifo} {fifo}", "{fifo}: is a named pipe (FIFO), not a regular file"),
    Case("perf-report {fifo_traces}", "{fifo_traces}: no traces"),
    Case("compare-kernels {base_csv} {pr_csv} --samples-base {fifo} --samples-pr {fifo}", "{fifo}: is a named pipe"),
    Case("compare-kernels {fifo} {pr_csv}", "{fifo}: is a named pipe (FIFO), not a regular file"),
    Case("compare-kernels {cut_csv} {pr_csv}", "{cut_csv}: line "),
    Case("compare-kernels {base_csv} {pr_csv} --samples-base {long_int} --samples-pr {long_int}",
         "{long_int}: a number too long to read"),
    Case("compare-kernels {base_csv} {pr_csv} --samples-base {deep} --samples-pr {deep}", "{deep}: nested too deeply"),
    Case("compare-kernels {base_csv} {pr_csv} --samples-base /dev/zero --samples-pr /dev/zero",
         "/dev/zero: is a character device"),
    Case("store import --file {fifo} --store {tmp}/store", "{fifo}: is a named pipe"),
    Case("store import --file {deep_tar} --store {tmp}/store", "index.json: nested too deeply"),
    Case("store import --file {long_int_tar} --store {tmp}/store", "index.json: a number too long to read"),
    Case("store import --file {bomb_tar} --store {tmp}/store", "is listed as 12 bytes but its object in the tar holds "
                                                               "4096"),
    Case("organize {fifo} {tmp}/organized", "{fifo}: is a named pipe"),
    Case("suite --overlay {fifo} --runs-dir {tmp}/suite_runs", "--overlay {fifo}: is a named pipe"),
    Case("suite --recipe {fifo_toml} --runs-dir {tmp}/suite_runs", "{fifo_toml}: is a named pipe"),
    Case("report fifo_samples --runs-dir {runs}", "kernel_samples.json: is a named pipe"),
    Case("status --runs-dir {status_runs}", "older", exit=0),
    Case("status --run newer --runs-dir {status_runs}", "manifest.json: not a valid run manifest (is a named pipe"),
    Case("rebuild --lock {fifo}", "--lock: {fifo}: is a named pipe"),
    Case("rebuild --lock {lock_long_int}", "a number too long to read"),
    Case("trace-diff {trace_long_int} {trace_long_int}", "{trace_long_int}: traceEvents[1]: a number too long to read"),
    Case("trace-diff {rocprof_long_int} {rocprof_long_int}", "{rocprof_long_int}: a number too long to read"),
]


@pytest.mark.parametrize("case", NOT_REGULAR, ids=[c.command for c in NOT_REGULAR])
def test_a_file_that_is_not_a_regular_file_or_json_beyond_bounds_is_one_line(world: dict[str, Path],
                                                                             case: Case) -> None:
    run_case(case, world)


# --- family: bounds at the door, run ids, patches, locks -------------------------------------------------------

AT_THE_DOOR = [
    Case("kernels -d {tmp} --timeout 1e308", "--timeout 1e308: expected at most 86400"),
    Case("kernels -d {tmp} --iterations 99999999999999999999", "--iterations 99999999999999999999: expected at most "
                                                                "1,000,000"),
    Case("kernels -d {tmp} --warmup 1e7", "--warmup '1e7': expected a whole number"),
    Case("kernels -d {tmp} --warmup 10000000", "--warmup 10000000: expected at most 1,000,000"),
    Case("compare --pr installed --kernel-timeout 1e308 --runs-dir {tmp}/r", "--kernel-timeout 1e308: expected at"),
    Case("compare --pr installed --kernel-iterations 2000000 --runs-dir {tmp}/r", "--kernel-iterations 2000000"),
    Case("compare --pr installed --kernel-warmup 99999999999999999999 --runs-dir {tmp}/r", "--kernel-warmup"),
    Case("compare --pr installed --iterations 99999999999999999999 --runs-dir {tmp}/r", "--iterations"),
    Case("profile suite.csv {tmp}/out --timeout 1e308", "--timeout 1e308: expected at most 86400"),
    Case("organize cache.tar.gz {tmp}/out --rep 99999999999999999999", "--rep 99999999999999999999: expected at most"),
    Case("perf-report {tmp} --top 99999999999999999999", "--top 99999999999999999999: expected at most 2,147,483,647"),
    # --run is checked before the patch (a FIFO here, which would otherwise be opened first).
    Case("compare --pr {fifo} --run 'nl\n' --runs-dir {tmp}/r", "--run 'nl\\n': a run id may hold"),
    Case("compare --pr {fifo} --run ../up --runs-dir {tmp}/r", "--run '../up': a run id may hold"),
    Case("status --run 'nl\n' --runs-dir {runs}", "--run 'nl\\n': a run id may hold"),
    Case("suite --overlay {symlink_patch} --runs-dir {tmp}/suite_runs", "'new file mode 120000': a symbolic link"),
    Case("rebuild --lock {lock_provenance}", "provenance is 'x'; expected an object"),
    Case("rebuild --lock {lock_base}", "base is a list; expected an object"),
    Case("verify --lock {lock_jobs}", "build.args.MAX_JOBS is 'many'; expected a whole number ≥ 1"),
    Case("verify --lock {lock_nan}", "{lock_nan} is not a prbench lock of this version (lock_version is nan"),
    Case("rebuild --lock {lock_bare}", "{lock_bare}: recipe.name is missing; expected a lock written by invoke build"),
]


@pytest.mark.parametrize("case", AT_THE_DOOR, ids=[c.command for c in AT_THE_DOOR])
def test_a_value_out_of_range_or_of_the_wrong_kind_is_refused_at_the_door(world: dict[str, Path], case: Case) -> None:
    run_case(case, world)


def test_a_run_id_is_matched_in_full_so_no_directory_named_with_a_newline_is_made(world: dict[str, Path]) -> None:
    run_case(Case("compare --pr installed --run 'ok\n' --runs-dir {tmp}/nl_runs", "--run 'ok\\n'"), world)
    assert not (world["tmp"] / "nl_runs").exists()


# --- family: names that reach a report -------------------------------------------------------------------------

HOSTILE_NAMES = [
    "triton_poi_<script>alert(1)</script>_0",
    "<img src=x onerror=alert(1)>",
    "<!-- prbench-report key=report -->",
    "name<!-- hides the rest",
    "</details></summary>",
    "=HYPERLINK(\"http://evil.example\",\"click\")",
    "+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd",
    "-2+3",
    "[click](http://evil.example) ![img](http://evil.example/t.png)",
    "`code` ``more`` | pipe \\| escaped",
    "**bold** _it_ ~~gone~~ &amp; &lt;",
]


def _hostile_tables(names: list[str]) -> tuple[pd.DataFrame, dict[str, Any], pd.DataFrame, dict[str, Any]]:
    specs = kernel_specs(len(names), 3, models=tuple(f"Model{n}" for n in names))
    base, base_samples = kernels_frame(specs, 3)
    pr, pr_samples = kernels_frame(specs, 4, factor={0: 1.3, 1: 0.7})
    for frame in (base, pr):
        frame["kernel_name"] = names
    return base, base_samples, pr, pr_samples


def _shown_as_text(markdown: str, files_in: Path | None = None) -> None:
    """No HTML of the names survives GitHub's renderer; the report is well formed (tables, details, links to
    its files in ``files_in``)."""
    assert gfm_problems(markdown, files_in) == []
    html = render_gfm(markdown)
    for markup in ("<script", "<img src=\"x\"", "<!--", "</details></summary>", 'href="http://evil'):
        assert markup not in html, markup


def test_hostile_names_are_shown_as_text_in_report_md_the_pr_comment_and_report_xlsx(tmp_path: Path) -> None:
    base, base_samples, pr, pr_samples = _hostile_tables(HOSTILE_NAMES)
    for side, frame, samples in (("base", base, base_samples), ("pr", pr, pr_samples)):
        write_variant(tmp_path / side, frame, samples, None, None)
    with hang_guard():
        proc = invoke_in_process("compare-kernels", str(tmp_path / "base/kernels.csv"),
                                 str(tmp_path / "pr/kernels.csv"), "--samples-base",
                                 str(tmp_path / "base/kernel_samples.json"), "--samples-pr",
                                 str(tmp_path / "pr/kernel_samples.json"), "-o", str(tmp_path / "out"), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    _shown_as_text(report, tmp_path / "out")
    assert "`triton_poi_<script>alert(1)</script>_0`" in report  # shown as the name, in a code span

    comment = pr_comment(report, comment_marker("report"), CommentSources("r1", "report.tar.gz"))
    _shown_as_text(comment.split("\n", 1)[1])
    assert comment.startswith("<!-- prbench-report key=report -->\n")  # the marker, once, where publish looks

    cells = [c for ws in load_workbook(tmp_path / "out" / "report.xlsx") for row in ws.iter_rows() for c in row]
    assert not [c.value for c in cells if c.data_type == "f"]  # no formula at all
    shown = {c.value for c in cells if isinstance(c.value, str)}
    assert set(HOSTILE_NAMES) <= shown  # each name is there, as the text it is


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_symbol_in_a_trace_table_is_text(name: str) -> None:
    table = frame_table(pd.DataFrame({"kernel": [name, "void at::native::f<float>(float*)"], "ms": [1.0, 2.0]}))
    _shown_as_text(table)
    assert "f&lt;float&gt;" in table


# --- family: the report renders whatever the data -------------------------------------------------------------

def test_a_run_whose_base_kernels_all_failed_renders_says_so_and_fail_on_reads_it(world: dict[str, Path]) -> None:
    with hang_guard():
        proc = invoke_in_process("report", "allfail", "--runs-dir", str(world["failed_runs"]), "--fail-on",
                                 "inconclusive", cwd=ROOT)
    report = (world["failed_runs"] / "allfail" / "report" / "report.md").read_text(encoding="utf-8")
    assert "No kernel pair has timings on both sides (failed or without timing: base 6, PR 0 of 6 pairs)" in report
    assert gfm_problems(report) == []
    assert proc.returncode == 1 and proc.stderr.strip().startswith("--fail-on inconclusive:"), proc.stderr


# Kernel times from 0 to a million ms (17 minutes), or missing; ratios beyond a float's range (1e-9 against a
# denormal 5e-324 ms) have their own test below.
KERNEL_VALUES = st.one_of(st.just(""), st.sampled_from([0.0, 1e-6, 1.0, 1e6]),
                          st.floats(min_value=1e-6, max_value=1e6, allow_nan=False))


@st.composite
def kernel_tables(draw: st.DrawFn) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two kernels.csv tables of 1-5 kernels: any status, names from the hostile list, times from 0 to 1e6 ms
    or missing."""
    n = draw(st.integers(1, 5))
    names = draw(st.lists(st.sampled_from([*HOSTILE_NAMES, "triton_poi_fused_add_0"]), min_size=n, max_size=n,
                          unique=True))
    frames = []
    for _ in ("base", "pr"):
        rows = []
        for i, name in enumerate(names):
            median = draw(KERNEL_VALUES)
            rows.append({"category": "pointwise", "kernel_name": name, "body_hash": f"{i:016x}", "shape_key": "x8_r1",
                         "legacy_key": f"k{i}_x8_r1", "path": f"pointwise/k{i}.py", "calls": draw(st.integers(0, 3)),
                         "graphs": "M/0_inference", "backend": "triton", "source": "", "n": 20, "median_ms": median,
                         "mean_ms": median, "std_ms": 0.0 if median != "" else "", "min_ms": median, "gb": 0.1,
                         "gb_per_s": 1.0, "status": draw(st.sampled_from(["ok", "fail", "timeout", "???", ""])),
                         "error": ""})
        frames.append(pd.DataFrame(rows, columns=list(KERNEL_COLUMNS)))
    return frames[0], frames[1]


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(tables=kernel_tables())
def test_any_kernel_tables_make_a_well_formed_report_or_one_line(tmp_path_factory: pytest.TempPathFactory,
                                                                 tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    from analysis.kernels.compare import read_kernels_csv

    root = tmp_path_factory.mktemp("tables")
    for side, frame in zip(("base", "pr"), tables, strict=True):
        frame.to_csv(root / f"{side}.csv", index=False)
    try:
        inputs = ReportInputs(base_kernels=read_kernels_csv(root / "base.csv"),
                              pr_kernels=read_kernels_csv(root / "pr.csv"), title="kernels")
        paths = render_report(inputs, root / "out")
    except UserError as exc:
        assert "\n" not in str(exc) and str(root) in str(exc)
        return
    report = paths.report_md.read_text(encoding="utf-8")
    _shown_as_text(report, root / "out")
    summary = json.loads(paths.summary_json.read_text())
    assert summary["verdict"]
    assert all(math.isfinite(v) for v in _numbers(summary))


def _numbers(value: Any) -> Iterator[float]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, float):
        yield value


@pytest.mark.parametrize(("base_ms", "pr_ms"), [(1e-9, 5e-324), (1e308, 1e-3)])
def test_kernel_times_whose_ratio_is_beyond_a_float_make_a_report(tmp_path: Path, base_ms: float,
                                                                  pr_ms: float) -> None:
    base, _, pr, _ = _hostile_tables(["triton_poi_a_0", "triton_poi_b_1"])
    for frame, value in ((base, base_ms), (pr, pr_ms)):
        frame.loc[0, ["median_ms", "mean_ms", "min_ms"]] = value
    inputs = ReportInputs(base_kernels=base, pr_kernels=pr, title="kernels")
    try:
        paths = render_report(inputs, tmp_path / "out")
    except UserError as exc:  # refused in one line is as good as reported
        assert "\n" not in str(exc)
        return
    _shown_as_text(paths.report_md.read_text(encoding="utf-8"), tmp_path / "out")


# --- family: deadlines and the publish path --------------------------------------------------------------------

PUBLISH = PullRequest("o/r", 1)


def test_publish_gives_up_on_a_server_that_trickles_within_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(github_api, "REQUEST_DEADLINE_S", 2.0)
    with FakeGitHub() as github, hang_guard():
        github.add_comment("x" * 200)
        github.trickle_s = 0.5  # per-read timeouts (60 s) never fire: only the deadline ends it
        with pytest.raises(UserError) as caught:
            GitHub(github.url, Token("t0ken", "GITHUB_TOKEN"), PUBLISH).find_comment("<!-- m -->")
    assert str(caught.value) == (f"{github.url} did not finish answering within 2 s while listing the comments of "
                                 "o/r#1: try again later")


def test_publish_does_not_follow_a_redirect_to_another_server(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeGitHub() as elsewhere, FakeGitHub() as github, hang_guard():
        github.redirect_to = elsewhere.url
        with pytest.raises(UserError) as caught:
            GitHub(github.url, Token("t0ken", "GITHUB_TOKEN"), PUBLISH).create_comment("body")
    assert str(caught.value) == (f"{github.url} answered 307 redirecting to {elsewhere.url} while adding the "
                                 "comment to o/r#1: not followed (the token would go along); check --api-url")
    assert elsewhere.requests == []


@pytest.mark.parametrize("token", ["tøken", "tok en", "tok\x07en"])
def test_a_token_no_header_can_carry_is_one_line_that_does_not_show_it(token: str) -> None:
    with pytest.raises(UserError) as caught:
        github_api.token_from_environment({"GITHUB_TOKEN": token})
    assert str(caught.value).startswith("$GITHUB_TOKEN: holds characters no GitHub token has")
    assert token not in str(caught.value)


class _FullDiskRunner:
    """Shard "full" fails as a stage does when the disk fills; shard "slow" runs until it is interrupted."""

    def __init__(self) -> None:
        self.interrupted = threading.Event()

    def run(self, command: StageCommand) -> None:
        if command.args[0] == "full":  # the executor appends the device it placed the shard on
            raise StageFailed("stage pair failed: error: no space left on device writing r/round-001.json: free "
                              "space or use --runs-dir elsewhere")
        if not self.interrupted.wait(HANG_S):
            raise AssertionError("the slow shard was never stopped")
        raise StageFailed("stage pair interrupted")

    def interrupt(self) -> None:
        self.interrupted.set()


def test_a_full_disk_in_one_shard_stops_the_shards_running_beside_it(tmp_path: Path) -> None:
    runner = _FullDiskRunner()
    spec = RunnerSpec("local")
    tasks = [ShardTask(name, (StageStep(spec, StageCommand("stages.paired", [name])),), (tmp_path / name,))
             for name in ("slow", "full")]
    pool = LocalPool(["cpu", "cpu"], say=lambda line: None, make=lambda spec: runner)
    started = time.monotonic()
    with hang_guard(), pytest.raises(StageFailed, match="no space left on device"):
        pool.run(tasks, lambda outcome: None)
    # The running shard is stopped as soon as the full disk is reported (well under a second), not when it ends.
    assert runner.interrupted.is_set() and time.monotonic() - started < HANG_S / 2


def test_a_shards_kernels_csv_cut_mid_row_is_one_line_naming_its_line(tmp_path: Path) -> None:
    base, samples, _, _ = _hostile_tables(["triton_poi_a_0", "triton_poi_b_1"])
    part = write_variant(tmp_path / "shard-1", base, samples, None, None)
    base.to_csv(part / "kernels_seed.csv", index=False)
    text = (part / "kernels.csv").read_text()
    (part / "kernels.csv").write_text(text[: text.rindex(",0.1,")])  # the disk filled while the row was written
    with pytest.raises(UserError) as caught:
        merge_result_files([part], tmp_path / "out", list(base["path"]))
    assert str(caught.value).startswith(f"{part / 'kernels.csv'}: line 3: 15 cells where the header has 19")


def test_a_full_disk_while_importing_names_the_store_and_its_flag(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from prbench.images import content_store as store_module

    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "store" / "incoming" / "object-1"))

    exported = tmp_path / "export.tar"
    sha = hashlib.sha256(b"wheel bytes!").hexdigest()
    item = {"kind": "wheel", "name": "x-1-py3-none-any.whl", "sha256": sha, "size": 12, "origin": "test"}
    _store_tar(exported, json.dumps({"format": 1, "items": [item]}).encode(),
               {f"objects/{sha[:2]}/{sha}": b"wheel bytes!"})
    monkeypatch.setattr(store_module, "_stage", full)
    with pytest.raises(UserError) as caught:
        store_module.Store(tmp_path / "store").import_tar(exported, emit=lambda line: None)
    assert str(caught.value) == (f"no space left on device writing into the store {tmp_path / 'store'}: free space "
                                 "or use --store elsewhere; nothing was imported")


def test_status_says_why_a_stage_ended_when_a_full_disk_kept_the_manifest_from_recording_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prbench.runs.run_store import Run, RunStore

    def full_disk(self: Run) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(self.root / MANIFEST))

    with RunStore(tmp_path / "runs").create_or_open("r1", {}, "test") as run:
        with contextlib.suppress(OSError), run.stage("pair/models-round-2", {}):
            monkeypatch.setattr(Run, "save", full_disk)
            raise OSError(errno.ENOSPC, "No space left on device", "round-002.json")
        monkeypatch.undo()
    proc = invoke_in_process("status", "--run", "r1", "--runs-dir", str(tmp_path / "runs"), cwd=ROOT,
                             env={"COLUMNS": "300"})
    assert proc.returncode == 0, proc.stderr
    assert "stopped" in proc.stdout and "ended: OSError: [Errno 28] No space left on device" in proc.stdout
    assert "killed?" not in proc.stdout


def test_hostile_names_in_every_table_of_a_runs_report_are_text(tmp_path: Path) -> None:
    """Model names (the suite, projection, compile/memory tables), kernels on one side only (fusion, unpaired),
    environment and lock values: `invoke report` on a run made of them."""
    from tests.support.compare_data import suite_frame

    models = {f"Model{name}"[:60]: 5.0 + i for i, name in enumerate(HOSTILE_NAMES[:6])}
    specs = kernel_specs(len(HOSTILE_NAMES), 5, models=tuple(models))
    run = tmp_path / "runs" / "r1"
    for side, seed in (("base", 5), ("pr", 6)):
        kernels, samples = kernels_frame(specs, seed, factor={0: 1.3} if side == "pr" else None)
        kernels["kernel_name"] = [f"{name}_{side}" if i == 1 else name for i, name in enumerate(HOSTILE_NAMES)]
        kernels.loc[1, "body_hash"] = f"{side}only".ljust(16, "0")  # one kernel on each side only: fusion tables
        suite, suite_samples = suite_frame(models, seed)
        write_variant(run / side, kernels, samples, suite, suite_samples,
                      env={"torch": HOSTILE_NAMES[0], "device": HOSTILE_NAMES[5]})
    (run / "lock.json").write_text(json.dumps({"base": {"base": {"image": HOSTILE_NAMES[3]}}}))
    (run / MANIFEST).write_text(json.dumps({"run_id": "r1", "created": "now", "stages": {}}))
    with hang_guard(30):
        proc = invoke_in_process("report", "r1", "--runs-dir", str(tmp_path / "runs"), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = (run / "report" / "report.md").read_text(encoding="utf-8")
    _shown_as_text(report, run / "report")
    assert "Only in" in report or "only in" in report
    comment = pr_comment(report, comment_marker("report"), CommentSources("r1", "report.tar.gz"))
    _shown_as_text(comment.split("\n", 1)[1])
    cells = [c for ws in load_workbook(run / "report" / "report.xlsx") for row in ws.iter_rows() for c in row]
    assert not [c.value for c in cells if c.data_type == "f"]
    assert HOSTILE_NAMES[5] in {c.value for c in cells}
