"""Encryption (LitData framing, §2.7): keys, the writer, optimize and StreamingDataset, both ways with LitData 0.2.68.

Fernet tokens carry a random IV (and keys a random salt), so encrypted files are compared after decryption;
the index (chunk sizes, names, config) must be identical because Fernet's token length depends only on the
plaintext length.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamscope._core.errors import EncryptionError, OptimizeInputError
from streamscope.format.compression import decompress_bytes
from streamscope.format.encryption import decrypt_chunk
from streamscope.format.writer import ChunkWriter
from streamscope.utilities.encryption import EncryptionLevel, FernetEncryption, RSAEncryption
from tests.format.conftest import same
from tests.support.litdata_version import LITDATA_076

litdata_enc = pytest.importorskip("litdata.utilities.encryption")

pytestmark = pytest.mark.interop

LEVELS = ("sample", "chunk")


def _sample(i: int) -> dict[str, Any]:
    return {"index": i, "text": f"row {i}" * (i % 4), "arr": np.arange(i, i + 3, dtype=np.int32)}


def _fn(i: int) -> dict[str, Any]:  # optimize's fn (module level: picklable)
    return _sample(i)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    """Per level: (our FernetEncryption, LitData's FernetEncryption loaded from our saved key)."""
    d = tmp_path_factory.mktemp("keys")
    out = {}
    for level in LEVELS:
        ours = FernetEncryption("s3cret", level=level)
        ours.save(str(d / f"{level}.json"))
        out[level] = (ours, litdata_enc.FernetEncryption.load(str(d / f"{level}.json"), "s3cret"))
    return out


# --- keys ------------------------------------------------------------------------------------------------


def test_fernet_keys_interoperate(keys: dict[str, tuple[Any, Any]], tmp_path: Any) -> None:
    ours, theirs = keys["sample"]
    assert theirs.decrypt(ours.encrypt(b"hello")) == b"hello"
    assert ours.decrypt(theirs.encrypt(b"world")) == b"world"
    assert ours.state_dict() == theirs.state_dict() == {"algorithm": "fernet", "level": "sample"}
    # a key saved by LitData loads here
    lit = litdata_enc.FernetEncryption("pw2", level="chunk")
    lit.save(str(tmp_path / "lit.json"))
    mine = FernetEncryption.load(str(tmp_path / "lit.json"), "pw2")
    assert mine.level == EncryptionLevel.CHUNK
    assert mine.decrypt(lit.encrypt(b"x" * 1000)) == b"x" * 1000


def test_fernet_wrong_password_is_a_clear_error(keys: dict[str, tuple[Any, Any]], tmp_path: Any) -> None:
    ours, _ = keys["sample"]
    ours.save(str(tmp_path / "k.json"))
    wrong = FernetEncryption.load(str(tmp_path / "k.json"), "not the password")
    with pytest.raises(EncryptionError, match="wrong password"):
        wrong.decrypt(ours.encrypt(b"secret"))
    from cryptography.fernet import InvalidToken

    with pytest.raises(InvalidToken) as caught:  # what LitData's FernetEncryption raises
        wrong.decrypt(ours.encrypt(b"secret"))
    again = pickle.loads(pickle.dumps(caught.value))  # as a DataLoader worker's error reaches the main process
    assert isinstance(again, EncryptionError) and isinstance(again, InvalidToken) and "wrong password" in str(again)
    with pytest.raises(ValueError, match="`sample` or `chunk`"):
        FernetEncryption("pw", level="row")  # type: ignore[arg-type]


def test_rsa_keys_interoperate(tmp_path: Any) -> None:
    ours = RSAEncryption("pw", level="chunk")
    ours.save(str(tmp_path / "ours.json"))
    theirs = litdata_enc.RSAEncryption.load(str(tmp_path / "ours.json"), "pw")
    assert theirs.decrypt(ours.encrypt(b"tiny")) == b"tiny"
    lit = litdata_enc.RSAEncryption("pw")
    lit.save(str(tmp_path / "lit.json"))
    mine = RSAEncryption.load(str(tmp_path / "lit.json"), "pw")
    assert mine.decrypt(lit.encrypt(b"abc")) == b"abc"
    assert mine.state_dict() == {"algorithm": "rsa", "level": "sample"}
    with pytest.raises(EncryptionError, match="190 bytes"):
        ours.encrypt(b"x" * 191)


# --- the writer --------------------------------------------------------------------------------------------


def _write_ours(out: str, samples: list[Any], **kw: Any) -> tuple[list[dict], dict]:
    if kw.get("encryption") is not None:
        kw.update(_encrypted_zstd_076(kw.get("compression")))
    # the layout of the LitData under test (the format layer writes what it is told)
    w = ChunkWriter(out, write_format="0.2.76" if LITDATA_076 else "0.2.68", **kw)
    for i, s in enumerate(samples):
        w.add_item(i, s)
    w.done()
    assert w.config is not None
    return w.chunks, w.config


def _encrypted_zstd_076(compression: str | None) -> dict[str, Any]:
    """Under LitData 0.2.76 (and the 0.2.76 layout its pass writes), encrypted zstd needs compression_level
    "chunk": its default "batch" frames refuse encryption, in both engines."""
    return {"compression_level": "chunk"} if LITDATA_076 and compression else {}


def _write_litdata(out: str, samples: list[Any], **kw: Any) -> dict[str, Any]:
    from litdata.streaming.writer import BinaryWriter

    if kw.get("encryption") is not None:
        kw.update(_encrypted_zstd_076(kw.get("compression")))
    w = BinaryWriter(out, **kw)
    for i, s in enumerate(samples):
        w.add_item(i, s)
    w.done()
    w.merge()
    with open(os.path.join(out, "index.json")) as f:
        return json.load(f)


def _plain_bytes(path: str, enc: Any, level: str, compression: str | None) -> bytes:
    data = Path(path).read_bytes()
    if compression:
        data = decompress_bytes(data, compression)
    return decrypt_chunk(data, enc, level, os.path.basename(path))


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("level", LEVELS)
def test_writer_matches_litdata_after_decryption(
    keys: dict[str, tuple[Any, Any]], tmp_path: Any, level: str, compression: str | None
) -> None:
    ours_key, their_key = keys[level]
    samples = [_sample(i) for i in range(23)]
    kw = {"chunk_bytes": 700, "compression": compression}
    chunks, config = _write_ours(str(tmp_path / "ours"), samples, encryption=ours_key, **kw)
    lit = _write_litdata(str(tmp_path / "lit"), samples, encryption=their_key, **kw)
    assert chunks == lit["chunks"]  # same sizes (Fernet token length is deterministic), names and counts
    assert config == lit["config"]
    assert config["encryption"] == {"algorithm": "fernet", "level": level}
    plain_chunks, _ = _write_ours(str(tmp_path / "plain"), samples, chunk_bytes=700)
    if level == "chunk":  # chunk level does not change the chunking
        assert [c["chunk_size"] for c in plain_chunks] == [c["chunk_size"] for c in chunks]
    for c in chunks:
        a = _plain_bytes(str(tmp_path / "ours" / c["filename"]), ours_key, level, compression)
        b = _plain_bytes(str(tmp_path / "lit" / c["filename"]), ours_key, level, compression)
        assert a == b  # decrypted with one key: both engines encrypted the same plaintext
    if level == "chunk":
        for c, p in zip(chunks, plain_chunks):
            plain = Path(tmp_path / "plain" / p["filename"]).read_bytes()
            assert _plain_bytes(str(tmp_path / "ours" / c["filename"]), ours_key, level, compression) == plain


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(st.one_of(st.integers(-(2**40), 2**40), st.text(max_size=30)), min_size=1, max_size=12))
def test_sample_level_items_decrypt_to_the_plain_chunk(
    keys: dict[str, tuple[Any, Any]], tmp_path_factory: pytest.TempPathFactory, items: list[Any]
) -> None:
    kinds = {type(x) for x in items}
    if len(kinds) > 1:  # one leaf type per dataset
        items = [x for x in items if isinstance(x, type(items[0]))]
    d = tmp_path_factory.mktemp("hyp")
    enc_chunks, _ = _write_ours(str(d / "enc"), items, chunk_size=4, encryption=keys["sample"][0])
    plain_chunks, _ = _write_ours(str(d / "plain"), items, chunk_size=4)
    assert [c["chunk_size"] for c in enc_chunks] == [c["chunk_size"] for c in plain_chunks]
    for e, p in zip(enc_chunks, plain_chunks):
        got = _plain_bytes(str(d / "enc" / e["filename"]), keys["sample"][0], "sample", None)
        assert got == Path(d / "plain" / p["filename"]).read_bytes()


