"""Fixtures for the compat suite: each usage pattern runs once with ``litdata`` and once with ``streamscope``.

LitData 0.2.68 is imported from the venv; streamscope from this worktree (PYTHONPATH). LitData's PyPI version
check is switched off (no network here) and its optimize staging folders are private to each test.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from tests.support.litdata_version import LITDATA_076, LITDATA_VERSION, InteropMarkerMissing

ENGINES = ("litdata", "streamscope")


@pytest.fixture(autouse=True)
def _private_env(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITDATA_DISABLE_VERSION_CHECK", "1")
    monkeypatch.setenv("DATA_OPTIMIZER_CACHE_FOLDER", str(tmp_path / "_stage"))
    monkeypatch.setenv("DATA_OPTIMIZER_DATA_CACHE_FOLDER", str(tmp_path / "_dstage"))
    monkeypatch.setenv("LITDATA_CACHE_DIR", str(tmp_path / "_cache"))


@contextlib.contextmanager
def installed_layout() -> Iterator[None]:
    """streamscope writes the layout of the installed LitData within (for datasets both engines read: session and
    module fixtures are built before tests/conftest.py sets the layout for each interop test)."""
    with pytest.MonkeyPatch.context() as mp:
        if LITDATA_VERSION is not None:
            mp.setenv("STREAMSCOPE_WRITE_FORMAT", "0.2.76" if LITDATA_076 else "0.2.68")
        yield


def engine(name: str) -> ModuleType:
    """The top-level module of one engine (``import litdata as ld`` / ``import streamscope as ld``)."""
    return importlib.import_module(name)


def both(scenario: Callable[..., Any], *args: Any, errors_ok: bool = False) -> tuple[Any, Any]:
    """Run ``scenario(ld, *args)`` with litdata then streamscope; return both outcomes (errors as values).

    Unless ``errors_ok``, LitData must run the scenario without raising (else it is no usage pattern and two
    equal errors would make the comparison pass for nothing).
    """
    out = []
    for name in ENGINES:
        try:
            out.append(plain(scenario(engine(name), *args)))
        except InteropMarkerMissing:
            raise  # the test lacks its marker: not an outcome to compare
        except Warning:
            # a warning the suite turns into an error (pyproject.toml's filterwarnings) is no outcome either: two
            # engines emitting the same one would compare equal and hide it
            raise
        except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare
            if name == "litdata" and not errors_ok:
                raise AssertionError(f"the scenario fails under LitData itself: {exc!r}") from exc
            out.append(("raised", type(exc).__name__))
    return out[0], out[1]


def plain(x: Any) -> Any:
    """Tensors/arrays/tuples to comparable plain values, keeping dtype and container kind."""
    import torch

    if isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype).replace("torch.", ""), x.tolist())
    if isinstance(x, np.ndarray):
        return ("ndarray", str(x.dtype), x.tolist())
    if isinstance(x, np.generic):
        return ("np", str(x.dtype), x.item())
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, tuple):  # list and tuple stay apart: (1, 2) != [1, 2]
        return tuple(plain(v) for v in x)
    if isinstance(x, list):
        return [plain(v) for v in x]
    return x


def _written(tmp_path_factory: pytest.TempPathFactory, kind: str, folder: str) -> str:
    """Dataset ``kind`` of ``_writer_script.DATASETS``, written by streamscope.optimize into a fresh folder."""
    import streamscope
    from tests.compat._writer_script import write

    out = str(tmp_path_factory.mktemp(f"compat-{folder}") / folder)
    with installed_layout():
        write(streamscope, out, kind)
    return out


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """50 README-style samples in chunks of 8, written by streamscope.optimize (byte-identical to LitData's,
    which ``test_optimize_parity`` checks)."""
    return _written(tmp_path_factory, "dict", "dict")


@pytest.fixture(scope="session")
def tokens_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """30 variable-length token sequences written with TokensLoader (chunk_size counts tokens)."""
    return _written(tmp_path_factory, "tokens", "tokens")


@pytest.fixture(scope="session")
def zstd_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A generator fn (two samples per input), chunk_bytes and zstd compression."""
    return _written(tmp_path_factory, "gen_zstd", "zstd")


def make_dirs(root: str, *names: str) -> list[str]:
    """``root/name`` for each name, created."""
    paths = [os.path.join(root, n) for n in names]
    for p in paths:
        os.makedirs(p, exist_ok=True)
    return paths


@pytest.fixture(scope="session")
def readme_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """LitData's README quick start dataset (PIL images, numpy int classes), 2 workers, chunk_bytes."""
    return _written(tmp_path_factory, "readme", "readme")


@pytest.fixture(scope="session")
def mixed_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Tuple samples mixing tensor, str, bytes, float, nested list/dict, numpy scalar and bool leaves."""
    return _written(tmp_path_factory, "mixed", "mixed")
