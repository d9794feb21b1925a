"""``invoke publish``: a run's report as one comment on a GitHub pull request, updated in place by later runs.

The comment is report.md made fit for a comment (``analysis.report.pr_comment``); the whole report travels as
``<run>/report.tar.gz`` (``prbench.publish.report_archive``), which ``--attach-release TAG`` uploads, with the plots, as
assets of an existing release the comment then links. ``--dry-run`` prints every request it would send and sends
nothing, so it needs no token. The REST calls and their errors are ``prbench.publish.github_api``.
"""

from __future__ import annotations

import hashlib
import mimetypes
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import requests

from analysis.report.pr_comment import CommentSources, comment_marker, local_targets, pr_comment
from foundation.errors import UserError
from foundation.flag_values import whole_number
from prbench.commands.cli import config_value, holds_run, task, user_facing
from prbench.commands.flags import runs_dir_from
from prbench.publish.github_api import (
    API_VERSION,
    DEFAULT_API_URL,
    PER_PAGE,
    TOKEN_VARIABLES,
    GitHub,
    PullRequest,
    check_api_url,
    token_from_environment,
)
from prbench.publish.report_archive import report_markdown, write_report_archive
from prbench.runs.run_store import Run

_REPO = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
# A tag name as git allows it, less what would need escaping in a URL path.
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


@dataclass(frozen=True)
class PublishTarget:
    """Where the report goes, from the flags."""

    pr: PullRequest
    api_url: str
    key: str
    release_tag: str | None


@dataclass(frozen=True)
class Upload:
    """A file of the run uploaded as a release asset; ``target`` is how report.md names it ("" for the archive)."""

    path: Path
    name: str
    content_type: str
    target: str


def check_publish_flags(repo: str | None, pr: object, api_url: str | None, key: str,
                        attach_release: str | None) -> PublishTarget:
    """The flags as values, before anything is read, written or sent."""
    if not repo:
        raise UserError("--repo is needed: the pull request's repository, OWNER/NAME")
    if not _REPO.fullmatch(repo) or repo.endswith((".", "/")):
        raise UserError(f"--repo {repo!r}: expected OWNER/NAME of a GitHub repository")
    if pr is None:
        raise UserError("--pr is needed: the pull request's number")
    if attach_release is not None and not _TAG.fullmatch(attach_release):
        raise UserError(f"--attach-release {attach_release!r}: expected the tag of an existing release (letters, "
                        "digits, '.', '_', '+', '-')")
    comment_marker(key)  # checks --key
    return PublishTarget(PullRequest(repo, whole_number("--pr", pr, minimum=1)),
                         check_api_url(api_url or DEFAULT_API_URL), key, attach_release)


def publish_run(run: Run, target: PublishTarget, *, dry_run: bool = False, environ: Mapping[str, str] | None = None,
                session: requests.Session | None = None) -> None:
    """Write the run's report archive, then post its comment (or, with ``dry_run``, print what would be sent)."""
    report_md = report_markdown(run)
    token = None if dry_run else token_from_environment(environ)  # before anything is written
    archive = write_report_archive(run)
    print(f"publish: wrote {archive} ({archive.stat().st_size} bytes)")
    uploads = _uploads(run, archive, report_md) if target.release_tag else []
    marker = comment_marker(target.key)
    if dry_run:
        _print_dry_run(run, target, archive, uploads, report_md, marker)
        return
    assert token is not None
    github = GitHub(target.api_url, token, target.pr, session)
    urls = _attach(github, target.release_tag, uploads) if target.release_tag else {}
    _post(github, marker, pr_comment(report_md, marker, _sources(run, archive, uploads, urls)))


def _attach(github: GitHub, tag: str, uploads: list[Upload]) -> dict[str, str]:
    """Upload each file to release ``tag``; how report.md names it ("" for the archive) → its download URL."""
    release = github.release(tag)
    urls = {}
    for upload in uploads:
        print(f"publish: uploading {upload.name} to release {release.tag!r} of {github.pr.repo}")
        urls[upload.target] = github.replace_asset(release, upload.path, upload.name, upload.content_type).url
    return urls


def _post(github: GitHub, marker: str, body: str) -> None:
    """Update the PR's comment that starts with ``marker``, or add it when there is none."""
    print(f"publish: looking for the comment marked {marker} on {github.pr}")
    found = github.find_comment(marker)
    if found is None:
        posted = github.create_comment(body)
        print(f"publish: added comment {posted.id} ({len(body)} characters): {posted.url}")
    else:
        posted = github.update_comment(found.id, body)
        print(f"publish: updated comment {posted.id} in place ({len(body)} characters): {posted.url}")


