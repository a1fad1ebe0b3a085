"""streamscope.cli: the ``cache path|clear`` commands (LitData's ``litdata cache``) and argument errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streamscope.cli import main


def test_cache_path_and_clear_use_the_cache_dir_knob(tmp_path, monkeypatch, capsys):
    root = tmp_path / "cache"
    (root / "ds").mkdir(parents=True)
    (root / "ds" / "chunk-0-0.bin").write_bytes(b"x")
    monkeypatch.setenv("LITDATA_CACHE_DIR", str(root))
    monkeypatch.delenv("STREAMSCOPE_CACHE_DIR", raising=False)
    assert main(["cache", "path"]) == 0
    assert capsys.readouterr().out == f"Default cache directory: {root}\n"
    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out == f"Cache directory '{root}' cleared.\n"
    assert not root.exists()
    assert main(["cache", "clear"]) == 0  # nothing there: still cleared


@pytest.mark.interop
def test_cache_output_matches_litdata(tmp_path):
    env = dict(os.environ, LITDATA_CACHE_DIR=str(tmp_path / "c"), LITDATA_DISABLE_VERSION_CHECK="1")
    env.pop("STREAMSCOPE_CACHE_DIR", None)
    out = {}
    for mod in ("litdata", "streamscope"):
        (tmp_path / "c").mkdir(exist_ok=True)
        runs = [
            subprocess.run([sys.executable, "-m", mod, "cache", a], env=env, capture_output=True, text=True)
            for a in ("path", "clear")
        ]
        out[mod] = [r.stdout for r in runs]
        assert not (tmp_path / "c").exists()
    assert out["litdata"] == out["streamscope"]


def test_unknown_cache_action_is_an_argument_error():
    with pytest.raises(SystemExit) as info:
        main(["cache", "wipe"])
    assert info.value.code == 2
