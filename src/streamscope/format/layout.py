"""Which layout a dataset is written in, and what the index ``config`` of its writers must agree on.

``write_format`` "0.2.68" is LitData 0.2.68's layout, "0.2.76" LitData 0.2.76's (:mod:`.writer` describes both);
a dataset's index tells its layout by 0.2.76's config keys. The ``config`` of every writer of one dataset (its
workers, an append) must be equal but for ``types``, which are fused.
"""

from __future__ import annotations

from typing import Any

from streamscope._core import config as cfg
from streamscope._core.errors import ConfigError
from streamscope.format import schema as sch

__all__ = ["V076_CONFIG_KEYS", "config_body", "fuse_configs", "layout_of", "resolve_write_format"]

#: the keys a LitData 0.2.76 writer adds to ``config`` (their presence tells the layout of a dataset)
V076_CONFIG_KEYS = ("compression_batch_size", "compression_level", "ipc_compression", "types")


def resolve_write_format(value: str | None = None) -> str:
    """``value`` checked, or the ``write_format`` knob when None.

    Raises:
        ConfigError: not a known layout (the knob's environment variable is named when it is the source).
    """
    raw = cfg.get("write_format") if value is None else value
    try:
        return cfg.parse_write_format(raw)
    except ValueError as exc:
        where = "write_format" if value is not None else "the write_format knob (STREAMSCOPE_WRITE_FORMAT)"
        raise ConfigError(f"{where}: {exc}") from None


def layout_of(config: dict[str, Any] | None) -> str:
    """The ``write_format`` a dataset's index ``config`` was written in: "0.2.76" when it has any of 0.2.76's keys."""
    return "0.2.76" if config and any(k in config for k in V076_CONFIG_KEYS) else "0.2.68"


def config_body(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without ``types``: what the workers of one dataset (and an append) must agree on."""
    return {k: v for k, v in config.items() if k != "types"}


def fuse_configs(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any] | None:
    """``base`` with ``other``'s ``types`` fused in, or None when their bodies differ (LitData 0.2.76's merge).

    Configs without ``types`` (LitData 0.2.68's) must be equal, and stay without it.
    """
    if config_body(base) != config_body(other):
        return None
    if "types" not in base and "types" not in other:
        return base
    return {**base, "types": sch.fuse_schema_json(base.get("types"), other.get("types"))}
