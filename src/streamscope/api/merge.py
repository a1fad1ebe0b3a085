"""``merge_datasets`` (implemented in :mod:`streamscope.processing.merge`), re-exported for the public API."""

from streamscope.processing.merge import merge_datasets

__all__ = ["merge_datasets"]
