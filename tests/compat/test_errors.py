"""Bad input raises an exception that LitData users' ``except`` clauses catch (same builtin type or a subclass).

streamscope may be stricter in message and class (its errors also derive from StreamscopeError) and more
lenient where LitData rejects something harmless (documented per case below), but never raises an exception
that an ``except <LitData's type>`` would miss.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.compat import _fns
from tests.compat.conftest import engine


def _raised(f: Callable[[], Any]) -> type[BaseException] | None:
    try:
        f()
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        return type(exc)
    return None


CASES: dict[str, Callable[[Any, str, str], Any]] = {
    "missing input_dir": lambda ld, d, tmp: ld.StreamingDataset(os.path.join(tmp, "nope")),
    "shuffle not a bool": lambda ld, d, tmp: ld.StreamingDataset(d, shuffle="yes"),
    "subsample 0": lambda ld, d, tmp: ld.StreamingDataset(d, subsample=0.0),
    "optimize chunk_size and chunk_bytes": lambda ld, d, tmp: ld.optimize(
        fn=_fns.sample, inputs=[1], output_dir=os.path.join(tmp, "a"), chunk_size=2, chunk_bytes="1MB"
    ),
    "optimize neither chunk_size nor chunk_bytes": lambda ld, d, tmp: ld.optimize(
        fn=_fns.sample, inputs=[1], output_dir=os.path.join(tmp, "b")
    ),
    "optimize bad mode": lambda ld, d, tmp: ld.optimize(
        fn=_fns.sample, inputs=[1], output_dir=os.path.join(tmp, "c"), chunk_size=2, mode="bad"
    ),
    "optimize empty inputs": lambda ld, d, tmp: ld.optimize(
        fn=_fns.sample, inputs=[], output_dir=os.path.join(tmp, "d"), chunk_size=2
    ),
    "train_test_split sum > 1": lambda ld, d, tmp: ld.train_test_split(ld.StreamingDataset(d), splits=[0.8, 0.5]),
}


@pytest.mark.interop
def test_dataloader_on_wrong_dataset_is_a_runtime_error() -> None:
    with pytest.raises(RuntimeError):
        engine("streamscope").StreamingDataLoader([1, 2, 3])
    assert _raised(lambda: engine("litdata").StreamingDataLoader([1, 2, 3])) is RuntimeError


@pytest.mark.interop
@pytest.mark.parametrize("case", sorted(CASES))
def test_streamscope_error_is_caught_like_litdata(case: str, data_dir: str, tmp_path: Any) -> None:
    theirs = _raised(lambda: CASES[case](engine("litdata"), data_dir, str(tmp_path / "ld")))
    ours = _raised(lambda: CASES[case](engine("streamscope"), data_dir, str(tmp_path / "ss")))
    assert theirs is not None, f"LitData accepts {case}: not an error case"
    assert ours is not None, f"streamscope accepts {case} (LitData raises {theirs.__name__})"
    builtin = next(c for c in theirs.__mro__ if c.__module__ == "builtins")
    assert issubclass(ours, builtin), f"{case}: streamscope raises {ours.__mro__}, LitData {builtin.__name__}"


def test_index_out_of_range_is_a_value_error(data_dir: str) -> None:
    ds = engine("streamscope").StreamingDataset(data_dir)
    with pytest.raises(ValueError):
        ds[len(ds)]


@pytest.mark.interop
def test_documented_leniencies(data_dir: str) -> None:
    """Where LitData raises and streamscope deliberately accepts (a superset of working programs)."""
    ld, ss = engine("litdata"), engine("streamscope")
    # an int subsample: LitData insists on float; 1 and 1.0 mean the same
    assert _raised(lambda: ld.StreamingDataset(data_dir, subsample=1)) is not None
    assert len(ss.StreamingDataset(data_dir, subsample=1)) == 50
    # negative indexes: LitData raises ValueError; streamscope counts from the end like a sequence
    assert _raised(lambda: ld.StreamingDataset(data_dir)[-1]) is not None
    assert ss.StreamingDataset(data_dir)[-1]["index"] == 49


@pytest.mark.interop
def test_encrypted_dataset_errors_are_caught_like_litdata(tmp_path: Any) -> None:
    """Found by running LitData's own tests: an encrypted dataset built without a key and read with a wrong one."""
    from cryptography.fernet import InvalidToken

    ss = engine("streamscope")
    from streamscope.utilities.encryption import FernetEncryption

    out = str(tmp_path / "enc")
    key = FernetEncryption("pw", level="chunk")
    ss.optimize(fn=_fns.sample, inputs=list(range(6)), output_dir=out, chunk_size=3, encryption=key, num_workers=1)
    key.save(str(tmp_path / "key.json"))
    wrong = str(tmp_path / "wrong.json")
    FernetEncryption("pw", level="chunk").save(wrong)  # same password, another salt: another key
    for name in ("litdata", "streamscope"):
        ld = engine(name)
        enc = __import__(f"{name}.utilities.encryption", fromlist=["FernetEncryption"])
        ds = ld.StreamingDataset(out, cache_dir=str(tmp_path / f"c-{name}"))  # built without a key: no error yet
        assert len(ds) == 6, name
        with pytest.raises(ValueError, match="Data is encrypted but no encryption object was provided"):
            ds[0]  # reading it is the error
        mismatch = enc.FernetEncryption.load(str(tmp_path / "key.json"), "pw")
        mismatch.level = "sample"
        with pytest.raises(ValueError, match="Encryption level mismatch"):  # at the read, in both
            ld.StreamingDataset(out, encryption=mismatch, cache_dir=str(tmp_path / f"m-{name}"))[0]
        with pytest.raises(InvalidToken):  # LitData lets cryptography's error through; ours derives from it
            ld.StreamingDataset(
                out, encryption=enc.FernetEncryption.load(wrong, "pw"), cache_dir=str(tmp_path / f"w-{name}")
            )[0]
        good = ld.StreamingDataset(
            out, encryption=enc.FernetEncryption.load(str(tmp_path / "key.json"), "pw"), cache_dir=str(tmp_path / name)
        )
        got = [good[i] for i in range(6)]
        assert [g["index"] for g in got] == list(range(6)), name
        assert all(np.array_equal(np.asarray(g["image"]), _fns.sample(i)["image"]) for i, g in enumerate(got)), name
