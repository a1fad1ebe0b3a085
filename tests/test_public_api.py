"""The public surface users switch to by changing one import."""

import pathlib
import re

import pytest

import streamscope

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_exported_names_are_exactly_the_documented_ones():
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    table = text.split("| name | what |", 1)[1].split("\n\n", 1)[0]
    documented = re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE)
    assert len(documented) == len(set(documented)), "docs/api.md lists a name twice"
    assert sorted(documented) == sorted(streamscope.__all__)
    assert streamscope.__all__ == sorted(streamscope.__all__)
    assert set(dir(streamscope)) >= set(streamscope.__all__)


def test_the_package_ships_py_typed():
    assert (ROOT / "src" / "streamscope" / "py.typed").is_file()


def test_lazy_import_does_not_pull_heavy_modules():
    import subprocess
    import sys

    code = "import sys, streamscope; print('torch' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_unknown_attribute_raises_attribute_error():
    with pytest.raises(AttributeError):
        streamscope.no_such_name  # noqa: B018


def test_dir_accepts_litdata_forms():
    from streamscope._core.dirs import as_dir
    from streamscope.streaming.resolver import Dir

    assert as_dir("s3://bucket/x") == Dir(url="s3://bucket/x")
    assert as_dir("/data/x") == Dir(path="/data/x")
    d = Dir(path="/a", url="s3://b")
    assert as_dir(d) is d


def test_enable_telemetry_is_public_and_loads_opentelemetry_only_when_called():
    import subprocess
    import sys

    code = (
        "import sys, streamscope; f = streamscope.enable_telemetry; "
        "print(callable(f), any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False"]
