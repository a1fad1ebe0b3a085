"""``litdata.streaming.item_loader`` at the same path."""

from streamscope.format.item_loader import BaseItemLoader, PyTreeLoader, TokensLoader  # noqa: F401
from streamscope.format.parquet import ParquetLoader  # noqa: F401

__all__ = ["BaseItemLoader", "ParquetLoader", "PyTreeLoader", "TokensLoader"]
