"""Posting a run's report to its pull request: one comment, found again by its hidden marker and updated in place,
through GitHub's REST API (here a stand-in on 127.0.0.1 that records every request). Refusals are one line each,
a report over GitHub's comment limit is fitted and says what it cut, --dry-run sends nothing, and the token is
never written anywhere nor printed."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from analysis.report.pr_comment import GITHUB_COMMENT_LIMIT, comment_marker, pr_comment
from analysis.report.render import load_report_inputs, render_report
from foundation.errors import UserError
from prbench.commands.publish import check_publish_flags, publish_run
from prbench.runs.run_store import RunStore
from tests.support.compare_data import kernel_specs, kernels_frame, model_rounds, suite_frame, write_variant
from tests.support.gfm_check import gfm_problems
from tests.support.github_stub import FakeGitHub, Refusal

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"BertForMaskedLM": 40.0, "GPT2": 30.0}
TOKEN = "ghp_" + "Zq7" * 12  # what a real token looks like; the tests look for it everywhere
MARKER = comment_marker("report")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run as `invoke compare` leaves it: both sides' tables, the manifest and lock, and report/ rendered."""
    run = tmp_path_factory.mktemp("template") / "runs" / "r1"
    specs = kernel_specs(40, seed=21, models=tuple(MODELS))
    base, bs = kernels_frame(specs, seed=22)
    pr, ps = kernels_frame(specs, seed=23, factor={0: 0.5, 1: 1.3})
    suite_b, ssb = suite_frame(MODELS, seed=24)
    suite_p, ssp = suite_frame(MODELS, seed=25, factor={"GPT2": 1.1})
    write_variant(run / "base", base, bs, suite_b, ssb, env={"torch": {"commit": "1" * 40}},
                  model_samples=model_rounds(MODELS, seed=26))
    write_variant(run / "pr", pr, ps, suite_p, ssp, env={"torch": {"commit": "2" * 40}},
                  model_samples=model_rounds(MODELS, seed=27, factor={"GPT2": 1.1}))
    (run / "lock.json").write_text(json.dumps({"base": {"image": {"digest": "sha256:" + "d" * 64}},
                                               "pr": {"image": {"digest": "sha256:" + "e" * 64}}}))
    (run / "manifest.json").write_text(json.dumps({"run_id": "r1", "created": "now", "settings": {"rounds": 5},
                                                   "stages": {}}))
    render_report(load_report_inputs(run), run / "report")
    return run


@pytest.fixture()
def runs(tmp_path: Path, finished_run: Path) -> Path:
    """A fresh copy of the finished run under ``tmp_path/runs``."""
    shutil.copytree(finished_run.parent, tmp_path / "runs")
    return tmp_path / "runs"


