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


def _get_quietly(client, bucket: str) -> None:
    try:
        client.get_object(Bucket=bucket, Key="k")["Body"].read()
    except Exception:  # noqa: BLE001 - the proxy closes under it
        pass


def _close_with_connections_open(s3_server) -> list[str]:
    """One proxy closed with keep-alive connections idle and requests under way; the ResourceWarnings it leaves."""
    import gc
    import warnings

    from tests.support.s3server import S3Endpoint

    gc.collect()  # what earlier proxies or tests left is theirs
    proxy = FaultProxy(s3_server.endpoint_url, seed=1)
    ep = S3Endpoint(proxy.url, s3_server.access_key, s3_server.secret_key, s3_server.bucket, s3_server.region)
    client = ep.boto3_client()
    client.put_object(Bucket=ep.bucket, Key="k", Body=b"x" * 1000)
    threads = [
        threading.Thread(target=lambda: client.get_object(Bucket=ep.bucket, Key="k")["Body"].read()) for _ in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # and requests under way: held by a delay after their upstream answered
    proxy.fixed_delay_s = 5.0
    slow = [threading.Thread(target=_get_quietly, args=(client, ep.bucket), daemon=True) for _ in range(4)]
    for t in slow:
        t.start()
    deadline = time.monotonic() + 10
    while proxy.peak_in_flight < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        proxy.close()
        del proxy  # its loops and their transports: what the collector would find
        gc.collect()
    client.close()
    return [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]


def test_closing_with_connections_open_leaves_no_socket_to_the_collector(s3_server) -> None:
    # every socket is closed by the proxy, none is left for the garbage collector (a ResourceWarning, an error in this
    # suite, raised in whichever later test collects it). Two ways it leaked (a stress run repeating this close, two
    # processes at once): a transport closed with bytes buffered (at 344bda1: 20 leaks in 680 closes), and one
    # accepted as the server closed (asyncio's Server._attach asserts before the loop registers it: 6 in 1,200 once
    # the first was mended); 0 in 1,600 with both mended. 40 closes failed 1 run of 4 on the old proxy, 0 of 4 after:
    # a guard, not a proof.
    leaked = [msg for _ in range(40) for msg in _close_with_connections_open(s3_server)]
    assert not leaked, leaked
