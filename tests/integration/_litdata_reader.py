"""Run by test_interop_s3.py in its own process: read an S3 dataset with the real LitData (patched to speak
plain http to the local server) and print one JSON line ``[[index, name, sha256(image)], ...]``."""

from __future__ import annotations

import hashlib
import json
import os
import sys


def main(argv: list[str]) -> None:
    os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")
    import litdata
    import litdata.streaming.downloader as dl
    import numpy as np

    dl._OBSTORE_CLIENT_OPTIONS = {**dl._OBSTORE_CLIENT_OPTIONS, "allow_http": True}  # LitData only: plain http
    args = json.loads(argv[0])
    ds = litdata.StreamingDataset(args["url"], cache_dir=args["cache"], storage_options=args["options"])
    out = []
    for s in ds:
        img = np.ascontiguousarray(np.asarray(s["image"]))
        out.append([int(s["index"]), s["name"], hashlib.sha256(img.tobytes()).hexdigest()])
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