def invoke_publish(runs: Path, *args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess:
    """``invoke publish`` as the user runs it, its temporary files and home inside the test's directory (next to
    ``runs``), where the token test looks for them."""
    scratch = {"TMPDIR": runs.parent / "tmp", "HOME": runs.parent / "home"}
    for path in scratch.values():
        path.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    env |= {"PYTHONPATH": str(ROOT), "NO_PROXY": "127.0.0.1", **{k: str(v) for k, v in scratch.items()},
            **({"GITHUB_TOKEN": token} if token else {})}
    return subprocess.run([sys.executable, "-m", "invoke", "publish", "--runs-dir", str(runs), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def publish_in_process(runs: Path, github: FakeGitHub, **flags: str) -> None:
    target = check_publish_flags(flags.get("repo", "o/r"), flags.get("pr", "1"), github.url,
                                 flags.get("key", "report"), flags.get("attach_release"))
    with RunStore(runs).open("r1", write=True) as run:
        publish_run(run, target, environ={"GITHUB_TOKEN": TOKEN})


@pytest.mark.integration
def test_the_first_publish_adds_one_comment_and_the_second_updates_it(runs: Path) -> None:
    with FakeGitHub(page_size=2) as github:
        # The PR already has a discussion: five comments, one of them quoting an earlier prbench comment.
        for i in range(4):
            github.add_comment(f"review note {i}")
        github.add_comment(f"> {MARKER}\n> # prbench: performance of this PR\n\nwhy is GPT2 slower?")

        first = invoke_publish(runs, "--repo", "o/r", "--pr", "1", "--api-url", github.url)
        assert first.returncode == 0, first.stderr
        ours = [c for c in github.comments if c["body"].startswith(MARKER)]
        assert len(ours) == 1 and "added comment" in first.stdout

        report = runs / "r1" / "report" / "comment.md"  # the comment form is what is posted
        report.write_text(report.read_text(encoding="utf-8") + "\nRe-rendered after a second run.\n",
                          encoding="utf-8")
        second = invoke_publish(runs, "--repo", "o/r", "--pr", "1", "--api-url", github.url)

    assert second.returncode == 0, second.stderr
    assert f"updated comment {ours[0]['id']} in place" in second.stdout
    mine = [c for c in github.comments if c["body"].startswith(MARKER)]
    assert len(github.comments) == 6 and len(mine) == 1 and mine[0]["id"] == ours[0]["id"]
    assert "Re-rendered after a second run." in mine[0]["body"]
    writes = [(r.method, r.path) for r in github.requests if r.method != "GET"]
    assert writes == [("POST", "/repos/o/r/issues/1/comments"),
                      ("PATCH", f"/repos/o/r/issues/comments/{ours[0]['id']}")]
    # The second publish walked the pages (2 comments each) to the last one, where its comment was.
    pages = [r.query.get("page", ["1"])[0] for r in github.requests if r.method == "GET"]
    assert pages == ["1", "2", "3", "1", "2", "3"]
    assert all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in github.requests)
    body = mine[0]["body"]
    assert "# prbench: performance of this PR" in body and "`report.tar.gz` in run `r1`" in body
    assert ".png)" not in body and gfm_problems(body) == []  # no local image links, and GitHub renders it whole


def test_a_different_key_posts_a_separate_comment(runs: Path) -> None:
    with FakeGitHub() as github:
        publish_in_process(runs, github)
        publish_in_process(runs, github, key="rocm7-mi300")
    assert [c["body"].split("\n", 1)[0] for c in github.comments] == [MARKER, comment_marker("rocm7-mi300")]


@pytest.mark.parametrize(("refusal", "expected"), [
    (Refusal(401, {"message": "Bad credentials"}),
     "GitHub refused the token in $GITHUB_TOKEN (401 Bad credentials) while listing the comments of o/r#1"),
    (Refusal(403, {"message": "Resource not accessible by personal access token"}),
     "the token in $GITHUB_TOKEN may not do this (403 Resource not accessible by personal access token) while "
     "listing the comments of o/r#1: it needs write access to the repository's pull requests"),
    (Refusal(404, {"message": "Not Found"}),
     "not found (404 Not Found) while listing the comments of o/r#1: check --repo o/r and --pr 1"),
    (Refusal(422, {"message": "Validation Failed", "errors": [{"message": "body is too long"}]}),
     "GitHub rejected the request (422 Validation Failed: body is too long) while listing the comments of o/r#1"),
    (Refusal(403, {"message": "API rate limit exceeded for user ID 1."},
             {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1800000000"}),
     "GitHub's API rate limit for this token is spent (403 API rate limit exceeded for user ID 1.) while listing "
     "the comments of o/r#1: publish again after 08:00:00 UTC"),
    (Refusal(429, {"message": "You have exceeded a secondary rate limit."}, {"Retry-After": "30"}),
     "GitHub's secondary rate limit stopped the request (429 You have exceeded a secondary rate limit.) while "
     "listing the comments of o/r#1: wait 30 s"),
    (Refusal(502, {"message": "Server Error"}), "GitHub failed (502 Server Error) while listing the comments of o/r#1"),
])
def test_each_refusal_is_one_line_naming_the_pr_and_what_to_do(runs: Path, refusal: Refusal, expected: str) -> None:
    with FakeGitHub() as github:
        github.refuse = refusal
        with pytest.raises(UserError) as caught:
            publish_in_process(runs, github)
    message = str(caught.value)
    assert expected in message and "\n" not in message and TOKEN not in message


@pytest.mark.integration
def test_a_refusal_on_the_command_line_is_one_line_and_exit_2(runs: Path) -> None:
    with FakeGitHub() as github:
        github.refuse = Refusal(401, {"message": "Bad credentials"})
        result = invoke_publish(runs, "--repo", "o/r", "--pr", "1", "--api-url", github.url)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: GitHub refused the token in $GITHUB_TOKEN (401 Bad credentials) while listing the comments of o/r#1: "
        "it is wrong, expired or revoked; set a valid token with write access to the repository's pull requests "
        "(fine-grained token: 'Pull requests: write'; classic token: 'repo', or 'public_repo' for a public "
        "repository)"]


def test_an_api_that_does_not_answer_is_one_line(runs: Path) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    target = check_publish_flags("o/r", "1", f"http://127.0.0.1:{port}", "report", None)
    with RunStore(runs).open("r1", write=True) as run, pytest.raises(UserError) as caught:
        publish_run(run, target, environ={"GH_TOKEN": TOKEN})
    assert str(caught.value) == (f"cannot reach http://127.0.0.1:{port} (connection refused) while listing the "
                                 f"comments of o/r#1: check --api-url (http://127.0.0.1:{port}) and the network")


@pytest.mark.integration
def test_without_a_token_publish_names_the_variables_and_sends_nothing(runs: Path) -> None:
    with FakeGitHub() as github:
        result = invoke_publish(runs, "--repo", "o/r", "--pr", "1", "--api-url", github.url, token=None)
    assert result.returncode == 2 and github.requests == []
    assert result.stderr.startswith("error: no GitHub token: set GITHUB_TOKEN or GH_TOKEN to a token with write")
    assert not (runs / "r1" / "report.tar.gz").exists()  # refused before anything was written


@pytest.mark.parametrize(("flags", "expected"), [
    (("o", "1", None), "--repo 'o': expected OWNER/NAME"),
    (("o/r", "first", None), "--pr 'first': expected a whole number"),
    (("o/r", "0", None), "--pr 0: expected at least 1"),
    (("o/r", "1", "http://api.example.com"), "the token would travel unencrypted; use https"),
    (("o/r", "1", "ftp://x"), "expected an https URL"),
])
def test_bad_flags_are_named_before_anything_happens(flags: tuple, expected: str) -> None:
    repo, pr, api = flags
    with pytest.raises(UserError) as caught:
        check_publish_flags(repo, pr, api, "report", None)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_a_report_over_the_comment_limit_is_fitted_and_says_what_was_cut(runs: Path) -> None:
    report = runs / "r1" / "report" / "comment.md"  # a comment form made elsewhere, far over the limit
    text = report.read_text(encoding="utf-8")
    rows = "".join(f"| triton_poi_fused_{i} | {i} | 1.000× |\n" for i in range(5000))
    huge = (f"{text}\n<details><summary>Every kernel ever (5000)</summary>\n\n"
            f"| kernel | n | speedup |\n|---|---|---|\n{rows}\n</details>\n")
    report.write_text(huge, encoding="utf-8")
    assert len(huge) > 2 * GITHUB_COMMENT_LIMIT

    with FakeGitHub() as github:
        publish_in_process(runs, github)

    (comment,) = github.comments  # the stand-in refuses a body over 65 536 characters with GitHub's 422
    body = comment["body"]
    assert len(body) <= GITHUB_COMMENT_LIMIT and body.startswith(MARKER)
    assert "_Cut to fit the size limit: the collapsed “Every kernel ever (5000)”. The whole text is in " \
           "`report.tar.gz` in run `r1`._" in body
    assert "## Kernels" in body and "triton_poi_fused_4999" not in body
    assert gfm_problems(body) == []


def test_a_report_that_cannot_fit_by_dropping_blocks_is_cut_at_a_line_and_closed() -> None:
    table = "| kernel | ms |\n|---|---|\n" + "".join(f"| k{i} | {i} |\n" for i in range(20000))
    report = f"# title\n\n## Kernels\n\n{table}\n## Method\n\nmore\n"

    body = pr_comment(report, MARKER, _sources())

    assert len(body) <= GITHUB_COMMENT_LIMIT
    assert "_Cut to fit the size limit: the text from part-way through “Kernels” on." in body
    assert "## Method" not in body and gfm_problems(body) == []


def test_attach_release_uploads_the_archive_and_links_it(runs: Path) -> None:
    with FakeGitHub() as github:
        github.add_release("bench-results", assets=["r1-report.tar.gz"])  # from an earlier publish of this run
        publish_in_process(runs, github, attach_release="bench-results")

    assets = github.releases["bench-results"]["assets"]
    names = [a["name"] for a in assets]
    assert names == ["r1-report.tar.gz"]  # the comment form shows no plot: they travel in the archive
    uploaded = next(r for r in github.requests if r.method == "POST" and r.query.get("name") == ["r1-report.tar.gz"])
    assert uploaded.body == (runs / "r1" / "report.tar.gz").read_bytes()
    assert uploaded.headers["Content-Type"] == "application/gzip"
    assert any(r.method == "DELETE" for r in github.requests)  # the earlier asset of that name was replaced
    body = github.comments[0]["body"]
    download = "https://github.com/o/r/releases/download/bench-results/"
    assert f"[r1-report.tar.gz]({download}r1-report.tar.gz)" in body
    assert ".png" not in body
    assert gfm_problems(body) == []


def test_a_release_that_does_not_exist_is_named(runs: Path) -> None:
    with FakeGitHub() as github, pytest.raises(UserError) as caught:
        publish_in_process(runs, github, attach_release="v9")
    assert str(caught.value).startswith("release 'v9' does not exist in o/r: create it first")
    assert github.comments == []


def test_the_archive_holds_the_whole_report_the_lock_and_the_manifest(runs: Path) -> None:
    with FakeGitHub() as github:
        publish_in_process(runs, github)
    first = (runs / "r1" / "report.tar.gz").read_bytes()
    with tarfile.open(runs / "r1" / "report.tar.gz") as tar:
        names = tar.getnames()
        owners = {(m.uid, m.uname) for m in tar.getmembers()}
    report_files = sorted(f"r1/report/{p.name}" for p in (runs / "r1" / "report").iterdir())
    assert set(report_files) | {"r1/lock.json", "r1/manifest.json"} <= set(names) and owners == {(0, "")}
    with FakeGitHub() as github:
        publish_in_process(runs, github)
    assert (runs / "r1" / "report.tar.gz").read_bytes() == first  # the same report gives the same bytes


@pytest.mark.integration
def test_dry_run_prints_every_request_and_the_comment_and_sends_nothing(runs: Path) -> None:
    with FakeGitHub() as github:
        result = invoke_publish(runs, "--repo", "o/r", "--pr", "1", "--api-url", github.url, "--dry-run", token=None)
        assert github.requests == []
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"GET {github.url}/repos/o/r/issues/1/comments?per_page=100" in out
    assert f"POST {github.url}/repos/o/r/issues/1/comments" in out and "PATCH " in out
    comment = out.split("----- comment -----\n", 1)[1].split("----- end of comment -----", 1)[0]
    assert comment.startswith(MARKER) and "## Kernels" in comment and gfm_problems(comment) == []


@pytest.mark.integration
def test_the_token_is_nowhere_on_disk_nor_in_any_output(runs: Path, tmp_path: Path) -> None:
    outputs = []
    with FakeGitHub() as github:
        github.add_release("v1")
        outputs.append(invoke_publish(runs, "--repo", "o/r", "--pr", "1", "--api-url", github.url,
                                      "--attach-release", "v1"))
        outputs.append(invoke_publish(runs, "--repo", "o/r", "--pr", "1", "--api-url", github.url, "--dry-run"))
        github.refuse = Refusal(401, {"message": f"Bad credentials: {TOKEN}"})  # a server that echoes it back
        outputs.append(invoke_publish(runs, "--repo", "o/r", "--pr", "1", "--api-url", github.url))
    assert [o.returncode for o in outputs] == [0, 0, 2]
    assert any(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in github.requests)  # it was used
    for output in outputs:
        assert TOKEN not in output.stdout and TOKEN not in output.stderr
    assert "$GITHUB_TOKEN" in outputs[2].stderr
    assert _files_holding(tmp_path, TOKEN.encode()) == []


def _files_holding(root: Path, secret: bytes) -> list[str]:
    """Every file under ``root`` whose bytes, or whose gzip-decompressed bytes (the archive), hold ``secret``."""
    found = []
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data += gzip.decompress(data)
        if secret in data:
            found.append(str(path))
    return found


def _sources():
    from analysis.report.pr_comment import CommentSources

    return CommentSources(run_id="r1", archive_name="report.tar.gz")
