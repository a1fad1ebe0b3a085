"""merge_datasets: same merged dataset as LitData's (chunks byte-identical), readable by both engines."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from streamscope import merge_datasets
from streamscope._core.errors import MergeDatasetsError
from tests.compat import _fns
from tests.compat.conftest import both, engine
from tests.support.litdata_version import LITDATA_076


def _write(out: str, fn: Any, n: int, **kwargs: Any) -> str:
    engine("streamscope").optimize(fn=fn, inputs=list(range(n)), output_dir=out, num_workers=1, verbose=False, **kwargs)
    return out


@pytest.fixture
def parts(tmp_path: Any) -> list[str]:
    return [
        _write(str(tmp_path / "a"), _fns.sample, 20, chunk_size=8),
        _write(str(tmp_path / "b"), _fns.shifted, 10, chunk_size=4),
    ]


def _files(d: str) -> dict[str, bytes]:
    return {f: Path(os.path.join(d, f)).read_bytes() for f in sorted(os.listdir(d)) if f != "index.json"}


@pytest.mark.interop
def test_merge_matches_litdata(parts: list[str], tmp_path: Any) -> None:
    def scenario(ld: Any) -> Any:
        out = str(tmp_path / f"merged-{ld.__name__}")
        ld.merge_datasets(parts, out)
        index = json.loads(Path(os.path.join(out, "index.json")).read_text())
        return _files(out), index["chunks"], index["config"]

    a, b = both(scenario)
    assert a == b
    assert sorted(a[0]) == [f"chunk-0-{i}.bin" for i in range(6)]


@pytest.mark.interop
def test_merged_dataset_reads_in_both_engines(parts: list[str], tmp_path: Any) -> None:
    out = str(tmp_path / "merged")
    merge_datasets(parts, out, max_workers=2)

    def scenario(ld: Any) -> Any:
        ds = ld.StreamingDataset(out)
        return len(ds), [s["index"] for s in ds]

    a, b = both(scenario)
    assert a == b == (30, list(range(20)) + list(range(1000, 1010)))


@pytest.mark.interop
def test_merge_compressed_keeps_suffix(tmp_path: Any) -> None:
    ins = [_write(str(tmp_path / n), _fns.pairs, 5, chunk_size=4, compression="zstd") for n in ("a", "b")]
    out = str(tmp_path / "m")
    merge_datasets(ins, out)
    # LitData 0.2.76's (framed) zstd chunks keep the plain .bin name; 0.2.68's whole-file zstd ones add .zstd
    suffix = ".bin" if LITDATA_076 else ".zstd.bin"
    assert sorted(_files(out)) == [f"chunk-0-{i}{suffix}" for i in range(6)]
    assert len(engine("litdata").StreamingDataset(out)) == 20


@pytest.mark.interop
def test_merge_rejects_what_litdata_rejects(parts: list[str], tmp_path: Any) -> None:
    def scenario(ld: Any) -> Any:
        errors = []
        for args in ([], [parts[0]], [*parts, str(tmp_path / "nope")], parts):
            out = parts[0] if args is parts else str(tmp_path / f"o-{ld.__name__}-{len(errors)}")
            try:
                ld.merge_datasets(args, out)
                errors.append(None)
            except ValueError:
                errors.append("ValueError")
        return errors

    a, b = both(scenario)
    assert a == b == ["ValueError"] * 4


def test_merge_refuses_existing_output_and_mismatched_inputs(parts: list[str], tmp_path: Any) -> None:
    out = str(tmp_path / "m")
    merge_datasets(parts, out)
    with pytest.raises(MergeDatasetsError, match="already contains"):
        merge_datasets(parts, out)
    z = _write(str(tmp_path / "z"), _fns.sample, 4, chunk_size=4, compression="zstd")
    with pytest.raises(MergeDatasetsError, match="compression"):
        merge_datasets([parts[0], z], str(tmp_path / "m2"))
    # same data_format list but another sample layout: LitData would merge and decode garbage
    other = _write(str(tmp_path / "p"), _fns.pairs, 4, chunk_size=4)
    with pytest.raises(MergeDatasetsError, match=r"data_(format|spec)"):
        merge_datasets([parts[0], other], str(tmp_path / "m3"))
    assert not os.path.exists(os.path.join(str(tmp_path / "m2"), "index.json"))


def test_failed_copy_leaves_no_dataset(parts: list[str], tmp_path: Any) -> None:
    os.remove(os.path.join(parts[1], "chunk-0-1.bin"))  # index still lists it
    out = str(tmp_path / "m")
    with pytest.raises(FileNotFoundError):
        merge_datasets(parts, out)
    assert not os.path.exists(os.path.join(out, "index.json"))
    leftovers = [f for f in os.listdir(out) if f.endswith(".bin")] if os.path.isdir(out) else []
    assert leftovers == []


def test_merge_into_s3(parts: list[str], s3_server: Any) -> None:
    """Local inputs, S3 output (LitData raises NotImplementedError for mixed locations)."""
    opts = s3_server.storage_options()
    url = s3_server.url("merged")
    merge_datasets(parts, url, storage_options=opts)
    ds = engine("streamscope").StreamingDataset(url, storage_options=opts)
    assert len(ds) == 30
