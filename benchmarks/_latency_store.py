"""A latency-bound S3 object server for benchmarks: objects in memory, latency and limits injected as asked.

moto (the correctness tests' S3) spends milliseconds of CPU per request in Python; on a 2-core machine it, not the
latency it is asked to add, bounds what a client can fetch. This server's own cost per request is a fraction of a
millisecond (asyncio, one thread, no signature checks, bodies sent from memory), so what a client sees is the
latency injected:

* **latency**: a fixed delay before the answer (``latency_ms``) plus optional log-normal jitter (median
  ``jitter_ms``, shape ``jitter_sigma``), slept with ``asyncio.sleep``: thousands of requests can wait at once
  without a thread or CPU each;
* **bandwidth**: a token bucket shared by every connection of a profile (``bandwidth_mbps`` MB/s, ``burst_kb``):
  bodies go out in 64 KB slices, each after its bytes' tokens (one link for all connections);
* **capacity knee**: at most ``capacity`` requests are served at once; beyond, a request queues for a slot
  (``knee_ms`` 0), or is served at once with ``knee_ms`` more latency per request in flight over the knee;
* **rate limit**: ``rate_limit_rps`` requests a second (bucket of ``rate_burst``); a request without a token is
  answered ``503 SlowDown`` (S3's throttling answer, which S3 clients retry with back-off).

The S3 calls the engines make, path-style (``http://127.0.0.1:PORT/bucket/key``, as boto3 and obstore address an
``endpoint_url`` that is an IP; dummy ``AWS_*`` credentials, signatures not checked, ``allow_http``): ``GET`` of an
object, whole or with ``Range: bytes=a-b`` (206 and ``Content-Range``), ``HEAD`` (size, ``ETag``,
``Last-Modified``: obstore refuses an answer without them), ``GET /bucket?list-type=2`` (ListObjectsV2: ``prefix``,
``delimiter``, ``max-keys``, ``continuation-token``, ``start-after``), and ``GET /bucket`` for ``HeadBucket``-like
probes. Nothing is written: objects are loaded at start from local folders (``--load DIR=bucket/prefix``). A
``GET /_stats`` on any port answers its profile's counters as JSON (requests by kind, 503s, bytes, the most
requests in flight, time queued at the knee, and this process's CPU seconds).

One process serves several *profiles*, each on its own port with its own limits, over the same objects (two ranks,
one slowed: two profiles). Run::

    python benchmarks/_latency_store.py serve --load /data/ds=bench/images --profile '{"latency_ms": 20}'

prints one JSON line ``{"ready": true, "ports": [...], "pid": ...}`` and serves until stdin closes or SIGTERM.
:class:`LatencyStore` starts it from a benchmark. ``python benchmarks/_latency_store.py selfcheck`` measures the
server: its CPU per request, the latency a client sees against the latency injected, and 1 MB GETs per second at
+20 ms (see :func:`selfcheck`).
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import hashlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
import urllib.parse
from dataclasses import asdict, dataclass
from typing import Any
from xml.sax.saxutils import escape

__all__ = ["LatencyStore", "Profile", "selfcheck"]

SLICE = 64 * 1024


@dataclass
class Profile:
    """The limits of one port (see the module docstring); zero means "none"."""

    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    jitter_sigma: float = 0.5
    bandwidth_mbps: float = 0.0
    burst_kb: float = 256.0
    capacity: int = 0
    knee_ms: float = 0.0
    rate_limit_rps: float = 0.0
    rate_burst: float = 0.0
    seed: int = 0

    @classmethod
    def parse(cls, text: str | dict[str, Any]) -> Profile:
        raw = json.loads(text) if isinstance(text, str) else dict(text)
        unknown = set(raw) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown profile keys {sorted(unknown)} (known: {sorted(cls.__dataclass_fields__)})")
        return cls(**raw)


@dataclass
class Obj:
    data: bytes
    etag: str
    mtime: float


class _Bucket:
    """A token bucket; ``take(n)`` returns how long to wait for ``n`` tokens (reserving them), or None."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, max(burst, 1.0)
        self.tokens = self.burst
        self.t = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
        self.t = now

    def reserve(self, n: float) -> float:
        """Take ``n`` tokens, going into debt: the seconds until the debt is paid (0 when none)."""
        self._refill()
        self.tokens -= n
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    def try_take(self, n: float = 1.0) -> bool:
        self._refill()
        if self.tokens >= n:
            self.tokens -= n
            return True
        return False


