"""One resolver for every URL form LitData accepts.

``parse_url`` turns a user string into a :class:`StoreURL`: which backend serves it, the bucket (or
container, or host) and the key prefix inside it. Accepted forms::

    /abs/dir  rel/dir  ~/dir  file:///abs/dir     local directory, read in place
    local:/abs/dir                                local directory, copied into the cache (LitData's meaning)
    s3://bucket/prefix   r2://bucket/prefix      S3 and S3-compatible stores
    gs://bucket/prefix                           Google Cloud Storage
    azure://container/prefix  az://...           Azure Blob Storage
    http://host[:port]/path  https://...         read-only HTTP(S)
    hf://datasets/owner/name[@revision]/path     read-only Hugging Face Hub dataset repository

Anything else with a ``scheme://`` is an :class:`UnsupportedURLError` that lists what is supported.
Keys inside a store are ``/``-separated and relative; :func:`join_key` refuses keys that climb out of it.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from streamscope._core.errors import UnsupportedURLError
from streamscope.storage.redact import redact_url

__all__ = ["SUPPORTED_SCHEMES", "StoreURL", "expand_time_template", "join_key", "normalize_key", "parse_url"]


SUPPORTED_SCHEMES: tuple[str, ...] = (
    "local:",
    "file://",
    "s3://",
    "r2://",
    "gs://",
    "azure://",
    "az://",
    "http://",
    "https://",
    "hf://",
)

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
# Bucket names: letters, digits, dots, hyphens, underscores. Deliberately looser than today's AWS rules
# (3-63 lowercase chars): legacy S3 buckets and S3-compatible stores have uppercase letters and underscores.
_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
# Azure containers: 3-63 chars of lowercase letters, digits and single hyphens.
_CONTAINER_RE = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}$")


@dataclass(frozen=True)
class StoreURL:
    """A parsed storage URL.

    Attributes:
        kind: ``"local"``, ``"s3"``, ``"gs"``, ``"azure"``, ``"http"`` or ``"hf"``.
        scheme: The scheme as written (``"s3"``, ``"r2"``, ``"local"``, ``"file"``, ``"https"``, ...).
        bucket: Bucket, container or ``host[:port]``; for ``hf://`` the repository ``owner/name`` with
            ``@revision`` when the URL names one; empty for local directories.
        prefix: Key prefix inside the bucket without leading or trailing ``/``; for local stores the
            absolute directory path.
        url: The canonical URL with credentials removed (safe to log).
        in_place: For local stores: True when readers may read files where they are (plain paths),
            False for ``local:`` URLs, which LitData copies into the cache.
    """

    kind: str
    scheme: str
    bucket: str
    prefix: str
    url: str
    in_place: bool = True


def _unsupported(url: str, why: str) -> UnsupportedURLError:
    return UnsupportedURLError(f"{why}: {redact_url(url)!r}; supported: local paths, {', '.join(SUPPORTED_SCHEMES)}")


def _local(url: str, path: str, scheme: str, in_place: bool) -> StoreURL:
    if not path:
        raise _unsupported(url, "empty local path")
    if "\x00" in path:
        raise _unsupported(url, "NUL byte in local path")
    absolute = os.path.abspath(os.path.expanduser(path))
    canonical = absolute if in_place else f"local:{absolute}"
    return StoreURL("local", scheme, "", absolute, canonical, in_place)


def parse_url(url: str) -> StoreURL:
    """Parse a storage URL or local path.

    Args:
        url: A local path or a URL in one of :data:`SUPPORTED_SCHEMES`.

    Returns:
        The parsed URL.

    Raises:
        UnsupportedURLError: The URL is empty or malformed, or its scheme has no backend.
    """
    if not isinstance(url, str):
        raise UnsupportedURLError(f"storage URL must be a str, got {type(url).__name__}")
    raw = url.strip()
    if not raw:
        raise _unsupported(url, "empty storage URL")
    if raw.startswith("local:"):
        return _local(url, raw[len("local:") :], "local", in_place=False)
    m = _SCHEME_RE.match(raw)
    if m is None or (len(m.group(1)) == 1 and os.name == "nt"):
        return _local(url, raw, "", in_place=True)
    scheme = m.group(1).lower()
    rest = raw[m.end() :]
    if not rest.startswith("//"):
        # "foo:bar" without "//": a relative local path that merely contains a colon.
        if scheme in ("s3", "r2", "gs", "azure", "az", "http", "https", "file", "hf"):
            raise _unsupported(url, f"malformed {scheme} URL (expected {scheme}://...)")
        return _local(url, raw, "", in_place=True)
    if scheme == "file":
        parts = urlsplit(raw)
        if parts.netloc not in ("", "localhost"):
            raise _unsupported(url, "file:// URLs must name a local path (file:///abs/path)")
        return _local(url, parts.path, "file", in_place=True)
    if scheme in ("s3", "r2", "gs", "azure", "az"):
        body = rest[2:]
        if "?" in body or "#" in body:
            raise _unsupported(url, f"query strings and fragments are not allowed in {scheme}:// URLs")
        if "@" in body.split("/", 1)[0]:
            raise _unsupported(url, f"credentials must go in storage_options, not in the {scheme}:// URL")
        bucket, _, prefix = body.partition("/")
        if not bucket:
            raise _unsupported(url, f"missing bucket in {scheme}:// URL")
        kind = {"s3": "s3", "r2": "s3", "gs": "gs", "azure": "azure", "az": "azure"}[scheme]
        pattern = _CONTAINER_RE if kind == "azure" else _BUCKET_RE
        if not pattern.match(bucket):
            rule = (
                "3-63 lowercase letters, digits and single hyphens"
                if kind == "azure"
                else "letters, digits, '.', '-', '_', starting with a letter or digit"
            )
            raise _unsupported(url, f"invalid {'container' if kind == 'azure' else 'bucket'} name {bucket!r} ({rule})")
        prefix = prefix.strip("/")
        if any(seg in (".", "..") for seg in prefix.split("/") if seg):
            raise _unsupported(url, "'.' and '..' segments are not allowed in object URLs")
        canonical = f"{scheme}://{bucket}" + (f"/{prefix}" if prefix else "")
        return StoreURL(kind, scheme, bucket, prefix, canonical)
    if scheme in ("http", "https"):
        parts = urlsplit(raw)
        try:
            host = parts.hostname
            port = parts.port
        except ValueError as exc:
            raise _unsupported(url, f"malformed {scheme} URL ({exc})") from None
        if not host:
            raise _unsupported(url, f"missing host in {scheme}:// URL")
        netloc = host if port is None else f"{host}:{port}"
        if ":" in host:  # IPv6 literal
            netloc = f"[{host}]" if port is None else f"[{host}]:{port}"
        prefix = parts.path.strip("/")
        canonical = redact_url(f"{scheme}://{netloc}" + (f"/{prefix}" if prefix else ""))
        return StoreURL("http", scheme, netloc, prefix, canonical)
    if scheme == "hf":
        return _parse_hf(url, rest[2:])
    raise _unsupported(url, f"unknown scheme {scheme + '://'!r}")


# Hub revisions that contain "/" (huggingface_hub's parse_hf_uri knows the same two): the rest is the path
_HF_SPECIAL_REVISION = re.compile(r"^(refs/(?:convert/[\w.-]+|pr/\d+))(?:/(.*))?$")
_HF_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def _parse_hf(url: str, body: str) -> StoreURL:
    """``hf://datasets/owner/name[@revision]/path``: bucket ``owner/name[@revision]``, prefix the path."""
    if "?" in body or "#" in body:
        raise _unsupported(url, "query strings and fragments are not allowed in hf:// URLs")
    kind, _, rest = body.partition("/")
    if kind != "datasets":
        raise _unsupported(url, "only Hugging Face dataset repositories are supported (hf://datasets/owner/name/...)")
    owner, _, rest = rest.partition("/")
    name, _, path = rest.partition("/")
    revision = ""
    if "@" in name:
        name, _, revision = name.partition("@")
        revision = unquote(revision)
        if revision.startswith("refs/") or revision == "refs":
            special = _HF_SPECIAL_REVISION.match(f"{revision}/{path}".rstrip("/"))
            if special is None:
                raise _unsupported(url, "unknown refs/ revision (known: refs/convert/<name>, refs/pr/<n>)")
            revision, path = special.group(1), special.group(2) or ""
        if not revision:
            raise _unsupported(url, "empty revision after '@' in hf:// URL")
    for part, what in ((owner, "owner"), (name, "repository name")):
        if not _HF_NAME_RE.match(part):
            raise _unsupported(url, f"missing or invalid {what} in hf:// URL (expected hf://datasets/owner/name/...)")
    prefix = path.strip("/")
    if any(seg in (".", "..") for seg in prefix.split("/") if seg):
        raise _unsupported(url, "'.' and '..' segments are not allowed in object URLs")
    bucket = f"{owner}/{name}" + (f"@{revision}" if revision else "")
    canonical = "hf://datasets/" + bucket + (f"/{prefix}" if prefix else "")
    return StoreURL("hf", "hf", bucket, prefix, canonical)


