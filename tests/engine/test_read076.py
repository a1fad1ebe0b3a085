"""Every read path over datasets written by the real LitData 0.2.76, compared with what LitData 0.2.76 reads.

The datasets are written once per session (``tests/support/ld076_datasets.py``); LitData's own reading of each is
the expectation, except where LitData 0.2.76 cannot read its own output (encrypted Arrow-footer datasets): there
the samples the writer was given are.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import default_collate

from streamscope.engine.combined import CombinedStreamingDataset
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.engine.parallel import ParallelStreamingDataset
from streamscope.format.item_loader import TokensLoader
from tests.format.conftest import same
from tests.support import ld076_datasets
from tests.support.litdata076 import expected

pytest.importorskip("pyarrow")

#: LitData 0.2.76 fails on these (its encrypted reads skip the Arrow footer): the writer's samples are the truth
_LITDATA_CANNOT = {"enc_chunk_plain", "enc_chunk_plain_zstd", "enc_sample_plain", "enc_sample_plain_zstd"}
_KEYED = {"keyed", "keyed_zstd", "keyed_updated", "keyed_zstd_updated"}
NAMES = sorted([*ld076_datasets.DATASETS, *_KEYED])


def _kwargs(name: str, root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(streamscope keyword arguments, LitData reading arguments) for dataset ``name``."""
    if name.startswith("tok"):
        return {"item_loader": TokensLoader(block_size=5)}, {"block_size": 5}
    if name.startswith("enc"):
        from streamscope.utilities.encryption import FernetEncryption

        key = FernetEncryption.load(str(root / name / "key.json"), ld076_datasets.PASSWORD)
        return {"encryption": key}, {"encrypted": True}
    return {}, {}


def _want(name: str, root: Path) -> list[Any]:
    if name in _LITDATA_CANNOT:
        fn, n, _ = ld076_datasets.DATASETS[name]
        return [fn(i) for i in range(n)]
    return expected(name, **_kwargs(name, root)[1])


def _open(name: str, root: Path, tmp: Path, source: str | None = None, **kw: Any) -> StreamingDataset:
    if name in _KEYED and not (root / name).exists():
        pytest.skip("LitData 0.2.76's keyed datasets need polars (STREAMSCOPE_LITDATA076_EXTRA_PATH)")
    return StreamingDataset(source or str(root / name), cache_dir=str(tmp / "cache"), **_kwargs(name, root)[0], **kw)


