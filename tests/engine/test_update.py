"""dataset_update: keyed in-place replaces, all-or-nothing commits, and what readers see afterwards."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from streamscope._core.errors import IndexNotFoundError, SampleKeyError, SchemaMismatchError, UpdateSessionError
from streamscope.engine.dataset import StreamingDataset
from streamscope.engine.key_lookup import build_keys_index
from streamscope.engine.update import dataset_update
from tests.engine._data import write_dataset


def _keyed(tmp_path: Any, compression: str | None = None, n: int = 25) -> str:
    d = write_dataset(str(tmp_path / "ds"), n, chunk_size=6, compression=compression)
    build_keys_index(d, lambda s: s["name"], verbose=False)
    return d


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_commit_replaces_samples_and_bumps_updated_at(tmp_path: Any, compression: str | None) -> None:
    d = _keyed(tmp_path, compression)
    before = json.loads(Path(os.path.join(d, "index.json")).read_text())
    with dataset_update(d) as update:
        update["s3"] = {"index": 300, "name": "s3"}
        update.replace("s20", {"index": 2000, "name": "s20"})
        update["s21"] = {"index": 2100, "name": "s21-new-longer-name"}
        update.commit()
    after = json.loads(Path(os.path.join(d, "index.json")).read_text())
    assert float(after["updated_at"]) > float(before["updated_at"])
    assert after["keys"] == before["keys"] and after["config"] == before["config"]
    assert [c["filename"] for c in after["chunks"]] == [c["filename"] for c in before["chunks"]]
    changed = [i for i, (a, b) in enumerate(zip(before["chunks"], after["chunks"])) if a != b]
    assert changed == [3]  # s21's longer name grows chunk 3; chunks 0 and 3 were rewritten
    if compression is None:  # chunk_bytes stays the uncompressed size (LitData records the file size)
        assert after["chunks"][3]["chunk_bytes"] == os.path.getsize(os.path.join(d, after["chunks"][3]["filename"]))
    ds = StreamingDataset(d, cache_dir=str(tmp_path / "cache"))
    got = [s["index"] for s in ds]
    expected = list(range(25))
    expected[3], expected[20], expected[21] = 300, 2000, 2100
    assert got == expected
    assert ds["s21"] == {"index": 2100, "name": "s21-new-longer-name"}


def test_exit_without_commit_discards(tmp_path: Any) -> None:
    d = _keyed(tmp_path)
    text = Path(os.path.join(d, "index.json")).read_text()
    with dataset_update(d) as update:
        update["s1"] = {"index": -1, "name": "s1"}
    assert Path(os.path.join(d, "index.json")).read_text() == text
    assert StreamingDataset(d)[1]["index"] == 1


def test_bad_updates_change_nothing(tmp_path: Any) -> None:
    d = _keyed(tmp_path)
    snapshot = {n: Path(os.path.join(d, n)).read_bytes() for n in os.listdir(d) if os.path.isfile(os.path.join(d, n))}
    with dataset_update(d) as update:
        update["s2"] = {"index": 5, "name": "ok"}
        update["nope"] = {"index": 1, "name": "x"}
        with pytest.raises(SampleKeyError, match="^Unknown dataset key: 'nope'"):  # LitData's sentence first
            update.commit()
    with dataset_update(d) as update:
        update["s2"] = {"index": 5, "name": "ok"}
        update["s13"] = {"name": "s13", "index": 13}  # keys in another order: another data_spec
        with pytest.raises(SchemaMismatchError, match="structure|data_spec"):
            update.commit()
    with dataset_update(d) as update:
        update["s4"] = {"index": "not an int", "name": "s4"}
        with pytest.raises(SchemaMismatchError):
            update.commit()
    after = {n: Path(os.path.join(d, n)).read_bytes() for n in os.listdir(d) if os.path.isfile(os.path.join(d, n))}
    assert after == snapshot
    assert not [n for n in os.listdir(d) if n.startswith(".update-")]


def test_session_rules_and_missing_pieces(tmp_path: Any) -> None:
    d = _keyed(tmp_path)
    with dataset_update(d) as update:
        update.commit()  # nothing staged: fine
        with pytest.raises(UpdateSessionError, match=r"^Cannot modify dataset_update after commit\(\)") as info:
            update["s1"] = {"index": 1, "name": "s1"}
        assert isinstance(info.value, RuntimeError)
        with pytest.raises(UpdateSessionError):
            update.commit()
    plain = write_dataset(str(tmp_path / "plain"), 5, chunk_size=5)
    with pytest.raises(IndexNotFoundError, match="keys/"):
        dataset_update(plain)
    with pytest.raises(IndexNotFoundError):
        dataset_update(str(tmp_path / "missing"))
    with pytest.raises(UpdateSessionError) as remote:
        dataset_update("s3://bucket/ds")
    assert isinstance(remote.value, NotImplementedError)
