"""What the store tests build: git clones with submodules, tiny wheels, a local HTTP server on 127.0.0.1."""

from __future__ import annotations

import base64
import hashlib
import http.server
import os
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def git_env(root: Path) -> dict[str, str]:
    return {
        **os.environ, "GIT_CEILING_DIRECTORIES": str(root.parent), "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.com",
        "GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.com",
        "GIT_AUTHOR_DATE": "2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE": "2026-01-02T03:04:05Z",
        # Submodules from local paths (git refuses the file transport for them by default).
        "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.file.allow", "GIT_CONFIG_VALUE_0": "always",
    }


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          env=git_env(root)).stdout.strip()


def commit_files(root: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)
    return git(root, "rev-parse", "HEAD")


def new_repo(root: Path, files: dict[str, str]) -> str:
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    return commit_files(root, files, "first")


@dataclass
class Clone:
    """A superproject clone whose tree records two submodules, one of them with a submodule of its own."""

    root: Path
    commit: str
    submodules: dict[str, str] = field(default_factory=dict)  # path in the tree → recorded commit


def clone_with_submodules(tmp: Path) -> Clone:
    """``project`` (a script, an executable, a symlink, an export-ignored file) with ``third_party/fmt`` and
    ``third_party/kineto``, which itself has ``libkineto/third_party/json``."""
    upstream = tmp / "upstream"
    json_commit = new_repo(upstream / "json", {"json.hpp": "// json\n"})
    fmt_commit = new_repo(upstream / "fmt", {"include/fmt/core.h": "// fmt\n"})
    new_repo(upstream / "kineto", {"libkineto/src/init.cpp": "// kineto\n"})
    git(upstream / "kineto", "submodule", "add", "-q", str(upstream / "json"), "libkineto/third_party/json")
    git(upstream / "kineto", "commit", "-qm", "add json")
    kineto_commit = git(upstream / "kineto", "rev-parse", "HEAD")

    root = tmp / "project"
    new_repo(root, {"README.md": "project\n", "tools/build.sh": "#!/bin/sh\necho build\n",
                    ".gitattributes": "secret.txt export-ignore\nversion.txt export-subst\n",
                    "secret.txt": "kept\n", "version.txt": "$Format:%H$\n"})
    (root / "tools/build.sh").chmod(0o755)
    (root / "link").symlink_to("README.md")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "executable and link")
    git(root, "submodule", "add", "-q", str(upstream / "fmt"), "third_party/fmt")
    git(root, "submodule", "add", "-q", str(upstream / "kineto"), "third_party/kineto")
    git(root, "submodule", "update", "-q", "--init", "--recursive")
    git(root, "commit", "-qm", "submodules")
    return Clone(root, git(root, "rev-parse", "HEAD"), {
        "third_party/fmt": fmt_commit, "third_party/kineto": kineto_commit,
        "third_party/kineto/libkineto/third_party/json": json_commit})


def pip_reads_no_machine_settings(monkeypatch) -> None:
    """pip with no configuration files and no PIP_* settings of this machine: only what the test gives it."""
    for key in list(os.environ):
        if key.startswith("PIP_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)


def write_wheel(directory: Path, name: str, version: str, *, requires: tuple[str, ...] = (),
                tag: str = "py3-none-any", build: str = "") -> Path:
    """A minimal valid wheel: one module, METADATA (with Requires-Dist), WHEEL and RECORD; ``build`` changes the
    bytes (a rebuild of the same name and version)."""
    dist_info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\nBUILD = {build!r}\n",
        f"{dist_info}/METADATA": metadata,
        f"{dist_info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n",
    }
    record = ""
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(text.encode())}\n"
    files[f"{dist_info}/RECORD"] = record + f"{dist_info}/RECORD,,\n"
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


@dataclass
class Server:
    url: str
    files: dict[str, bytes]
    requests: list[str]


@contextmanager
def http_server(files: dict[str, bytes]) -> Iterator[Server]:
    """Serve ``files`` (path → bytes) on 127.0.0.1, recording every request path."""
    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            body = files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # shutdown() waits for serve_forever's next poll (0.5 s by default): poll often so each test ends at once.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield Server(f"http://127.0.0.1:{server.server_address[1]}", files, requests)
    finally:
        server.shutdown()
        server.server_close()