def _all_same(got: list[Any], want: list[Any]) -> bool:
    return len(got) == len(want) and all(same(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("name", NAMES)
def test_getitem_and_iteration(ld076_data: Path, tmp_path: Path, name: str) -> None:
    ds = _open(name, ld076_data, tmp_path)
    want = _want(name, ld076_data)
    assert len(ds) == len(want)
    assert _all_same([ds[i] for i in range(len(ds))], want)
    assert _all_same(list(ds), want)
    assert same(ds[len(ds) - 1], want[-1]) and same(ds[3], want[3])  # random access after a pass


_LOADER = ["table", "table_ipc_zstd", "plain", "fixed", "fixed_zstd", "bare", "tok", "enc_chunk_plain", "keyed_zstd"]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", _LOADER)
def test_loader_batches_are_default_collate_of_litdata_samples(
    ld076_data: Path, tmp_path: Path, name: str, workers: int
) -> None:
    ds = _open(name, ld076_data, tmp_path)
    want = _want(name, ld076_data)
    if name == "keyed_zstd":  # ragged x: batch the samples one by one
        ds = _open(name, ld076_data, tmp_path)
        want = [{k: v for k, v in s.items() if k != "x"} for s in want]
        loader = StreamingDataLoader(ds, batch_size=7, num_workers=workers, collate_fn=_drop_x)
    else:
        loader = StreamingDataLoader(ds, batch_size=7, num_workers=workers)
    batches = list(loader)
    assert len(batches) == -(-len(want) // 7)
    for k, batch in enumerate(batches):
        assert same(batch, default_collate(want[7 * k : 7 * k + 7])), f"batch {k}"


def _drop_x(samples: list[Any]) -> Any:
    return default_collate([{k: v for k, v in s.items() if k != "x"} for s in samples])


@pytest.mark.slow
def test_loader_spawn_workers(ld076_data: Path, tmp_path: Path) -> None:
    ds = _open("table_ipc_zstd", ld076_data, tmp_path)
    want = _want("table_ipc_zstd", ld076_data)
    batches = list(StreamingDataLoader(ds, batch_size=16, num_workers=2, multiprocessing_context="spawn"))
    assert all(same(b, default_collate(want[16 * k : 16 * k + 16])) for k, b in enumerate(batches))
    assert sum(len(b["index"]) for b in batches) == len(want)


def test_arrow_batches_take_the_column_path(ld076_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of Arrow rows are built column-wise (not sample by sample), across record batches and chunks."""
    from streamscope.engine import collate as collate_module

    calls: list[int] = []
    real = collate_module.ArrowCollator.collate

    def spy(self: Any, groups: Any, n: int) -> Any:
        out = real(self, groups, n)
        calls.append(len(groups) if out is not None else -1)
        return out

    monkeypatch.setattr(collate_module.ArrowCollator, "collate", spy)
    ds = _open("table", ld076_data, tmp_path, shuffle=True)
    batches = list(StreamingDataLoader(ds, batch_size=70, num_workers=0))
    assert calls and -1 not in calls and max(calls) == 2  # a batch spanning both chunks
    assert sorted(int(i) for b in batches for i in b["index"]) == list(range(600))
    assert all(b["score"].dtype == torch.float64 and b["ok"].dtype == torch.bool for b in batches)


def test_combined_over_076_datasets(ld076_data: Path, tmp_path: Path) -> None:
    a = _open("plain", ld076_data, tmp_path / "a")
    b = _open("tens_zstd", ld076_data, tmp_path / "b")
    combined = CombinedStreamingDataset([a, b], seed=3, iterate_over_all=True)
    got = list(combined)
    want = _want("plain", ld076_data) + _want("tens_zstd", ld076_data)
    assert len(got) == len(want)
    left = list(want)
    for s in got:
        k = next(k for k, w in enumerate(left) if same(s, w))
        left.pop(k)
    assert not left


@pytest.mark.parametrize("workers", [0, 2])
def test_parallel_over_076_datasets(ld076_data: Path, tmp_path: Path, workers: int) -> None:
    a = _open("plain", ld076_data, tmp_path / "a")
    b = _open("table", ld076_data, tmp_path / "b")
    par = ParallelStreamingDataset([a, b])
    pairs = list(par)
    assert len(pairs) == 12
    assert _all_same([x for x, _ in pairs], _want("plain", ld076_data))
    assert _all_same([y for _, y in pairs], _want("table", ld076_data)[:12])
    batches = list(StreamingDataLoader(ParallelStreamingDataset([a, b]), batch_size=4, num_workers=workers))
    assert [s for x, _ in batches for s in x["id"]] == [f"k{i}" for i in range(12)]
    assert torch.equal(torch.cat([y["index"] for _, y in batches]), torch.arange(12))


@pytest.mark.parametrize(
    ("name", "keys"),
    [
        ("keyed", ["k0", "k7", "k11", "k5"]),
        ("keyed_zstd", [0, 3, 11]),
        ("keyed_updated", ["k7", "k6"]),
        ("keyed_zstd_updated", [3, 4]),
    ],
)
def test_get_by_key(ld076: Any, ld076_data: Path, tmp_path: Path, name: str, keys: list[Any]) -> None:
    ds = _open(name, ld076_data, tmp_path)
    want = ld076.call("tests.support.ld076_datasets.read_all", str(ld076_data / name), by_key=keys)
    assert _all_same([ds.get_by_key(k) for k in keys], want)
    if name == "keyed_updated":
        assert ds.get_by_key("k7") == {"id": "k7", "i": 700, "s": "updated"}


_REMOTE = [
    "rows",
    "tens_zstd",
    "tens_zstd_k2",
    "tens_zstd_sample",
    "tens_zstd_chunk",
    "enc_chunk_plain",
    "enc_sample_tens",
    "tok_zstd_chunk",
    "keyed",
]


def _upload(client: Any, bucket: str, src: Path, prefix: str) -> None:
    for root, _, files in os.walk(src):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), src)
            client.upload_file(os.path.join(root, f), bucket, f"{prefix}/{rel}")


@pytest.mark.parametrize("name", _REMOTE)
def test_remote_s3(ld076_data: Path, tmp_path: Path, s3_server: Any, name: str) -> None:
    if name in _KEYED and not (ld076_data / name).exists():
        pytest.skip("LitData 0.2.76's keyed datasets need polars")
    _upload(s3_server.boto3_client(), s3_server.bucket, ld076_data / name, name)
    ds = _open(name, ld076_data, tmp_path, source=s3_server.url(name), storage_options=s3_server.storage_options())
    want = _want(name, ld076_data)
    assert _all_same(list(ds), want)
    assert _all_same([ds[i] for i in reversed(range(len(ds)))], want[::-1])
    if name == "keyed":
        assert ds.get_by_key("k4") == want[4]
    cached = sorted(p.name for p in (tmp_path / "cache").rglob("chunk-*"))
    assert cached and not [p for p in cached if ".download." in p or ".tmp." in p]  # no temporary file left