def test_tampered_sample_names_chunk_and_item(keys: dict[str, tuple[Any, Any]], tmp_path: Any) -> None:
    chunks, _ = _write_ours(str(tmp_path), [_sample(i) for i in range(6)], chunk_size=3, encryption=keys["sample"][0])
    path = tmp_path / chunks[1]["filename"]
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01  # inside the last item's token
    with pytest.raises(EncryptionError, match=r"chunk 'chunk-0-1.bin' item 2"):
        decrypt_chunk(bytes(data), keys["sample"][0], "sample", "chunk-0-1.bin")


# --- optimize / StreamingDataset, both ways ---------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("level", LEVELS)
def test_litdata_reads_streamscope_optimize(
    keys: dict[str, tuple[Any, Any]], tmp_path: Any, level: str, compression: str | None
) -> None:
    import litdata

    import streamscope

    ours_key, their_key = keys[level]
    out = str(tmp_path / "ds")
    streamscope.optimize(
        fn=_fn, inputs=list(range(30)), output_dir=out, chunk_size=7, num_workers=2,
        compression=compression, encryption=ours_key, verbose=False, **_encrypted_zstd_076(compression),
    )  # fmt: skip
    ds = litdata.StreamingDataset(out, encryption=their_key, cache_dir=str(tmp_path / "cache"))
    assert len(ds) == 30
    for i in range(30):
        assert same(ds[i], _sample(i))


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("level", LEVELS)
def test_streamscope_reads_litdata_writer(
    keys: dict[str, tuple[Any, Any]], tmp_path: Any, level: str, compression: str | None
) -> None:
    import streamscope

    ours_key, their_key = keys[level]
    out = str(tmp_path / "ds")
    _write_litdata(out, [_sample(i) for i in range(30)], chunk_size=7, compression=compression, encryption=their_key)
    ds = streamscope.StreamingDataset(out, encryption=ours_key, cache_dir=str(tmp_path / "cache"))
    assert len(ds) == 30
    assert all(same(ds[i], _sample(i)) for i in range(30))
    seen = [int(i) for b in streamscope.StreamingDataLoader(ds, batch_size=4) for i in b["index"]]
    assert seen == list(range(30))


