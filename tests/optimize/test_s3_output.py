"""optimize() to an S3 bucket (a real moto server on 127.0.0.1), through the storage layer."""

from __future__ import annotations

import pytest

from streamscope._core.errors import WorkerFailedError
from streamscope.optimize import optimize
from streamscope.storage import open_store
from tests.optimize import _fns
from tests.optimize.conftest import read_dataset

pytestmark = pytest.mark.slow


def _remote_dataset(store) -> tuple[dict, dict[str, bytes]]:
    import json

    index = json.loads(store.get("index.json"))
    index.pop("updated_at")
    return index, {c["filename"]: store.get(c["filename"]) for c in index["chunks"]}


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_s3_output_equals_local_output(tmp_path, s3_server, start_method):
    local = str(tmp_path / "local")
    url, opts = s3_server.url(f"ds-{start_method}"), s3_server.storage_options()
    kw = {"chunk_size": 6, "num_workers": 2, "verbose": False}
    optimize(_fns.gen_samples, list(range(60)), local, **kw)
    optimize(_fns.gen_samples, list(range(60)), url, storage_options=opts, start_method=start_method, **kw)
    store = open_store(url, opts)
    assert _remote_dataset(store) == read_dataset(local)
    keys = sorted(m.key for m in store.list(""))
    assert keys == sorted(["index.json", *read_dataset(local)[1]])  # no staging, probe or checkpoint leftovers


def test_s3_failure_leaves_no_index_and_no_chunks(s3_server):
    url, opts = s3_server.url("failing"), s3_server.storage_options()
    with pytest.raises(WorkerFailedError, match="input 13"):
        optimize(
            _fns.fail_on_13, list(range(40)), url, storage_options=opts, chunk_size=2, num_workers=2, verbose=False
        )
    assert [m.key for m in open_store(url, opts).list("")] == []
