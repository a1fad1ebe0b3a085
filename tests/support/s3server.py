"""A real S3 server for tests: moto's server in a subprocess on 127.0.0.1 (ephemeral port), http or https.

Usage from tests (see ``tests/conftest.py`` for the pytest fixtures)::

    with S3Server() as srv:                 # or S3Server(https=True) for TLS with a throw-away CA
        ep = srv.endpoint(srv.new_bucket())
        open_store(ep.url("prefix"), ep.storage_options())

The server checks SigV4 signatures: it starts with one IAM user (full access) whose key pair the fixture
hands out, so wrong credentials are rejected as on real S3. The subprocess exits when the test process
closes its stdin (so it never outlives the test session) or on :meth:`S3Server.stop`.

The server is moto's WSGI app (moto's S3 logic, SigV4 checks and bucket state, unchanged) served by cheroot
(HTTP/1.1 keep-alive, a pool of threads) when cheroot is installed, else by werkzeug's dev server as moto's own
``moto_server`` does (``STREAMSCOPE_S3SERVER=werkzeug`` forces it). The dev server opens a connection and a
thread for every request and moto looks up the backend for the Host header by listing its package folder each
time; with keep-alive and that lookup remembered per host a 100 KB GET costs the server 1.5-2.7 ms of CPU
instead of 4.4-5.9 ms, so one moto process no longer caps a benchmark near 200 GETs/s.
``STREAMSCOPE_S3SERVER_LOG=1`` writes one stderr line per request (:attr:`S3Server.log`); off by default.

Run directly (``python tests/support/s3server.py [--cert C --key K]``) it is the server process itself:
it prints one JSON line ``{"port":..., "access_key":..., "secret_key":...}`` and serves until stdin closes.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import json
import os
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

REGION = "us-east-1"
_USER = "streamscope-test"
_LOG_REQUESTS = os.environ.get("STREAMSCOPE_S3SERVER_LOG", "") == "1"  # one stderr line per request
# "cheroot" (default when installed: keep-alive, thread pool) or "werkzeug" (moto's own dev server)
_SERVER = os.environ.get("STREAMSCOPE_S3SERVER", "cheroot")
_THREADS = int(os.environ.get("STREAMSCOPE_S3SERVER_THREADS", "16"))  # cheroot worker threads


# --------------------------------------------------------------------------------------------------
# Throw-away certificate authority
# --------------------------------------------------------------------------------------------------


def make_ca_and_server_cert(directory: str) -> tuple[str, str, str]:
    """Create a CA and a server certificate for 127.0.0.1/localhost signed by it.

    Returns:
        Paths ``(ca_pem, server_cert_pem, server_key_pem)`` inside ``directory``.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = _dt.datetime.now(_dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "streamscope throw-away test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_path = os.path.join(directory, "ca.pem")
    cert_path = os.path.join(directory, "server.pem")
    key_path = os.path.join(directory, "server.key")
    with open(ca_path, "wb") as f:
        f.write(ca_cert.public_bytes(serialization.Encoding.PEM))
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return ca_path, cert_path, key_path


# --------------------------------------------------------------------------------------------------
# Client side
# --------------------------------------------------------------------------------------------------


@dataclass
class S3Endpoint:
    """Everything a test needs to reach one bucket on a running server."""

    endpoint_url: str
    access_key: str
    secret_key: str
    bucket: str
    region: str = REGION
    ca_file: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def url(self, prefix: str = "") -> str:
        """``s3://bucket[/prefix]``."""
        prefix = prefix.strip("/")
        return f"s3://{self.bucket}/{prefix}" if prefix else f"s3://{self.bucket}"

    def storage_options(self, **overrides: Any) -> dict[str, Any]:
        """boto3-style ``storage_options`` for this endpoint (LitData's spelling)."""
        opts: dict[str, Any] = {
            "endpoint_url": self.endpoint_url,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "region_name": self.region,
        }
        if self.ca_file:
            opts["verify"] = self.ca_file
        opts.update(self.extra)
        opts.update(overrides)
        return opts

    def boto3_client(self) -> Any:
        """A plain boto3 S3 client for this endpoint (for setting up or checking state in tests)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            verify=self.ca_file if self.ca_file else True,
            config=Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=30),
        )


class S3Server:
    """moto's S3 server in a subprocess on 127.0.0.1:<ephemeral>.

    Args:
        https: Serve TLS with a certificate from a throw-away CA (``ca_file``).
        auth: Check SigV4 signatures against one generated IAM key pair (default True).
        startup_timeout: Seconds to wait for the server to come up.
    """

    def __init__(self, https: bool = False, auth: bool = True, startup_timeout: float = 60.0) -> None:
        self.https = https
        self.auth = auth
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.access_key = ""
        self.secret_key = ""
        self.ca_file: str | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._stderr_lines: list[str] = []
        self._admin: Any = None

    @property
    def endpoint_url(self) -> str:
        return f"{'https' if self.https else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> S3Server:
        """Start the subprocess and wait until it prints its port and keys."""
        args = [sys.executable, os.path.abspath(__file__)]
        if self.https:
            self._tmp = tempfile.TemporaryDirectory(prefix="s3server-ca-")
            self.ca_file, cert, key = make_ca_and_server_cert(self._tmp.name)
            args += ["--cert", cert, "--key", key]
        if not self.auth:
            args.append("--no-auth")
        env = dict(os.environ)
        for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY"):
            env.pop(var, None)
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, close_fds=True
        )
        result: dict[str, Any] = {}
        done = threading.Event()

        def _read_first_line() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            line = self.proc.stdout.readline()
            if line:
                result.update(json.loads(line))
            done.set()

        def _drain_stderr() -> None:
            assert self.proc is not None and self.proc.stderr is not None
            for raw in self.proc.stderr:
                if len(self._stderr_lines) < 2000:
                    self._stderr_lines.append(raw.decode(errors="replace"))

        self._readers = [
            threading.Thread(target=_read_first_line, daemon=True),
            threading.Thread(target=_drain_stderr, daemon=True),
        ]
        for t in self._readers:
            t.start()
        if not done.wait(self.startup_timeout) or "port" not in result:
            self.stop()
            raise RuntimeError(f"moto server did not start: {''.join(self._stderr_lines)[-2000:]}")
        self.port = int(result["port"])
        self.access_key = result.get("access_key", "testing")
        self.secret_key = result.get("secret_key", "testing")
        return self

    def stop(self) -> None:
        """Stop the subprocess and remove the CA files."""
        if self.proc is not None:
            try:
                if self.proc.stdin:
                    self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
            for t in getattr(self, "_readers", ()):
                t.join(5)  # they end at the pipes' EOF; then the pipes close here (no ResourceWarning)
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()
            self.proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def endpoint(self, bucket: str, endpoint_url: str | None = None) -> S3Endpoint:
        """An :class:`S3Endpoint` for ``bucket`` (optionally through another URL, e.g. a proxy)."""
        return S3Endpoint(
            endpoint_url=endpoint_url or self.endpoint_url,
            access_key=self.access_key,
            secret_key=self.secret_key,
            bucket=bucket,
            ca_file=self.ca_file,
        )

    def new_bucket(self, prefix: str = "t") -> str:
        """Create a fresh, empty bucket and return its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:16]}"
        if self._admin is None:
            self._admin = self.endpoint(name).boto3_client()
        self._admin.create_bucket(Bucket=name)
        return name

    @property
    def log(self) -> str:
        """What the server wrote to stderr so far (the request log with ``STREAMSCOPE_S3SERVER_LOG=1``)."""
        return "".join(self._stderr_lines)


