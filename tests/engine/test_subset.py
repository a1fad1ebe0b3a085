"""StreamingDataset.subset (LitData 0.2.76): a copy over chosen positions of the unshuffled order."""

from __future__ import annotations

import pytest

from streamscope._core.errors import DatasetError
from streamscope.engine.dataset import StreamingDataset
from tests.engine._data import write_dataset

N = 25


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> StreamingDataset:
    return StreamingDataset(write_dataset(str(tmp_path_factory.mktemp("subset") / "ds"), N, chunk_size=6))


def _ids(ds: StreamingDataset) -> list[int]:
    return [s["index"] for s in ds]


@pytest.mark.parametrize(
    "indices",
    [range(0, 10), slice(3, 20, 4), slice(-5, None), [24, 0, 1, 2, 7, 6, 13], [], [5, 5]],
)
def test_subset_yields_the_chosen_positions_in_order(ds: StreamingDataset, indices: object) -> None:
    want = list(range(N))[indices] if isinstance(indices, slice) else list(indices)  # type: ignore[call-overload]
    sub = ds.subset(indices)  # type: ignore[arg-type]
    assert len(sub) == len(want)
    assert _ids(sub) == want
    assert [sub[i]["index"] for i in range(len(sub))] == want
    assert len(ds) == N  # the original is unchanged


def test_subset_of_a_split_uses_the_splits_positions(ds: StreamingDataset) -> None:
    part = ds.subset(range(10, 20))
    assert _ids(part.subset([0, 9, 5])) == [10, 19, 15]


def test_subset_shuffles_within_itself(ds: StreamingDataset) -> None:
    sub = StreamingDataset(ds.input_dir, shuffle=True, seed=1).subset(range(5, 17))
    got = _ids(sub)
    assert sorted(got) == list(range(5, 17))


@pytest.mark.parametrize("bad", [[N], [-1], ["3"], [1.0]])
def test_positions_outside_the_dataset_are_refused(ds: StreamingDataset, bad: list[object]) -> None:
    with pytest.raises(DatasetError, match=r"subset positions must be ints in \[0, 24\]"):
        ds.subset(bad)  # type: ignore[arg-type]
