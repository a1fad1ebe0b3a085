"""The format layer on chunks written by the real LitData 0.2.76: framed zstd (LDFZ01), per-sample zstd, whole-file
zstd and Arrow footers (LDARW01), and the errors for damaged ones."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamscope._core.errors import CorruptChunkError, FormatError, MissingDependencyError
from streamscope.format import PyTreeLoader, load_index
from streamscope.format.arrowchunk import ArrowChunk
from streamscope.format.chunk import decompress_file, open_chunk_file
from streamscope.format.v076 import V076Chunk, decrypt_to_classic, open_chunk_bytes, prepare_chunk_file
from tests.format.conftest import same
from tests.support import chunk_damage, ld076_datasets
from tests.support.litdata076 import expected

pytest.importorskip("pyarrow")


def _read(d: Path, tmp: Path) -> tuple[list[Any], set[str]]:
    """Every sample of dataset ``d`` through prepare_chunk_file + open_chunk_file; and the chunk kinds seen."""
    idx = load_index(str(d))
    cfg = idx["config"]
    loader = PyTreeLoader()
    loader.setup(cfg)
    out: list[Any] = []
    kinds = set()
    for entry in idx["chunks"]:
        plain = str(tmp / f"plain-{entry['filename']}")
        prepare_chunk_file(str(d / entry["filename"]), plain, cfg)
        chunk = open_chunk_file(plain, entry["chunk_size"])
        kinds.add(chunk.kind)
        out += [chunk.sample(i, loader) for i in range(chunk.num_items)]
        chunk.close()
    return out, kinds


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("tens_zstd", "classic"),
        ("tens_zstd_k2", "classic"),
        ("tens_zstd_sample", "classic"),
        ("tens_zstd_chunk", "classic"),
        ("fixed_zstd", "classic"),
        ("tens", "classic"),
        ("plain", "arrow"),
        ("rows", "arrow"),
        ("rows_ipc_zstd", "arrow"),
        ("opt", "arrow"),
        ("bytes", "arrow"),
        ("nested", "classic"),
    ],
)
def test_every_layout_reads_as_litdata_076_reads_it(ld076_data: Path, tmp_path: Path, name: str, kind: str) -> None:
    got, kinds = _read(ld076_data / name, tmp_path)
    assert kinds == {kind}
    want = expected(name)
    assert len(got) == len(want)
    assert all(same(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("name", ["tens_zstd", "tens_zstd_sample", "tens_zstd_chunk"])
def test_prepared_chunks_are_the_classic_chunks_byte_for_byte(ld076_data: Path, tmp_path: Path, name: str) -> None:
    """The zstd layouts wrap the classic bytes: undone, they equal the uncompressed dataset's chunks."""
    for comp, plain in zip(
        load_index(str(ld076_data / name))["chunks"], load_index(str(ld076_data / "tens"))["chunks"]
    ):
        out = tmp_path / plain["filename"]
        layout = prepare_chunk_file(
            str(ld076_data / name / comp["filename"]),
            str(out),
            {"compression_level": None if name.endswith("chunk") else name.rsplit("_", 1)[-1]},
        )
        assert layout == {"tens_zstd": "framed", "tens_zstd_sample": "sample_zstd", "tens_zstd_chunk": "zstd"}[name]
        assert out.read_bytes() == (ld076_data / "tens" / plain["filename"]).read_bytes()


def test_decompress_file_handles_every_zstd_layout(ld076_data: Path, tmp_path: Path) -> None:
    """The format's one entry point for compressed chunks (used by keys and update) takes the 0.2.76 layouts."""
    for name in ("tens_zstd", "tens_zstd_sample"):
        cfg = load_index(str(ld076_data / name))["config"]
        src = ld076_data / name / "chunk-0-0.bin"
        decompress_file(str(src), str(tmp_path / name), "zstd", config=cfg)
        assert (tmp_path / name).read_bytes() == (ld076_data / "tens" / "chunk-0-0.bin").read_bytes()


@pytest.mark.parametrize(
    ("name", "cls", "kind"),
    [
        ("tens_zstd", V076Chunk, "framed"),
        ("tens_zstd_sample", V076Chunk, "sample_zstd"),
        ("rows", ArrowChunk, "arrow"),
        ("tens", V076Chunk, "classic"),
    ],
)
def test_open_chunk_picks_the_layout(ld076_data: Path, name: str, cls: type, kind: str) -> None:
    """Unprepared files open too (the zstd layouts in memory)."""
    idx = load_index(str(ld076_data / name))
    loader = PyTreeLoader()
    loader.setup(idx["config"])
    entry = idx["chunks"][0]
    with open_chunk_bytes(str(ld076_data / name / entry["filename"]), idx["config"], entry["chunk_size"]) as chunk:
        assert isinstance(chunk, cls) and chunk.kind == kind
        got = [chunk.sample(i, loader) for i in range(chunk.num_items)]
    assert all(same(a, b) for a, b in zip(got, expected(name)))


