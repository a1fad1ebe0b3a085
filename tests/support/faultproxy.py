"""A fault-injecting HTTP proxy for tests, plus a server that answers garbage.

:class:`FaultProxy` listens on 127.0.0.1:<ephemeral> and forwards every request to an upstream HTTP server
(e.g. the moto S3 server), injecting faults at configurable rates with a seeded RNG:

* ``error_rate``: answer ``500 InternalError`` or ``503 SlowDown`` (S3 XML bodies) without forwarding;
* ``reset_rate``: drop the connection with a TCP RST before any response;
* ``truncate_rate``: forward, then send the full headers (true Content-Length) but only half of the body,
  then close the connection cleanly (HEAD requests and bodies under 2 bytes are passed through and counted
  as ``truncate_skipped``);
* ``delay_rate`` / ``delay_s``: sleep ``delay_s`` before forwarding (set ``delay_s`` above a client's read
  timeout to provoke timeouts);
* ``fixed_delay_s``: added to every request (a slow link).

``methods`` restricts faults to some HTTP methods (default: all); ``max_faults`` stops injecting after that
many faults; ``on_fault(kind, method, path)`` runs after a truncation was delivered (tests use it to change
the object mid-download). The Host header is forwarded unchanged,
so SigV4 signatures made for the proxy's address verify at the upstream. ``counts`` says how many requests
were seen and how many of each fault were injected.

:class:`GarbageServer` answers every request with ``200`` and random bytes (or a configurable body).
"""

from __future__ import annotations

import http.client
import os
import random
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
}