# --------------------------------------------------------------------------------------------------
# Server side (runs in the subprocess)
# --------------------------------------------------------------------------------------------------


def _serve(argv: list[str]) -> None:  # pragma: no cover - runs in the subprocess
    import argparse

    parser = argparse.ArgumentParser(description="moto S3 server on 127.0.0.1:0 for streamscope tests")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--no-auth", action="store_true")
    ns = parser.parse_args(argv)

    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    from moto import settings
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.iam.models import iam_backends
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    info: dict[str, Any] = {}
    if not ns.no_auth:
        iam = iam_backends[DEFAULT_ACCOUNT_ID]["aws"]
        iam.create_user(REGION, _USER)
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(_USER, "all", json.dumps(policy))
        key = iam.create_access_key(_USER)
        info["access_key"] = key.access_key_id
        info["secret_key"] = key.secret_access_key
        settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    else:
        info["access_key"] = "testing"
        info["secret_key"] = "testing"

    class _Dispatcher(DomainDispatcherApplication):
        # moto answers "which backend serves this Host?" by listing its package folder on every request
        # (~1 ms CPU); the answer depends only on the host, so it is remembered per host
        _hosts: dict[str | None, Any] = {}

        def get_backend_for_host(self, host: str | None) -> Any:
            try:
                return self._hosts[host]
            except KeyError:
                found = self._hosts[host] = super().get_backend_for_host(host)
                return found

    app = _Dispatcher(create_backend_app)
    if _SERVER == "werkzeug" or not _have_cheroot():
        server = _werkzeug_server(app, ns.cert, ns.key)
        info["port"] = server.server_port
        serve = server.serve_forever
    else:
        cserver = _cheroot_server(app, ns.cert, ns.key)
        info["port"] = cserver.bind_addr[1]
        serve = cserver.serve

    def _exit_when_parent_goes() -> None:
        try:
            sys.stdin.buffer.read()
        finally:
            os._exit(0)

    threading.Thread(target=_exit_when_parent_goes, daemon=True).start()
    sys.stdout.write(json.dumps(info) + "\n")
    sys.stdout.flush()
    serve()


