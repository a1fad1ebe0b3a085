"""Golden bytes of the chunk format (the 52-byte example of the format README)."""

from __future__ import annotations

import json
import os

from streamscope.format import ChunkFile, ChunkWriter, PyTreeLoader, dumps_index, load_index, write_index

GOLDEN_CHUNK = bytes.fromhex(
    "02000000" "10000000" "22000000" "34000000"
    "08000000" "02000000" "0000000000000000" "6869"
    "08000000" "02000000" "0100000000000000" "6869"
)  # fmt: skip

GOLDEN_INDEX = (
    '{"chunks": [{"chunk_bytes": 52, "chunk_size": 2, "dim": null, "filename": "chunk-0-0.bin"}], '
    '"config": {"chunk_bytes": 67108864, "chunk_size": null, "compression": null, "data_format": ["int", "str"], '
    '"data_spec": "[1, {\\"type\\": \\"builtins.dict\\", \\"context\\": \\"[\\\\\\"index\\\\\\", '
    '\\\\\\"text\\\\\\"]\\", \\"children_spec\\": [{\\"type\\": null, \\"context\\": null, \\"children_spec\\": []}, '
    '{\\"type\\": null, \\"context\\": null, \\"children_spec\\": []}]}]", "encryption": null, '
    '"item_loader": "PyTreeLoader"}, "updated_at": "1715000000.123"}'
)


def test_two_sample_chunk_is_byte_exact(tmp_path):
    w = ChunkWriter(str(tmp_path), chunk_bytes=1 << 26)
    assert w.config is None
    assert w.add_item(0, {"index": 0, "text": "hi"}) == []
    assert w.add_item(1, {"index": 1, "text": "hi"}) == []
    entries = w.done()
    assert entries == [{"chunk_bytes": 52, "chunk_size": 2, "dim": None, "filename": "chunk-0-0.bin"}]
    assert w.chunks == entries
    assert (tmp_path / "chunk-0-0.bin").read_bytes() == GOLDEN_CHUNK
    assert dumps_index(w.chunks, w.config, "1715000000.123") == GOLDEN_INDEX
    # no tmp files left behind
    assert sorted(os.listdir(tmp_path)) == ["chunk-0-0.bin"]


def test_golden_index_parses_and_round_trips(tmp_path):
    path = tmp_path / "index.json"
    path.write_text(GOLDEN_INDEX)
    idx = load_index(str(path))
    assert idx["config"]["data_format"] == ["int", "str"]
    write_index(str(tmp_path / "again.json"), idx["chunks"], idx["config"], idx["updated_at"])
    assert (tmp_path / "again.json").read_text() == GOLDEN_INDEX
    write_index(str(tmp_path / "now.json"), idx["chunks"], idx["config"])
    stamp = json.loads((tmp_path / "now.json").read_text())["updated_at"]
    assert float(stamp) > 1.7e9


def test_golden_chunk_reads_back(tmp_path):
    (tmp_path / "chunk-0-0.bin").write_bytes(GOLDEN_CHUNK)
    idx = load_index(GOLDEN_INDEX.encode())
    loader = PyTreeLoader()
    loader.setup(idx["config"])
    with ChunkFile(str(tmp_path / "chunk-0-0.bin"), expected_items=2) as cf:
        assert cf.num_items == 2
        assert [loader.decode(cf.item_view(i)) for i in range(2)] == [
            {"index": 0, "text": "hi"},
            {"index": 1, "text": "hi"},
        ]
