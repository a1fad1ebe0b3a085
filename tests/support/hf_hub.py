"""A Hugging Face Hub emulator for tests: a threaded HTTP server on 127.0.0.1 serving dataset repositories.

Usage (the ``hf_hub`` fixture of ``tests/storage/conftest.py`` starts one per test session and points
``HF_ENDPOINT`` at it)::

    with HFHub() as hub:
        hub.create_repo("owner/name")
        hub.put("owner/name", "data/train-0.parquet", payload)
        open_store("hf://datasets/owner/name/data", {"endpoint": hub.endpoint})

It speaks the parts of the Hub's HTTP API that ``huggingface_hub`` and streamscope's ``hf://`` store use, with the
headers the real Hub sends:

* ``GET``/``HEAD /datasets/<owner>/<name>/resolve/<revision>/<path>``: the file, with ``Content-Length``,
  ``ETag``, ``X-Repo-Commit``, ``Accept-Ranges``; ``Range: bytes=a-b`` answers 206 with ``Content-Range`` (416
  past the end); ``If-Match`` answers 412 when the ETag differs.
* ``GET /api/datasets/<owner>/<name>/tree/<revision>[/<path>]?recursive=..&expand=..``: the folder's entries
  (``type``, ``oid``, ``size``, ``path``, ``lfs`` for large files), paginated with a ``Link: <..>; rel="next"``
  header (``page_size`` entries per page; the Hub uses 1000).
* ``GET /api/datasets/<owner>/<name>[/revision/<revision>]``: the repository's info (``id``, ``sha``, ``private``,
  ``siblings``).
* ``POST /api/datasets/<owner>/<name>/paths-info/<revision>``: the entries of the given ``paths`` (form or JSON).
* with ``cdn=True``, a large (LFS) file's resolve answers ``302`` to a second server on ``127.0.0.2`` (another
  origin, as the Hub's file CDN is) that serves ``/blobs/<sha256>`` with ``Range``: a client must follow the
  redirect, and must not send its token there (``requests`` records whether it did).

Errors are the Hub's: 404 with ``X-Error-Code`` ``RepoNotFound`` / ``RevisionNotFound`` / ``EntryNotFound``; a
private repository (created with ``token=``) answers 401 ``RepoNotFound`` to a request without that bearer token,
as the Hub does, so a client that does not send its token fails. ``fail_next(n, status)`` makes the next ``n``
requests fail (retry tests); ``requests`` records every request (method, path, Range, whether it was authorized;
never the token).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["HFHub", "HubRequest"]

_RANGE_RE = re.compile(r"bytes=(\d+)-(\d*)$")
#: files at least this large, and every ``.parquet`` file (the Hub's default ``.gitattributes``), are LFS files:
#: listed with an ``lfs`` entry, ETag the sha256, redirected to the CDN
LFS_THRESHOLD = 1024


def _is_lfs(path: str, data: bytes) -> bool:
    return len(data) >= LFS_THRESHOLD or path.endswith(".parquet")


@dataclass
class _Repo:
    private_token: str | None = None
    branches: dict[str, dict[str, bytes]] = field(default_factory=lambda: {"main": {}})

    def sha(self, revision: str) -> str:
        files = self.branches[revision]
        h = hashlib.sha1(revision.encode())
        for path in sorted(files):
            h.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
        return h.hexdigest()

    def files_at(self, revision: str) -> dict[str, bytes] | None:
        if revision in self.branches:
            return self.branches[revision]
        for branch in self.branches:  # a commit sha names the branch's current state
            if self.sha(branch) == revision:
                return self.branches[branch]
        return None


@dataclass(frozen=True)
class HubRequest:
    """One request the emulator answered (the token itself is never recorded)."""

    method: str
    path: str
    range: str | None
    authorized: bool
    status: int


def _git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _etag(path: str, data: bytes) -> str:
    """The Hub's ETag: the sha256 of an LFS file, the git blob id of another."""
    return hashlib.sha256(data).hexdigest() if _is_lfs(path, data) else _git_oid(data)


