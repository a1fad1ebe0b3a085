"""dataset_update on LitData 0.2.76's layout: the rewritten chunk keeps the dataset's layout (Arrow rows, framed
or per-sample zstd, whole-file zstd), the config stays as it was, and the dataset still reads (with the real
LitData 0.2.76 too, when that is the one installed)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamscope._core.errors import SchemaMismatchError
from streamscope.engine.update import dataset_update
from streamscope.processing import optimize
from tests.format.conftest import same
from tests.processing._read import read_samples


def _row(i: int) -> dict[str, Any]:
    return {"name": f"s{i}", "n": i, "text": "t" * (i % 5)}


def _arr(i: int) -> dict[str, Any]:
    return {"name": f"s{i}", "a": np.full((2, 3), i, dtype=np.int32)}


def _key(sample: dict[str, Any]) -> str:
    return sample["name"]


CASES = {
    "rows": (_row, {}),
    "rows_ipc_zstd": (_row, {"compression": "zstd"}),
    "framed": (_arr, {"compression": "zstd", "compression_batch_size": 2}),
    "sample_zstd": (_arr, {"compression": "zstd", "compression_level": "sample"}),
    "whole_zstd": (_arr, {"compression": "zstd", "compression_level": "chunk"}),
}


def _chunk_kind(data: bytes, name: str) -> str:
    if name.endswith(".zstd.bin"):
        return "whole"
    if data.startswith(b"LDFZ01\0\0"):
        return "framed"
    return "arrow" if data.endswith(b"LDARW01\0") else "classic"


def _kinds(d: str) -> list[str]:
    index = json.loads(Path(os.path.join(d, "index.json")).read_text())
    return [_chunk_kind(Path(os.path.join(d, c["filename"])).read_bytes(), c["filename"]) for c in index["chunks"]]


@pytest.mark.parametrize("case", list(CASES))
def test_update_keeps_the_0_2_76_layout(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    monkeypatch.setenv("STREAMSCOPE_WRITE_FORMAT", "0.2.76")
    fn, kw = CASES[case]
    d = str(tmp_path / "ds")
    optimize(fn, list(range(12)), d, chunk_size=5, num_workers=1, key_fn=_key, verbose=False, **kw)
    before = json.loads(Path(os.path.join(d, "index.json")).read_text())
    kinds = _kinds(d)
    new = {3: {**fn(103), "name": "s3"}, 11: {**fn(111), "name": "s11"}}  # same keys, other values
    with dataset_update(d) as update:
        for i, s in new.items():
            update[f"s{i}"] = s
        update.commit()
    after = json.loads(Path(os.path.join(d, "index.json")).read_text())
    assert after["config"] == before["config"]
    assert _kinds(d) == kinds and len(set(kinds)) == 1
    for entry in after["chunks"]:
        assert entry["chunk_bytes"] == os.path.getsize(os.path.join(d, entry["filename"])) or kinds[0] == "whole"
    want = [new.get(i, fn(i)) for i in range(12)]
    got = read_samples(d)
    assert all(same(a, b) for a, b in zip(got, want)) and len(got) == 12


def test_update_of_rows_with_other_fields_is_refused(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMSCOPE_WRITE_FORMAT", "0.2.76")
    d = str(tmp_path / "ds")
    optimize(_row, list(range(6)), d, chunk_size=5, num_workers=1, key_fn=_key, verbose=False)
    files = {n: Path(os.path.join(d, n)).read_bytes() for n in os.listdir(d) if n.endswith(".bin")}
    with dataset_update(d) as update:
        update["s1"] = {"name": "s1", "n": "not an int", "text": ""}
        with pytest.raises(SchemaMismatchError):
            update.commit()
    assert files == {n: Path(os.path.join(d, n)).read_bytes() for n in files}


@pytest.mark.interop
def test_litdata_0_2_76_reads_the_updated_chunks(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    litdata = pytest.importorskip("litdata")
    if tuple(int(p) for p in litdata.__version__.split(".")[:3]) < (0, 2, 76):
        pytest.skip(f"LitData {litdata.__version__} is not 0.2.76")
    monkeypatch.setenv("STREAMSCOPE_WRITE_FORMAT", "0.2.76")
    for case, (fn, kw) in CASES.items():
        d = str(tmp_path / case)
        optimize(fn, list(range(12)), d, chunk_size=5, num_workers=1, key_fn=_key, verbose=False, **kw)
        with dataset_update(d) as update:
            update["s7"] = {**fn(70), "name": "s7"}
            update.commit()
        ds = litdata.StreamingDataset(d)
        want = [{**fn(70), "name": "s7"} if i == 7 else fn(i) for i in range(12)]
        assert all(same(ds[i], want[i]) for i in range(12)), case
