"""engine/batch_mode.py: the loader's typed request to its dataset."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from streamscope.engine.batch_mode import BatchMode


def test_the_loaders_live_position_wins_when_the_iterator_starts():
    position = [3, 5]
    mode = BatchMode(epoch=1, start=0, batch_size=4, position=position)
    position[0], position[1] = 4, 0  # the loader moved on before the iterator ran
    assert mode.epoch_and_start() == (4, 0)
    assert BatchMode(epoch=2, start=7, batch_size=4).epoch_and_start() == (2, 7)


def test_it_is_frozen_and_pickles_for_spawned_workers():
    from streamscope.recording.loader_share import Ticket

    mode = BatchMode(epoch=1, start=2, batch_size=8, position=[1, 2], ticket=Ticket(parcel=True, workers=2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        mode.epoch = 3  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(mode)) == mode
