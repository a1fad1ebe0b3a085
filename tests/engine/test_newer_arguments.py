"""Arguments LitData 0.2.76 added to StreamingDataset and StreamingDataLoader, and its default collate."""

from __future__ import annotations

import os
import pstats
from typing import Any

import pytest
import torch
from torch.utils.data import default_collate

from streamscope import litdata_collate
from streamscope._core import units
from streamscope._core.errors import DatasetError
from streamscope.engine.dataloader import StreamingDataLoader, join_worker_shutdowns
from streamscope.engine.dataset import StreamingDataset
from tests.engine._data import write_dataset

N = 30


@pytest.fixture(scope="module")
def ds_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_dataset(str(tmp_path_factory.mktemp("newer") / "ds"), N, chunk_size=7)


def _ids(ds: StreamingDataset) -> list[int]:
    return [s["index"] for s in ds]


def test_newer_dataset_arguments_keep_the_samples(ds_dir: str) -> None:
    plain = StreamingDataset(ds_dir, shuffle=True, seed=5)
    newer = StreamingDataset(
        ds_dir, shuffle=True, seed=5, num_canonical_nodes=8, batch_decode=64, item_shuffle_window="full"
    )
    assert _ids(newer) == _ids(plain) and sorted(_ids(newer)) == list(range(N))
    assert newer.num_canonical_nodes == 8


@pytest.mark.parametrize(
    "kw",
    [
        {"num_canonical_nodes": 0},
        {"num_canonical_nodes": "8"},
        {"batch_decode": 0},
        {"batch_decode": "fast"},
        {"item_shuffle_window": -1},
        {"item_shuffle_window": "some"},
        {"window_direct_io": True},
    ],
)
def test_newer_dataset_arguments_are_checked(ds_dir: str, kw: dict[str, Any]) -> None:
    name = next(iter(kw))
    with pytest.raises(DatasetError, match=name):
        StreamingDataset(ds_dir, **kw)