@dataclass
class _Stats:
    requests: int = 0
    gets: int = 0
    range_gets: int = 0
    heads: int = 0
    lists: int = 0
    not_found: int = 0
    slowdown_503: int = 0
    bytes_sent: int = 0
    in_flight: int = 0
    in_flight_max: int = 0
    queued_s: float = 0.0
    injected_s: float = 0.0


class _Server:
    def __init__(self, profile: Profile, objects: dict[str, dict[str, Obj]]) -> None:
        self.p = profile
        self.objects = objects
        self.rng = random.Random(profile.seed)
        self.bw = _Bucket(profile.bandwidth_mbps * 1e6, profile.burst_kb * 1e3) if profile.bandwidth_mbps else None
        self.rl = (
            _Bucket(profile.rate_limit_rps, profile.rate_burst or profile.rate_limit_rps)
            if profile.rate_limit_rps
            else None
        )
        self.slots = asyncio.Semaphore(profile.capacity) if profile.capacity and not profile.knee_ms else None
        self.stats = _Stats()
        # log-normal jitter with median jitter_ms: exp(N(ln jitter_ms, sigma))
        self._mu = math.log(profile.jitter_ms) if profile.jitter_ms > 0 else 0.0

    def delay(self) -> float:
        d = self.p.latency_ms
        if self.p.jitter_ms > 0:
            d += math.exp(self.rng.gauss(self._mu, self.p.jitter_sigma))
        if self.p.capacity and self.p.knee_ms:
            d += self.p.knee_ms * max(0, self.stats.in_flight - self.p.capacity)
        return d / 1000.0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _version = lines[0].split(" ", 2)
                headers = {}
                for ln in lines[1:]:
                    if ":" in ln:
                        k, v = ln.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length") or 0)
                if length:
                    await reader.readexactly(length)  # a body we do not use (nothing is written)
                keep = headers.get("connection", "").lower() != "close"
                await self.request(method, target, headers, writer)
                if not keep:
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            writer.close()

    async def request(self, method: str, target: str, headers: dict[str, str], w: asyncio.StreamWriter) -> None:
        st = self.stats
        url = urllib.parse.urlsplit(target)
        if url.path == "/_stats":
            body = json.dumps({**asdict(st), "cpu_s": sum(os.times()[:2]), "profile": asdict(self.p)}).encode()
            if "reset" in (url.query or ""):  # the most in flight since the last read (an arm's own peak)
                st.in_flight_max = st.in_flight
            return await self.send(w, 200, {"Content-Type": "application/json"}, body, method)
        st.requests += 1
        st.in_flight += 1
        st.in_flight_max = max(st.in_flight_max, st.in_flight)
        try:
            if self.slots is not None:
                t = time.monotonic()
                async with self.slots:
                    st.queued_s += time.monotonic() - t
                    await self.serve(method, url, headers, w)
            else:
                await self.serve(method, url, headers, w)
        finally:
            st.in_flight -= 1

    async def serve(self, method: str, url: urllib.parse.SplitResult, headers: dict[str, str], w: Any) -> None:
        st = self.stats
        d = self.delay()
        st.injected_s += d
        if d > 0:
            await asyncio.sleep(d)
        if self.rl is not None and not self.rl.try_take():
            st.slowdown_503 += 1
            return await self.send(w, 503, {}, _error("SlowDown", "Please reduce your request rate."), method)
        parts = urllib.parse.unquote(url.path).lstrip("/").split("/", 1)
        bucket = parts[0]
        key = parts[1] if len(parts) > 1 else ""
        objs = self.objects.get(bucket)
        if objs is None:
            st.not_found += 1
            return await self.send(w, 404, {}, _error("NoSuchBucket", "The specified bucket does not exist"), method)
        if not key:
            if method == "GET" and url.query:  # ListObjectsV2 (list-type=2) and its parameters
                st.lists += 1
                return await self.send(
                    w, 200, {"Content-Type": "application/xml"}, _list(bucket, objs, url.query), method
                )
            return await self.send(w, 200, {}, b"", method)  # HeadBucket / GET bucket: it exists
        obj = objs.get(key)
        if obj is None:
            st.not_found += 1
            return await self.send(w, 404, {}, _error("NoSuchKey", "The specified key does not exist."), method)
        hdrs = {
            "ETag": obj.etag,
            "Last-Modified": email.utils.formatdate(obj.mtime, usegmt=True),
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        size = len(obj.data)
        if method == "HEAD":
            st.heads += 1
            hdrs["Content-Length"] = str(size)
            return await self.send(w, 200, hdrs, b"", method, length=size)
        rng = headers.get("range")
        if rng:
            span = _range(rng, size)
            if span is None:
                hdrs["Content-Range"] = f"bytes */{size}"
                return await self.send(w, 416, hdrs, _error("InvalidRange", "bad range"), method)
            a, b = span
            st.range_gets += 1
            hdrs["Content-Range"] = f"bytes {a}-{b}/{size}"
            return await self.send(w, 206, hdrs, memoryview(obj.data)[a : b + 1], method)
        st.gets += 1
        return await self.send(w, 200, hdrs, memoryview(obj.data), method)

    async def send(
        self,
        w: Any,
        status: int,
        hdrs: dict[str, str],
        body: bytes | memoryview,
        method: str,
        length: int | None = None,
    ) -> None:
        reason = {200: "OK", 206: "Partial Content", 404: "Not Found", 416: "Range Not Satisfiable", 503: "Slow Down"}
        hdrs = {**hdrs, "Content-Length": str(len(body) if length is None else length), "x-amz-request-id": "0"}
        if status >= 400 and "Content-Type" not in hdrs:
            hdrs["Content-Type"] = "application/xml"
        head = f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in hdrs.items()
        )
        w.write(head.encode("latin-1") + b"\r\n")
        if method != "HEAD" and len(body):
            if self.bw is None:
                w.write(body)
            else:
                for i in range(0, len(body), SLICE):
                    part = body[i : i + SLICE]
                    wait = self.bw.reserve(len(part))
                    if wait > 0:
                        await asyncio.sleep(wait)
                    w.write(part)
                    await w.drain()
            self.stats.bytes_sent += len(body)
        await w.drain()


