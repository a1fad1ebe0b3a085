"""Credentials never appear in traces, logs, error messages or metrics, end to end: a real secret (from the
environment) and planted fake ones (in storage_options) through optimize → S3 → StreamingDataLoader workers with
faults and failures; every output is searched for them."""

from __future__ import annotations

import json
import logging
import os
import uuid

import pytest

from streamscope import StreamingDataLoader, StreamingDataset
from streamscope.api.tracing import enable_metrics, enable_tracer, flush_tracer, metrics
from tests.integration.conftest import N, write_dataset
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = [pytest.mark.usefixtures("clean_tracer"), pytest.mark.slow]


def _errors(exc: BaseException | None) -> list[str]:
    out: list[str] = []
    seen = 0
    while exc is not None and seen < 10:
        out += [str(exc), repr(exc), "".join(getattr(exc, "args", ()) and map(str, exc.args))]
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return out


def test_no_secret_in_any_output(s3_server, fault_proxy, fast_retries, tmp_path, caplog, capfd, monkeypatch) -> None:
    planted_secret = f"PLANTEDSECRET{uuid.uuid4().hex}"
    planted_token = f"PLANTEDTOKEN{uuid.uuid4().hex}"
    real_secret = s3_server.secret_key
    caplog.set_level(logging.DEBUG)
    log = tmp_path / "trace.log"
    metrics_dir = tmp_path / "metrics"
    monkeypatch.setenv("STREAMSCOPE_METRICS_DIR", str(metrics_dir))
    enable_tracer("debug", log_file=str(log), flush_interval=0.2)
    enable_metrics("debug")
    write_dataset(s3_server, "sec")
    # the real credentials come from the environment only; storage_options name the endpoint and region
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", real_secret)
    env_opts = {"endpoint_url": fault_proxy.s3.endpoint_url, "region_name": s3_server.region}
    url = fault_proxy.s3.url("sec")
    outputs: list[str] = []

    # 1. success, with 10% faults, in forked workers
    fault_proxy.configure(seed=5, error_rate=0.05, reset_rate=0.03, truncate_rate=0.02)
    ds = StreamingDataset(url, cache_dir=str(tmp_path / "c1"), storage_options=env_opts)
    n = sum(len(b["index"]) for b in StreamingDataLoader(ds, batch_size=8, num_workers=2))
    assert n == N
    # 2. planted wrong secret and token in storage_options: fails in the main process
    bad = {**env_opts, "aws_access_key_id": s3_server.access_key, "aws_secret_access_key": planted_secret}
    bad["aws_session_token"] = planted_token
    with pytest.raises(Exception) as info:
        StreamingDataset(url, cache_dir=str(tmp_path / "c2"), storage_options=bad)
    outputs += _errors(info.value)
    assert url in str(info.value) or "sec/index.json" in str(info.value), info.value  # names what failed
    # 3. ... and in a DataLoader worker (the dataset was built with good credentials, the workers get bad ones)
    ds2 = StreamingDataset(url, cache_dir=str(tmp_path / "c3"), storage_options=env_opts)
    ds2.storage_options = dict(bad)
    with pytest.raises(Exception) as info:
        for _ in StreamingDataLoader(ds2, batch_size=8, num_workers=1):
            pass
    outputs += _errors(info.value)

    flush_tracer()
    trace = log.read_text()
    assert "retry" in trace and "download" in trace, "the trace should hold the storage events searched here"
    outputs.append(trace)
    snap = metrics()
    outputs.append(json.dumps(snap.to_dict(), default=str))
    for root, _, files in os.walk(metrics_dir):
        for f in files:
            with open(os.path.join(root, f), errors="replace") as fh:
                outputs.append(fh.read())
    outputs += [caplog.text, *(r.getMessage() for r in caplog.records)]
    assert caplog.records, "nothing was logged: the log search would be empty"
    cap = capfd.readouterr()
    outputs += [cap.out, cap.err]
    blob = "\n".join(outputs)
    for name, secret in (("real secret", real_secret), ("planted secret", planted_secret), ("token", planted_token)):
        assert secret not in blob, (
            f"the {name} leaked: ...{blob[max(0, blob.find(secret) - 300) : blob.find(secret) + 80]}"
        )