def test_encrypted_dataset_through_worker_processes(keys: dict[str, tuple[Any, Any]], tmp_path: Any) -> None:
    import streamscope

    ours_key, their_key = keys["chunk"]
    out = str(tmp_path / "ds")
    _write_litdata(out, [_sample(i) for i in range(40)], chunk_size=6, compression="zstd", encryption=their_key)
    ds = streamscope.StreamingDataset(out, encryption=ours_key, cache_dir=str(tmp_path / "cache"), shuffle=True)
    loader = streamscope.StreamingDataLoader(ds, batch_size=5, num_workers=2)
    assert sorted(int(i) for b in loader for i in b["index"]) == list(range(40))


def test_reader_refuses_missing_or_mismatched_keys(keys: dict[str, tuple[Any, Any]], tmp_path: Any) -> None:
    import streamscope

    enc_dir = str(tmp_path / "enc")
    _write_litdata(enc_dir, [_sample(i) for i in range(5)], chunk_size=2, encryption=keys["sample"][1])
    no_key = streamscope.StreamingDataset(enc_dir, cache_dir=str(tmp_path / "c1"))  # built, as in LitData
    assert len(no_key) == 5
    with pytest.raises(EncryptionError, match="is encrypted .*pass encryption="):
        no_key[0]  # reading it is the error
    with pytest.raises(EncryptionError, match="is encrypted .*pass encryption="):
        next(iter(no_key))
    other_level = streamscope.StreamingDataset(enc_dir, encryption=keys["chunk"][0], cache_dir=str(tmp_path / "c2"))
    assert len(other_level) == 5
    with pytest.raises(EncryptionError, match="level 'sample'"):
        other_level[0]
    plain_dir = str(tmp_path / "plain")
    _write_litdata(plain_dir, [_sample(i) for i in range(5)], chunk_size=2)
    with pytest.raises(EncryptionError, match="is not encrypted"):
        streamscope.StreamingDataset(plain_dir, encryption=keys["chunk"][0], cache_dir=str(tmp_path / "c3"))[0]
    from cryptography.fernet import InvalidToken

    ours, _ = keys["sample"]
    ours.save(str(tmp_path / "k.json"))
    wrong = streamscope.StreamingDataset(
        enc_dir, encryption=FernetEncryption.load(str(tmp_path / "k.json"), "wrong"), cache_dir=str(tmp_path / "c4")
    )
    with pytest.raises(InvalidToken, match="wrong password"):  # its type kept until the read
        wrong[0]


