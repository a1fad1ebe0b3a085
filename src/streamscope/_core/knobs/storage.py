"""Knobs of storage: retries, deadlines and timeouts of requests, and the S3 client."""

from __future__ import annotations

from streamscope._core.knob_registry import knob

__all__: list[str] = []

knob(
    "storage_max_attempts",
    5,
    "attempts",
    ("STREAMSCOPE_STORAGE_MAX_ATTEMPTS",),
    "Attempts per storage request (first try included) before giving up on retryable errors.",
)
knob(
    "storage_retry_base_delay",
    0.1,
    "s",
    ("STREAMSCOPE_STORAGE_RETRY_BASE_DELAY",),
    "First retry backoff; doubles each attempt up to storage_retry_max_delay (with jitter).",
)
knob(
    "storage_retry_max_delay",
    5.0,
    "s",
    ("STREAMSCOPE_STORAGE_RETRY_MAX_DELAY",),
    "Upper bound of one retry backoff.",
)
knob(
    "storage_retry_jitter",
    1.0,
    "fraction",
    ("STREAMSCOPE_STORAGE_RETRY_JITTER",),
    "Share of each backoff that is randomised (0 = fixed delays, 1 = full jitter).",
)
knob(
    "storage_deadline",
    120.0,
    "s",
    ("STREAMSCOPE_STORAGE_DEADLINE",),
    "Total time budget of one storage operation across all its attempts.",
)
knob(
    "storage_connect_timeout",
    3.0,
    "s",
    ("STREAMSCOPE_STORAGE_CONNECT_TIMEOUT",),
    "TCP/TLS connect timeout; small so an unreachable endpoint fails fast (well under 30 s).",
)
knob(
    "storage_read_timeout",
    30.0,
    "s",
    ("STREAMSCOPE_STORAGE_READ_TIMEOUT",),
    "Longest silence while reading a response before the attempt counts as a timeout.",
)
knob(
    "storage_request_timeout",
    300.0,
    "s",
    ("STREAMSCOPE_STORAGE_REQUEST_TIMEOUT",),
    "Longest single request (connect to last byte); large chunks need minutes on slow links.",
)
knob(
    "storage_s3_backend",
    "auto",
    "name",
    ("STREAMSCOPE_S3_BACKEND",),
    "S3 client: obstore, boto3, or auto (obstore when importable, else boto3).",
)
knob(
    "storage_s3_light_get",
    True,
    "flag",
    ("STREAMSCOPE_S3_LIGHT_GET",),
    "Where boto3 serves S3 with an explicit endpoint and explicit keys, whole-object GETs (index.json) use a "
    "stdlib SigV4 client instead, so opening a dataset does not wait 0.1-0.3 s for a boto3 client.",
)
knob(
    "storage_s3_streaming_backend",
    "obstore",
    "name",
    ("STREAMSCOPE_S3_STREAMING_BACKEND",),
    "S3 client for the chunk downloads of an iteration when storage_s3_backend is auto: obstore (fast; used "
    "in the main process too when it iterates itself, num_workers=0 - DataLoader workers that this process "
    "forks LATER then use boto3, with a warning) or auto (boto3 in processes that may fork workers).",
)
