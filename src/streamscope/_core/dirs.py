"""``Dir``: a dataset location as LitData spells it (``litdata.streaming.resolver.Dir``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from os import PathLike

__all__ = ["Dir", "as_dir"]


@dataclass
class Dir:
    """A local ``path``, a remote ``url``, or both (a local mirror of a remote dataset)."""

    path: str | None = None
    url: str | None = None
    data_connection_id: str | None = None


def as_dir(value: str | PathLike[str] | Dir | None) -> Dir:
    """Normalise what users pass as ``input_dir``/``output_dir``/``cache_dir`` into a :class:`Dir`."""
    if value is None:
        return Dir()
    if isinstance(value, Dir):
        return value
    if not isinstance(value, str):
        import os

        if isinstance(value, os.PathLike):
            return Dir(path=os.fspath(value))
        from streamscope._core.errors import ConfigError

        raise ConfigError(f"a directory must be a str, os.PathLike or Dir, got {type(value).__name__}")
    if "://" in value or value.startswith("local:"):
        return Dir(path=None, url=value)
    return Dir(path=value)