def test_framed_frames_follow_compression_batch_size(ld076_data: Path) -> None:
    raw = (ld076_data / "tens_zstd_k2" / "chunk-0-0.bin").read_bytes()
    assert raw[:8] == b"LDFZ01\0\0"
    chunk = open_chunk_bytes(raw, {"compression_level": "batch"}, expected_items=7)
    assert chunk.kind == "framed" and chunk.num_items == 7
    assert len(chunk._layout.frames) == 4  # ceil(7 / 2)
    loader = PyTreeLoader()
    loader.setup(load_index(str(ld076_data / "tens_zstd_k2"))["config"])
    order = [6, 0, 3, 3, 5, 1]  # jumps between frames
    assert all(same(chunk.sample(i, loader), ld076_datasets.tens(i)) for i in order)


def test_arrow_rows_in_any_order(ld076_data: Path) -> None:
    """Rows across the 256-row record batches, read in order, backwards and at random, and taken in bulk."""
    want = expected("rows")[:300]
    path = str(ld076_data / "rows" / "chunk-0-0.bin")
    with open_chunk_file(path, 300) as chunk:
        assert isinstance(chunk, ArrowChunk) and chunk.num_items == 300
        assert [chunk.sample(i) for i in range(300)] == want
        assert [chunk.sample(i) for i in reversed(range(300))] == want[::-1]
        order = np.random.default_rng(0).permutation(300)
        assert [chunk.sample(int(i)) for i in order] == [want[i] for i in order]
        assert chunk.rows(order[:50]) == [want[i] for i in order[:50]]
        assert chunk.rows(np.array([299, 0, 256, 255])) == [want[i] for i in (299, 0, 256, 255)]


def test_arrow_footer_behind_full_items_wins(ld076: Any, tmp_path: Path) -> None:
    """A chunk holding its items AND a footer: LitData returns the footer's rows; so does the reader."""
    samples = [ld076_datasets.plain(i) for i in range(5)]
    classic = ld076.call("tests.support.ld076_datasets.classic_chunk", samples)
    full = ld076.call("litdata.streaming.item_loader.append_arrow_row_footer", classic, samples)
    assert full.startswith(classic) and full[-8:] == b"LDARW01\0"
    path = tmp_path / "chunk-0-0.bin"
    path.write_bytes(full)
    with open_chunk_file(str(path), 5) as chunk:
        assert chunk.kind == "arrow"
        assert [chunk.sample(i) for i in range(5)] == samples
    (tmp_path / "classic.bin").write_bytes(classic)
    loader = PyTreeLoader()
    loader.setup({"data_format": ["str", "int", "str"], "data_spec": None})
    with open_chunk_file(str(tmp_path / "classic.bin"), 5) as chunk:  # the same items without the footer
        assert chunk.kind == "classic"
        assert [chunk.sample(i, loader) for i in range(5)] == [list(s.values()) for s in samples]


