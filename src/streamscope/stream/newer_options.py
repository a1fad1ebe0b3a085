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
"""

from __future__ import annotations

from typing import Any

from streamscope._core.errors import DatasetError


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_newer_options(
    num_canonical_nodes: Any, batch_decode: Any, item_shuffle_window: Any, window_direct_io: Any
) -> None:
    """Raise :class:`DatasetError` for a value LitData 0.2.76 would not take (or that streamscope cannot honour)."""
    if num_canonical_nodes is not None and not (_is_int(num_canonical_nodes) and num_canonical_nodes >= 1):
        raise DatasetError(f"num_canonical_nodes must be None or an int >= 1, got {num_canonical_nodes!r}")
    if not (
        isinstance(batch_decode, bool) or batch_decode == "auto" or (_is_int(batch_decode) and batch_decode >= 1)
    ):
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
