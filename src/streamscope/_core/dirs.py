"""``Dir``: a dataset location as LitData spells it (``litdata.streaming.resolver.Dir``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from os import PathLike

__all__ = ["Dir", "as_dir", "local_and_url"]


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
        if isinstance(value, os.PathLike):
            return Dir(path=os.fspath(value))
        from streamscope._core.errors import ConfigError

        raise ConfigError(f"a directory must be a str, os.PathLike or Dir, got {type(value).__name__}")
    if "://" in value or value.startswith("local:"):
        return Dir(path=None, url=value)
    return Dir(path=value)


def local_and_url(value: Any, who: str) -> tuple[str, str | None]:
    """The local folder (absolute for a path) and the remote URL (None: none) of ``value``, a :class:`Dir` (or any
    object with ``path`` and ``url``: LitData's ``Dir`` too) or a local path, for ``who``, which writes and caches in
    a local folder (LitData's ``Cache``).

    Raises:
        ValueError: ``value`` is None, has no local path, or is a URL (naming how to pass one).
    """
    if value is None:
        raise ValueError(f"{who} needs an input_dir")
    if isinstance(value, Dir) or (hasattr(value, "path") and hasattr(value, "url")):
        path, url = value.path, value.url
        if not path:
            raise ValueError(f"{who} needs a local path in {value!r} to write and cache chunks")
        return str(path), url
    text = os.fspath(value)
    if "://" in text:
        raise ValueError(f"{who} needs a local directory; for a remote dataset pass Dir(path=<local>, url={text!r})")
    return os.path.abspath(text), None
