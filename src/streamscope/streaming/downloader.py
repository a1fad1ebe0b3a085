"""``litdata.streaming.downloader`` at the same path: register a downloader class for a URL prefix.

A class registered with :func:`register_downloader` serves every URL starting with its prefix wherever
streamscope opens storage (``StreamingDataset``, the chunk cache, ``BinaryReader``); see
:mod:`streamscope.storage.registry`. Registrations are per process: DataLoader workers started with
"fork" inherit them; with "spawn", register at import time of a module the workers import.

LitData's built-in classes are here by name (``S3Downloader``, ``GCPDownloader``, ``AzureDownloader``,
``R2Downloader``, ``HFDownloader`` over streamscope's backends; ``LocalDownloader`` and
``LocalDownloaderWithCache`` copy local files): :func:`get_downloader` returns them for their schemes, and a user
class may subclass them.
"""

from streamscope.storage.registry import (  # noqa: F401
    AzureDownloader,
    Downloader,
    GCPDownloader,
    HFDownloader,
    LocalDownloader,
    LocalDownloaderWithCache,
    R2Downloader,
    S3Downloader,
    get_downloader,
    register_downloader,
    unregister_downloader,
)

__all__ = [
    "AzureDownloader",
    "Downloader",
    "GCPDownloader",
    "HFDownloader",
    "LocalDownloader",
    "LocalDownloaderWithCache",
    "R2Downloader",
    "S3Downloader",
    "get_downloader",
    "register_downloader",
    "unregister_downloader",
]
