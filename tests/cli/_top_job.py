"""A small training job for the ``streamscope top`` tests: serves its metrics and streams until told to stop.

``python tests/cli/_top_job.py WORKDIR [SECONDS] [step]`` writes a local image dataset into WORKDIR, starts the
Prometheus endpoint on a free port, writes the port to ``WORKDIR/port``, then runs epochs (two forked workers, a
transform of ~2 ms a sample) until ``WORKDIR/stop`` exists or SECONDS (default 120) have passed. With ``step``
the workers are the fast side instead: larger samples (:data:`STEP_SAMPLE_BYTES` of tensors each), no transform,
and a training step of 10 ms a batch, so the batches of a group reach the loop long before it takes them. While
``WORKDIR/pause`` exists the training loop holds its batch and asks for no other (no batch, no wait); the job
writes ``WORKDIR/paused`` once it holds. With ``store`` the dataset is read from a store 20 ms away
(``benchmarks/_latency_store.py``: one worker, no transform, no step): the loop waits on the downloads.
"""

from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


#: Tensor bytes of a sample in the ``step`` job: a 3x64x64 uint8 image and an int64 label.
STEP_SAMPLE_BYTES = 3 * 64 * 64 + 8


def _slow(sample):
    time.sleep(0.002)
    return sample


def _large(i):
    import numpy as np

    return {"image": np.full((3, 64, 64), i % 251, dtype=np.uint8), "label": i}


def main() -> int:
    work = sys.argv[1]
    limit = float(sys.argv[2]) if len(sys.argv) > 2 else 120.0
    step = len(sys.argv) > 3 and sys.argv[3] == "step"
    store = len(sys.argv) > 3 and sys.argv[3] == "store"
    os.environ.setdefault("STREAMSCOPE_METRICS_INTERVAL", "0.2")
    sys.path.insert(0, ROOT)
    from streamscope.engine.dataloader import StreamingDataLoader
    from streamscope.engine.dataset import StreamingDataset
    from streamscope.telemetry.prometheus import start_endpoint
    from tests.engine._data import image_sample, write_dataset

    if step:
        data = write_dataset(os.path.join(work, "images"), 2000, _large, chunk_size=50)
    else:
        data = write_dataset(os.path.join(work, "images"), 400, image_sample, chunk_size=20)
    latency = None
    if store:
        from benchmarks._latency_store import LatencyStore, Profile

        latency = LatencyStore({data: "bench/images"}, [Profile(latency_ms=20)])
    port = start_endpoint(0)
    with open(os.path.join(work, "port.tmp"), "w") as f:
        f.write(str(port))
    os.replace(os.path.join(work, "port.tmp"), os.path.join(work, "port"))
    if latency is not None:
        dataset = StreamingDataset(
            "s3://bench/images",
            cache_dir=os.path.join(work, "cache"),
            storage_options=latency.storage_options(),
            max_cache_size=4 * max(os.path.getsize(os.path.join(data, n)) for n in os.listdir(data)),
        )  # a cache of four chunks: every epoch downloads
    else:
        dataset = StreamingDataset(data) if step else StreamingDataset(data, transform=_slow)
    loader = StreamingDataLoader(dataset, batch_size=8, num_workers=1 if store else 2)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and not os.path.exists(os.path.join(work, "stop")):
        for _ in loader:
            if os.path.exists(os.path.join(work, "stop")):
                break
            if step:
                time.sleep(0.01)
            if os.path.exists(os.path.join(work, "pause")):
                open(os.path.join(work, "paused"), "w").close()
                while os.path.exists(os.path.join(work, "pause")) and not os.path.exists(os.path.join(work, "stop")):
                    time.sleep(0.05)
                os.remove(os.path.join(work, "paused"))
    if latency is not None:
        latency.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
