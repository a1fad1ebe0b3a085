"""Keep credentials out of messages, traces, logs and metric labels.

Three layers, applied by :func:`redact` to any text:

1. Secrets registered with :func:`register_secret` (every backend registers the keys, tokens and
   passwords it receives in ``storage_options`` or the environment) are replaced wherever they appear.
2. URL userinfo (``scheme://user:pass@host``) and credential query parameters (``X-Amz-Signature``,
   ``X-Amz-Credential``, ``X-Amz-Security-Token``, Azure ``sig``, ``token``, ...) are masked.
3. ``name=value`` / ``"name": "value"`` pairs whose name says secret, token, password, signature,
   credential or authorization are masked.

The mask is ``***``. Everything here is pure text processing; it never raises.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MASK",
    "SECRET_OPTION_KEYS",
    "install_log_redaction",
    "redact",
    "redact_options",
    "redact_url",
    "register_options",
    "register_secret",
]


MASK = "***"

_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()
_secret_re: re.Pattern[str] | None = None


def _reinit_lock_in_child() -> None:
    global _SECRETS_LOCK
    _SECRETS_LOCK = threading.Lock()  # the parent's may have been held by a thread that does not exist here


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_lock_in_child)

# Query parameters that carry credentials (compared lower-case).
_SENSITIVE_PARAMS = frozenset(
    {
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "awsaccesskeyid",
        "signature",
        "sig",
        "token",
        "access_token",
        "sas",
        "se",
        "skoid",
        "sktid",
        "password",
        "secret",
        "key",
        "api_key",
        "apikey",
        "x-goog-signature",
        "x-goog-credential",
    }
)

_USERINFO_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@'\"<>]+)@")
_QUERY_PARAM_RE = re.compile(r"(?P<sep>[?&;])(?P<name>[A-Za-z0-9_.-]+)=(?P<value>[^&#\s'\"<>]*)")
_NAMED_SECRET_RE = re.compile(
    r"(?P<name>[A-Za-z0-9_-]*(?:secret|token|password|passwd|signature|credential|authorization|"
    r"session_key|account_key|sas_key|client_key|private_key)[A-Za-z0-9_-]*)"
    r"(?P<sep>\s*=\s*[\"']?|[\"']\s*:\s*[\"']?|:\s*(?=AWS4-HMAC-SHA256 |Bearer |Basic ))"
    r"(?P<value>(?:AWS4-HMAC-SHA256 |Bearer |Basic )?[^\s\"'&,;)}<>]+)",
    re.IGNORECASE,
)
# <AWSAccessKeyId>..</AWSAccessKeyId>, <SignatureProvided>..</...>, <StringToSign>..</...> in S3 error XML.
_XML_SECRET_RE = re.compile(
    r"<(?P<tag>AWSAccessKeyId|SignatureProvided|StringToSign|StringToSignBytes|CanonicalRequest|"
    r"CanonicalRequestBytes)>.*?</(?P=tag)>",
    re.DOTALL,
)

# storage_options keys whose values are secret (compared lower-case).
SECRET_OPTION_KEYS = frozenset(
    {
        "aws_secret_access_key",
        "secret_access_key",
        "aws_session_token",
        "session_token",
        "token",
        "aws_access_key_id",
        "access_key_id",
        "key",
        "secret",
        "password",
        "account_key",
        "azure_storage_account_key",
        "access_key",
        "sas_key",
        "azure_storage_sas_key",
        "sas_token",
        "azure_storage_token",
        "bearer_token",
        "client_secret",
        "azure_client_secret",
        "service_account_key",
        "google_service_account_key",
        "credential",
        "credentials",
    }
)


def register_secret(value: Any) -> None:
    """Remember a secret so that :func:`redact` masks it wherever it appears.

    Values under 8 characters are ignored: real keys and tokens are longer, and masking a short dummy
    (moto's ``testing``) would mask that word in every bucket name and path of every message.
    """
    global _secret_re
    if not isinstance(value, str) or len(value) < 8:
        return
    with _SECRETS_LOCK:
        if value in _SECRETS:
            return
        _SECRETS.add(value)
        ordered = sorted(_SECRETS, key=len, reverse=True)
        _secret_re = re.compile("|".join(re.escape(s) for s in ordered))


def register_options(options: Mapping[str, Any] | None) -> None:
    """Register every secret-looking value of a ``storage_options`` mapping (nested mappings too)."""
    if not options:
        return
    for name, value in options.items():
        if isinstance(value, Mapping):
            register_options(value)
        elif str(name).lower() in SECRET_OPTION_KEYS or _NAMED_SECRET_RE.match(f"{name}=x"):
            register_secret(value)


def _mask_param(m: re.Match[str]) -> str:
    if m.group("name").lower() in _SENSITIVE_PARAMS and m.group("value"):
        return f"{m.group('sep')}{m.group('name')}={MASK}"
    return m.group(0)


def redact_url(url: str) -> str:
    """Remove userinfo and credential query parameters from a URL (or any text containing URLs)."""
    try:
        out = _USERINFO_RE.sub(lambda m: f"{m.group('scheme')}{MASK}@", url)
        return _QUERY_PARAM_RE.sub(_mask_param, out)
    except Exception:  # pragma: no cover - redaction must never raise
        return MASK


def redact(text: Any) -> str:
    """Return ``str(text)`` with every known secret, URL credential and named secret value masked."""
    try:
        out = text if isinstance(text, str) else str(text)
        pattern = _secret_re
        if pattern is not None:
            out = pattern.sub(MASK, out)
        out = _XML_SECRET_RE.sub(lambda m: f"<{m.group('tag')}>{MASK}</{m.group('tag')}>", out)
        out = redact_url(out)
        return _NAMED_SECRET_RE.sub(lambda m: f"{m.group('name')}{m.group('sep')}{MASK}", out)
    except Exception:  # pragma: no cover - redaction must never raise
        return MASK


def redact_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``storage_options`` safe to print: secret values replaced by the mask."""
    out: dict[str, Any] = {}
    for name, value in (options or {}).items():
        if isinstance(value, Mapping):
            out[name] = redact_options(value)
        elif str(name).lower() in SECRET_OPTION_KEYS or _NAMED_SECRET_RE.match(f"{name}=x"):
            out[name] = MASK
        else:
            out[name] = redact(value) if isinstance(value, str) else value
    return out


# Loggers of the client libraries our backends drive; their DEBUG output includes request headers.
_CLIENT_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3", "obstore", "streamscope")
_factory_installed = False


def install_log_redaction() -> None:
    """Mask registered secrets in log records of the client libraries (botocore logs headers at DEBUG).

    Wraps the logging record factory once per process; records of other loggers are untouched, and the
    cost is paid only for records that are actually created (i.e. enabled levels).
    """
    global _factory_installed
    with _SECRETS_LOCK:
        if _factory_installed:
            return
        _factory_installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if _secret_re is not None and record.name.startswith(_CLIENT_LOGGERS):
            try:
                message = record.getMessage()
            except Exception:
                return record
            masked = redact(message)
            if masked != message:
                record.msg = masked
                record.args = None
        return record

    logging.setLogRecordFactory(factory)