def test_max_cache_size_none_is_three_quarters_of_free_disk_leaving_50gb(
    ds_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    free = {"bytes": 400 * 10**9}
    monkeypatch.setattr(units.shutil, "disk_usage", lambda p: _Usage(free["bytes"]))
    assert units.cache_budget(None, ds_dir) == 300 * 10**9  # 75 % leaves 100 GB free
    free["bytes"] = 120 * 10**9
    assert units.cache_budget(None, ds_dir) == 70 * 10**9  # 75 % would leave 30 GB: 50 GB stay free
    free["bytes"] = 40 * 10**9
    assert units.cache_budget(None, ds_dir) == 30 * 10**9  # less than 50 GB free: 75 % of it
    assert units.cache_budget(0.5, ds_dir) == units.cache_budget("0.5", ds_dir) == 20 * 10**9
    assert units.cache_budget("100G", ds_dir) == units.cache_budget("100GB", ds_dir) == 100 * 10**9
    assert units.cache_budget(123, ds_dir) == 123
    assert StreamingDataset(ds_dir).max_cache_size == 30 * 10**9
    monkeypatch.setenv("MAX_CACHE_SIZE", "0.25")  # LitData's variable wins over the argument, fractions too
    assert StreamingDataset(ds_dir, max_cache_size="1GB").max_cache_size == 10 * 10**9


def test_cache_budget_measures_the_volume_of_a_folder_not_yet_made(tmp_path: Any) -> None:
    assert units.cache_budget(1.0, str(tmp_path / "not" / "yet")) == units.cache_budget(1.0, str(tmp_path)) > 0


class _Usage:
    def __init__(self, free: int) -> None:
        self.free = free


def test_litdata_collate_is_default_collate_for_plain_samples() -> None:
    samples = [{"x": torch.arange(3) + i, "i": i, "s": f"t{i}"} for i in range(4)]
    got, want = litdata_collate(samples), default_collate(samples)
    assert got.keys() == want.keys() and torch.equal(got["x"], want["x"]) and got["s"] == want["s"]
    assert torch.equal(got["i"], want["i"])
    assert litdata_collate([]) == []


def test_litdata_collate_keeps_graphs_in_a_list_without_pyg() -> None:
    graph_type = type("Data", (), {"__module__": "torch_geometric.data.data", "to_dict": lambda self: {}})
    graphs = [graph_type(), graph_type()]
    try:
        import torch_geometric  # noqa: F401
    except ImportError:
        assert litdata_collate(graphs) == graphs
        batch = litdata_collate([{"g": g, "id": i} for i, g in enumerate(graphs)])
        assert batch["g"] == graphs and batch["id"].tolist() == [0, 1]
    else:  # pragma: no cover - PyG is not in the test environment
        pytest.skip("torch_geometric installed: Batch.from_data_list would need real Data objects")


def test_loader_default_and_litdata_collate_batch_alike(ds_dir: str) -> None:
    a = list(StreamingDataLoader(StreamingDataset(ds_dir), batch_size=4))
    b = list(StreamingDataLoader(StreamingDataset(ds_dir), batch_size=4, collate_fn=litdata_collate))
    c = list(StreamingDataLoader(StreamingDataset(ds_dir), batch_size=4, collate_fn=default_collate))
    for x, y, z in zip(a, b, c, strict=True):
        assert torch.equal(x["index"], y["index"]) and torch.equal(x["index"], z["index"])


@pytest.mark.parametrize("workers", [0, 2])
def test_profile_cprofile_writes_main_and_worker0(ds_dir: str, tmp_path: Any, workers: int) -> None:
    out = tmp_path / "profiles"
    dl = StreamingDataLoader(
        StreamingDataset(ds_dir), batch_size=4, num_workers=workers, profile_cprofile=True, profile_dir=str(out)
    )
    assert sum(len(b["index"]) for b in dl) == N
    join_worker_shutdowns()
    expected = {"cprofile_main.prof", "cprofile_main.txt"}
    if workers:
        expected |= {"cprofile_worker0.prof", "cprofile_worker0.txt"}
    assert set(os.listdir(out)) == expected
    for name in expected - {"cprofile_main.txt", "cprofile_worker0.txt"}:
        assert pstats.Stats(str(out / name)).total_calls > 0
    assert "by self time" in (out / "cprofile_main.txt").read_text()


def test_profile_cprofile_runs_the_users_worker_init(ds_dir: str, tmp_path: Any) -> None:
    flag_dir = tmp_path / "flags"
    flag_dir.mkdir()
    dl = StreamingDataLoader(
        StreamingDataset(ds_dir),
        batch_size=4,
        num_workers=2,
        profile_cprofile=True,
        profile_dir=str(tmp_path / "p"),
        worker_init_fn=_TouchFlag(str(flag_dir)),
    )
    list(dl)
    join_worker_shutdowns()
    assert sorted(os.listdir(flag_dir)) == ["0", "1"]


class _TouchFlag:
    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __call__(self, worker_id: int) -> None:
        open(os.path.join(self.folder, str(worker_id)), "w").close()


def test_profile_cprofile_and_profile_batches_are_exclusive(ds_dir: str) -> None:
    with pytest.raises(ValueError, match="profile_cprofile"):
        StreamingDataLoader(StreamingDataset(ds_dir), num_workers=1, profile_batches=2, profile_cprofile=True)


def test_state_has_litdata_076s_elastic_keys(ds_dir: str) -> None:
    loader = StreamingDataLoader(
        StreamingDataset(ds_dir, item_shuffle_window="full", num_canonical_nodes=3), batch_size=4, num_workers=0
    )
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()["dataset"]
    assert {
        k: state[k] for k in ("state_version", "sample_in_epoch", "num_canonical_nodes", "item_shuffle_window")
    } == {
        "state_version": 2,
        "sample_in_epoch": 8,
        "num_canonical_nodes": 3,
        "item_shuffle_window": 0,
    }
    assert (state["initial_world_size"], state["initial_num_workers"], state["initial_batch_size"]) == (1, 1, 4)
    # a run resumed from that state keeps the first run's initial_* (here: another worker count)
    again = StreamingDataLoader(StreamingDataset(ds_dir), batch_size=4, num_workers=2)
    again.load_state_dict({**loader.state_dict(), "dataset": {**state, "initial_num_workers": 7}})
    it = iter(again)
    next(it)
    resumed = again.state_dict()["dataset"]
    assert resumed["initial_num_workers"] == 7 and resumed["num_canonical_nodes"] == 3
    assert resumed["item_shuffle_window"] == 256  # None/"auto": LitData's default block
