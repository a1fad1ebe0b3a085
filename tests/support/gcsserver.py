"""A Google Cloud Storage emulator for tests: ``gcp-storage-emulator`` (PyPI) in a subprocess on 127.0.0.1.

Usage (see ``tests/conftest.py`` for the pytest fixtures)::

    with GCSServer() as srv:
        ep = srv.endpoint(srv.new_bucket())
        open_store(ep.url("prefix"), ep.storage_options())

The emulator speaks the JSON API of GCS (what google-cloud-storage and LitData use) with anonymous access,
in memory. It serves one request at a time. Its XML API is a stub (no HEAD, listing or DELETE, no ETag or
Last-Modified headers), so obstore's GCS client, which speaks the XML API, cannot be tested against it.
"""

from __future__ import annotations

import json
import sys
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any

from tests.support.servers import ServerProcess, free_port

MODULE = "gcp_storage_emulator"


def available() -> str | None:
    """None when the emulator can be started, else why not."""
    import importlib.util

    if importlib.util.find_spec(MODULE) is None:
        return "the gcp-storage-emulator package is not installed (it is in the test extra)"
    if importlib.util.find_spec("google.cloud.storage") is None:
        return "the google-cloud-storage package is not installed (it is in the gcs extra)"
    return None


@dataclass
class GCSEndpoint:
    """Everything a test needs to reach one bucket on the emulator."""

    base_url: str
    bucket: str

    def url(self, prefix: str = "") -> str:
        """``gs://bucket[/prefix]``."""
        prefix = prefix.strip("/")
        return f"gs://{self.bucket}/{prefix}" if prefix else f"gs://{self.bucket}"

    def storage_options(self, **overrides: Any) -> dict[str, Any]:
        """``storage_options`` reaching this emulator anonymously through google-cloud-storage."""
        opts: dict[str, Any] = {"base_url": self.base_url, "skip_signature": True, "backend": "google"}
        opts.update(overrides)
        return opts

    def litdata_storage_options(self) -> dict[str, Any]:
        """The same, spelled as LitData users write it (``google.cloud.storage.Client`` arguments)."""
        from google.auth.credentials import AnonymousCredentials

        return {
            "project": "test",
            "credentials": AnonymousCredentials(),
            "client_options": {"api_endpoint": self.base_url},
        }

    def put(self, key: str, data: bytes) -> None:
        """Upload one object (for setting up state without streamscope)."""
        from urllib.parse import quote

        req = urllib.request.Request(
            f"{self.base_url}/upload/storage/v1/b/{self.bucket}/o?uploadType=media&name={quote(key, safe='')}",
            data=data,
            headers={"Content-Type": "application/octet-stream"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()


class GCSServer:
    """gcp-storage-emulator in a subprocess on 127.0.0.1 (a free port), data in memory.

    Args:
        startup_timeout: Seconds to wait for the server to answer.
    """

    def __init__(self, startup_timeout: float = 30.0) -> None:
        self.startup_timeout = startup_timeout
        self.port = 0
        self._proc: ServerProcess | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GCSServer:
        """Start the emulator and wait until it answers (a port taken meanwhile is retried)."""
        last: Exception | None = None
        for _ in range(3):
            self.port = free_port()
            args = [sys.executable, "-m", MODULE, "start", "--host=127.0.0.1", f"--port={self.port}", "--in-memory"]
            self._proc = ServerProcess(args, "gcp-storage-emulator")
            try:
                self._proc.wait_until_answers(self.base_url + "/", self.startup_timeout)
                return self
            except RuntimeError as exc:
                last = exc
                self._proc.stop()
                self._proc = None
        raise RuntimeError(str(last))

    def stop(self) -> None:
        """Stop the emulator."""
        if self._proc is not None:
            self._proc.stop()
            self._proc = None

    def __enter__(self) -> GCSServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def log(self) -> str:
        """What the emulator printed last (its request log)."""
        return self._proc.output if self._proc is not None else ""

    def endpoint(self, bucket: str) -> GCSEndpoint:
        """A :class:`GCSEndpoint` for ``bucket``."""
        return GCSEndpoint(self.base_url, bucket)

    def new_bucket(self, prefix: str = "t") -> str:
        """Create a fresh, empty bucket and return its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:16]}"
        req = urllib.request.Request(
            f"{self.base_url}/storage/v1/b?project=test",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()
        return name
