"""The one index merge (format/index.py ``merge_indexes``) and its users in format/: the rule is LitData 0.2.76's
(configs agree but for ``types``, which are fused; 0.2.68 configs, without ``types``, must be identical)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from streamscope import complete_dataset
from streamscope._core.errors import FormatError, SchemaMismatchError
from streamscope.format.index import load_partial_index, merge_indexes, merge_partial_indexes, write_partial_index

BODY = {"chunk_bytes": None, "chunk_size": 2, "compression": None, "data_format": ["int"]}


def _chunk(name: str) -> dict[str, Any]:
    return {"chunk_bytes": 1, "chunk_size": 1, "dim": None, "filename": name}


def test_existing_first_then_parts_in_the_order_given() -> None:
    existing = {"chunks": [_chunk("old")], "config": BODY}
    chunks, config = merge_indexes([("w0", [_chunk("a")], BODY), ("w1", [_chunk("b")], dict(BODY))], existing)
    assert [c["filename"] for c in chunks] == ["old", "a", "b"]
    assert config == BODY


def test_types_are_fused_other_keys_must_agree() -> None:
    a = {**BODY, "types": {"a": "int"}}
    b = {**BODY, "types": {"a": "int", "b": "str"}}
    _, config = merge_indexes([("0.index.json", [_chunk("a")], a), ("1.index.json", [_chunk("b")], b)])
    assert config == {**BODY, "types": {"a": "int", "b": {"optional": True, "type": "str"}}}
    with pytest.raises(SchemaMismatchError, match=r"^The config isn't consistent between chunks: 'w1' differs from "):
        merge_indexes([("w0", [_chunk("a")], a), ("w1", [_chunk("b")], {**b, "compression": "zstd"})])


def test_identical_configs_without_types_stay_without_types() -> None:
    _, config = merge_indexes([("w0", [_chunk("a")], BODY), ("w1", [_chunk("b")], dict(BODY))])
    assert config == BODY and "types" not in config
    with pytest.raises(SchemaMismatchError, match=r"'w1' differs from 'the existing dataset' in \['chunk_size'\]"):
        merge_indexes([("w1", [_chunk("b")], {**BODY, "chunk_size": 3})], {"chunks": [_chunk("old")], "config": BODY})


def test_a_part_without_chunks_adds_nothing_and_is_not_compared() -> None:
    chunks, config = merge_indexes(
        [("w0", [], None), ("w1", [], {**BODY, "chunk_size": 9}), ("w2", [_chunk("c")], BODY)]
    )
    assert [c["filename"] for c in chunks] == ["c"] and config == BODY
    assert merge_indexes([("w0", [], None)]) == ([], None)


def test_partial_files_with_fusable_types_merge(tmp_path: Any) -> None:
    write_partial_index(str(tmp_path), 0, [_chunk("chunk-0-0.bin")], {**BODY, "types": {"a": "int"}})
    write_partial_index(str(tmp_path), 1, [_chunk("chunk-1-0.bin")], {**BODY, "types": {"a": "int", "b": "str"}})
    merged = merge_partial_indexes(str(tmp_path))
    assert merged["config"]["types"] == {"a": "int", "b": {"optional": True, "type": "str"}}
    assert [c["filename"] for c in merged["chunks"]] == ["chunk-0-0.bin", "chunk-1-0.bin"]


def test_complete_dataset_uses_the_same_rule(tmp_path: Any) -> None:
    out = str(tmp_path)
    write_partial_index(out, 0, [_chunk("chunk-0-0.bin")], {**BODY, "types": {"a": "int"}})
    write_partial_index(out, 1, [_chunk("chunk-1-0.bin")], {**BODY, "types": {"a": "int", "b": "str"}})
    # a node of optimize() whose workers wrote nothing leaves an empty node index: nothing to add, not an error
    with open(os.path.join(out, "2-index.json"), "w") as f:
        json.dump({"chunks": [], "config": None}, f)
    complete_dataset(out)
    with open(os.path.join(out, "index.json")) as f:
        index = json.load(f)
    assert [c["filename"] for c in index["chunks"]] == ["chunk-0-0.bin", "chunk-1-0.bin"]
    assert index["config"]["types"] == {"a": "int", "b": {"optional": True, "type": "str"}}
    assert sorted(os.listdir(out)) == ["index.json"]


def test_load_partial_index_names_a_bad_file(tmp_path: Any) -> None:
    path = tmp_path / "0.index.json"
    path.write_text("{not json")
    with pytest.raises(FormatError, match=r"0\.index\.json.*not valid JSON"):
        load_partial_index(str(path))