def _error(code: str, message: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{escape(message)}</Message>'
        "<RequestId>0</RequestId></Error>"
    ).encode()


def _range(text: str, size: int) -> tuple[int, int] | None:
    """``bytes=a-b`` / ``bytes=a-`` / ``bytes=-n`` -> inclusive (first, last), or None when unsatisfiable."""
    if not text.startswith("bytes=") or "," in text:
        return None
    a, _, b = text[6:].partition("-")
    if a == "":
        n = int(b)
        if n <= 0:
            return None
        return max(0, size - n), size - 1
    first = int(a)
    last = min(int(b), size - 1) if b else size - 1
    if first >= size or last < first:
        return None
    return first, last


def _list(bucket: str, objs: dict[str, Obj], query: str) -> bytes:
    q = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    prefix, delim = q.get("prefix", ""), q.get("delimiter", "")
    max_keys = int(q.get("max-keys") or 1000)
    after = max(q.get("continuation-token", ""), q.get("start-after", ""))
    contents: list[str] = []
    prefixes: list[str] = []
    last = ""
    truncated = False
    for key in sorted(objs):
        if not key.startswith(prefix) or key <= after:
            continue
        if len(contents) + len(prefixes) >= max_keys:
            truncated = True
            break
        if delim:
            rest = key[len(prefix) :]
            if delim in rest:
                cp = prefix + rest.split(delim, 1)[0] + delim
                if not prefixes or prefixes[-1] != cp:
                    prefixes.append(cp)
                last = key
                continue
        o = objs[key]
        mtime = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(o.mtime))
        contents.append(
            f"<Contents><Key>{escape(key)}</Key><LastModified>{mtime}</LastModified><ETag>{escape(o.etag)}</ETag>"
            f"<Size>{len(o.data)}</Size><StorageClass>STANDARD</StorageClass></Contents>"
        )
        last = key
    xml = [
        '<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
        f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix><MaxKeys>{max_keys}</MaxKeys>",
        f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount><IsTruncated>{'true' if truncated else 'false'}</IsTruncated>",
    ]
    if delim:
        xml.append(f"<Delimiter>{escape(delim)}</Delimiter>")
    if truncated:
        xml.append(f"<NextContinuationToken>{escape(last)}</NextContinuationToken>")
    xml += contents
    xml += [f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in prefixes]
    xml.append("</ListBucketResult>")
    return "".join(xml).encode()