def _entry(path: str, data: bytes) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "file", "oid": _git_oid(data), "size": len(data), "path": path}
    if _is_lfs(path, data):
        entry["lfs"] = {"oid": _etag(path, data), "size": len(data), "pointerSize": 134}
    return entry


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: HFHub

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    # -- plumbing -------------------------------------------------------------------------------------

    def _send(
        self, status: int, body: bytes = b"", headers: dict[str, str] | None = None, send_body: bool = True
    ) -> None:
        self._status = status
        # Recorded before a byte of the answer leaves: a client that has its answer finds its request recorded
        # (recording after the write let a test count the requests before the server thread had added the last).
        self._record_once()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body and body:
            self.wfile.write(body)

    def _error(self, status: int, code: str | None, message: str, send_body: bool = True) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, json.dumps({"error": message}).encode(), headers, send_body)

    def _json(self, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(200, json.dumps(obj).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _record_once(self) -> None:
        if not self._recorded:
            self._recorded = True
            auth = self.headers.get("Authorization")
            req = HubRequest(self.command, unquote(self.path), self.headers.get("Range"), auth is not None, self._status)
            self.hub._record(req)

    def _handle(self, method: str) -> None:
        self._status = 0
        self._recorded = False
        auth = self.headers.get("Authorization")
        length = int(self.headers.get("Content-Length") or 0)
        self._body = self.rfile.read(length) if length else b""  # read first: the connection is kept alive
        try:
            if self.hub._take_failure(self):
                return
            self._route(method, auth)
        finally:
            self._record_once()  # a request that got no answer is recorded too (status 0)

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._handle("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    # -- routing --------------------------------------------------------------------------------------

    def _repo(self, owner: str, name: str, auth: str | None, send_body: bool) -> _Repo | None:
        repo_id = f"{unquote(owner)}/{unquote(name)}"
        repo = self.hub._repos.get(repo_id)
        if repo is not None and repo.private_token is not None and auth != f"Bearer {repo.private_token}":
            if auth is not None and auth.startswith("Bearer "):
                self._error(401, None, "Invalid credentials in Authorization header", send_body)
                return None
            repo = None  # the Hub hides private repositories from anonymous callers
        if repo is None:
            self._error(401, "RepoNotFound", f"Repository Not Found for url: {self.path}.", send_body)
            return None
        return repo

    def _files(self, repo: _Repo, revision: str, send_body: bool) -> dict[str, bytes] | None:
        files = repo.files_at(revision)
        if files is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", send_body)
        return files

    def _route(self, method: str, auth: str | None) -> None:
        parts = urlsplit(self.path)
        segs = parts.path.split("/")[1:]
        query = parse_qs(parts.query)
        body = method != "HEAD"
        if len(segs) == 2 and segs[0] == "blobs" and method in ("GET", "HEAD"):  # the CDN
            blob = self.hub._blobs.get(segs[1])
            if blob is None:
                self._error(404, None, "no such blob", body)
            else:
                self._serve_bytes(blob, f'"{segs[1]}"', {"ETag": f'"{segs[1]}"', "Accept-Ranges": "bytes"}, body)
            return
        if len(segs) >= 5 and segs[0] == "datasets" and segs[3] == "resolve" and method in ("GET", "HEAD"):
            repo = self._repo(segs[1], segs[2], auth, body)
            if repo is None:
                return
            revision = unquote(segs[4])
            files = self._files(repo, revision, body)
            if files is None:
                return
            self._resolve(repo, revision, files, unquote("/".join(segs[5:])), body)
            return
        if len(segs) >= 4 and segs[0] == "api" and segs[1] == "datasets":
            repo = self._repo(segs[2], segs[3], auth, body)
            if repo is None:
                return
            rest = segs[4:]
            if not rest or (rest[0] == "revision" and len(rest) == 2):
                revision = unquote(rest[1]) if rest else "main"
                files = self._files(repo, revision, body)
                if files is not None:
                    self._info(repo, revision, files, f"{unquote(segs[2])}/{unquote(segs[3])}")
                return
            if rest[0] == "tree" and len(rest) >= 2 and method == "GET":
                files = self._files(repo, unquote(rest[1]), body)
                if files is not None:
                    self._tree(files, unquote("/".join(rest[2:])).strip("/"), query)
                return
            if rest[0] == "paths-info" and len(rest) == 2 and method == "POST":
                files = self._files(repo, unquote(rest[1]), body)
                if files is not None:
                    self._paths_info(files)
                return
        self._error(404, None, f"no route for {method} {parts.path}", body)

    # -- endpoints ------------------------------------------------------------------------------------

    def _resolve(self, repo: _Repo, revision: str, files: dict[str, bytes], path: str, body: bool) -> None:
        data = files.get(path)
        if data is None:
            self._error(404, "EntryNotFound", f'{path} does not exist on "{revision}"', body)
            return
        etag = f'"{_etag(path, data)}"'
        commit = repo.sha(revision) if revision in repo.branches else revision
        headers = {
            "ETag": etag,
            "X-Repo-Commit": commit,
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if _is_lfs(path, data):
            headers["X-Linked-Size"] = str(len(data))
            headers["X-Linked-ETag"] = etag
        if _is_lfs(path, data) and self.hub.cdn_endpoint is not None:
            headers["Location"] = f"{self.hub.cdn_endpoint}/blobs/{hashlib.sha256(data).hexdigest()}"
            self._send(302, b"", headers, body)
            return
        self._serve_bytes(data, etag, headers, body)

    def _serve_bytes(self, data: bytes, etag: str, headers: dict[str, str], body: bool) -> None:
        """``data`` with If-Match and Range honoured."""
        if_match = self.headers.get("If-Match")
        if if_match is not None and if_match.strip() not in (etag, "*"):
            self._error(412, None, "Precondition Failed", body)
            return
        rng = self.headers.get("Range")
        if rng:
            m = _RANGE_RE.match(rng.strip())
            if m is None:
                self._error(400, None, f"bad Range {rng!r}", body)
                return
            start = int(m.group(1))
            end = min(int(m.group(2)) + 1 if m.group(2) else len(data), len(data))
            if start >= len(data):
                self._send(416, b"", {**headers, "Content-Range": f"bytes */{len(data)}"}, body)
                return
            payload = data[start:end]
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
            headers["Content-Length"] = str(len(payload))
            self._send(206, payload, headers, body)
            return
        headers["Content-Length"] = str(len(data))
        self._send(200, data, headers, body)

    def _info(self, repo: _Repo, revision: str, files: dict[str, bytes], repo_id: str) -> None:
        self._json(
            {
                "id": repo_id,
                "author": repo_id.split("/")[0],
                "sha": repo.sha(revision) if revision in repo.branches else revision,
                "private": repo.private_token is not None,
                "gated": False,
                "disabled": False,
                "lastModified": "2026-01-01T00:00:00.000Z",
                "siblings": [{"rfilename": p} for p in sorted(files)],
            }
        )

    def _tree(self, files: dict[str, bytes], folder: str, query: dict[str, list[str]]) -> None:
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        base = f"{folder}/" if folder else ""
        under = sorted(p for p in files if p.startswith(base))
        if folder and not under:
            self._error(404, "EntryNotFound", f"{folder} does not exist", True)
            return
        entries: list[dict[str, Any]] = []
        dirs: set[str] = set()
        for path in under:
            rel = path[len(base) :]
            parts = rel.split("/")
            # directories are listed before the files inside them, as the Hub does
            for depth in range(1, len(parts) if recursive else min(len(parts), 2)):
                d = base + "/".join(parts[:depth])
                if d not in dirs:
                    dirs.add(d)
                    entries.append(
                        {"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
                    )
            if recursive or len(parts) == 1:
                entries.append(_entry(path, files[path]))
        cursor = int(query.get("cursor", ["0"])[0])
        size = self.hub.page_size
        page = entries[cursor : cursor + size]
        headers = {}
        if cursor + size < len(entries):
            q = {k: v[0] for k, v in query.items() if k != "cursor"}
            nxt = "&".join(f"{k}={quote(v)}" for k, v in q.items())
            url = f"{self.hub.endpoint}{urlsplit(self.path).path}?{nxt + '&' if nxt else ''}cursor={cursor + size}"
            headers["Link"] = f'<{url}>; rel="next"'
        self._json(page, headers)

    def _paths_info(self, files: dict[str, bytes]) -> None:
        raw = self._body.decode()
        if self.headers.get("Content-Type", "").startswith("application/json"):
            paths = list(json.loads(raw or "{}").get("paths", []))
        else:
            paths = parse_qs(raw).get("paths", [])
        out: list[dict[str, Any]] = []
        for p in paths:
            p = p.strip("/")
            if p in files:
                out.append(_entry(p, files[p]))
            elif any(f.startswith(p + "/") for f in files):
                out.append({"type": "directory", "oid": hashlib.sha1(p.encode()).hexdigest(), "size": 0, "path": p})
        self._json(out)


class HFHub:
    """The emulator: a ``ThreadingHTTPServer`` on 127.0.0.1 (a free port) in a daemon thread.

    Args:
        page_size: tree entries per page (the Hub: 1000); small values exercise pagination.
        cdn: redirect large files to a file server on another origin (``127.0.0.2``), as the Hub does.
    """

    def __init__(self, page_size: int = 1000, cdn: bool = False) -> None:
        self.page_size = page_size
        self._repos: dict[str, _Repo] = {}
        self._blobs: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._failures: list[int] = []
        self.requests: list[HubRequest] = []
        handler = type("HubHandler", (_Handler,), {"hub": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread: threading.Thread | None = None
        self._cdn: ThreadingHTTPServer | None = None
        self._cdn_thread: threading.Thread | None = None
        self.cdn_endpoint: str | None = None
        if cdn:
            try:
                self._cdn, host = ThreadingHTTPServer(("127.0.0.2", 0), handler), "127.0.0.2"
            except OSError:  # a loopback without 127.0.0.2: "localhost" is another origin as well
                self._cdn, host = ThreadingHTTPServer(("127.0.0.1", 0), handler), "localhost"
            self._cdn.daemon_threads = True
            self.cdn_endpoint = f"http://{host}:{self._cdn.server_address[1]}"

    # -- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> HFHub:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        if self._cdn is not None:
            self._cdn_thread = threading.Thread(
                target=self._cdn.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            )
            self._cdn_thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        for server, thread in ((self._server, self._thread), (self._cdn, self._cdn_thread)):
            if server is not None and thread is not None:  # shutdown() waits for a serve_forever that runs
                server.shutdown()
                thread.join(timeout=5)
            if server is not None:
                server.server_close()

    def __enter__(self) -> HFHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- state ------------------------------------------------------------------------------------------

    def create_repo(self, repo_id: str, token: str | None = None) -> None:
        """An empty dataset repository ``owner/name`` (private, readable only with ``token``, when given)."""
        with self._lock:
            self._repos[repo_id] = _Repo(private_token=token)

    def put(self, repo_id: str, path: str, data: bytes, revision: str = "main") -> None:
        """Commit one file (creating the revision as a branch when it does not exist)."""
        with self._lock:
            self._repos[repo_id].branches.setdefault(revision, {})[path.strip("/")] = bytes(data)
            self._blobs[hashlib.sha256(data).hexdigest()] = bytes(data)

    def delete(self, repo_id: str, path: str, revision: str = "main") -> None:
        """Remove one file."""
        with self._lock:
            self._repos[repo_id].branches[revision].pop(path.strip("/"), None)

    def commit_sha(self, repo_id: str, revision: str = "main") -> str:
        """The sha the Hub reports for ``revision``."""
        return self._repos[repo_id].sha(revision)

    def fail_next(self, n: int, status: int = 503) -> None:
        """Answer the next ``n`` requests with ``status`` (before routing)."""
        with self._lock:
            self._failures.extend([status] * n)

    def clear_failures(self) -> None:
        """Drop the failures :meth:`fail_next` queued and no request took yet."""
        with self._lock:
            self._failures.clear()

    def clear_requests(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self.requests.clear()

    def requests_for(self, fragment: str) -> list[HubRequest]:
        """Recorded requests whose path contains ``fragment``."""
        with self._lock:
            return [r for r in self.requests if fragment in r.path]

    # -- used by the handler ----------------------------------------------------------------------------

    def _take_failure(self, handler: _Handler) -> bool:
        with self._lock:
            status = self._failures.pop(0) if self._failures else None
        if status is None:
            return False
        handler._error(status, None, "injected failure", handler.command != "HEAD")
        return True

    def _record(self, req: HubRequest) -> None:
        with self._lock:
            self.requests.append(req)

    def repos(self) -> Iterator[str]:
        """Ids of the repositories."""
        with self._lock:
            yield from list(self._repos)
