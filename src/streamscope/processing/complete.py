"""``litdata.processing.complete`` at the same path (the code lives in :mod:`streamscope.format.complete`, where the
dataset's read path can reach it too)."""

from streamscope.format.complete import complete_dataset, is_complete_dataset  # noqa: F401

__all__ = ["complete_dataset", "is_complete_dataset"]
