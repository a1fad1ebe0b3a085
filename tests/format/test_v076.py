"""Reading datasets written by the real LitData 0.2.76: framed zstd (LDFZ01), per-sample zstd, Arrow footer."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamscope._core.errors import CorruptChunkError, FormatError
from streamscope.format import PyTreeLoader, load_index, open_chunk_bytes, uncompressed_name
from streamscope.format.chunk import decompress_file
from tests.format.conftest import same

pytestmark = pytest.mark.interop

GEN = r"""
import os, sys
os.environ["LITDATA_DISABLE_VERSION_CHECK"] = "1"
import litdata
assert litdata.__version__ == "0.2.76", litdata.__version__
from litdata.streaming.writer import BinaryWriter
import numpy as np
out = sys.argv[1]

def tensors(i):
    return {"x": np.arange(i + 2, dtype=np.float32).reshape(1, -1), "i": i}

def rows(i):
    return {"index": i, "text": f"hi {i}", "score": i / 2, "ok": i % 2 == 0, "tags": ["a"] * (i % 3), "meta": {"k": i}}

def write(name, make, n, **kw):
    w = BinaryWriter(os.path.join(out, name), **kw)
    for i in range(n):
        w.add_item(i, make(i))
    w.done()
    w.merge()

write("framed", tensors, 12, chunk_size=5, compression="zstd")
write("framed_k2", tensors, 7, chunk_size=7, compression="zstd:7", compression_batch_size=2)
write("sample_zstd", tensors, 12, chunk_size=5, compression="zstd", compression_level="sample")
write("chunk_zstd", tensors, 12, chunk_size=5, compression="zstd", compression_level="chunk")
write("arrow", rows, 12, chunk_size=5)
write("arrow_ipc_zstd", rows, 9, chunk_size=4, compression="zstd")
"""


def _tensors(i: int) -> dict[str, Any]:
    return {"x": np.arange(i + 2, dtype=np.float32).reshape(1, -1), "i": i}


def _rows(i: int) -> dict[str, Any]:
    return {"index": i, "text": f"hi {i}", "score": i / 2, "ok": i % 2 == 0, "tags": ["a"] * (i % 3), "meta": {"k": i}}


def _litdata076() -> Path | None:
    """An unpacked litdata 0.2.76 (env STREAMSCOPE_LITDATA076_DIR, a cached copy, or a fresh pip download)."""
    env = os.environ.get("STREAMSCOPE_LITDATA076_DIR")
    if env:
        return Path(env) if (Path(env) / "litdata").is_dir() else None
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "streamscope-tests" / "litdata-0.2.76"
    if (cache / "litdata" / "__init__.py").exists():
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "litdata==0.2.76", "-d", str(cache)],
            check=True,
            capture_output=True,
            timeout=120,
        )
    except (subprocess.SubprocessError, OSError):
        return None
    wheels = list(cache.glob("litdata-0.2.76-*.whl"))
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(cache)
    return cache


@pytest.fixture(scope="module")
def v076(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pkg = _litdata076()
    if pkg is None:
        pytest.skip("litdata 0.2.76 is not available (pip download failed; set STREAMSCOPE_LITDATA076_DIR)")
    out = tmp_path_factory.mktemp("ld076")
    env = {**os.environ, "PYTHONPATH": f"{pkg}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", GEN, str(out)], env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        pytest.fail(f"litdata 0.2.76 writer failed:\n{proc.stderr[-3000:]}")
    return out


def read_all(d: Path) -> tuple[list[Any], set[str]]:
    idx = load_index(str(d))
    cfg = idx["config"]
    loader = PyTreeLoader()
    loader.setup(cfg)
    out, kinds = [], set()
    for entry in idx["chunks"]:
        path = str(d / entry["filename"])
        comp = cfg.get("compression")
        if comp and entry["filename"].endswith(f".{comp}.bin"):  # whole-file zstd (0.2.68 style)
            plain = str(d / uncompressed_name(entry["filename"], comp))
            decompress_file(path, plain, comp)
            path = plain
        chunk = open_chunk_bytes(path, cfg, expected_items=entry["chunk_size"])
        kinds.add(chunk.kind)
        out += [chunk.sample(i, loader) for i in range(chunk.num_items)]
    return out, kinds


@pytest.mark.parametrize(
    ("name", "n", "kind"),
    [
        ("framed", 12, "framed"),
        ("framed_k2", 7, "framed"),
        ("sample_zstd", 12, "sample_zstd"),
        ("chunk_zstd", 12, "classic"),
    ],
)
def test_read_076_zstd_layouts(v076: Path, name: str, n: int, kind: str) -> None:
    got, kinds = read_all(v076 / name)
    assert kinds == {kind}
    assert len(got) == n
    assert all(same(_tensors(i), g) for i, g in enumerate(got))


@pytest.mark.parametrize(("name", "n"), [("arrow", 12), ("arrow_ipc_zstd", 9)])
def test_read_076_arrow_footer(v076: Path, name: str, n: int) -> None:
    pytest.importorskip("pyarrow")
    got, kinds = read_all(v076 / name)
    assert kinds == {"arrow"}
    assert got == [_rows(i) for i in range(n)]


def test_framed_header_is_as_documented(v076: Path) -> None:
    raw = (v076 / "framed_k2" / "chunk-0-0.bin").read_bytes()
    assert raw[:8] == b"LDFZ01\0\0"
    chunk = open_chunk_bytes(raw, expected_items=7)
    assert chunk.kind == "framed" and chunk.num_items == 7
    assert len(chunk._frames) == 4  # ceil(7 / 2)


def test_truncated_framed_chunk(v076: Path) -> None:
    raw = (v076 / "framed" / "chunk-0-0.bin").read_bytes()
    with pytest.raises(CorruptChunkError, match="framed"):
        open_chunk_bytes(raw[:30])
    chunk = open_chunk_bytes(raw[:-5] + b"\0" * 5)  # corrupt the last zstd frame's tail
    with pytest.raises(CorruptChunkError):
        chunk.item_view(0)


def test_arrow_footer_without_pyarrow(v076: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = (v076 / "arrow" / "chunk-0-0.bin").read_bytes()
    chunk = open_chunk_bytes(raw)
    assert chunk.kind == "arrow"
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    with pytest.raises(FormatError, match="needs pyarrow"):
        chunk.sample(0, None)


@pytest.mark.parametrize("name", ["framed", "sample_zstd", "arrow"])
def test_open_chunk_picks_the_layout(v076: Path, name: str) -> None:
    from streamscope.format import open_chunk

    idx = load_index(str(v076 / name))
    entry = idx["chunks"][0]
    with open_chunk(str(v076 / name / entry["filename"]), idx["config"], entry["chunk_size"]) as chunk:
        assert chunk.kind == {"framed": "framed", "sample_zstd": "sample_zstd", "arrow": "arrow"}[name]
        assert chunk.num_items == entry["chunk_size"]
