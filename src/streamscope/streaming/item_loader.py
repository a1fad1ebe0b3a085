"""``litdata.streaming.item_loader`` at the same path."""

from streamscope.format.item_loader import BaseItemLoader, PyTreeLoader, TokensLoader  # noqa: F401

__all__ = ["BaseItemLoader", "PyTreeLoader", "TokensLoader"]
