"""The layout rules of format/layout.py: telling a dataset's layout from its index config, fusing the configs of
the writers of one dataset."""

from __future__ import annotations

import pytest

from streamscope._core import config as cfg
from streamscope._core.errors import ConfigError
from streamscope.format.layout import V076_CONFIG_KEYS, config_body, fuse_configs, layout_of, resolve_write_format


def test_fuse_configs_ignores_types_and_fuses_them() -> None:
    a = {"data_format": ["int"], "compression": None, "types": {"a": "int"}}
    b = {"data_format": ["int"], "compression": None, "types": {"a": "int", "b": "str"}}
    assert fuse_configs(a, b) == {**a, "types": {"a": "int", "b": {"optional": True, "type": "str"}}}
    assert fuse_configs(a, {**b, "compression": "zstd"}) is None
    plain = {"data_format": ["int"], "compression": None}
    assert fuse_configs(plain, dict(plain)) == plain  # 0.2.68 configs stay without types
    new = {**a, "compression_level": None, "compression_batch_size": None, "ipc_compression": None}
    assert fuse_configs(plain, new) is None  # another layout


def test_layout_of_tells_the_layout_by_any_0_2_76_key() -> None:
    assert layout_of(None) == "0.2.68" and layout_of({}) == "0.2.68"
    assert layout_of({"data_format": ["int"], "compression": None}) == "0.2.68"
    for key in V076_CONFIG_KEYS:
        assert layout_of({"data_format": ["int"], key: None}) == "0.2.76", key


def test_config_body_drops_only_types() -> None:
    config = {"data_format": ["int"], "compression": None, "types": {"a": "int"}}
    assert config_body(config) == {"data_format": ["int"], "compression": None}
    assert config["types"] == {"a": "int"}  # the config given is left as it is


def test_resolve_write_format_names_where_a_bad_value_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_write_format(" 0.2.68 ") == "0.2.68"
    with pytest.raises(ConfigError, match=r"^write_format: expected one of 0\.2\.76, 0\.2\.68, got '0\.3'"):
        resolve_write_format("0.3")
    monkeypatch.setenv("STREAMSCOPE_WRITE_FORMAT", "0.2.68")
    assert resolve_write_format() == "0.2.68"
    cfg.set_value("write_format", "0.2.76")
    try:
        assert resolve_write_format() == "0.2.76"
    finally:
        cfg.reset("write_format")
