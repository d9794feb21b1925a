"""A stand-in for the few GitHub REST endpoints ``invoke publish`` uses, on 127.0.0.1, recording every request.

Issue comments (list with ``Link: rel="next"`` pages of ``page_size``, create, update), a release by tag with an
uploads-style ``upload_url`` of its own, its assets (list, delete, upload). ``refuse`` makes every request answer
with a given status, body and headers, as GitHub does for a bad token, missing rights, an unknown repository or
a spent rate limit. Comments over ``comment_limit`` characters are refused with GitHub's 422. Two hostile
servers: ``redirect_to`` answers every request with a 307 to that origin (same path), ``trickle_s`` sends each
answer's body one byte every ``trickle_s`` seconds.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class Refusal:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class FakeGitHub:
    """Serves ``repo``'s issue ``pr`` and the releases in ``releases`` ({tag: [asset names]})."""

    def __init__(self, repo: str = "o/r", pr: int = 1, page_size: int = 2, comment_limit: int = 65_536) -> None:
        self.repo, self.pr, self.page_size, self.comment_limit = repo, pr, page_size, comment_limit
        self.comments: list[dict[str, Any]] = []
        self.releases: dict[str, dict[str, Any]] = {}
        self.requests: list[Recorded] = []
        self.refuse: Refusal | None = None
        self.redirect_to: str | None = None
        self.trickle_s: float | None = None
        self._next_id = 1000
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        # shutdown() waits for serve_forever's next poll: the default 0.5 s poll would cost every test half a second.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeGitHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add_comment(self, body: str, user: str = "someone") -> dict[str, Any]:
        comment = {"id": self._new_id(), "body": body, "user": {"login": user},
                   "html_url": f"https://github.com/{self.repo}/pull/{self.pr}#issuecomment-{self._next_id}"}
        self.comments.append(comment)
        return comment

    def add_release(self, tag: str, assets: list[str] = ()) -> None:  # type: ignore[assignment]
        release_id = self._new_id()
        self.releases[tag] = {"id": release_id, "tag_name": tag, "assets": [
            self._asset(tag, name) for name in assets]}

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _asset(self, tag: str, name: str, size: int = 0) -> dict[str, Any]:
        return {"id": self._new_id(), "name": name, "size": size,
                "browser_download_url": f"https://github.com/{self.repo}/releases/download/{tag}/{name}"}

    # --- the endpoints ----------------------------------------------------------------------------------------

    def answer(self, method: str, path: str, query: dict[str, list[str]], body: bytes
               ) -> tuple[int, Any, dict[str, str]]:
        if self.refuse is not None:
            return self.refuse.status, self.refuse.body, self.refuse.headers
        repo = f"/repos/{self.repo}"
        if method == "GET" and path == f"{repo}/issues/{self.pr}/comments":
            return self._page(self.comments, path, query)
        if method == "POST" and path == f"{repo}/issues/{self.pr}/comments":
            text = json.loads(body)["body"]
            if len(text) > self.comment_limit:
                return self._too_long()
            comment = self.add_comment(text, user="prbench-bot")
            return 201, comment, {}
        found = re.fullmatch(rf"{re.escape(repo)}/issues/comments/(\d+)", path)
        if method == "PATCH" and found:
            text = json.loads(body)["body"]
            if len(text) > self.comment_limit:
                return self._too_long()
            for comment in self.comments:
                if comment["id"] == int(found.group(1)):
                    comment["body"] = text
                    return 200, comment, {}
            return 404, {"message": "Not Found"}, {}
        found = re.fullmatch(rf"{re.escape(repo)}/releases/tags/(.+)", path)
        if method == "GET" and found:
            release = self.releases.get(found.group(1))
            if release is None:
                return 404, {"message": "Not Found"}, {}
            upload = f"{self.url}/uploads{repo}/releases/{release['id']}/assets{{?name,label}}"
            return 200, {**release, "upload_url": upload}, {}
        found = re.fullmatch(rf"{re.escape(repo)}/releases/(\d+)/assets", path)
        if method == "GET" and found:
            return self._page(self._release(int(found.group(1)))["assets"], path, query)
        found = re.fullmatch(rf"{re.escape(repo)}/releases/assets/(\d+)", path)
        if method == "DELETE" and found:
            for release in self.releases.values():
                release["assets"] = [a for a in release["assets"] if a["id"] != int(found.group(1))]
            return 204, None, {}
        found = re.fullmatch(rf"/uploads{re.escape(repo)}/releases/(\d+)/assets", path)
        if method == "POST" and found:
            release = self._release(int(found.group(1)))
            name = query["name"][0]
            if any(a["name"] == name for a in release["assets"]):
                return 422, {"message": "Validation Failed", "errors": [{"code": "already_exists"}]}, {}
            asset = self._asset(release["tag_name"], name, len(body))
            release["assets"].append(asset)
            return 201, asset, {}
        return 404, {"message": "Not Found"}, {}

    def _page(self, items: list[dict[str, Any]], path: str, query: dict[str, list[str]]
              ) -> tuple[int, Any, dict[str, str]]:
        page = int(query.get("page", ["1"])[0])
        start = (page - 1) * self.page_size
        headers = {}
        if start + self.page_size < len(items):
            headers["Link"] = f'<{self.url}{path}?page={page + 1}>; rel="next"'
        return 200, items[start: start + self.page_size], headers

    def _release(self, release_id: int) -> dict[str, Any]:
        return next(r for r in self.releases.values() if r["id"] == release_id)

    def _too_long(self) -> tuple[int, Any, dict[str, str]]:
        return 422, {"message": "Validation Failed", "errors": [{
            "resource": "IssueComment", "code": "custom", "field": "body",
            "message": f"body is too long (maximum is {self.comment_limit} characters)"}]}, {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                parts = urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                query = parse_qs(parts.query)
                with stub._lock:
                    stub.requests.append(Recorded(self.command, parts.path, query, dict(self.headers), body))
                    status, payload, headers = stub.answer(self.command, parts.path, query, body)
                data = b"" if payload is None else json.dumps(payload).encode()
                if stub.redirect_to:
                    status, data, headers = 307, b"", {"Location": stub.redirect_to + self.path}
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                if stub.trickle_s is None:
                    self.wfile.write(data)
                    return
                for i in range(len(data)):
                    try:
                        self.wfile.write(data[i:i + 1])
                        self.wfile.flush()
                    except OSError:  # the client gave up
                        return
                    time.sleep(stub.trickle_s)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:  # the test output stays quiet
                pass

        return Handler