def load_objects(specs: list[str]) -> dict[str, dict[str, Obj]]:
    """``DIR=bucket/prefix`` -> every file under DIR as ``prefix/<relative path>`` of ``bucket``, in memory."""
    out: dict[str, dict[str, Obj]] = {}
    for spec in specs:
        src, _, dest = spec.partition("=")
        if not dest:
            raise SystemExit(f"--load {spec!r}: expected DIR=bucket[/prefix]")
        bucket, _, prefix = dest.partition("/")
        objs = out.setdefault(bucket, {})
        for dirpath, _dirs, files in os.walk(src):
            for name in files:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, src).replace(os.sep, "/")
                with open(path, "rb") as f:
                    data = f.read()
                key = f"{prefix.rstrip('/')}/{rel}" if prefix else rel
                objs[key] = Obj(data, '"' + hashlib.md5(data).hexdigest() + '"', os.path.getmtime(path))
    return out


async def _serve(profiles: list[Profile], objects: dict[str, dict[str, Obj]], host: str) -> None:
    servers = []
    ports = []
    for p in profiles:
        srv = _Server(p, objects)
        s = await asyncio.start_server(srv.handle, host, 0, backlog=1024, limit=1 << 16)
        servers.append(s)
        ports.append(s.sockets[0].getsockname()[1])
    n = sum(len(v) for v in objects.values())
    size = sum(len(o.data) for v in objects.values() for o in v.values())
    print(json.dumps({"ready": True, "ports": ports, "pid": os.getpid(), "objects": n, "bytes": size}), flush=True)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    # the parent holds our stdin: when it goes (the benchmark ended, even by a crash), so do we
    loop.add_reader(sys.stdin.fileno(), lambda: done.set() if not os.read(sys.stdin.fileno(), 4096) else None)
    await done.wait()
    for s in servers:
        s.close()


class LatencyStore:
    """The server in a process of its own, from a benchmark: ``with LatencyStore(loads, profiles) as st: ...``."""

    def __init__(
        self, loads: dict[str, str], profiles: list[Profile | dict[str, Any]], host: str = "127.0.0.1"
    ) -> None:
        """``loads``: local folder -> ``bucket/prefix``; ``profiles``: one port each, in order."""
        self.profiles = [p if isinstance(p, Profile) else Profile.parse(p) for p in profiles]
        argv = [sys.executable, os.path.abspath(__file__), "serve", "--host", host]
        for src, dest in loads.items():
            argv += ["--load", f"{src}={dest}"]
        for p in self.profiles:
            argv += ["--profile", json.dumps(asdict(p))]
        self.host = host
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"latency store did not start (exit code {self.proc.wait()})")
        ready = json.loads(line)
        self.ports: list[int] = ready["ports"]
        self.pid: int = ready["pid"]
        self.objects, self.bytes = ready["objects"], ready["bytes"]

    def url(self, i: int = 0) -> str:
        return f"http://{self.host}:{self.ports[i]}"

    def storage_options(self, i: int = 0) -> dict[str, Any]:
        """What both engines take to reach profile ``i`` (LitData's boto3 spelling): an endpoint, dummy keys, a
        region. streamscope's obstore client allows plain http to an ``http://`` endpoint by itself; LitData's
        needs ``allow_http`` patched in (``_autotune_loop._patch_litdata_allow_http``)."""
        return {
            "endpoint_url": self.url(i),
            "aws_access_key_id": "bench",
            "aws_secret_access_key": "bench",
            "region_name": "us-east-1",
        }

    def stats(self, i: int = 0, reset: bool = False) -> dict[str, Any]:
        """Profile ``i``'s counters; ``reset``: its peak of requests in flight starts again from now."""
        import urllib.request

        with urllib.request.urlopen(self.url(i) + "/_stats" + ("?reset=1" if reset else ""), timeout=30) as r:
            return dict(json.loads(r.read()))

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()  # the pipe of its first line (a ResourceWarning when left to the collector)

    def __enter__(self) -> LatencyStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- self-check -----------------------------------------------------------------------------------------------


