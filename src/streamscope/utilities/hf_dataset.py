"""LitData's ``litdata.utilities.hf_dataset`` import path: :func:`index_hf_dataset` (``hf://`` Parquet datasets).

The implementation is :mod:`streamscope.engine.hf_index`.
"""

from streamscope.engine.hf_index import hf_index_dir, index_hf_dataset

__all__ = ["hf_index_dir", "index_hf_dataset"]
