"""A fault-injecting HTTP proxy for tests, plus a server that answers garbage.

:class:`FaultProxy` listens on 127.0.0.1:<ephemeral> and forwards every request to an upstream HTTP server
(e.g. the moto S3 server), injecting faults at configurable rates with a seeded RNG. It runs a few asyncio
event loops (one thread each) on one listening socket; each client connection keeps its own upstream
connection, delays are ``asyncio.sleep`` (hundreds of delayed requests cost no threads), lean enough that a benchmark through it
measures the client, not the proxy:

* ``error_rate``: answer ``500 InternalError`` or ``503 SlowDown`` (S3 XML bodies) without forwarding;
* ``reset_rate``: drop the connection with a TCP RST before any response;
* ``truncate_rate``: forward, then send the full headers (true Content-Length) but only half of the body,
  then close the connection cleanly (HEAD requests and bodies under 2 bytes are passed through and counted
  as ``truncate_skipped``);
* ``delay_rate`` / ``delay_s``: sleep ``delay_s`` before forwarding (set ``delay_s`` above a client's read
  timeout to provoke timeouts);
* ``fixed_delay_s``: added to every request (a slow link);
* ``bandwidth_bps``: response bodies share one link of this many bytes per second (all connections together,
  sent in 64 KB slices that each reserve their time on the link in turn; None: no cap). Headers, faults and
  request bodies are not throttled. ``counts["body_bytes"]`` is the body bytes sent so far.

``methods`` restricts faults to some HTTP methods (default: all); ``max_faults`` stops injecting after that
many faults; ``on_fault(kind, method, path)`` runs after a truncation was delivered (tests use it to change
the object mid-download); ``peak_in_flight`` is the most requests it was answering at once. The Host header is forwarded unchanged,
so SigV4 signatures made for the proxy's address verify at the upstream. ``counts`` says how many requests
were seen (``requests``, ``requests_<METHOD>``, client ``connections`` accepted) and how many of each fault
were injected.

:class:`GarbageServer` answers every request with ``200`` and random bytes (or a configurable body).
"""

from __future__ import annotations

import asyncio
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


