"""Run by test_fork_foreign_obstore.py in its own process (it may crash or hang): obstore used directly in the
parent, then a StreamingDataLoader with 2 forked workers. Prints ``OK <samples>`` on success."""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> None:
    import obstore
    from obstore.store import S3Store

    from streamscope import StreamingDataLoader, StreamingDataset

    ep = json.loads(argv[0])
    store = S3Store(
        ep["bucket"],
        config={
            "endpoint": ep["endpoint_url"],
            "access_key_id": ep["access_key"],
            "secret_access_key": ep["secret_key"],
            "region": ep["region"],
        },
        client_options={"allow_http": True},
    )
    # user code in the parent reads the bucket with obstore: the tokio runtime now runs in this process
    assert len(bytes(obstore.get(store, f"{ep['prefix']}/index.json").bytes())) > 0
    ds = StreamingDataset(ep["url"], cache_dir=ep["cache"], storage_options=ep["options"])
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context="fork", timeout=30)
    got = sorted(i for b in loader for i in b["index"].tolist())
    print(f"OK {len(got)} {len(set(got))}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
