"""The few GitHub REST calls ``invoke publish`` makes: a PR's comments (list, create, update) and release assets.

Everything goes through ``requests`` with the token from the environment in the ``Authorization`` header; the
token never enters a message, a file or a printed line (``Token`` does not even show it in a repr, and a message
from the server is scrubbed of it before it is shown). Every refusal (401, 403, 404, 422, a spent rate limit, a
server error, a network that does not answer) is one ``UserError`` line naming what was being done on which
repository and PR, and what to do. The token is sent only to the API root given and to the upload URL GitHub
returns, over HTTPS (plain HTTP only to this machine, for tests); a redirect is followed only on the origin it
came from, and only for a GET. Each request has a deadline for the whole of its answer (``REQUEST_DEADLINE_S``),
so a server that trickles bytes cannot hold publish forever.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests

from foundation.errors import UserError

DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
TOKEN_VARIABLES = ("GITHUB_TOKEN", "GH_TOKEN")
# GitHub's largest page; the loop stops after this many pages (100 000 comments) rather than follow links forever.
PER_PAGE = 100
MAX_PAGES = 1000
_TIMEOUT_S = (10.0, 60.0)  # connect, read (each read: a server trickling bytes never reaches it)
_UPLOAD_TIMEOUT_S = (10.0, 600.0)
# The whole of one request, from connecting to the last byte of the answer, whatever the pace of the bytes. An API
# answer is at most a page of 100 comments (under 7 MB); an upload is the report archive (tens of MB).
REQUEST_DEADLINE_S = 120.0
UPLOAD_DEADLINE_S = 1800.0
MAX_REDIRECTS = 5  # GitHub redirects a renamed repository's API paths, on its own host
_COMMENT_RIGHTS = "write access to the repository's pull requests (fine-grained token: 'Pull requests: write'; " \
                  "classic token: 'repo', or 'public_repo' for a public repository)"
_RELEASE_RIGHTS = "write access to the repository's contents (fine-grained token: 'Contents: write'; classic " \
                  "token: 'repo')"


@dataclass(frozen=True, repr=False)
class Token:
    """A token and the environment variable it came from (named in messages; the value never is)."""

    value: str
    variable: str

    def __repr__(self) -> str:
        return f"Token(from ${self.variable})"


def token_from_environment(environ: Mapping[str, str] | None = None) -> Token:
    """The first of ``TOKEN_VARIABLES`` that is set and not empty."""
    environ = os.environ if environ is None else environ
    for variable in TOKEN_VARIABLES:
        value = environ.get(variable, "").strip()
        if value:
            # A token is ASCII letters, digits and '_'; anything else cannot go into an HTTP header (and is not shown).
            if not (value.isascii() and value.isprintable() and " " not in value):
                raise UserError(f"${variable}: holds characters no GitHub token has (non-ASCII, spaces or control "
                                "characters); set it to the token alone")
            return Token(value, variable)
    raise UserError(f"no GitHub token: set {' or '.join(TOKEN_VARIABLES)} to a token with {_COMMENT_RIGHTS} "
                    "(--dry-run needs none)")


def check_api_url(url: str, flag: str = "--api-url") -> str:
    """An API root the token may travel to: https, or http to this machine only; no trailing slash."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise UserError(f"{flag} {url!r}: expected an https URL such as {DEFAULT_API_URL} (GitHub Enterprise: "
                        "https://HOST/api/v3)")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise UserError(f"{flag} {url!r}: the token would travel unencrypted; use https")
    return url.rstrip("/")


@dataclass(frozen=True)
class PullRequest:
    repo: str  # OWNER/NAME
    number: int

    def __str__(self) -> str:
        return f"{self.repo}#{self.number}"


@dataclass(frozen=True)
class Comment:
    id: int
    body: str
    url: str  # the comment on github.com (html_url)


@dataclass(frozen=True)
class Release:
    id: int
    tag: str
    upload_url: str  # without its URI template ({?name,label})