def test_optimize_refuses_what_cannot_be_read(keys: dict[str, tuple[Any, Any]], tmp_path: Any) -> None:
    import streamscope
    from streamscope.streaming.item_loader import TokensLoader

    with pytest.raises(OptimizeInputError, match="TokensLoader"):
        streamscope.optimize(
            fn=_fn, inputs=[1], output_dir=str(tmp_path / "a"), chunk_size=10, item_loader=TokensLoader(),
            encryption=keys["sample"][0], verbose=False,
        )  # fmt: skip
    with pytest.raises(OptimizeInputError, match="FernetEncryption/RSAEncryption"):
        streamscope.optimize(
            fn=_fn, inputs=[1], output_dir=str(tmp_path / "b"), chunk_size=10, encryption="fernet", verbose=False
        )
    assert not os.path.exists(tmp_path / "a" / "index.json") and not os.path.exists(tmp_path / "b" / "index.json")


@pytest.mark.slow  # a fresh interpreter (torch import) plus two key derivations
def test_decrypted_copy_is_private_and_removed_at_exit(keys: dict[str, tuple[Any, Any]], tmp_path: Any) -> None:
    ours_key, their_key = keys["chunk"]
    out = str(tmp_path / "ds")
    _write_litdata(out, [_sample(i) for i in range(5)], chunk_size=2, encryption=their_key)
    ours_key.save(str(tmp_path / "key.json"))
    cache = tmp_path / "cache"
    code = (
        "import os, sys, streamscope\n"
        "from streamscope.utilities.encryption import FernetEncryption\n"
        "key = FernetEncryption.load(sys.argv[2], 'pw'.replace('pw', 's3cret'))\n"
        "ds = streamscope.StreamingDataset(sys.argv[1], encryption=key, cache_dir=sys.argv[3])\n"
        "print(ds[4]['index'], oct(os.stat(ds._plain_dir).st_mode & 0o777), os.path.isdir(ds._plain_dir))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, out, str(tmp_path / "key.json"), str(cache)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert res.stdout.split() == ["4", "0o700", "True"]
    assert [p for p in os.listdir(cache) if p.startswith("decrypted-")] == []


def test_encrypted_dataset_on_s3(keys: dict[str, tuple[Any, Any]], tmp_path: Any, s3_server: Any) -> None:
    import streamscope

    ours_key, _ = keys["sample"]
    url, opts = s3_server.url("enc"), s3_server.storage_options()
    streamscope.optimize(
        fn=_fn, inputs=list(range(12)), output_dir=url, chunk_size=5, num_workers=1, compression="zstd",
        encryption=ours_key, storage_options=opts, verbose=False, **_encrypted_zstd_076("zstd"),
    )  # fmt: skip
    ds = streamscope.StreamingDataset(url, encryption=ours_key, storage_options=opts, cache_dir=str(tmp_path / "c"))
    assert all(same(ds[i], _sample(i)) for i in range(12))
