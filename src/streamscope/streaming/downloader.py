"""``litdata.streaming.downloader`` at the same path: register a downloader class for a URL prefix.

A class registered with :func:`register_downloader` serves every URL starting with its prefix wherever
streamscope opens storage (``StreamingDataset``, the chunk cache, ``BinaryReader``); see
:mod:`streamscope.storage.registry`. Registrations are per process: DataLoader workers started with
"fork" inherit them; with "spawn", register at import time of a module the workers import.
"""

from streamscope.storage.registry import (  # noqa: F401
    Downloader,
    get_downloader,
    register_downloader,
    unregister_downloader,
)

__all__ = ["Downloader", "get_downloader", "register_downloader", "unregister_downloader"]