@dataclass(frozen=True)
class Asset:
    id: int
    name: str
    url: str  # browser_download_url


class GitHub:
    """The REST calls, for one API root, token and pull request."""

    def __init__(self, api_url: str, token: Token, pr: PullRequest, session: requests.Session | None = None) -> None:
        self.api_url = check_api_url(api_url)
        self.pr = pr
        self._token = token
        self._session = session or requests.Session()
        self._session.headers.update({"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION,
                                      "User-Agent": "prbench-publish"})

    # --- comments -------------------------------------------------------------------------------------------

    def find_comment(self, marker: str) -> Comment | None:
        """The first comment on the PR whose body starts with ``marker`` (a quote of it starts with "> ")."""
        doing = f"listing the comments of {self.pr}"
        url = f"{self.api_url}/repos/{self.pr.repo}/issues/{self.pr.number}/comments"
        for page in self._pages(url, doing, _COMMENT_RIGHTS):
            for item in page:
                if isinstance(item, dict) and str(item.get("body") or "").startswith(marker):
                    return _comment(item, doing)
        return None

    def create_comment(self, body: str) -> Comment:
        doing = f"adding the comment to {self.pr}"
        url = f"{self.api_url}/repos/{self.pr.repo}/issues/{self.pr.number}/comments"
        return _comment(self._json("POST", url, doing, _COMMENT_RIGHTS, json={"body": body}), doing)

    def update_comment(self, comment_id: int, body: str) -> Comment:
        doing = f"updating comment {comment_id} on {self.pr}"
        url = f"{self.api_url}/repos/{self.pr.repo}/issues/comments/{comment_id}"
        return _comment(self._json("PATCH", url, doing, _COMMENT_RIGHTS, json={"body": body}), doing)

    # --- release assets -------------------------------------------------------------------------------------

    def release(self, tag: str) -> Release:
        doing = f"reading release {tag!r} of {self.pr.repo}"
        found = self._json("GET", f"{self.api_url}/repos/{self.pr.repo}/releases/tags/{tag}", doing, _RELEASE_RIGHTS,
                           missing=f"release {tag!r} does not exist in {self.pr.repo}: create it first (`gh release "
                                   f"create {tag}`) or name another with --attach-release")
        try:
            upload_url = str(found["upload_url"]).split("{", 1)[0]
            return Release(int(found["id"]), tag, check_api_url(upload_url, "the release's upload_url"))
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{self.api_url} answered with no release id or upload_url while {doing}: is --api-url "
                            "GitHub's REST API?") from None

    def replace_asset(self, release: Release, path: Path, name: str, content_type: str) -> Asset:
        """Upload ``path`` as asset ``name`` of ``release``, deleting an earlier asset of that name first."""
        doing = f"listing the assets of release {release.tag!r} of {self.pr.repo}"
        for page in self._pages(f"{self.api_url}/repos/{self.pr.repo}/releases/{release.id}/assets", doing,
                                _RELEASE_RIGHTS):
            for item in page:
                if isinstance(item, dict) and item.get("name") == name:
                    self._send("DELETE", f"{self.api_url}/repos/{self.pr.repo}/releases/assets/{item.get('id')}",
                               f"replacing asset {name} of release {release.tag!r}", _RELEASE_RIGHTS)
        doing = f"uploading {name} to release {release.tag!r} of {self.pr.repo}"
        with path.open("rb") as data:
            found = self._json("POST", release.upload_url, doing, _RELEASE_RIGHTS, params={"name": name}, data=data,
                               headers={"Content-Type": content_type}, timeout=_UPLOAD_TIMEOUT_S,
                               deadline_s=UPLOAD_DEADLINE_S)
        try:
            return Asset(int(found["id"]), str(found["name"]), str(found["browser_download_url"]))
        except (KeyError, TypeError, ValueError):
            raise UserError(f"the upload answered with no asset id or browser_download_url while {doing}") from None

    # --- the transport --------------------------------------------------------------------------------------

    def _pages(self, url: str, doing: str, rights: str) -> Iterator[list[Any]]:
        params: dict[str, Any] | None = {"per_page": PER_PAGE}
        next_url: str | None = url
        for _ in range(MAX_PAGES):
            if next_url is None:
                return
            response = self._send("GET", next_url, doing, rights, params=params)
            page = _decoded(response, doing, self.api_url)
            if not isinstance(page, list):
                raise UserError(f"{self.api_url} answered with no list while {doing}: is --api-url GitHub's REST API?")
            yield page
            next_url = response.links.get("next", {}).get("url")
            params = None  # the next link carries them
            if next_url is not None and _origin(next_url) != _origin(self.api_url):
                raise UserError(f"the next page while {doing} is on another host ({_origin(next_url)}); refusing to "
                                "send the token there")

    def _json(self, method: str, url: str, doing: str, rights: str, **kwargs: Any) -> Any:
        return _decoded(self._send(method, url, doing, rights, **kwargs), doing, self.api_url)

    def _send(self, method: str, url: str, doing: str, rights: str, *, missing: str | None = None,
              headers: dict[str, str] | None = None, timeout: tuple[float, float] = _TIMEOUT_S,
              deadline_s: float | None = None, **kwargs: Any) -> requests.Response:
        auth = {"Authorization": f"Bearer {self._token.value}", **(headers or {})}
        deadline_s = REQUEST_DEADLINE_S if deadline_s is None else deadline_s
        try:
            with _deadline(deadline_s):
                response = self._follow(method, url, doing, auth, timeout, kwargs)
        except DeadlinePassed:
            raise UserError(f"{_origin(url)} did not finish answering within {deadline_s:g} s while {doing}: try "
                            "again later") from None
        except requests.Timeout:
            raise UserError(f"{_origin(url)} did not answer in time while {doing}: try again later") from None
        except requests.ConnectionError as exc:
            raise UserError(f"cannot reach {_origin(url)} ({_network_reason(exc)}) while {doing}: check --api-url "
                            f"({self.api_url}) and the network") from None
        except requests.RequestException as exc:
            raise UserError(f"the request to {_origin(url)} failed ({type(exc).__name__}) while {doing}") from None
        if response.status_code >= 400:
            raise self._refusal(response, doing, rights, missing)
        return response

    def _follow(self, method: str, url: str, doing: str, headers: dict[str, str], timeout: tuple[float, float],
                kwargs: dict[str, Any]) -> requests.Response:
        """The request, following a redirect only on the same origin (scheme, host and port) and only for a GET:
        the token never goes to another server, and a body already sent is never sent again."""
        for _ in range(MAX_REDIRECTS + 1):
            response = self._session.request(method, url, headers=headers, timeout=timeout, allow_redirects=False,
                                             **kwargs)
            if not response.is_redirect:
                return response
            target = urljoin(url, response.headers.get("Location", ""))
            if method != "GET" or _origin(target) != _origin(url):
                raise UserError(f"{_origin(url)} answered {response.status_code} redirecting to {_origin(target)} "
                                f"while {doing}: not followed (the token would go along); check --api-url")
            url, kwargs = target, {k: v for k, v in kwargs.items() if k != "params"}  # the location carries them
        raise UserError(f"{_origin(url)} redirected more than {MAX_REDIRECTS} times while {doing}; check --api-url")

    def _refusal(self, response: requests.Response, doing: str, rights: str, missing: str | None) -> UserError:
        status = response.status_code
        said = self._scrubbed(_server_message(response))
        told = f"{status} {said}".strip()
        limit_spent = response.headers.get("X-RateLimit-Remaining") == "0"
        if status in (403, 429) and limit_spent:
            return UserError(f"GitHub's API rate limit for this token is spent ({told}) while {doing}: publish again "
                             f"after {_reset_time(response)}")
        if status == 429 or (status == 403 and ("Retry-After" in response.headers or "rate limit" in said.lower())):
            wait = response.headers.get("Retry-After", "60")
            return UserError(f"GitHub's secondary rate limit stopped the request ({told}) while {doing}: wait {wait} s "
                             "and publish again")
        if status == 401:
            return UserError(f"GitHub refused the token in ${self._token.variable} ({told}) while {doing}: it is "
                             f"wrong, expired or revoked; set a valid token with {rights}")
        if status == 403:
            actions = ("; a workflow run for a pull request from a fork gets a read-only token (publish from a "
                       "workflow_run job instead)") if "by integration" in said else ""
            return UserError(f"the token in ${self._token.variable} may not do this ({told}) while {doing}: it needs "
                             f"{rights}{actions}")
        if status == 404:
            return UserError(missing or f"not found ({told}) while {doing}: check --repo {self.pr.repo} and --pr "
                             f"{self.pr.number} (a private repository answers 404 to a token that cannot see it)")
        if status == 422:
            return UserError(f"GitHub rejected the request ({told}) while {doing}: nothing was changed on {self.pr}; "
                             "correct what GitHub names and publish again")
        if status >= 500:
            return UserError(f"GitHub failed ({told}) while {doing}: try again later")
        return UserError(f"GitHub answered {told} while {doing}")

    def _scrubbed(self, text: str) -> str:
        return text.replace(self._token.value, f"${self._token.variable}")


