"""The retry policy on its own: backoff bounds, jitter, attempts, deadline, traced retries and give-ups."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscope import events as ev
from streamscope._core import config
from streamscope._core.errors import (
    ObjectNotFoundError,
    StorageTimeoutError,
    TransientStorageError,
    TruncatedBodyError,
)
from streamscope.storage import retry
from streamscope.storage.retry import RetryPolicy


@pytest.fixture
def tracing() -> Iterator[None]:
    ev.drain()
    ev.ACTIVE.add("download")
    try:
        yield
    finally:
        ev.ACTIVE.discard("download")
        ev.drain()


@given(
    base=st.floats(0.0, 2.0),
    cap=st.floats(0.0, 10.0),
    jitter=st.floats(0.0, 1.0),
    n=st.integers(1, 40),
    seed=st.integers(0, 2**32),
)
def test_backoff_bounds(base: float, cap: float, jitter: float, n: int, seed: int) -> None:
    pol = RetryPolicy(base_delay=base, max_delay=cap, jitter=jitter)
    d = pol.backoff(n, random.Random(seed))
    raw = min(cap, base * 2 ** (n - 1))
    assert raw * (1 - jitter) - 1e-9 <= d <= raw + 1e-9


def test_jitter_spreads_and_zero_jitter_is_exact() -> None:
    pol = RetryPolicy(base_delay=1.0, max_delay=100.0, jitter=1.0)
    rng = random.Random(7)
    values = {round(pol.backoff(3, rng), 6) for _ in range(50)}
    assert len(values) > 40
    assert RetryPolicy(base_delay=0.5, max_delay=100.0, jitter=0.0).backoff(3) == 2.0
    assert RetryPolicy(base_delay=0.5, max_delay=1.5, jitter=0.0).backoff(10) == 1.5


def test_policy_validates() -> None:
    for kwargs in ({"max_attempts": 0}, {"deadline": 0}, {"jitter": 1.5}, {"base_delay": -1}):
        with pytest.raises(ValueError):
            RetryPolicy(**kwargs)


def test_from_config_reads_knobs() -> None:
    config.set_value("storage_max_attempts", 9)
    config.set_value("storage_deadline", 3.5)
    try:
        pol = RetryPolicy.from_config()
        assert pol.max_attempts == 9 and pol.deadline == 3.5
    finally:
        config.reset("storage_max_attempts")
        config.reset("storage_deadline")


def test_retries_then_succeeds_and_traces(tracing: None) -> None:
    calls = []

    def fn(f: dict) -> bytes:
        calls.append(1)
        if len(calls) < 3:
            err = TransientStorageError("503 SlowDown from s3://b/k")
            err.status = 503  # type: ignore[attr-defined]
            raise err
        f["bytes"] = 4
        return b"data"

    pol = RetryPolicy(max_attempts=5, base_delay=0.001, max_delay=0.002)
    assert retry.call("get", "s3://b/k", fn, policy=pol) == b"data"
    assert len(calls) == 3
    events = ev.drain()
    begins = [e for e in events if e[0] == "B" and e[1] == "get" and e[2] == "download"]
    ends = [e for e in events if e[0] == "E" and e[1] == "get" and e[2] == "download"]
    retries = [e for e in events if e[0] == "I" and e[1] == "retry"]
    assert [e[6]["attempt"] for e in begins] == [1, 2, 3]
    assert [e[6]["status"] for e in ends] == ["retry", "retry", "ok"]
    assert [e[6].get("http_status") for e in ends] == [503, 503, None]
    assert ends[0][6]["exception"] == "TransientStorageError" and "SlowDown" in ends[0][6]["error"]
    assert ends[-1][6]["bytes"] == 4 and ends[-1][6]["duration_s"] >= 0
    assert len(retries) == 2 and all(e[6]["url"] == "s3://b/k" for e in retries)
    assert not [e for e in events if e[1] == "give_up"]


def test_gives_up_after_max_attempts(tracing: None) -> None:
    calls = []

    def fn(f: dict) -> bytes:
        calls.append(1)
        raise TruncatedBodyError("got 3 of 10 bytes from 's3://b/k'")

    with pytest.raises(TruncatedBodyError) as info:
        retry.call("get", "s3://b/k", fn, policy=RetryPolicy(max_attempts=4, base_delay=0.0, max_delay=0.0))
    assert len(calls) == 4
    assert "4 attempt(s)" in str(info.value) and "s3://b/k" in str(info.value)
    give_ups = [e for e in ev.drain() if e[1] == "give_up"]
    assert len(give_ups) == 1 and give_ups[0][6]["attempt"] == 4


def test_final_errors_are_not_retried() -> None:
    calls = []

    def fn(f: dict) -> bytes:
        calls.append(1)
        raise ObjectNotFoundError("no such object s3://b/k")

    with pytest.raises(ObjectNotFoundError):
        retry.call("get", "s3://b/k", fn, policy=RetryPolicy(max_attempts=5, base_delay=0.0))
    assert len(calls) == 1


def test_deadline_bounds_total_time() -> None:
    def fn(f: dict) -> bytes:
        time.sleep(0.05)
        raise TransientStorageError("500 from s3://b/k")

    t0 = time.monotonic()
    with pytest.raises(StorageTimeoutError) as info:
        retry.call("get", "s3://b/k", fn, policy=RetryPolicy(max_attempts=1000, base_delay=0.05, deadline=0.5))
    took = time.monotonic() - t0
    # the 0.5 s deadline and the attempt under way, with room for a busy machine; the 1000 attempts would take
    # more than 50 s (0.05 s each, before any back-off)
    assert took < 3.0, took
    assert "deadline" in str(info.value) and "s3://b/k" in str(info.value)
