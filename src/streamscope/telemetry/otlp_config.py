"""The OTLP set-up ``enable_telemetry()`` builds: ``OTEL_*`` environment variables and its arguments, validated.

The variables mean what OpenTelemetry's SDK configuration documents say (``opentelemetry.io/docs/specs/otel/
configuration/sdk-environment-variables`` and ``.../protocol/exporter``); an argument of ``enable_telemetry``
wins over its variable, a signal's own variable (``OTEL_EXPORTER_OTLP_TRACES_*``, ``..._METRICS_*``) over the
shared one. Where the specification and opentelemetry-python part, the specification is followed:

* ``OTEL_EXPORTER_OTLP_TIMEOUT`` (and the signal variants) are milliseconds, as the specification says;
  opentelemetry-python 1.45 reads them as seconds (its issue #4044). streamscope passes the exporters the
  timeout in seconds itself, so ``10000`` means ten seconds here.
* A malformed value is an error naming the variable (:class:`TelemetryConfigError`), not a warning and a default:
  a typo in an endpoint or a header would otherwise lose a whole run's telemetry unnoticed. A header or resource
  value is never repeated in a message (headers carry API keys).

When is OTLP exported at all: a signal whose exporter variable (``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``)
is set is exported as it says (``none``: not at all). Unset, the specification's default (``otlp``) applies when an
OTLP endpoint is configured for the signal (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT``)
or an OTLP argument is given (``endpoint``, ``protocol``, ``headers``, ``timeout``, ``compression``), and otherwise
only when the caller asked for nothing else (``otlp_default``): ``enable_telemetry(prometheus_port=...)`` (or
``STREAMSCOPE_PROMETHEUS_PORT``) with no OTLP configuration serves Prometheus and sends nothing to
``localhost:4318``, where no collector may be listening.

Nothing here imports OpenTelemetry; :mod:`.pipeline` builds the SDK objects from an :class:`OTLPConfig`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from streamscope._core.errors import TelemetryConfigError

__all__ = [
    "DEFAULT_COMPRESSION",
    "DEFAULT_GRPC_ENDPOINT",
    "DEFAULT_HTTP_ENDPOINT",
    "EXPORTERS",
    "NO_LIMIT_S",
    "OTLPConfig",
    "PROTOCOLS",
    "SIGNAL_PATHS",
    "SignalConfig",
    "TEMPORALITIES",
    "load",
    "parse_bool",
    "parse_count",
    "parse_millis",
    "parse_pairs",
    "redact_url",
    "resource_attributes",
    "signal_endpoint",
]


PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_HTTP_ENDPOINT = "http://localhost:4318"
DEFAULT_GRPC_ENDPOINT = "http://localhost:4317"
SIGNAL_PATHS = {"traces": "v1/traces", "metrics": "v1/metrics"}
#: Compression when neither an argument nor a variable names one. The specification's default is none;
#: streamscope's payloads are repetitive (attribute names, resource) and shrink about 2x with gzip.
DEFAULT_COMPRESSION = "gzip"
EXPORTERS = ("otlp", "console", "none")
TEMPORALITIES = ("cumulative", "delta", "lowmemory")
#: What a timeout of 0 ("no limit" in the specification) becomes: a day, as the exporters need a number.
NO_LIMIT_S = 86_400.0


@dataclass(frozen=True)
class SignalConfig:
    """How one signal (traces or metrics) is exported.

    Attributes:
        exporters: ``otlp`` and/or ``console``; empty: the signal is not exported.
        protocol: ``http/protobuf`` or ``grpc``.
        endpoint: the full URL (HTTP: with the signal path; gRPC: scheme, host and port).
        headers: sent with every request (never printed).
        timeout_s: one export's time limit, retries included.
        compression: ``gzip`` or ``none``.
        insecure: gRPC without TLS (None: from the scheme, as the SDK decides).
    """

    exporters: tuple[str, ...]
    protocol: str
    endpoint: str
    headers: dict[str, str] = field(repr=False)
    timeout_s: float
    compression: str
    insecure: bool | None = None


@dataclass(frozen=True)
class OTLPConfig:
    """Everything ``enable_telemetry()`` sets up, from its arguments and the environment."""

    disabled: bool
    traces: SignalConfig
    metrics: SignalConfig
    resource: dict[str, Any]
    metric_interval_s: float
    metric_timeout_s: float
    span_delay_s: float
    span_timeout_s: float
    span_queue: int
    span_batch: int


def _bad(var: str, why: str) -> TelemetryConfigError:
    return TelemetryConfigError(f"{var}: {why}")


def parse_bool(var: str, raw: str) -> bool:
    """The specification's booleans: ``true`` (any case) is true; ``false`` or empty is false; anything else is
    an error here (the SDK would warn and read false)."""
    low = raw.strip().lower()
    if low == "true":
        return True
    if low in ("false", ""):
        return False
    raise _bad(var, f"{raw!r} is not a boolean: use true or false")


def parse_millis(var: str, raw: str, *, positive: bool = False) -> float:
    """A duration in milliseconds (a non-negative number; ``positive``: above 0), returned in seconds. 0 means
    no limit for timeouts (:data:`NO_LIMIT_S`)."""
    try:
        v = float(raw.strip())
    except ValueError:
        raise _bad(var, f"{raw!r} is not a number of milliseconds") from None
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise _bad(var, f"{raw!r} must be a {'positive' if positive else 'non-negative'} number of milliseconds")
    return v / 1000.0


def parse_count(var: str, raw: str) -> int:
    try:
        v = int(raw.strip())
    except ValueError:
        raise _bad(var, f"{raw!r} is not a whole number") from None
    if v <= 0:
        raise _bad(var, f"{raw!r} must be above 0")
    return v


def parse_pairs(var: str, raw: str, what: str) -> dict[str, str]:
    """``key1=value1,key2=value2`` with percent-encoded values (the W3C Baggage shape the specification uses
    for headers and resource attributes). Values are never repeated in an error."""
    out: dict[str, str] = {}
    for n, part in enumerate(raw.split(","), 1):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key:
            raise _bad(var, f"entry {n} is not key=value (a comma list of {what}; values not shown)")
        try:
            out[unquote(key, errors="strict")] = unquote(value.strip(), errors="strict")
        except UnicodeDecodeError:
            raise _bad(var, f"entry {n} ({key!r}) has a percent-encoding that is not UTF-8") from None
    return out


def _endpoint_url(var: str, raw: str) -> str:
    url = raw.strip()
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number or out of range
    except ValueError as exc:
        raise _bad(var, f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(var, "must be a URL with scheme http or https and a host, e.g. http://localhost:4318 (gRPC: :4317)")
    _ = port
    return url


def signal_endpoint(base: str, signal: str) -> str:
    """The HTTP signal URL of a base endpoint: its path, then ``v1/<signal>`` (the specification's rule)."""
    return base.rstrip("/") + "/" + SIGNAL_PATHS[signal]


def redact_url(url: str) -> str:
    """``url`` without user information or query (what messages may show of an endpoint)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _exporters(var: str, raw: str | None, default: str = "otlp") -> tuple[str, ...]:
    names = [p.strip().lower() for p in (raw if raw is not None and raw.strip() else default or "none").split(",")]
    names = [n for n in names if n]
    bad = [n for n in names if n not in EXPORTERS]
    if bad:
        hint = " (Prometheus: enable_telemetry(prometheus_port=...))" if "prometheus" in bad else ""
        raise _bad(var, f"unknown exporter {bad[0]!r}; streamscope sets up {', '.join(EXPORTERS)}{hint}")
    if "none" in names:
        if len(names) > 1:
            raise _bad(var, "'none' cannot be combined with other exporters")
        return ()
    return tuple(dict.fromkeys(names))


def _signal(
    env: Mapping[str, str],
    signal: str,
    *,
    endpoint: str | None,
    protocol: str | None,
    headers: Mapping[str, str] | None,
    timeout: float | None,
    compression: str | None,
    otlp_default: bool = True,
) -> SignalConfig:
    up = signal.upper()

    def var(name: str) -> tuple[str, str | None]:
        """(the variable that is set, its value): the signal's own first, then the shared one."""
        own = f"OTEL_EXPORTER_OTLP_{up}_{name}"
        if env.get(own, "").strip():
            return own, env[own]
        shared = f"OTEL_EXPORTER_OTLP_{name}"
        return shared, env.get(shared) if env.get(shared, "").strip() else None

    exp_var = f"OTEL_{up}_EXPORTER"
    configured = any(a is not None for a in (endpoint, protocol, headers, timeout, compression)) or any(
        env.get(v, "").strip() for v in ("OTEL_EXPORTER_OTLP_ENDPOINT", f"OTEL_EXPORTER_OTLP_{up}_ENDPOINT")
    )
    exporters = _exporters(exp_var, env.get(exp_var), "otlp" if configured or otlp_default else "")

    praw: str | None
    if protocol is not None:
        pvar, praw = "enable_telemetry(protocol=...)", protocol
    else:
        pvar, praw = var("PROTOCOL")
    proto = (praw or "http/protobuf").strip().lower()
    if proto == "http/json":
        raise _bad(pvar, "http/json is not available in opentelemetry-python: use http/protobuf or grpc")
    if proto not in PROTOCOLS:
        raise _bad(pvar, f"{praw!r} is not an OTLP protocol: use http/protobuf or grpc")
    grpc = proto == "grpc"

    if endpoint is not None:
        base = _endpoint_url("enable_telemetry(endpoint=...)", endpoint)
        url = base if grpc else signal_endpoint(base, signal)
    else:
        own = f"OTEL_EXPORTER_OTLP_{up}_ENDPOINT"
        if env.get(own, "").strip():
            url = _endpoint_url(own, env[own])  # the signal's own URL is used as it is
        elif env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
            base = _endpoint_url("OTEL_EXPORTER_OTLP_ENDPOINT", env["OTEL_EXPORTER_OTLP_ENDPOINT"])
            url = base if grpc else signal_endpoint(base, signal)
        else:
            url = DEFAULT_GRPC_ENDPOINT if grpc else signal_endpoint(DEFAULT_HTTP_ENDPOINT, signal)

    hdrs: dict[str, str] = {}
    hvar, hraw = var("HEADERS")
    if hraw is not None:
        hdrs.update(parse_pairs(hvar, hraw, "headers"))
    if headers is not None:
        hdrs.update({str(k): str(v) for k, v in dict(headers).items()})

    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            raise _bad("enable_telemetry(timeout=...)", f"{timeout!r} must be a non-negative number of seconds")
        timeout_s = float(timeout)
    else:
        tvar, traw = var("TIMEOUT")
        timeout_s = parse_millis(tvar, traw) if traw is not None else 10.0
    if timeout_s == 0:
        timeout_s = NO_LIMIT_S

    craw: str | None
    if compression is not None:
        cvar, craw = "enable_telemetry(compression=...)", compression
    else:
        cvar, craw = var("COMPRESSION")
    comp = (craw or DEFAULT_COMPRESSION).strip().lower()
    if comp not in ("gzip", "none"):
        raise _bad(cvar, f"{craw!r} is not an OTLP compression: use gzip or none")

    insecure: bool | None = None
    ivar, iraw = var("INSECURE")
    if iraw is not None:
        insecure = parse_bool(ivar, iraw)
    for name in ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE"):
        fvar, fraw = var(name)
        if fraw is not None and not os.path.isfile(fraw.strip()):
            raise _bad(fvar, f"no such file: {fraw.strip()!r}")
    return SignalConfig(exporters, proto, url, hdrs, timeout_s, comp, insecure)


def resource_attributes(
    env: Mapping[str, str], service_name: str | None, extra: Mapping[str, Any] | None, defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """The resource: ``defaults`` (streamscope's), then ``OTEL_RESOURCE_ATTRIBUTES``, then ``OTEL_SERVICE_NAME``,
    then the arguments (``resource_attributes=``, ``service_name=``): each wins over those before it."""
    out: dict[str, Any] = dict(defaults)
    raw = env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if raw.strip():
        out.update(parse_pairs("OTEL_RESOURCE_ATTRIBUTES", raw, "resource attributes"))
    svc = env.get("OTEL_SERVICE_NAME", "").strip()
    if svc:
        out["service.name"] = svc
    if extra:
        out.update({str(k): v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in dict(extra).items()})
    if service_name is not None:
        if not str(service_name).strip():
            raise _bad("enable_telemetry(service_name=...)", "must not be empty")
        out["service.name"] = str(service_name)
    return out


def load(
    env: Mapping[str, str] | None = None,
    *,
    endpoint: str | None = None,
    protocol: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float | None = None,
    compression: str | None = None,
    service_name: str | None = None,
    resource_attributes_: Mapping[str, Any] | None = None,
    metric_export_interval: float | None = None,
    default_resource: Mapping[str, Any] | None = None,
    otlp_default: bool = True,
) -> OTLPConfig:
    """The whole configuration (arguments in seconds; variables as the specification says).

    ``otlp_default``: a signal with no exporter variable and no OTLP endpoint or argument is exported to
    OpenTelemetry's default endpoint (``localhost:4318``); False: it is not exported (its ``exporters`` are empty;
    see the module doc). ``enable_telemetry`` passes False when a Prometheus endpoint was asked for.

    Raises:
        TelemetryConfigError: a malformed variable or argument; the message names it.
    """
    env = os.environ if env is None else env
    disabled = parse_bool("OTEL_SDK_DISABLED", env.get("OTEL_SDK_DISABLED", ""))
    kw: dict[str, Any] = dict(
        endpoint=endpoint,
        protocol=protocol,
        headers=headers,
        timeout=timeout,
        compression=compression,
        otlp_default=otlp_default,
    )
    traces = _signal(env, "traces", **kw)
    metrics = _signal(env, "metrics", **kw)
    pref = env.get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "")
    if pref.strip() and pref.strip().lower() not in TEMPORALITIES:
        raise _bad(
            "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", f"{pref!r} is not one of {', '.join(TEMPORALITIES)}"
        )

    if metric_export_interval is not None:
        v = metric_export_interval
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
            raise _bad("enable_telemetry(metric_export_interval=...)", f"{v!r} must be a positive number of seconds")
        interval = float(v)
    else:
        raw = env.get("OTEL_METRIC_EXPORT_INTERVAL", "")
        interval = parse_millis("OTEL_METRIC_EXPORT_INTERVAL", raw, positive=True) if raw.strip() else 60.0

    def millis(var: str, default_s: float, positive: bool = False) -> float:
        raw = env.get(var, "")
        return parse_millis(var, raw, positive=positive) if raw.strip() else default_s

    def count(var: str, default: int) -> int:
        raw = env.get(var, "")
        return parse_count(var, raw) if raw.strip() else default

    metric_timeout = millis("OTEL_METRIC_EXPORT_TIMEOUT", 30.0) or NO_LIMIT_S
    delay = millis("OTEL_BSP_SCHEDULE_DELAY", 5.0)
    span_timeout = millis("OTEL_BSP_EXPORT_TIMEOUT", 30.0) or NO_LIMIT_S
    queue = count("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
    batch = count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
    if batch > queue:
        raise _bad("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", f"{batch} must not exceed OTEL_BSP_MAX_QUEUE_SIZE ({queue})")
    resource = resource_attributes(env, service_name, resource_attributes_, default_resource or {})
    return OTLPConfig(disabled, traces, metrics, resource, interval, metric_timeout, delay, span_timeout, queue, batch)