def _reset_transport(writer: asyncio.StreamWriter, sock: Any) -> None:
    """Drop a client connection with a TCP RST (SO_LINGER 0), not a clean FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except (OSError, AttributeError):
        pass
    writer.transport.abort()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: Any = None

    def handle_error(self, request: Any, client_address: Any) -> None:  # quiet: resets are expected
        pass


class _UpstreamError(Exception):
    """The upstream could not be reached or answered nonsense (the client connection is dropped)."""


def _parse_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    """Split an HTTP message head into its first line and its ``(name, value)`` header list."""
    lines = head.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if sep:
            headers.append((name.strip(), value.strip()))
    return lines[0], headers


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


async def _read_body(reader: asyncio.StreamReader, headers: list[tuple[str, str]]) -> bytes:
    """A message body framed by Content-Length or chunked encoding (de-chunked)."""
    if (_header(headers, "transfer-encoding") or "").lower() == "chunked":
        parts = []
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            parts.append(await reader.readexactly(size))
            await reader.readline()
    n = int(_header(headers, "content-length") or 0)
    return await reader.readexactly(n) if n else b""


class _Upstream:
    """One keep-alive connection to the upstream, owned by one client connection (requests never interleave)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.transport.abort()
        self.reader = self.writer = None

    async def exchange(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """Send one request and read its whole response; on failure, one retry on a fresh connection."""
        out = [f"{method} {path} HTTP/1.1\r\n"]
        for name, value in headers:
            low = name.lower()
            if low in _HOP_BY_HOP or low in ("content-length", "expect"):
                continue
            out.append(f"{name}: {value}\r\n")
        if body or method in ("PUT", "POST"):
            out.append(f"Content-Length: {len(body)}\r\n")
        out.append("\r\n")
        request = "".join(out).encode("latin-1")
        for attempt in range(2):
            fresh = self.writer is None
            try:
                if fresh:
                    self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=_BUF)
                assert self.reader is not None and self.writer is not None
                self.writer.writelines((request, body) if body else (request,))
                await self.writer.drain()
                while True:
                    status_line, resp_headers = _parse_head(await self.reader.readuntil(b"\r\n\r\n"))
                    version, _, rest = status_line.partition(" ")
                    code, _, reason = rest.partition(" ")
                    status = int(code)
                    if status >= 200 or status == 101:
                        break  # 1xx interim answers (100 Continue) are skipped
                if method == "HEAD" or status in (204, 304):
                    data = b""
                elif (
                    _header(resp_headers, "content-length") is None
                    and (_header(resp_headers, "transfer-encoding") or "").lower() != "chunked"
                ):
                    data = await self.reader.read()  # framed by close
                    self.close()
                else:
                    data = await _read_body(self.reader, resp_headers)
                conn = (_header(resp_headers, "connection") or "").lower()
                if conn == "close" or version == "HTTP/1.0":
                    self.close()
                return status, reason, resp_headers, data
            except (OSError, EOFError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                self.close()
                if attempt == 1:
                    raise _UpstreamError(f"upstream {self.host}:{self.port}: {exc!r}") from exc
        raise AssertionError("unreachable")


_BUF = 1 << 20
_SLICE = 64 << 10  # bytes of a response body sent per turn on a bandwidth-capped link


class _Loop:
    """One event loop in its own daemon thread, accepting from (a dup of) the proxy's listening socket."""

    def __init__(self, owner: FaultProxy, index: int, listener: socket.socket) -> None:
        self.loop = asyncio.new_event_loop()
        self.server: asyncio.AbstractServer | None = None
        started = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(owner, listener, started), name=f"fault-proxy-{index}", daemon=True
        )
        self.thread.start()
        started.wait(30)
        if self.server is None:
            raise RuntimeError("fault proxy did not start")

    def _run(self, owner: FaultProxy, listener: socket.socket, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def boot() -> None:
            self.server = await asyncio.start_server(owner._serve_client, sock=listener, limit=_BUF)

        try:
            self.loop.run_until_complete(boot())
        finally:
            started.set()
        try:
            self.loop.run_forever()
        finally:
            try:
                self._close_everything()
            finally:
                self.loop.close()

    def _close_everything(self) -> None:
        """Cancel every task and abort every transport until none is left, so the loop takes its sockets with it.

        A socket left open is found by the garbage collector (a ResourceWarning, an error in this suite), and each turn
        of the loop can open one: an accept under way makes its transport on a later turn, and a cancelled task's
        upstream connection closes on the turn after its abort. The server stays open until the end (asyncio builds
        an accepted transport with ``Server._attach`` first: on a closed server that asserts half-way, before the loop
        knows the transport, and nothing ever closes it). Closing transports are aborted too: one closed with bytes buffered for
        a peer that no longer reads keeps its socket until they drain. The selector loop's transports by fd are
        private (absent elsewhere: nothing to sweep).
        """
        aborted: set[asyncio.BaseTransport] = set()
        begun: set[asyncio.Task[Any]] = set()
        for _ in range(50):  # a task that swallows its cancellation must not keep the thread forever
            tasks = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for t in tasks:
                # a task is cancelled once it has begun: a connection's task cancelled before its first step makes
                # asyncio's done-callback (3.11) raise on it, logged as an error, and an accept's would leave its
                # socket with no transport (begun, it closes the transport it made)
                if t in begun:
                    t.cancel()
            begun.update(tasks)
            fresh = [tr for tr in list(getattr(self.loop, "_transports", {}).values()) if tr is not None]
            fresh = [tr for tr in fresh if tr not in aborted]
            for tr in fresh:
                tr.abort()
                aborted.add(tr)
            if not tasks and not fresh:
                break  # the turn before ran every abort's close and opened nothing
            self.loop.run_until_complete(asyncio.sleep(0))
        if self.server is not None:
            self.server.close()  # its listening socket

    def stop(self) -> None:
        if not self.thread.is_alive():
            return

        def halt() -> None:
            if self.server is not None:
                for sock in self.server.sockets:  # no new connection; the server stays open (_close_everything)
                    self.loop.remove_reader(sock.fileno())
            self.loop.stop()  # the thread then closes every connection

        self.loop.call_soon_threadsafe(halt)
        self.thread.join(timeout=5)


class FaultProxy:
    """Forward HTTP to ``upstream`` and inject faults at the configured rates.

    Args:
        upstream: ``http://host:port`` of the real server.
        seed: Seed of the fault RNG (same seed and request order → same faults).
        error_rate, reset_rate, truncate_rate, delay_rate: Probability per request of each fault.
        delay_s: Sleep of a ``delay`` fault.
        fixed_delay_s: Sleep added to every request.
        bandwidth_bps: Bytes per second of response body for all connections together (None: no cap).
        methods: HTTP methods eligible for faults (None: all).
        max_faults: Inject at most this many faults (None: no limit).
        loops: Event loops (one thread each) accepting from the one listening socket. One loop does all the
            work; more keep the proxy's share of a loaded machine's CPU (the scheduler shares per thread)
            close to that of the thread-per-connection servers around it.
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
        bandwidth_bps: float | None = None,
        methods: tuple[str, ...] | None = None,
        max_faults: int | None = None,
        loops: int = 4,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"FaultProxy forwards to http:// upstreams only, got {upstream!r}")
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port or 80
        self.delay_s = delay_s
        self.fixed_delay_s = fixed_delay_s
        if bandwidth_bps is not None and not bandwidth_bps > 0:
            raise ValueError(f"bandwidth_bps must be > 0 (or None for no cap), got {bandwidth_bps}")
        self.bandwidth_bps = bandwidth_bps
        self._link_free_at = 0.0  # monotonic time at which the capped link has sent everything reserved so far
        self.counts: Counter[str] = Counter()
        self.max_faults = max_faults
        self.on_fault: Any = None  # called as on_fault(kind, method, path) after a fault was delivered
        # every connection's task, held until it ends: asyncio keeps tasks by weak reference, and once a client
        # half-closes (a DataLoader worker that exits with a request under way) its transport leaves the selector,
        # so a task awaiting the upstream (whose protocol holds its reader by weak reference too) is reachable from
        # nothing: the collector destroyed such tasks pending, their sockets unclosed (unraisable ResourceWarnings
        # in whichever test ran then)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._lock = threading.Lock()
        self._port = 0
        self.in_flight = 0  # requests being answered now (delays included)
        self.peak_in_flight = 0  # most requests answered at once so far (tests check latency hiding with it)
        self.configure(
            seed=seed,
            error_rate=error_rate,
            reset_rate=reset_rate,
            truncate_rate=truncate_rate,
            delay_rate=delay_rate,
            methods=methods,
        )
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(512)
        self._listener.setblocking(False)
        self._port = int(self._listener.getsockname()[1])
        self._loops: list[_Loop] = [_Loop(self, i, self._listener.dup()) for i in range(max(1, loops))]

    def _enter_request(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def _leave_request(self) -> None:
        with self._lock:
            self.in_flight -= 1

    @property
    def port(self) -> int:
        return self._port

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

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one client connection: requests one after another (keep-alive), each through the faults."""
        self._count("connections")
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        sock = writer.get_extra_info("socket")
        upstream = _Upstream(self.upstream_host, self.upstream_port)
        try:
            while True:
                try:
                    request_line, headers = _parse_head(await reader.readuntil(b"\r\n\r\n"))
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
                    return
                method, _, rest = request_line.partition(" ")
                path, _, version = rest.partition(" ")
                if (_header(headers, "expect") or "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = await _read_body(reader, headers)
                keep = version == "HTTP/1.1" and (_header(headers, "connection") or "").lower() != "close"
                if not await self._answer(method, path, headers, body, writer, sock, upstream):
                    return
                if not keep:
                    await writer.drain()
                    return
        except (OSError, ValueError, asyncio.IncompleteReadError, _UpstreamError):
            writer.transport.abort()
        except asyncio.CancelledError:  # close(): the proxy is going away
            writer.transport.abort()
        finally:
            upstream.close()
            if not writer.transport.is_closing():
                writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _answer(
        self,
        method: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes,
        writer: asyncio.StreamWriter,
        sock: Any,
        upstream: _Upstream,
    ) -> bool:
        """Answer one request (a fault or the upstream's answer); False when the connection must end."""
        self._enter_request()
        try:
            return await self._answer_one(method, path, headers, body, writer, sock, upstream)
        finally:
            self._leave_request()

    async def _answer_one(
        self,
        method: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes,
        writer: asyncio.StreamWriter,
        sock: Any,
        upstream: _Upstream,
    ) -> bool:
        fault = self._choose(method)
        if self.fixed_delay_s:
            await asyncio.sleep(self.fixed_delay_s)
        if fault == "reset":
            _reset_transport(writer, sock)
            return False
        if fault == "error":
            status, code, message = self._rng_choice(_ERRORS)
            payload = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
                f"<RequestId>fault-{self.counts['requests']}</RequestId></Error>"
            ).encode()
            head = [f"HTTP/1.1 {status} {'Service Unavailable' if status == 503 else 'Internal Server Error'}"]
            head += ["Content-Type: application/xml", f"Content-Length: {len(payload)}"]
            if status == 503:
                head.append("Retry-After: 0")
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
            if method != "HEAD":
                writer.write(payload)
            await writer.drain()
            return True
        if fault == "delay":
            await asyncio.sleep(self.delay_s)
        status, reason, resp_headers, data = await upstream.exchange(method, path, headers, body)
        truncate = fault == "truncate" and method != "HEAD" and len(data) >= 2
        if fault == "truncate" and not truncate:
            self._count("truncate_skipped")
        head = [f"HTTP/1.1 {status} {reason}"]
        for name, value in resp_headers:
            low = name.lower()
            if low in _HOP_BY_HOP or (low == "content-length" and method != "HEAD"):
                continue
            head.append(f"{name}: {value}")
        if method != "HEAD":
            head.append(f"Content-Length: {len(data)}")
        out = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        if truncate:
            writer.writelines((out, data[: len(data) // 2]))
            await writer.drain()
            writer.close()  # clean close (FIN) mid-body: the client sees a short body
            if self.on_fault is not None:
                self.on_fault("truncate", method, path)
            return False
        await self._send(writer, out, data if method != "HEAD" else b"")
        return True

    def _reserve(self, nbytes: int) -> float:
        """Reserve ``nbytes`` of link time after everything reserved before; the monotonic time it is sent by."""
        rate = self.bandwidth_bps
        with self._lock:
            self.counts["body_bytes"] += nbytes
            if not rate:
                return 0.0
            # an idle link saves no credit: a slice starts no earlier than now
            self._link_free_at = max(time.monotonic(), self._link_free_at) + nbytes / rate
            return self._link_free_at

    async def _send(self, writer: asyncio.StreamWriter, head: bytes, body: bytes) -> None:
        """Write a response; with a bandwidth cap, the body goes out slice by slice as the link allows."""
        if not self.bandwidth_bps or not body:
            if body:
                self._reserve(len(body))
            writer.writelines((head, body) if body else (head,))
            await writer.drain()
            return
        writer.write(head)
        view = memoryview(body)
        for off in range(0, len(body), _SLICE):
            piece = view[off : off + _SLICE]
            wait = self._reserve(len(piece)) - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(piece)
            await writer.drain()

    def close(self) -> None:
        """Stop serving and drop every open connection."""
        for loop in self._loops:
            loop.stop()
        try:
            self._listener.close()
        except OSError:
            pass

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
