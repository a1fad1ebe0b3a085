"""StreamingRawDataset: stream existing files with no optimize step.

Public names match LitData's ``litdata.raw``: :class:`StreamingRawDataset`, :class:`FileMetadata`,
:class:`BaseIndexer`, :class:`FileIndexer`.
"""

from __future__ import annotations

from streamscope.raw.dataset import StreamingRawDataset
from streamscope.raw.indexer import INDEX_FILENAME, BaseIndexer, FileIndexer, FileMetadata

__all__ = ["INDEX_FILENAME", "BaseIndexer", "FileIndexer", "FileMetadata", "StreamingRawDataset"]
