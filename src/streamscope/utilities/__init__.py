"""LitData-compatible module paths (``litdata.utilities.*``); only re-exports live here."""

__all__: list[str] = []
