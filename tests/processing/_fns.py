"""Module-level functions for optimize()/map() tests (importable by spawned workers)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import numpy as np

from streamscope.processing.data_processor import DataChunkRecipe

KILL_FLAG_ENV = "STREAMSCOPE_TEST_KILL_FLAG"
KILL_AT_ENV = "STREAMSCOPE_TEST_KILL_AT"
CALL_LOG_ENV = "STREAMSCOPE_TEST_CALL_LOG"


def image_sample(i: int) -> dict[str, Any]:
    rng = np.random.default_rng(i)
    return {"image": rng.integers(0, 255, size=(3, 8, 8), dtype=np.uint8), "label": i, "id": f"s{i:05d}"}


def mixed_sample(i: int) -> dict[str, Any]:
    return {
        "x": np.arange(i % 5 + 1, dtype=np.float32),
        "m": np.full((2, 3), i, dtype=np.int64),
        "f": i / 7,
        "b": bytes([i % 256]) * (i % 3),
        "flag": bool(i % 2),
        "t": ("a" * (i % 4), [i, i + 1]),
    }


def keep_even(i: int) -> dict[str, Any] | None:
    return {"i": i} if i % 2 == 0 else None


def gen_samples(i: int) -> Iterator[dict[str, Any]]:
    """Yields i % 4 samples (0..3), some None in between."""
    for k in range(i % 4):
        yield {"i": i, "k": k, "pad": np.full(10 + k, i % 256, dtype=np.uint8)}
        if k == 0:
            yield None


def fail_on_13(i: int) -> dict[str, int]:
    if i == 13:
        raise KeyError(f"input {i} is bad")
    return {"i": i}


def mixed_types(i: int) -> dict[str, Any]:
    return {"v": 1.5 if i == 7 else i}


def kill_on_flag(i: int) -> Iterator[dict[str, Any]]:
    """Like gen_samples, but SIGKILLs its own worker process at input $KILL_AT (after one sample) once."""
    log = os.environ.get(CALL_LOG_ENV)
    if log:
        with open(log, "a") as f:
            f.write(f"{i}\n")
    flag = os.environ.get(KILL_FLAG_ENV, "")
    kill_at = int(os.environ.get(KILL_AT_ENV, "-1"))
    for k in range(i % 4):
        yield {"i": i, "k": k, "pad": np.full(10 + k, i % 256, dtype=np.uint8)}
        if i == kill_at and k == 0 and flag and os.path.exists(flag):
            os.kill(os.getpid(), signal.SIGKILL)


def die_hard(i: int) -> dict[str, int]:
    if i == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"i": i}


def write_files(i: int, output_dir: str) -> None:
    sub = os.path.join(output_dir, f"d{i % 3}")
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, f"f{i}.txt"), "w") as f:
        f.write(f"content {i}")


def return_something(i: int, output_dir: str) -> int:
    return i


def tokens(i: int) -> np.ndarray:
    return np.arange(i * 100, i * 100 + 5 + i % 7, dtype=np.int64)


def slow_gen(i: int) -> Iterator[dict[str, Any]]:
    import time

    time.sleep(0.004)
    yield from gen_samples(i)


def counted(counts: list[int], i: int) -> Iterator[dict[str, Any] | None]:
    """Yields counts[i] samples of varying size, with a None after the first."""
    for k in range(counts[i]):
        yield {"i": i, "k": k, "pad": b"x" * ((i * 7 + k) % 13)}
        if k == 0:
            yield None


class RecordArgs:
    """A map() fn object whose ``__call__`` takes LitData's optional ``device`` and ``is_last``."""

    def __call__(self, i: int, output_dir: str, device: str | None = "unset", is_last: bool = False) -> None:
        with open(os.path.join(output_dir, f"{i}.txt"), "w") as f:
            f.write(f"{device} {is_last}")


class Numbers(DataChunkRecipe):
    """A chunk recipe over inputs 0..n-1, one sample each (``n`` from the constructor)."""

    def __init__(self, n: int = 30, **kw: Any) -> None:
        super().__init__(**kw)
        self.n = n

    def prepare_structure(self, input_dir: str | None) -> list[int]:
        return list(range(self.n))

    def prepare_item(self, item: int) -> dict[str, int]:
        return {"i": item}


class NotAList(DataChunkRecipe):
    def prepare_structure(self, input_dir: str | None) -> Any:
        return range(3)


def kill_rows_on_flag(i: int) -> Iterator[dict[str, Any]]:
    """``kill_on_flag`` with JSON-like rows (LitData 0.2.76: Arrow rows, counted by their payload then by the bytes
    per row), a list of varying length and a field that is None on most rows."""
    for sample in kill_on_flag(i):
        yield {
            "i": sample["i"],
            "k": sample["k"],
            "s": "x" * (i % 13),
            "note": None if i % 5 else f"n{i}",
            "tags": [f"t{i}"] * (i % 3),
        }


class Arrays(Numbers):
    """``Numbers`` whose samples hold an array (classic chunks in LitData 0.2.76's layout, not Arrow rows)."""

    def prepare_item(self, item: int) -> dict[str, Any]:  # type: ignore[override]
        return {"a": np.full(3, item, dtype=np.int64), "i": item}