def _uploads(run: Run, archive: Path, report_md: str) -> list[Upload]:
    """The archive, then every local file report.md shows or links that lies in ``report/`` (the plots)."""
    report_dir = run.layout.report.resolve()
    found = [Upload(archive, f"{run.run_id}-{archive.name}", "application/gzip", "")]
    for name in local_targets(report_md):
        path = (report_dir / name).resolve()
        if path.is_file() and path.is_relative_to(report_dir):
            asset = f"{run.run_id}-{PurePosixPath(name).as_posix().replace('/', '-')}"
            found.append(Upload(path, asset, mimetypes.guess_type(path.name)[0] or "application/octet-stream", name))
    return found


def _sources(run: Run, archive: Path, uploads: list[Upload], urls: Mapping[str, str]) -> CommentSources:
    return CommentSources(run_id=run.run_id, archive_name=uploads[0].name if uploads else archive.name,
                          archive_url=urls.get(""), uploaded={k: v for k, v in urls.items() if k})


def _print_dry_run(run: Run, target: PublishTarget, archive: Path, uploads: list[Upload], report_md: str,
                   marker: str) -> None:
    api, repo, pr = target.api_url, target.pr.repo, target.pr.number
    variables = " or ".join(f"${v}" for v in TOKEN_VARIABLES)
    print(f"dry run: nothing is sent. With a token in {variables}, publish sends these requests, each with the "
          f"headers Accept: application/vnd.github+json, X-GitHub-Api-Version: {API_VERSION}, "
          f"Authorization: Bearer <the token>:")
    urls: dict[str, str] = {}
    if target.release_tag:
        tag = target.release_tag
        print(f"GET {api}/repos/{repo}/releases/tags/{tag}")
        for upload in uploads:
            digest = hashlib.sha256(upload.path.read_bytes()).hexdigest()
            print(f"GET {api}/repos/{repo}/releases/<release id>/assets?per_page={PER_PAGE} (and each next page); "
                  f"DELETE {api}/repos/{repo}/releases/assets/<id> of an asset named {upload.name}, if there is one")
            print(f"POST <the release's upload_url>?name={upload.name}  Content-Type: {upload.content_type}  body: "
                  f"{upload.path} ({upload.path.stat().st_size} bytes, sha256 {digest})")
            urls[upload.target] = f"{_web_root(api)}/{repo}/releases/download/{tag}/{upload.name}"
        print("(the comment below links the assets where GitHub usually serves them; the browser_download_url "
              "of each upload takes their place)")
    print(f"GET {api}/repos/{repo}/issues/{pr}/comments?per_page={PER_PAGE} (and each next page), to find the "
          f"comment whose body starts with {marker}")
    print(f"PATCH {api}/repos/{repo}/issues/comments/<its id> when there is one, else "
          f"POST {api}/repos/{repo}/issues/{pr}/comments")
    body = pr_comment(report_md, marker, _sources(run, archive, uploads, urls))
    print(f'body: {{"body": COMMENT}} (JSON), COMMENT being the {len(body)} characters between these lines:')
    print("----- comment -----")
    print(body, end="" if body.endswith("\n") else "\n")
    print("----- end of comment -----")


def _web_root(api_url: str) -> str:
    """github.com for api.github.com, https://HOST for GitHub Enterprise's https://HOST/api/v3."""
    parts = urlsplit(api_url)
    if parts.hostname == "api.github.com":
        return "https://github.com"
    return f"{parts.scheme}://{parts.netloc}"


@task(
    help={
        "repo": "The pull request's GitHub repository, OWNER/NAME",
        "pr": "The pull request's number",
        "run": "Run id under the runs directory (default: the most recent run)",
        "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)",
        "api_url": "GitHub REST API root (default from invoke.yaml: https://api.github.com; GitHub Enterprise: "
                   "https://HOST/api/v3)",
        "attach_release": "Also upload the run's report archive and plots as assets of this existing release tag "
                          "(replacing same-named ones) and link them from the comment",
        "key": "Which prbench comment on the PR to update (default: report); another key posts a separate one, "
               "e.g. one per recipe",
        "dry_run": "Print every request (method, URL, body) and send nothing; needs no token (the archive is still "
                   "written into the run)",
    }
)
@user_facing
@holds_run(runs_dir_from)
def publish(ctx, repo=None, pr=None, run=None, runs_dir=None, api_url=None, attach_release=None, key="report",
            dry_run=False):
    """Post <run>/report/report.md to a pull request as one comment that later runs update in place.

    The token comes from $GITHUB_TOKEN (or $GH_TOKEN) and is never written anywhere; the run's report files are
    archived into <run>/report.tar.gz.
    """
    from prbench.runs.run_store import RunStore

    target = check_publish_flags(repo, pr, api_url or config_value(ctx, "publish.api_url"), key, attach_release)
    store = RunStore(runs_dir_from(ctx, runs_dir))
    with store.open(run or store.latest().run_id, write=True) as opened:
        publish_run(opened, target, dry_run=dry_run)