class DeadlinePassed(Exception):
    """Raised inside a request by `_deadline`'s alarm."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise `DeadlinePassed` in the calling code if it is still inside after ``seconds`` (an interval timer's
    SIGALRM, which interrupts a blocked socket read). Only the main thread receives signals; elsewhere (a test's
    thread) the per-read timeouts alone apply."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise DeadlinePassed

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _comment(item: Any, doing: str) -> Comment:
    try:
        return Comment(int(item["id"]), str(item.get("body") or ""), str(item.get("html_url") or ""))
    except (KeyError, TypeError, ValueError):
        raise UserError(f"GitHub answered with no comment id while {doing}: is --api-url GitHub's REST API?") from None


def _decoded(response: requests.Response, doing: str, api_url: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise UserError(f"{_origin(response.url or api_url)} answered {response.status_code} with something that is "
                        f"not JSON while {doing}: is --api-url ({api_url}) GitHub's REST API?") from None


def _server_message(response: requests.Response) -> str:
    """GitHub's ``message`` and the first error's ``message``/``code``, on one short line."""
    try:
        payload = response.json()
    except ValueError:
        return response.reason or ""
    if not isinstance(payload, dict):
        return response.reason or ""
    parts = [str(payload.get("message") or response.reason or "")]
    errors = payload.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        first = errors[0]
        parts.append(str(first.get("message") or f"{first.get('field', '')} {first.get('code', '')}".strip()))
    text = ": ".join(p for p in parts if p)
    return " ".join(text.split())[:300]


def _reset_time(response: requests.Response) -> str:
    try:
        reset = dt.datetime.fromtimestamp(int(response.headers["X-RateLimit-Reset"]), dt.UTC)
    except (KeyError, ValueError, OverflowError, OSError):
        return "it resets (within the hour)"
    return reset.strftime("%H:%M:%S UTC")


def _network_reason(exc: requests.ConnectionError) -> str:
    seen: BaseException | None = exc
    for _ in range(10):  # down the chain of causes (urllib3 wraps the socket's error twice)
        if seen is None:
            break
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        text = str(seen)
        if "Name or service not known" in text or "nodename nor servname" in text or "getaddrinfo" in text:
            return "host name not found"
        if "Connection refused" in text:
            return "connection refused"
        seen = seen.__cause__ or seen.__context__ or (seen.args[0] if seen.args and
                                                       isinstance(seen.args[0], BaseException) else None)
    return "connection failed"


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
