"""Storage backends behind narrow protocols, chosen by URL scheme.

Entry points:

* :func:`open_store` — an :class:`~streamscope._core.protocols.ObjectStore` rooted at a URL.
* :func:`walk` — every object under a URL (one listing implementation: ``ObjectStore.list``).
* :func:`parse_url` — the one resolver of LitData's URL forms.
* :func:`redact` / :func:`redact_url` — strip credentials from any text.

Backends: local directories (:class:`LocalStore`); ``s3://``/``r2://`` via obstore or boto3; ``gs://`` and
``azure://`` via obstore; ``http(s)://`` and ``hf://datasets/...`` (Hugging Face Hub, through huggingface_hub)
read-only. Network clients are built lazily in each process, so stores may be pickled into (or inherited by)
DataLoader workers, fork or spawn.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from streamscope._core.errors import UnsupportedURLError
from streamscope._core.protocols import ObjectMeta, ObjectStore
from streamscope.storage import registry
from streamscope.storage.local import LocalStore
from streamscope.storage.redact import (
    install_log_redaction,
    redact,
    redact_options,
    redact_url,
    register_options,
    register_secret,
)
from streamscope.storage.retry import RetryPolicy
from streamscope.storage.url import (
    SUPPORTED_SCHEMES,
    StoreURL,
    expand_time_template,
    join_key,
    normalize_key,
    parse_url,
)

__all__ = [
    "SUPPORTED_SCHEMES",
    "LocalStore",
    "ObjectMeta",
    "ObjectStore",
    "RetryPolicy",
    "StoreURL",
    "expand_time_template",
    "join_key",
    "normalize_key",
    "open_store",
    "parse_url",
    "redact",
    "redact_options",
    "redact_url",
    "register_options",
    "register_secret",
    "walk",
]


def open_store(
    url: str | os.PathLike[str] | Any,
    storage_options: Mapping[str, Any] | None = None,
    session_options: Mapping[str, Any] | None = None,
) -> ObjectStore:
    """Open the object store rooted at ``url``.

    Args:
        url: A local path (``str`` or ``os.PathLike``) or a ``local:``, ``file://``, ``s3://``, ``r2://``,
            ``gs://``, ``azure://``, ``http(s)://``, ``hf://datasets/owner/name[@revision]/path`` URL; a
            LitData-style ``Dir`` (anything with ``url`` / ``path`` attributes) is accepted too (its ``url`` wins).
        storage_options: Backend options (endpoint, region, credentials, ...). For S3 both boto3-style
            keys (``endpoint_url``, ``aws_access_key_id``, ``aws_secret_access_key``, ``region_name``,
            ``aws_session_token``, ``verify``) and obstore keys are accepted; ``backend`` selects
            ``"obstore"`` or ``"boto3"``. Secret values are registered for redaction.
        session_options: LitData's boto3 ``Session`` arguments (``profile_name``, ``region_name``,
            credentials) for S3; ``storage_options`` win where both set a value. Ignored by other schemes.

    Returns:
        A store whose keys are relative to ``url``. No network connection is made until first use.

    Raises:
        UnsupportedURLError: The URL is malformed or its scheme has no backend.
    """
    if not isinstance(url, str):
        if isinstance(url, os.PathLike):
            url = os.fspath(url)
        elif getattr(url, "url", None) or getattr(url, "path", None):
            url = str(getattr(url, "url", None) or url.path)
    if isinstance(url, str) and registry.has_custom():  # a user downloader for this prefix (register_downloader)
        custom = registry.store_for(url.strip(), storage_options, session_options)
        if custom is not None:
            return custom
    parsed = parse_url(url)
    options = dict(storage_options or {})
    register_options(options)
    register_options(session_options)
    if session_options and parsed.kind == "s3":
        options = {**dict(session_options), **options}
    if parsed.kind != "local":
        install_log_redaction()
    if parsed.kind == "local":
        return LocalStore(parsed)  # storage_options mean nothing for local directories (as in LitData)
    if parsed.kind == "s3":
        from streamscope.storage.s3 import S3Store

        return S3Store(parsed, options)
    if parsed.kind == "gs":
        from streamscope.storage.cloud import GCSStore

        return GCSStore(parsed, options)
    if parsed.kind == "azure":
        from streamscope.storage.cloud import AzureStore

        return AzureStore(parsed, options)
    if parsed.kind == "http":
        from streamscope.storage.http import HTTPStore

        return HTTPStore(parsed, options)
    if parsed.kind == "hf":
        from streamscope.storage.hf import HFStore

        return HFStore(parsed, options)
    raise UnsupportedURLError(f"no backend for {parsed.url!r}")  # pragma: no cover - parse_url rejects first


def walk(url: str, storage_options: Mapping[str, Any] | None = None, prefix: str = "") -> Iterator[ObjectMeta]:
    """Every object under ``url`` (recursively, sorted by key), as :class:`ObjectMeta` with relative keys."""
    return open_store(url, storage_options).list(prefix)