def join_key(prefix: str, key: str, url: str = "") -> str:
    """Join a store prefix and a relative key with ``/``.

    Args:
        prefix: The store's prefix (may be empty).
        key: A ``/``-separated key relative to the store root. A leading ``/`` is ignored.
        url: The store URL, for the error message.

    Raises:
        UnsupportedURLError: The key is empty or contains ``.``/``..`` segments.
    """
    clean = normalize_key(key, url)
    return f"{prefix}/{clean}" if prefix else clean


def normalize_key(key: str, url: str = "") -> str:
    """Validate a key relative to a store root and return it without leading/trailing ``/``.

    Raises:
        UnsupportedURLError: The key is not a str, is empty, or contains ``.``/``..`` segments or NUL bytes.
    """
    if not isinstance(key, str):
        raise UnsupportedURLError(f"object key must be a str, got {type(key).__name__} (store {url})")
    clean = key.strip("/")
    if not clean:
        raise UnsupportedURLError(f"empty object key (store {url})")
    if "\x00" in clean or any(seg in (".", "..") for seg in clean.split("/")):
        raise UnsupportedURLError(f"object key {key!r} is not a plain relative key (store {url})")
    return clean


_TIME_TEMPLATE_RE = re.compile(r"\{(%[^{}]*)\}")


def expand_time_template(path: str, now: _dt.datetime | None = None) -> str:
    """Replace ``{%...}`` placeholders in a local path with the current time (LitData's output-dir templates).

    ``"/out/run-{%Y-%m-%d}"`` becomes ``"/out/run-2026-11-29"``. LitData expands only the first
    placeholder and only in local paths; this expands every placeholder. Remote URLs are returned unchanged.
    """
    if "://" in path or path.startswith("local:"):
        return path
    moment = now or _dt.datetime.now()
    return _TIME_TEMPLATE_RE.sub(lambda m: moment.strftime(m.group(1)), path)
