"""An Azure Blob Storage emulator for tests: Azurite (npm) in a subprocess on 127.0.0.1, data in memory.

Usage (see ``tests/conftest.py`` for the pytest fixtures)::

    with AzuriteServer() as srv:
        ep = srv.endpoint(srv.new_container())
        open_store(ep.url("prefix"), ep.storage_options())

``azurite-blob`` is looked up in ``$STREAMSCOPE_AZURITE`` (a path to the executable), then in
``.cache/azurite`` of the repository (where ``./run.sh test`` installs the pinned version), then on
``PATH``. Requests are authenticated with Shared Key, using the emulator's well-known development account.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import shutil
import tempfile
import urllib.request
import uuid
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any

from tests.support.servers import ServerProcess

# The development account every Azure emulator accepts (published in Azure's documentation; not a secret,
# but streamscope must mask it like any account key).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_LISTENING = re.compile(r"successfully listens on http://127\.0\.0\.1:(\d+)")


def executable() -> str | None:
    """Path of ``azurite-blob``, or None when it is not installed."""
    explicit = os.environ.get("STREAMSCOPE_AZURITE")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    local = os.path.join(_REPO, ".cache", "azurite", "node_modules", ".bin", "azurite-blob")
    if os.access(local, os.X_OK):
        return local
    return shutil.which("azurite-blob")


def available() -> str | None:
    """None when Azurite can be started, else why not."""
    if shutil.which("node") is None:
        return "node is not installed (Azurite runs on node)"
    if executable() is None:
        return "azurite-blob is not installed (looked in $STREAMSCOPE_AZURITE, .cache/azurite and PATH)"
    return None


@dataclass
class AzureEndpoint:
    """Everything a test needs to reach one container on the emulator."""

    blob_url: str  # http://127.0.0.1:<port>/devstoreaccount1
    container: str
    account: str = ACCOUNT
    account_key: str = ACCOUNT_KEY

    def url(self, prefix: str = "") -> str:
        """``azure://container[/prefix]``."""
        prefix = prefix.strip("/")
        return f"azure://{self.container}/{prefix}" if prefix else f"azure://{self.container}"

    def storage_options(self, **overrides: Any) -> dict[str, Any]:
        """obstore-style ``storage_options`` for this endpoint."""
        opts: dict[str, Any] = {
            "account_name": self.account,
            "account_key": self.account_key,
            "endpoint": self.blob_url,
        }
        opts.update(overrides)
        return opts

    def litdata_storage_options(self) -> dict[str, Any]:
        """The same, spelled as LitData users write it (``azure.storage.blob.BlobServiceClient`` arguments)."""
        return {"account_url": self.blob_url, "credential": self.account_key}

    def request(self, method: str, path: str, query: dict[str, str] | None = None, data: bytes = b"") -> bytes:
        """One Shared-Key-signed request to ``/<account>/<path>`` (for setting up state without streamscope)."""
        return _signed(self.blob_url, self.account, self.account_key, method, path, query or {}, data)

    def put(self, key: str, data: bytes) -> None:
        """Upload one blob."""
        _signed(
            self.blob_url,
            self.account,
            self.account_key,
            "PUT",
            f"{self.container}/{key}",
            {},
            data,
            {"x-ms-blob-type": "BlockBlob"},
        )


def _signed(
    blob_url: str,
    account: str,
    key: str,
    method: str,
    path: str,
    query: dict[str, str],
    data: bytes,
    extra_headers: dict[str, str] | None = None,
) -> bytes:
    from urllib.parse import quote, urlencode

    headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": "2021-08-06", **(extra_headers or {})}
    canonical_headers = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
    quoted = quote(path)
    # path-style emulator URLs: the resource is /<account>/<account>/<path>
    resource = f"/{account}/{account}/{quoted}" + "".join(f"\n{k}:{v}" for k, v in sorted(query.items()))
    length = str(len(data)) if data else ""
    string_to_sign = f"{method}\n\n\n{length}\n\n{'application/octet-stream' if data else ''}\n\n\n\n\n\n\n"
    string_to_sign += canonical_headers + resource
    sig = base64.b64encode(hmac.new(base64.b64decode(key), string_to_sign.encode(), hashlib.sha256).digest()).decode()
    headers["Authorization"] = f"SharedKey {account}:{sig}"
    headers["Content-Length"] = str(len(data))
    if data:
        headers["Content-Type"] = "application/octet-stream"
    url = f"{blob_url}/{quoted}" + (f"?{urlencode(query)}" if query else "")
    req = urllib.request.Request(url, data=data or None, headers=headers, method=method)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.read()


class AzuriteServer:
    """``azurite-blob`` in a subprocess on 127.0.0.1 (a port it picks), data in memory.

    Args:
        startup_timeout: Seconds to wait for the server to listen.
    """

    def __init__(self, startup_timeout: float = 60.0) -> None:
        self.startup_timeout = startup_timeout
        self.port = 0
        self._proc: ServerProcess | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def blob_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    def start(self) -> AzuriteServer:
        """Start Azurite and wait until it listens."""
        exe = executable()
        if exe is None:
            raise RuntimeError(available() or "azurite-blob not found")
        self._tmp = tempfile.TemporaryDirectory(prefix="azurite-")
        args = [
            exe,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            "0",
            "--inMemoryPersistence",
            "--silent",
            "--skipApiVersionCheck",
            "--loose",
            "--disableTelemetry",
        ]
        self._proc = ServerProcess(args, "azurite-blob", cwd=self._tmp.name)
        try:
            port = self._proc.wait_for_line(
                lambda line: m.group(1) if (m := _LISTENING.search(line)) else None, self.startup_timeout
            )
        except RuntimeError:
            self.stop()
            raise
        self.port = int(port)
        return self

    def stop(self) -> None:
        """Stop Azurite."""
        if self._proc is not None:
            self._proc.stop()
            self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> AzuriteServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def endpoint(self, container: str) -> AzureEndpoint:
        """An :class:`AzureEndpoint` for ``container``."""
        return AzureEndpoint(self.blob_url, container)

    def new_container(self, prefix: str = "t") -> str:
        """Create a fresh, empty container and return its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:16]}"
        _signed(self.blob_url, ACCOUNT, ACCOUNT_KEY, "PUT", name, {"restype": "container"}, b"")
        return name
