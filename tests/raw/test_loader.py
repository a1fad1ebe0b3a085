"""StreamingRawDataset under a StreamingDataLoader (stream.mapped): every file once per epoch in the plan's order
(shuffled per epoch or not), independent of the workers, exact mid-epoch resume, the look-ahead told the plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamscope._core.errors import NotAStreamingDatasetError, StateDictError
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.mapped import MappedBatches
from streamscope.raw import StreamingRawDataset
from tests.raw.conftest import file_id, make_folder

N = 45


def ids(batch: list[bytes]) -> list[int]:
    return [file_id(b) for b in batch]


def loader(data: Path, cache: Path, workers: int, shuffle: bool = False, method: str = "fork", **kw):
    ds = StreamingRawDataset(str(data), cache_dir=str(cache), max_prefetch=kw.pop("max_prefetch", 8))
    return StreamingDataLoader(
        ds,
        batch_size=4,
        num_workers=workers,
        shuffle=shuffle,
        multiprocessing_context=method if workers else None,
        **kw,
    )


def epoch(dl: StreamingDataLoader) -> list[int]:
    return [i for b in dl for i in ids(b)]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(
    ("workers", "method"), [(0, "fork"), (2, "fork"), pytest.param(2, "spawn", marks=pytest.mark.slow)]
)
def test_every_file_once_in_order_and_shuffled_per_epoch(tmp_path: Path, workers: int, method: str):
    data = make_folder(tmp_path, N)
    dl = loader(data, tmp_path / "c", workers, method=method)
    assert isinstance(dl.dataset, MappedBatches) and isinstance(dl.dataset.dataset, StreamingRawDataset)
    assert len(dl) == 12 and epoch(dl) == list(range(N))
    sh = loader(data, tmp_path / "c", workers, shuffle=True, method=method)
    e1, e2 = epoch(sh), epoch(sh)
    assert sorted(e1) == sorted(e2) == list(range(N)) and e1 != e2 and e1 != list(range(N))
    ref = loader(data, tmp_path / "c", 0, shuffle=True)
    assert [epoch(ref), epoch(ref)] == [e1, e2]  # the order does not depend on the workers


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_exact_resume_mid_epoch_with_other_workers(tmp_path: Path):
    data = make_folder(tmp_path, N)
    dl = loader(data, tmp_path / "c", 2, shuffle=True)
    full = [epoch(dl), epoch(dl)]
    dl = loader(data, tmp_path / "c", 2, shuffle=True)
    first = epoch(dl)
    it = iter(dl)
    head = [i for _ in range(5) for i in ids(next(it))]
    state = dl.state_dict()
    del it
    again = loader(data, tmp_path / "c", 0, shuffle=True)
    again.load_state_dict(state)
    tail = epoch(again)
    assert first == full[0] and head + tail == full[1]
    other = loader(data, tmp_path / "c", 0, shuffle=False)
    with pytest.raises(StateDictError, match="shuffle"):
        other.load_state_dict(state)


def test_the_look_ahead_fetches_the_plans_next_items(tmp_path: Path):
    """With the plan told (``expect``), the items fetched ahead are this process's next ones, shuffled or not:
    after the first batch every item of the epoch was fetched ahead."""
    data = make_folder(tmp_path, N)
    dl = loader(data, tmp_path / "c", 0, shuffle=True, max_prefetch=8)
    raw = dl.dataset.dataset
    assert sorted(epoch(dl)) == list(range(N))
    assert raw.prefetch_misses == 4 and raw.prefetch_hits == N - 4


def test_a_dataset_without_batches_is_refused():
    with pytest.raises(NotAStreamingDatasetError, match="StreamingRawDataset"):
        StreamingDataLoader([1, 2, 3])  # type: ignore[arg-type]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_persistent_workers_follow_the_epochs(tmp_path: Path):
    data = make_folder(tmp_path, N)
    ref = loader(data, tmp_path / "c", 0, shuffle=True)
    want = [epoch(ref), epoch(ref)]
    dl = loader(data, tmp_path / "c", 2, shuffle=True, persistent_workers=True)
    assert [epoch(dl), epoch(dl)] == want


def test_the_arguments_look_ahead_is_shared_by_the_workers_a_board_value_is_each_workers(tmp_path, monkeypatch):
    """``max_prefetch`` is capped so the workers together hold about 64 items (LitData's rule); a value the tuner
    (or the user) puts on the board is each worker's as it is: a move of the tuner changes what is fetched."""
    import streamscope.raw.dataset as raw_dataset

    monkeypatch.setattr(raw_dataset, "_num_workers", lambda: 8)
    ds = StreamingRawDataset(str(make_folder(tmp_path, N)), cache_dir=str(tmp_path / "c"))
    assert ds.prefetch_depth() == 8  # 16 by default, 64 // 8 each
    assert ds.knobs.propose("raw_prefetch", 40, "test") is True
    assert ds.prefetch_depth() == 40
    assert ds.knobs.propose("raw_prefetch", 16, "test") is True
    assert ds.prefetch_depth() == 8  # the argument's value again: shared as the argument is
