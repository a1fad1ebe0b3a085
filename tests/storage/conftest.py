"""Fixtures of the storage tests: a loopback static-file HTTP(S) server with Range support; the Hugging Face Hub
emulator (``hf_hub``)."""

from __future__ import annotations

import os
import re
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

import pytest

from tests.support.hf_hub import HFHub
from tests.support.s3server import make_ca_and_server_cert

_RANGE_RE = re.compile(r"bytes=(\d+)-(\d*)$")


class _FileHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = ""
    honour_range = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _serve(self, body: bool) -> None:
        path = os.path.join(self.root, unquote(self.path.lstrip("/").split("?", 1)[0]))
        if not os.path.isfile(path):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with open(path, "rb") as f:
            data = f.read()
        status, payload = 200, data
        rng = self.headers.get("Range")
        if rng and self.honour_range:
            m = _RANGE_RE.match(rng.strip())
            assert m is not None
            start = int(m.group(1))
            end = int(m.group(2)) + 1 if m.group(2) else len(data)
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status, payload = 206, data[start : min(end, len(data))]
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Last-Modified", self.date_time_string(os.path.getmtime(path)))
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def do_GET(self) -> None:  # noqa: N802
        self._serve(True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(False)


@dataclass
class FileServer:
    """A static-file server rooted at ``root`` on 127.0.0.1."""

    url: str
    root: str
    ca_file: str | None = None


def _start(root: str, honour_range: bool, cert: tuple[str, str] | None) -> tuple[ThreadingHTTPServer, threading.Thread]:
    handler = type("H", (_FileHandler,), {"root": root, "honour_range": honour_range})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if cert is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert[0], cert[1])
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return server, thread


@pytest.fixture(params=["http", "http-norange", "https"])
def http_files(request: pytest.FixtureRequest, tmp_path) -> Iterator[FileServer]:
    """Static files over http, over http ignoring Range, and over https (throw-away CA)."""
    root = tmp_path / "www"
    root.mkdir()
    cert = None
    ca = None
    if request.param == "https":
        ca, c, k = make_ca_and_server_cert(str(tmp_path))
        cert = (c, k)
    server, thread = _start(str(root), request.param != "http-norange", cert)
    scheme = "https" if cert else "http"
    try:
        yield FileServer(f"{scheme}://127.0.0.1:{server.server_address[1]}", str(root), ca)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="session")
def hf_hub() -> Iterator[HFHub]:
    """The Hub emulator for this test session, ``HF_ENDPOINT`` pointed at it (tree pages of 3 entries, so listings
    paginate; large files redirected to its CDN on another origin, as the Hub does)."""
    pytest.importorskip("huggingface_hub")
    saved = {k: os.environ.get(k) for k in ("HF_ENDPOINT", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    with HFHub(page_size=3, cdn=True) as hub:
        os.environ["HF_ENDPOINT"] = hub.endpoint
        for k in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):  # a developer's own token never reaches the tests
            os.environ.pop(k, None)
        try:
            yield hub
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
