"""Plant secrets in storage_options; run operations that succeed and fail; search every output for them."""

from __future__ import annotations

import logging
import os
import pickle
import uuid

import pytest

from streamscope import events as ev
from streamscope._core import config
from streamscope._core.errors import StorageError
from streamscope.storage import open_store, redact_options
from tests.support.faultproxy import closed_port


@pytest.mark.parametrize("backend", ["obstore", "boto3"])
def test_secrets_never_leak(backend: str, s3_server, fault_proxy, caplog, tmp_path) -> None:
    planted_secret = f"PLANTED-SECRET-{uuid.uuid4().hex}"
    planted_token = f"PLANTED-TOKEN-{uuid.uuid4().hex}"
    secrets = [planted_secret, planted_token, s3_server.secret_key]
    outputs: list[str] = []
    caplog.set_level(logging.DEBUG)  # every logger, botocore's header dumps included
    ev.drain()
    ev.ACTIVE.update(ev.CATEGORIES)
    config.set_value("storage_max_attempts", 2)
    config.set_value("storage_retry_base_delay", 0.005)
    try:
        good = open_store(s3_server.url("sec"), s3_server.storage_options(backend=backend))
        faulty = open_store(fault_proxy.s3.url("sec"), fault_proxy.s3.storage_options(backend=backend))
        wrong = open_store(
            s3_server.url("sec"), s3_server.storage_options(aws_secret_access_key=planted_secret, backend=backend)
        )
        with_token = open_store(
            s3_server.url("sec"),
            s3_server.storage_options(aws_session_token=planted_token, aws_secret_access_key=planted_secret),
        )
        unreachable = open_store(
            "s3://bucket-x/sec",
            {
                "endpoint_url": f"http://127.0.0.1:{closed_port()}",
                "aws_access_key_id": "AKIAPLANTED",
                "aws_secret_access_key": planted_secret,
                "aws_session_token": planted_token,
                "backend": backend,
            },
        )
        # operations that succeed
        good.put("a.bin", os.urandom(100))
        good.get("a.bin")
        good.get_range("a.bin", 1, 50)
        good.download_file("a.bin", str(tmp_path / "a.bin"))
        list(good.list())
        fault_proxy.configure(error_rate=0.3, reset_rate=0.1, truncate_rate=0.1, seed=3)
        for _ in range(5):
            try:
                faulty.get("a.bin")
            except StorageError as exc:
                outputs += [str(exc), repr(exc)]
        # operations that fail
        for store in (wrong, with_token, unreachable):
            for op in (lambda s=store: s.get("a.bin"), lambda s=store: s.head("a.bin"), lambda s=store: list(s.list())):
                with pytest.raises(StorageError) as info:
                    op()
                outputs += [str(info.value), repr(info.value), str(info.value.__cause__), str(info.value.__context__)]
        for store in (good, faulty, wrong, with_token, unreachable):
            outputs += [repr(store), str(store), store.url, str(redact_options(vars(store.options)))]
    finally:
        ev.ACTIVE.clear()
        config.reset("storage_max_attempts")
        config.reset("storage_retry_base_delay")
    events = ev.drain()
    assert any(e[1] == "retry" for e in events) and any(e[1] == "give_up" for e in events)
    outputs.append(repr(events))
    outputs += [r.getMessage() for r in caplog.records] + [caplog.text]
    assert any("gave up" in r.getMessage() for r in caplog.records)
    blob = "\n".join(outputs)
    for secret in secrets:
        assert secret not in blob
    # sanity: the search would have found them (the stores do hold them, for pickling into workers)
    assert planted_secret in repr(pickle.dumps(wrong)) or planted_secret.encode() in pickle.dumps(wrong)