def _have_cheroot() -> bool:  # pragma: no cover - runs in the subprocess
    try:
        import cheroot.wsgi  # noqa: F401
    except ImportError:
        return False
    return True


def _werkzeug_server(app: Any, cert: str | None, key: str | None) -> Any:  # pragma: no cover - subprocess
    """moto's own server: werkzeug's threaded dev server (a new connection and thread for every request)."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    class _Handler(MotoRequestHandler):
        def log_request(self, code: Any = "-", size: Any = "-") -> None:
            if _LOG_REQUESTS:
                super().log_request(code, size)

    ssl_context = (cert, key) if cert else None
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=_Handler, ssl_context=ssl_context)
    return server


def _cheroot_server(app: Any, cert: str | None, key: str | None) -> Any:  # pragma: no cover - subprocess
    """moto's WSGI app behind cheroot: HTTP/1.1 keep-alive, a thread pool, TLS when ``cert`` is given.

    Header names are handed to moto as werkzeug's server (moto's ``MotoRequestHandler``) hands them: a name
    with ``_`` never stands in for the dashed one, is dropped unless it is S3 user metadata
    (``x-amz-meta-*``), and metadata keeps its original spelling for moto to report.
    """
    import sys as _sys

    from cheroot import wsgi
    from moto.core.request import (
        PRESERVED_HEADER_NAMES_ENVIRON_KEY,
        environ_key_for_header,
        should_preserve_original_header_name,
    )

    class _Gateway(wsgi.Gateway_10):
        def get_environ(self) -> dict[str, Any]:
            env = super().get_environ()
            raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in self.req.inheaders.items()]
            names: dict[str, str] = {}
            if any("_" in k for k, _ in raw):
                dashed = {environ_key_for_header(k): v for k, v in raw if "_" not in k}
                for name, _value in raw:
                    if "_" not in name:
                        continue
                    wkey = environ_key_for_header(name)
                    if wkey in dashed:
                        env[wkey] = dashed[wkey]
                    elif should_preserve_original_header_name(name):
                        names.setdefault(wkey, name)
                    else:
                        env.pop(wkey, None)
            env[PRESERVED_HEADER_NAMES_ENVIRON_KEY] = names
            env["RAW_URI"] = env["REQUEST_URI"]  # as werkzeug: moto checks SigV4 against the path as sent
            env["SERVER_NAME"] = "127.0.0.1"
            if _LOG_REQUESTS:
                _sys.stderr.write(f"{env['REQUEST_METHOD']} {env.get('REQUEST_URI', '')}\n")
            return env

    server = wsgi.Server(
        ("127.0.0.1", 0), app, numthreads=_THREADS, max=max(64, _THREADS), request_queue_size=128, timeout=30
    )
    server.gateway = _Gateway
    # cheroot keeps at most 10 idle keep-alive connections by default and answers "Connection: close" past
    # that; a loader keeps 64-128 connections open, so lift the limit (idle ones still expire after timeout)
    server.keep_alive_conn_limit = 4096
    if cert:
        from cheroot.ssl.builtin import BuiltinSSLAdapter

        server.ssl_adapter = BuiltinSSLAdapter(cert, key)
    server.prepare()
    return server


if __name__ == "__main__":  # pragma: no cover
    _serve(sys.argv[1:])
