"""The fault proxy's bandwidth cap: one link shared by every connection."""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.support.faultproxy import FaultProxy

_MB = 1 << 20


def _get_all(client, bucket: str, keys: list[str]) -> float:
    """GET every key at once (one thread and connection each); seconds until the last body is in."""
    bodies: dict[str, bytes] = {}

    def get(key: str) -> None:
        bodies[key] = client.get_object(Bucket=bucket, Key=key)["Body"].read()

    threads = [threading.Thread(target=get, args=(k,)) for k in keys]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    took = time.monotonic() - t0
    assert sorted(bodies) == sorted(keys) and all(len(b) == _MB for b in bodies.values())
    return took


def test_bandwidth_cap_is_one_link_for_all_connections(fault_proxy) -> None:
    client = fault_proxy.s3.boto3_client()
    bucket = fault_proxy.s3.bucket
    for key in ("a", "b"):
        client.put_object(Bucket=bucket, Key=key, Body=os.urandom(_MB))
    _get_all(client, bucket, ["a", "b"])  # connections open, uncapped
    before = fault_proxy.counts["body_bytes"]
    assert before >= 2 * _MB

    fault_proxy.bandwidth_bps = 4 * _MB
    one = _get_all(client, bucket, ["a"])
    two = _get_all(client, bucket, ["a", "b"])
    assert one >= 0.25 * 0.97  # 1 MB at 4 MB/s
    assert two >= 0.5 * 0.97  # 2 MB on the same link: not 1 MB per connection in parallel
    assert fault_proxy.counts["body_bytes"] - before == 3 * _MB


@pytest.mark.parametrize("bad", [0, -1.0])
def test_bandwidth_must_be_positive(bad: float) -> None:
    with pytest.raises(ValueError, match="bandwidth_bps must be > 0"):
        FaultProxy("http://127.0.0.1:9", bandwidth_bps=bad)
