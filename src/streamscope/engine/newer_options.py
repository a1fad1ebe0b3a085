"""StreamingDataset arguments LitData 0.2.76 added, checked the way LitData reads them.

They are accepted so that a call written for LitData 0.2.76 binds in streamscope; none of them changes which
samples a dataset yields (tests/compat/README.md, "Allowed differences"):

* ``num_canonical_nodes`` (None or an int >= 1): LitData freezes it in a checkpoint for elastic resume.
  streamscope's resume position does not depend on the number of workers to begin with; the value is kept.
* ``batch_decode`` ("auto", a bool, or an int >= 1): how many items LitData decodes at once. streamscope's
  loader decodes whole batches column-wise already.
* ``item_shuffle_window`` (None, "auto", "full", or an int >= 0): LitData's in-chunk block shuffle. Shuffled
  orders are engine-specific (they differ between LitData 0.2.68 and 0.2.76 too).
* ``window_direct_io``: direct I/O for ``TemporalArrayLoader.read_window``, which streamscope does not
  provide; True is refused.

A dataset's state carries LitData 0.2.76's elastic-resume keys too (:func:`elastic_state`).
"""

from __future__ import annotations

import os
from typing import Any

from streamscope._core.errors import DatasetError

__all__ = ["DEFAULT_ITEM_SHUFFLE_WINDOW", "check_newer_options", "elastic_state"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_newer_options(
    num_canonical_nodes: Any, batch_decode: Any, item_shuffle_window: Any, window_direct_io: Any
) -> None:
    """Raise :class:`DatasetError` for a value LitData 0.2.76 would not take (or that streamscope cannot honour)."""
    if num_canonical_nodes is not None and not (_is_int(num_canonical_nodes) and num_canonical_nodes >= 1):
        raise DatasetError(f"num_canonical_nodes must be None or an int >= 1, got {num_canonical_nodes!r}")
    if not (isinstance(batch_decode, bool) or batch_decode == "auto" or (_is_int(batch_decode) and batch_decode >= 1)):
        raise DatasetError(f"batch_decode must be 'auto', a bool or an int >= 1, got {batch_decode!r}")
    if not (
        item_shuffle_window is None
        or item_shuffle_window in ("auto", "full")
        or (_is_int(item_shuffle_window) and item_shuffle_window >= 0)
    ):
        raise DatasetError(
            f"item_shuffle_window must be None, 'auto', 'full' or an int >= 0, got {item_shuffle_window!r}"
        )
    if window_direct_io:
        raise DatasetError(
            "window_direct_io=True serves TemporalArrayLoader.read_window, which streamscope does not provide"
        )


#: LitData 0.2.76's in-chunk shuffle block when ``item_shuffle_window`` is None/"auto" ("full" is 0: no blocks).
DEFAULT_ITEM_SHUFFLE_WINDOW = 256


def elastic_state(ds: Any, num_samples_yielded: int, num_workers: int, batch_size: Any) -> dict[str, Any]:
    """The keys LitData 0.2.76 adds to a StreamingDataset state (``state_version`` 2), with its meanings.

    ``sample_in_epoch`` counts the samples of the epoch consumed over all ranks; ``num_canonical_nodes`` is the
    argument, else the one of the state this dataset resumed from, else the world size; the ``initial_*`` keys
    are those of the state this dataset resumed from (the first run's), else this run's. streamscope's own
    resume reads its ``plan_state`` and does not need them; they are there for code (and LitData) that reads a
    checkpoint.
    """
    world = int(ds.world_size)
    resumed = getattr(ds, "_resumed_from_state", None) or {}
    window = ds.item_shuffle_window
    if window is None or window == "auto":
        window = int(os.environ.get("LITDATA_ITEM_SHUFFLE_WINDOW", DEFAULT_ITEM_SHUFFLE_WINDOW))
    elif window == "full":
        window = 0
    ncn = ds.num_canonical_nodes or resumed.get("num_canonical_nodes") or resumed.get("initial_world_size", world)
    return {
        "item_shuffle_window": int(window),
        "state_version": 2,
        "sample_in_epoch": int(num_samples_yielded) * world,
        "num_canonical_nodes": int(ncn),
        "initial_world_size": resumed.get("initial_world_size", resumed.get("world_size", world)),
        "initial_num_workers": resumed.get("initial_num_workers", max(1, int(num_workers))),
        "initial_batch_size": resumed.get("initial_batch_size", batch_size),
        "initial_num_nodes": resumed.get("initial_num_nodes", _num_nodes(world)),
    }


def _num_nodes(world_size: int) -> int:
    """Nodes of the job as LitData counts them: world size over the GPUs of this machine (1 without GPUs)."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return max(1, world_size // gpus) if gpus else 1
