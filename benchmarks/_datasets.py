"""Shared benchmark workloads, written once with the real ``litdata.optimize`` and reused.

* ``images``: 20,000 samples ``{"image": uint8[3, 64, 64], "label": int, "name": str}`` (64 MB chunks).
* ``images_1mb``: the same samples in 1 MB chunks (~250 chunks: many requests, as in the auto-tuning benchmark).
* ``tokens``: 50,000,000 int32 tokens in 50 sequences of 1M tokens, TokensLoader, 8M-token chunks.

``write_small_images`` writes, with ``streamscope.optimize``, the small local datasets of the telemetry
benchmarks (no LitData involved).

Run ``python benchmarks/_datasets.py`` to build them (``--root`` or ``STREAMSCOPE_BENCH_DIR``, default
``/tmp/streamscope-bench``). LitData runs in a child process without our sources on ``PYTHONPATH`` and with a
private staging directory (LitData's default ``/tmp/chunks`` is shared by every job on the host).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

IMAGES_N = 20_000
TOKENS_TOTAL = 50_000_000
TOKENS_PER_SEQ = 1_000_000

_WRITER = r"""
import sys
import numpy as np
import torch
import litdata as ld
from litdata.streaming.item_loader import TokensLoader


def image(i):
    rng = np.random.default_rng(i)
    return {"image": rng.integers(0, 256, (3, 64, 64), dtype=np.uint8), "label": i, "name": f"img-{i:06d}"}


def tokens(i):
    g = torch.Generator().manual_seed(i)
    return torch.randint(0, 50_000, (%(per_seq)d,), dtype=torch.int32, generator=g)


if __name__ == "__main__":
    out, kind = sys.argv[1], sys.argv[2]
    if kind in ("images", "images_1mb"):
        ld.optimize(fn=image, inputs=list(range(%(n)d)), output_dir=out, num_workers=2,
                    chunk_bytes="1MB" if kind == "images_1mb" else "64MB")
    else:
        ld.optimize(fn=tokens, inputs=list(range(%(seqs)d)), output_dir=out, chunk_size=8_000_000,
                    num_workers=2, item_loader=TokensLoader())
""" % {"n": IMAGES_N, "per_seq": TOKENS_PER_SEQ, "seqs": TOKENS_TOTAL // TOKENS_PER_SEQ}


def bench_root(root: str | None = None) -> str:
    """The benchmark data directory."""
    return root or os.environ.get("STREAMSCOPE_BENCH_DIR", "/tmp/streamscope-bench")


def ensure(kind: str, root: str | None = None) -> str:
    """Path of workload ``kind`` ("images", "images_1mb" or "tokens"), writing it with litdata.optimize if missing."""
    root = bench_root(root)
    out = os.path.join(root, kind)
    if os.path.isfile(os.path.join(out, "index.json")):
        return out
    os.makedirs(root, exist_ok=True)
    script = os.path.join(root, "_writer.py")
    with open(script, "w") as f:
        f.write(_WRITER)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["LITDATA_DISABLE_VERSION_CHECK"] = "1"
    env["DATA_OPTIMIZER_CACHE_FOLDER"] = os.path.join(root, f".stage-{kind}")
    env["DATA_OPTIMIZER_DATA_CACHE_FOLDER"] = os.path.join(root, f".dstage-{kind}")
    subprocess.run([sys.executable, script, out, kind], env=env, check=True, stdout=subprocess.DEVNULL)
    return out


def small_image(i: int) -> dict[str, Any]:
    """A small sample of the benchmark's shape: uint8 image 3x8x8, int label, str name."""
    import numpy as np

    rng = np.random.default_rng(i)
    return {"image": rng.integers(0, 255, (3, 8, 8), dtype=np.uint8), "label": i, "name": f"img{i}"}


def write_small_images(
    out_dir: str, n: int, *, chunk_size: int, compression: str | None = None, make: Callable[[int], Any] = small_image
) -> str:
    """Write ``n`` samples ``make(i)`` into ``out_dir`` with ``streamscope.optimize`` (one worker, in order)."""
    import streamscope

    streamscope.optimize(
        fn=make,
        inputs=list(range(n)),
        output_dir=out_dir,
        chunk_size=chunk_size,
        compression=compression,
        num_workers=1,
        verbose=False,
    )
    return out_dir


def chunk_files(path: str) -> list[str]:
    """The chunk files of a dataset directory."""
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.startswith("chunk-") and f.endswith(".bin"))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", default=None)
    args = ap.parse_args()
    for k in ("images", "tokens"):
        print(k, ensure(k, args.root))