async def _client_gets(port: int, keys: list[str], conns: int, seconds: float) -> dict[str, Any]:
    """``conns`` keep-alive connections, each GETting the next key in turn for ``seconds``: per-request latency
    (request written -> last body byte read) and the count; a raw HTTP client, cheaper than any SDK."""
    lat: list[float] = []
    nbytes = throttled = 0
    stop = time.monotonic() + seconds

    async def one(c: int) -> None:
        nonlocal nbytes, throttled
        r, w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        i = c
        while time.monotonic() < stop:
            key = keys[i % len(keys)]
            i += conns
            t = time.perf_counter()
            w.write(f"GET /{key} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            head = await r.readuntil(b"\r\n\r\n")
            n = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")))
            await r.readexactly(n)
            if head.startswith(b"HTTP/1.1 503"):
                throttled += 1
                continue
            lat.append(time.perf_counter() - t)
            nbytes += n
        w.close()

    t0 = time.monotonic()
    await asyncio.gather(*(one(c) for c in range(conns)))
    wall = time.monotonic() - t0
    lat.sort()

    def q(f: float) -> float:
        return round(lat[min(len(lat) - 1, int(f * len(lat)))] * 1e3, 2)

    return {
        "requests": len(lat),
        "slowdown_503": throttled,
        "requests_per_s": round(len(lat) / wall, 1),
        "mb_per_s": round(nbytes / wall / 1e6, 1),
        "latency_ms": {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": q(1.0), "min": q(0.0)},
    }


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def selfcheck(seconds: float = 5.0, conns: int = 64) -> dict[str, Any]:
    """Measure the server: per case, requests/s and MB/s delivered, the latency a raw client saw (p50/p90/p99)
    against the latency injected, and the server's CPU per request (its process's user+system time over the
    requests). Cases: 64 KB objects at +0 and +20 ms (CPU per request, latency fidelity), +20 ms with jitter,
    1 MB objects at +20 ms with ``conns`` connections (what it delivers against a loop's demand)."""
    import tempfile

    out: dict[str, Any] = {"conns": conns, "seconds": seconds, "cases": {}}
    with tempfile.TemporaryDirectory() as d:
        for name, size in (("small", 64 * 1024), ("big", 1_000_000)):
            os.makedirs(os.path.join(d, name))
            for i in range(32):
                with open(os.path.join(d, name, f"o{i:03d}"), "wb") as f:
                    f.write(os.urandom(size))
        cases = [
            ("64KB +0ms", "small", Profile(), conns),
            ("64KB +20ms", "small", Profile(latency_ms=20), conns),
            ("64KB +20ms jitter 5ms", "small", Profile(latency_ms=20, jitter_ms=5, jitter_sigma=0.5), conns),
            ("1MB +20ms", "big", Profile(latency_ms=20), conns),
            ("64KB +20ms 4 conns", "small", Profile(latency_ms=20), 4),
            ("64KB +20ms capacity 16", "small", Profile(latency_ms=20, capacity=16), conns),
            ("64KB +20ms 200 req/s limit", "small", Profile(latency_ms=20, rate_limit_rps=200, rate_burst=20), conns),
        ]
        for label, kind, prof, c in cases:
            with LatencyStore({os.path.join(d, kind): "b/k"}, [prof]) as st:
                keys = [f"b/k/o{i:03d}" for i in range(32)]
                cpu0, t0 = _cpu_of(st.pid), time.monotonic()
                res = asyncio.run(_client_gets(st.ports[0], keys, c, seconds))
                cpu = _cpu_of(st.pid) - cpu0
                res["server_cpu_s"] = round(cpu, 3)
                res["server_cpu_us_per_request"] = round(cpu / max(res["requests"] + res["slowdown_503"], 1) * 1e6, 1)
                res["server_cpu_share_of_one_core"] = round(cpu / (time.monotonic() - t0), 3)
                res["injected_ms"] = asdict(prof)
                out["cases"][label] = res
                print(f"{label:26s} {json.dumps(res)}", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--load", action="append", default=[], help="DIR=bucket[/prefix] (repeatable)")
    s.add_argument("--profile", action="append", default=[], help="JSON of Profile fields, one port each")
    s.add_argument("--host", default="127.0.0.1")
    c = sub.add_parser("selfcheck")
    c.add_argument("--seconds", type=float, default=5.0)
    c.add_argument("--conns", type=int, default=64)
    c.add_argument("--out", default=None, help="also write the numbers as JSON here")
    args = ap.parse_args(argv)
    if args.cmd == "serve":
        profiles = [Profile.parse(p) for p in args.profile] or [Profile()]
        asyncio.run(_serve(profiles, load_objects(args.load), args.host))
    else:
        res = selfcheck(args.seconds, args.conns)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
