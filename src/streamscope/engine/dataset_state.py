"""What a StreamingDataset's state says of it: its identity (``checkpoint_identity``: what defines the order, checked
on resume), LitData's keys (``subsampled_files``, ``region_of_interest``, 0.2.76's elastic keys) and how a checked
state's position is found in this dataset's plan, also in another world size (elastic resume, ``resume_plan``).

A mixin of :class:`~streamscope.engine.dataset.StreamingDataset` (it holds the attributes declared below); the rest
of resume is :mod:`streamscope.engine.resume`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streamscope._core.errors import DatasetError
from streamscope.engine.newer_options import elastic_state
from streamscope.engine.resume import resume_plan
from streamscope.format.item_loader import BaseItemLoader

__all__ = ["DatasetIdentity"]


class DatasetIdentity:
    """Identity, LitData's state keys and the resume position of a StreamingDataset (see the module docstring)."""

    chunks: list[dict[str, Any]]
    chunk_sizes: Sequence[int]
    regions: list[tuple[int, int, int]] | None
    remote: bool
    input_dir: str
    _cache_root: str
    item_loader: BaseItemLoader
    is_tokens: bool
    drop_last: bool
    seed: int
    world_size: int
    rank: int
    shuffle: bool
    subsample: float
    shuffle_buffer: int
    _elastic: tuple[int, tuple[tuple[int, ...], ...]] | None

    @property
    def on_demand_bytes(self) -> bool:
        """LitData's switch for ranged item reads on random access (``ds[i]``) of remote datasets.

        Accepted and validated for compatibility; streamscope's reader always fetches whole chunks into the
        cache (then serves later reads of the same chunk from it), so the value does not change what is read.
        """
        return bool(self.__dict__.get("_on_demand_bytes", True))

    @on_demand_bytes.setter
    def on_demand_bytes(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise DatasetError(f"on_demand_bytes should be a boolean, got {value!r}")
        self._on_demand_bytes = value

    @property
    def subsampled_files(self) -> list[str]:
        """LitData's attribute: the chunk file of each region this dataset reads (after ``subsample`` or
        ``train_test_split``; every chunk file otherwise), in the order of :attr:`region_of_interest`."""
        return list(self.litdata_state()["subsampled_files"])

    @property
    def region_of_interest(self) -> list[tuple[int, int]]:
        """LitData's attribute: the ``[start, end)`` item range read from each file of :attr:`subsampled_files`."""
        return list(self.litdata_state()["region_of_interest"])

    def litdata_state(self) -> dict[str, Any]:
        """LitData's ``subsampled_files`` and ``region_of_interest``: the (chunk file, [start, end)) list this
        dataset runs over, as LitData computes it (every chunk whole unless subsampled or split)."""
        names = [c["filename"] for c in self.chunks]
        if self.regions is None:
            return {
                "subsampled_files": names,
                "region_of_interest": [(0, int(n)) for n in self.chunk_sizes],
            }
        return {
            "subsampled_files": [names[c] for c, _, _ in self.regions],
            "region_of_interest": [(int(a), int(b)) for _, a, b in self.regions],
        }

    def _elastic_state(self, num_samples_yielded: int, num_workers: int, batch_size: Any) -> dict[str, Any]:
        return elastic_state(self, num_samples_yielded, num_workers, batch_size)

    def checkpoint_identity(self) -> dict[str, Any]:
        return {
            "input_dir_path": None if self.remote else self.input_dir,
            "input_dir_url": self.input_dir if self.remote else None,
            "cache_dir_path": self._cache_root,
            "item_loader": self.item_loader.state_dict() if self.is_tokens else None,
            "drop_last": self.drop_last,
            "seed": self.seed,
            "world_size": self.world_size,
            "shuffle": self.shuffle,
            "subsample": self.subsample,
            "shuffle_buffer": self.shuffle_buffer,
        }

    def check_checkpoint_identity(self, state: dict[str, Any], skip: tuple[str, ...] = ()) -> list[str]:
        mine = self.checkpoint_identity()
        diffs = []
        for key in (
            "input_dir_path",
            "input_dir_url",
            "item_loader",
            "drop_last",
            "seed",
            "world_size",
            "shuffle",
            "subsample",
            "shuffle_buffer",
        ):
            if key in state and key not in skip and state[key] != mine[key]:
                diffs.append(f"{key}: saved {state[key]!r}, now {mine[key]!r}")
        return diffs

    def _resume_diffs(self, state: dict[str, Any]) -> list[str]:
        # another world size is an elastic resume (_plan_position), not a mismatch
        return self.check_checkpoint_identity(state, skip=("world_size",))

    def _plan_position(self, state: dict[str, Any], epoch: int, batch_size: int) -> tuple[int, int]:
        """Continue ``state``'s epoch, also with another world size than it was saved with (elastic resume): the
        epoch's plan then covers exactly the samples no rank consumed before the save, cut into this world
        size's rank slices and batches (``resume_plan``); the ``resumed_from`` history travels in the states
        saved from here on."""
        self._elastic = None
        plan, start = resume_plan(
            state["plan_state"],
            self.chunk_sizes,
            world_size=self.world_size,
            rank=self.rank,
            batch_size=batch_size,
            drop_last=self.drop_last,
            shuffle=self.shuffle,
            seed=self.seed,
            shuffle_buffer=self.shuffle_buffer,
            regions=self.regions,
        )
        self._elastic = (plan.epoch, tuple(plan.resumed_from)) if plan.resumed_from else None
        return plan.epoch, start
