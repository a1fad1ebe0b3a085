"""10% of requests faulted while real DataLoader workers (fork) stream objects: every sample arrives exactly
once per epoch, byte for byte. (The storage-level half of issue #5 item 6; the StreamingDataset half runs
once the read path uses ``open_store``.)"""

from __future__ import annotations

import hashlib
import os
from collections import Counter

import pytest

from streamscope.storage import open_store


class _Objects:
    """Map-style dataset: item i is object i, fetched whole or by range, or downloaded to a file."""

    def __init__(self, store, keys: list[str], tmp: str) -> None:
        self.store = store
        self.keys = keys
        self.tmp = tmp

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int):
        key = self.keys[i]
        mode = i % 3
        if mode == 0:
            data = self.store.get(key)
        elif mode == 1:
            size = self.store.head(key).size
            data = self.store.get_range(key, 0, size // 2) + self.store.get_range(key, size // 2, size)
        else:
            dest = os.path.join(self.tmp, f"{os.getpid()}-{i}.bin")
            self.store.download_file(key, dest)
            with open(dest, "rb") as f:
                data = f.read()
            os.unlink(dest)
        return i, hashlib.sha256(data).hexdigest(), self.store.backend_name


@pytest.mark.slow
def test_every_sample_once_per_epoch_under_faults(fault_proxy, s3_server, tmp_path) -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    admin = s3_server.boto3_client()
    keys = [f"chunks/chunk-0-{i}.bin" for i in range(24)]
    digests = {}
    for i, key in enumerate(keys):
        data = os.urandom(2000 + 313 * i)
        admin.put_object(Bucket=s3_server.bucket, Key=key, Body=data)
        digests[i] = hashlib.sha256(data).hexdigest()
    # Fast retries for the workers: they read knobs from the environment they inherit.
    os.environ["STREAMSCOPE_STORAGE_RETRY_BASE_DELAY"] = "0.01"
    os.environ["STREAMSCOPE_STORAGE_MAX_ATTEMPTS"] = "8"
    try:
        store = open_store(fault_proxy.s3.url(), fault_proxy.s3.storage_options())
        assert store.exists(keys[0])  # the parent touches S3 before the workers start
        fault_proxy.configure(seed=11, error_rate=0.04, reset_rate=0.03, truncate_rate=0.03)
        ds = _Objects(store, keys, str(tmp_path))
        for epoch in range(2):
            seen: Counter[int] = Counter()
            backends = set()
            loader = torch_data.DataLoader(ds, batch_size=None, shuffle=True, num_workers=2, timeout=90)
            for i, digest, backend in loader:
                seen[int(i)] += 1
                assert digest == digests[int(i)], f"epoch {epoch}: wrong bytes for sample {i}"
                backends.add(backend)
            assert seen == Counter(range(len(keys))), f"epoch {epoch}: {seen}"
            assert backends == {"obstore"}
    finally:
        del os.environ["STREAMSCOPE_STORAGE_RETRY_BASE_DELAY"]
        del os.environ["STREAMSCOPE_STORAGE_MAX_ATTEMPTS"]
    injected = fault_proxy.counts["error"] + fault_proxy.counts["reset"] + fault_proxy.counts["truncate"]
    assert injected >= 5, fault_proxy.counts
    # 2 epochs x (8 gets + 8 x (head + 2 ranges) + 8 downloads) = 80 requests before retries
    assert fault_proxy.counts["requests"] >= 80 + injected - fault_proxy.counts["truncate_skipped"]
