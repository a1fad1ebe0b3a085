"""Run by test_fork_foreign_obstore.py in its own process: open an S3 dataset (no obstore yet), iterate it in
this process (num_workers=0: the prefetcher downloads through obstore), then fork 2 DataLoader workers (they
use boto3, loudly). Prints ``OK <before> <after> <w0 samples> <w2 samples> <w2 distinct>``."""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> None:
    from streamscope import StreamingDataLoader, StreamingDataset
    from streamscope.storage import obstore_backend as ob

    ep = json.loads(argv[0])
    ds = StreamingDataset(ep["url"], cache_dir=ep["cache"], storage_options=ep["options"], max_cache_size=1)
    assert ds[3]["index"] == 3  # random access downloads a chunk too, through the dataset's (boto3) store
    before = ob.runtime_pid() == os.getpid()
    w0 = [i for b in StreamingDataLoader(ds, batch_size=8, num_workers=0) for i in b["index"].tolist()]
    after = ob.runtime_pid() == os.getpid()
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context="fork", timeout=30)
    w2 = [i for b in loader for i in b["index"].tolist()]
    print(f"OK {before} {after} {len(w0)} {len(w2)} {len(set(w2))}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