def test_arrow_footer_without_pyarrow(ld076_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(ld076_data / "plain" / "chunk-0-0.bin")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    with pytest.raises(
        MissingDependencyError, match=r'chunk-0-0\.bin.*needs pyarrow.*pip install "streamscope\[arrow\]"'
    ):
        open_chunk_file(path, 5)


@pytest.mark.parametrize("level", ["chunk", "sample"])
@pytest.mark.parametrize("kind", ["tens", "plain"])
@pytest.mark.parametrize("zstd", [False, True])
def test_decrypt_to_classic(ld076_data: Path, level: str, kind: str, zstd: bool) -> None:
    from streamscope.utilities.encryption import FernetEncryption

    name = f"enc_{level}_{kind}" + ("_zstd" if zstd else "")
    idx = load_index(str(ld076_data / name))
    key = FernetEncryption.load(str(ld076_data / name / "key.json"), ld076_datasets.PASSWORD)
    loader = PyTreeLoader()
    loader.setup(idx["config"])
    got = []
    for entry in idx["chunks"]:
        raw = (ld076_data / name / entry["filename"]).read_bytes()
        plain = decrypt_to_classic(raw, key, level, entry["filename"], idx["config"])
        chunk = open_chunk_bytes(plain, idx["config"], entry["chunk_size"])
        got += [chunk.sample(i, loader) for i in range(chunk.num_items)]
    make = getattr(ld076_datasets, kind)
    assert all(same(g, make(i)) for i, g in enumerate(got)) and len(got) == 12


# --- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", sorted(chunk_damage.ARROW))
@pytest.mark.parametrize("name", ["plain", "rows_ipc_zstd"])
def test_damaged_arrow_footer_is_named(ld076_data: Path, tmp_path: Path, how: str, name: str) -> None:
    raw = (ld076_data / name / "chunk-0-0.bin").read_bytes()
    bad, words = chunk_damage.ARROW[how](raw)
    path = tmp_path / "chunk-0-0.bin"
    path.write_bytes(bad)
    n = load_index(str(ld076_data / name))["chunks"][0]["chunk_size"]
    with pytest.raises(FormatError, match=words) as err:
        with open_chunk_file(str(path), n) as chunk:
            [chunk.sample(i) for i in range(n)]
    assert "chunk-0-0.bin" in str(err.value)
    with pytest.raises(FormatError, match=words):
        open_chunk_bytes(bad, None, n).sample(0, None)


@pytest.mark.parametrize("how", sorted(chunk_damage.FRAMED))
def test_damaged_framed_chunk_is_named(ld076_data: Path, tmp_path: Path, how: str) -> None:
    raw = (ld076_data / "tens_zstd_k2" / "chunk-0-0.bin").read_bytes()
    bad, words = chunk_damage.FRAMED[how](raw)
    src = tmp_path / "chunk-0-0.bin"
    src.write_bytes(bad)
    cfg = load_index(str(ld076_data / "tens_zstd_k2"))["config"]
    with pytest.raises(FormatError, match=words) as err:
        prepare_chunk_file(str(src), str(tmp_path / "out.bin"), cfg)
    assert "chunk-0-0.bin" in str(err.value)
    assert not (tmp_path / "out.bin").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chunk-0-0.bin"]  # no temporary file left behind
    loader = PyTreeLoader()
    loader.setup(cfg)
    with pytest.raises(FormatError, match=words):  # read in memory: at open, or at the first item of the frame
        open_chunk_bytes(bad, cfg, 7).sample(0, loader)


def test_frames_that_do_not_tile_the_items(ld076_data: Path) -> None:
    import struct

    raw = bytearray((ld076_data / "tens_zstd_k2" / "chunk-0-0.bin").read_bytes())
    pos = 24 + 4 * 8 + 24  # frame 1's record
    first, cnt, coff, clen, ulen = struct.unpack_from("<IIQII", raw, pos)
    struct.pack_into("<IIQII", raw, pos, first + 1, cnt, coff, clen, ulen)
    with pytest.raises(CorruptChunkError, match="frame 1 .* holds items 3..4, expected to start at item 2"):
        open_chunk_bytes(bytes(raw), None, 7)
    raw = bytearray((ld076_data / "tens_zstd_k2" / "chunk-0-0.bin").read_bytes())
    struct.pack_into("<IIQII", raw, pos, first, cnt, coff, clen, ulen + 1)
    with pytest.raises(CorruptChunkError, match="inflates to"):
        open_chunk_bytes(bytes(raw), None, 7)


def test_item_count_against_the_index(ld076_data: Path) -> None:
    with pytest.raises(CorruptChunkError, match="chunk_size=6"):
        open_chunk_file(str(ld076_data / "plain" / "chunk-0-0.bin"), 6)
    with pytest.raises(CorruptChunkError, match="chunk_size=6"):
        open_chunk_bytes((ld076_data / "tens_zstd" / "chunk-0-0.bin").read_bytes(), None, 6)


@pytest.mark.parametrize("name", ["tens_zstd", "tens_zstd_sample"])
def test_normalising_is_a_decompress_span(ld076_data: Path, tmp_path: Path, name: str) -> None:
    import os

    from streamscope import events as ev

    cfg = load_index(str(ld076_data / name))["config"]
    ev.drain()
    ev.ACTIVE.add("decompress")
    try:
        prepare_chunk_file(str(ld076_data / name / "chunk-0-0.bin"), str(tmp_path / "out.bin"), cfg)
    finally:
        ev.ACTIVE.discard("decompress")
    events = [e for e in ev.drain() if e[2] == "decompress"]
    assert [e[0] for e in events] == ["B", "E"]
    assert events[1][6]["bytes"] == os.path.getsize(tmp_path / "out.bin")