_ERRORS = [
    (500, "InternalError", "We encountered an internal error. Please try again."),
    (503, "SlowDown", "Please reduce your request rate."),
]


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP RST (SO_LINGER 0) instead of a clean FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: Any = None

    def handle_error(self, request: Any, client_address: Any) -> None:  # quiet: resets are expected
        pass


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(parts)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _handle(self) -> None:
        proxy: FaultProxy = self.server.owner
        body = self._read_body()
        fault = proxy._choose(self.command)
        if proxy.fixed_delay_s:
            time.sleep(proxy.fixed_delay_s)
        if fault == "reset":
            self.close_connection = True
            _reset(self.connection)
            return
        if fault == "error":
            status, code, message = proxy._rng_choice(_ERRORS)
            payload = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
                f"<RequestId>fault-{proxy.counts['requests']}</RequestId></Error>"
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            if status == 503:
                self.send_header("Retry-After", "0")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        if fault == "delay":
            time.sleep(proxy.delay_s)
        status, reason, headers, data = proxy._forward(self.command, self.path, self.headers, body)
        if fault == "truncate" and self.command != "HEAD" and len(data) >= 2:
            self.send_response(status, reason)
            for name, value in headers:
                if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True  # clean close (FIN) mid-body: the client sees a short body
            if proxy.on_fault is not None:
                proxy.on_fault("truncate", self.command, self.path)
            return
        if fault == "truncate":
            proxy._count("truncate_skipped")
        self.send_response(status, reason)
        for name, value in headers:
            low = name.lower()
            if low in _HOP_BY_HOP or (low == "content-length" and self.command != "HEAD"):
                continue
            self.send_header(name, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD" and data:
            self.wfile.write(data)

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (OSError, ValueError):
            self.close_connection = True

    def finish(self) -> None:
        try:
            super().finish()
        except (OSError, ValueError):
            pass

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _handle  # noqa: N815


class FaultProxy:
    """Forward HTTP to ``upstream`` and inject faults at the configured rates.

    Args:
        upstream: ``http://host:port`` of the real server.
        seed: Seed of the fault RNG (same seed and request order → same faults).
        error_rate, reset_rate, truncate_rate, delay_rate: Probability per request of each fault.
        delay_s: Sleep of a ``delay`` fault.
        fixed_delay_s: Sleep added to every request.
        methods: HTTP methods eligible for faults (None: all).
        max_faults: Inject at most this many faults (None: no limit).
    """

    def __init__(
        self,
        upstream: str,
        *,
        seed: int = 0,
        error_rate: float = 0.0,
        reset_rate: float = 0.0,
        truncate_rate: float = 0.0,
        delay_rate: float = 0.0,
        delay_s: float = 0.2,
        fixed_delay_s: float = 0.0,
        methods: tuple[str, ...] | None = None,
        max_faults: int | None = None,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"FaultProxy forwards to http:// upstreams only, got {upstream!r}")
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port or 80
        self.delay_s = delay_s
        self.fixed_delay_s = fixed_delay_s
        self.counts: Counter[str] = Counter()
        self.max_faults = max_faults
        self.on_fault: Any = None  # called as on_fault(kind, method, path) after a fault was delivered
        self._lock = threading.Lock()
        self._local = threading.local()
        self.configure(
            seed=seed,
            error_rate=error_rate,
            reset_rate=reset_rate,
            truncate_rate=truncate_rate,
            delay_rate=delay_rate,
            methods=methods,
        )
        self._server = _Server(("127.0.0.1", 0), _ProxyHandler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fault-proxy", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` — point clients here."""
        return f"http://127.0.0.1:{self.port}"

    def configure(
        self,
        *,
        seed: int | None = None,
        error_rate: float | None = None,
        reset_rate: float | None = None,
        truncate_rate: float | None = None,
        delay_rate: float | None = None,
        methods: tuple[str, ...] | None | str = "keep",
    ) -> None:
        """Change fault rates (and reseed) while running; arguments left as None keep their value."""
        with self._lock:
            if seed is not None:
                self._rng = random.Random(seed)
            for name, value in (
                ("error_rate", error_rate),
                ("reset_rate", reset_rate),
                ("truncate_rate", truncate_rate),
                ("delay_rate", delay_rate),
            ):
                if value is not None:
                    if not 0.0 <= value <= 1.0:
                        raise ValueError(f"{name} must be within [0, 1], got {value}")
                    setattr(self, name, value)
            if methods != "keep":
                self.methods = None if methods is None else tuple(m.upper() for m in methods)  # type: ignore[union-attr]
            total = self.error_rate + self.reset_rate + self.truncate_rate + self.delay_rate
            if total > 1.0:
                raise ValueError(f"fault rates add up to {total} > 1")

    def faults(self) -> int:
        """How many faults were injected so far (delays included)."""
        with self._lock:
            return sum(self.counts[k] for k in ("error", "reset", "truncate", "delay"))

    def _count(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    def _rng_choice(self, seq: list[Any]) -> Any:
        with self._lock:
            return self._rng.choice(seq)

    def _choose(self, method: str) -> str | None:
        with self._lock:
            self.counts["requests"] += 1
            self.counts[f"requests_{method}"] += 1
            if self.methods is not None and method.upper() not in self.methods:
                return None
            injected = sum(self.counts[k] for k in ("error", "reset", "truncate", "delay"))
            if self.max_faults is not None and injected >= self.max_faults:
                return None
            x = self._rng.random()
            for name in ("error", "reset", "truncate", "delay"):
                rate = getattr(self, f"{name}_rate")
                if x < rate:
                    self.counts[name] += 1
                    return name
                x -= rate
            return None

    def _forward(
        self, method: str, path: str, headers: Any, body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        out_headers = {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}
        if body or method in ("PUT", "POST"):
            out_headers["Content-Length"] = str(len(body))
        for attempt in range(2):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
                self._local.conn = conn
            try:
                conn.request(method, path, body=body if body else None, headers=out_headers)
                resp = conn.getresponse()
                data = resp.read()
                return resp.status, resp.reason, resp.getheaders(), data
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _GarbageHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _handle(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        owner: GarbageServer = self.server.owner
        owner.requests += 1
        if owner.raw:
            # Not even HTTP: random bytes straight onto the socket.
            self.wfile.write(owner.body())
            self.close_connection = True
            return
        payload = owner.body()
        self.send_response(owner.status)
        self.send_header("Content-Type", owner.content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle  # noqa: N815


class GarbageServer:
    """An HTTP server on 127.0.0.1:<ephemeral> that answers every request with nonsense.

    Args:
        status: Status code of the answers.
        payload: Fixed body; random bytes when None.
        raw: Write random bytes instead of an HTTP response at all.
    """

    def __init__(
        self,
        status: int = 200,
        payload: bytes | None = None,
        raw: bool = False,
        content_type: str = "application/xml",
    ) -> None:
        self.status = status
        self.payload = payload
        self.raw = raw
        self.content_type = content_type
        self.requests = 0
        self._server = _Server(("127.0.0.1", 0), _GarbageHandler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="garbage-server", daemon=True
        )
        self._thread.start()

    def body(self) -> bytes:
        return self.payload if self.payload is not None else os.urandom(512)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> GarbageServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def closed_port() -> int:
    """A loopback port with nothing listening (bound then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BlackHole:
    """A loopback address where TCP connects hang: a listener whose accept queue is full and never drained.

    Linux drops further SYNs to a listener with a full accept queue, so clients wait for their connect
    timeout exactly as with an unreachable host. ``url`` is ``http://127.0.0.1:<port>``.
    """

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(0)
        self.port = int(self._listener.getsockname()[1])
        self._fillers: list[socket.socket] = []
        for _ in range(4):  # fill the accept queue (backlog 0 still admits one or two)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", self.port))
            except BlockingIOError:
                pass
            self._fillers.append(s)
        time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        for s in self._fillers:
            s.close()
        self._listener.close()

    def __enter__(self) -> BlackHole:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
