"""Datasets written by the real LitData 0.2.76, and LitData's reading of them. Runs in a child process whose
``import litdata`` is 0.2.76 (see :mod:`tests.support.litdata076`); never imported by the test process itself.

``python -m tests.support.ld076_datasets OUT`` writes every dataset of :data:`DATASETS` (BinaryWriter: fast)
and the ``optimize`` ones (keyed, updated) under ``OUT``. The sample functions are importable here so that
tests can build the same samples to compare with.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any

import numpy as np

os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")

PASSWORD = "streamscope-pw"


def plain(i: int) -> dict[str, Any]:
    return {"id": f"k{i}", "i": i, "s": f"text-{i}"}


def rows(i: int) -> dict[str, Any]:
    return {
        "index": i,
        "text": f"hi {i}",
        "score": i / 2,
        "ok": i % 2 == 0,
        "tags": ["a"] * (i % 3),
        "meta": {"k": i, "w": [i, i + 1]},
    }


def table(i: int) -> dict[str, Any]:
    """Rows that ``default_collate`` can batch: every field of fixed shape."""
    return {"index": i, "text": f"row {i}", "score": i / 4, "ok": i % 3 == 0, "vec": [i, i + 1], "meta": {"k": i}}


def opt(i: int) -> dict[str, Any]:
    return {"a": i, "b": (f"x{i}" if i % 2 else None), "f": float(i) if i % 3 else None}


def bytes_(i: int) -> dict[str, Any]:
    return {"b": bytes([i % 256, (i + 1) % 256]), "s": "z" * (i % 7)}


def tens(i: int) -> dict[str, Any]:
    import torch

    return {"x": torch.arange(i + 2, dtype=torch.float32), "y": np.full((2, 3), i, dtype=np.int16), "i": i}


def fixed(i: int) -> dict[str, Any]:
    """Same-shape arrays (the column collator's case) and a json leaf."""
    import torch

    return {"x": torch.full((3,), float(i)), "y": np.full((2, 2), i, dtype=np.int32), "i": i, "tags": [i, i]}


def img(i: int) -> dict[str, Any]:
    from PIL import Image

    return {"image": Image.new("RGB", (4 + i % 3, 5), (i % 256, 2 * i % 255, 9)), "label": i % 10}


def tup(i: int) -> Any:
    return (i, f"s{i}", np.arange(3) * i, {"n": [i, i + 1]})


def nested(i: int) -> Any:
    return {"a": (i, [f"v{i}", {"b": np.arange(2) + i}]), "c": [1.5 * i, {"d": i % 2 == 0}]}


def tok(i: int) -> Any:
    import torch

    return torch.arange(10 + i, dtype=torch.int64)


def bare(i: int) -> int:
    return i * 3


def key_of(sample: Any) -> str:
    return sample["id"]


def key_of_tens(sample: Any) -> int:
    return int(sample["i"])


#: name -> (sample function, number of samples, BinaryWriter keyword arguments)
DATASETS: dict[str, tuple[Any, int, dict[str, Any]]] = {
    "plain": (plain, 12, {"chunk_size": 5}),
    "rows": (rows, 600, {"chunk_size": 300}),
    "table": (table, 600, {"chunk_size": 300}),
    "table_ipc_zstd": (table, 300, {"chunk_size": 140, "compression": "zstd"}),
    "rows_ipc_zstd": (rows, 300, {"chunk_size": 270, "compression": "zstd"}),
    "opt": (opt, 12, {"chunk_size": 5}),
    "bytes": (bytes_, 12, {"chunk_size": 5}),
    "bare": (bare, 12, {"chunk_size": 5}),
    "tens": (tens, 12, {"chunk_size": 5}),
    "fixed": (fixed, 12, {"chunk_size": 5}),
    "fixed_zstd": (fixed, 12, {"chunk_size": 5, "compression": "zstd"}),
    "tens_zstd": (tens, 12, {"chunk_size": 5, "compression": "zstd"}),
    "tens_zstd_k2": (tens, 11, {"chunk_size": 7, "compression": "zstd:7", "compression_batch_size": 2}),
    "tens_zstd_sample": (tens, 12, {"chunk_size": 5, "compression": "zstd", "compression_level": "sample"}),
    "tens_zstd_chunk": (tens, 12, {"chunk_size": 5, "compression": "zstd", "compression_level": "chunk"}),
    "img": (img, 12, {"chunk_size": 5}),
    "tup": (tup, 12, {"chunk_size": 5}),
    "nested": (nested, 12, {"chunk_size": 5}),
    "tok": (tok, 12, {"chunk_size": 60, "item_loader": "tokens"}),
    "tok_zstd_chunk": (
        tok,
        12,
        {"chunk_size": 60, "item_loader": "tokens", "compression": "zstd", "compression_level": "chunk"},
    ),
}
for _level in ("chunk", "sample"):
    for _kind, _fn in (("tens", tens), ("plain", plain)):
        DATASETS[f"enc_{_level}_{_kind}"] = (_fn, 12, {"chunk_size": 5, "encryption": _level})
        DATASETS[f"enc_{_level}_{_kind}_zstd"] = (
            _fn,
            12,
            {"chunk_size": 5, "encryption": _level, "compression": "zstd", "compression_level": "chunk"},
        )


def write(out: str, name: str) -> None:
    from litdata.streaming.item_loader import TokensLoader
    from litdata.streaming.writer import BinaryWriter
    from litdata.utilities.encryption import FernetEncryption

    fn, n, kw = DATASETS[name]
    kw = dict(kw)
    d = os.path.join(out, name)
    enc = None
    if "encryption" in kw:
        enc = FernetEncryption(PASSWORD, level=kw.pop("encryption"))
        kw["encryption"] = enc
    if kw.get("item_loader") == "tokens":
        kw["item_loader"] = TokensLoader()
    w = BinaryWriter(d, **kw)
    for i in range(n):
        w.add_item(i, fn(i))
    w.done()
    w.merge()
    if enc is not None:
        enc.save(os.path.join(d, "key.json"))


def write_optimized(out: str) -> None:
    """``keyed`` (the issue's example, with key_fn), ``keyed_zstd`` (framed, int keys) and ``keyed_updated`` (after
    dataset_update)."""
    import litdata as ld

    ld.optimize(
        fn=plain,
        inputs=list(range(12)),
        output_dir=os.path.join(out, "keyed"),
        chunk_size=5,
        num_workers=1,
        key_fn=key_of,
    )
    ld.optimize(
        fn=tens,
        inputs=list(range(12)),
        output_dir=os.path.join(out, "keyed_zstd"),
        chunk_size=5,
        num_workers=1,
        key_fn=key_of_tens,
        compression="zstd",
    )
    for src, dst, key, sample in (
        ("keyed", "keyed_updated", "k7", {"id": "k7", "i": 700, "s": "updated"}),
        ("keyed_zstd", "keyed_zstd_updated", 3, tens(300)),
    ):
        shutil.copytree(os.path.join(out, src), os.path.join(out, dst))
        with ld.dataset_update(os.path.join(out, dst)) as update:
            update[key] = sample
            update.commit()


def read_all(path: str, block_size: int | None = None, encrypted: bool = False, by_key: list | None = None) -> Any:
    """LitData 0.2.76's samples of the dataset at ``path`` (read from a copy: its reader may write next to it)."""
    import litdata as ld
    from litdata.streaming.item_loader import TokensLoader
    from litdata.utilities.encryption import FernetEncryption

    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "ds")
        shutil.copytree(path, copy)
        kw: dict[str, Any] = {"cache_dir": os.path.join(tmp, "cache")}
        if block_size:
            kw["item_loader"] = TokensLoader(block_size=block_size)
        if encrypted:
            kw["encryption"] = FernetEncryption.load(os.path.join(copy, "key.json"), PASSWORD)
        ds = ld.StreamingDataset(copy, **kw)
        if by_key is not None:
            return [ds.get_by_key(k) for k in by_key]
        return [ds[i] for i in range(len(ds))]


def main(out: str) -> None:
    for name in DATASETS:
        write(out, name)
    try:
        import polars  # noqa: F401
    except ImportError:
        print("polars is missing: the keyed datasets are not written")
        return
    write_optimized(out)


if __name__ == "__main__":
    main(sys.argv[1])


def classic_chunk(samples: list[Any]) -> bytes:
    """The classic chunk (header and items) LitData 0.2.76 serializes ``samples`` into, without a footer."""
    import struct

    from litdata.streaming.writer import BinaryWriter

    with tempfile.TemporaryDirectory() as tmp:
        w = BinaryWriter(tmp, chunk_size=len(samples))
        items = [w.serialize(s)[0] for s in samples]
    n = len(items)
    offsets = [4 * (n + 2)]
    for it in items:
        offsets.append(offsets[-1] + len(it))
    return struct.pack(f"<I{n + 1}I", n, *offsets) + b"".join(items)
