"""Dtype index tables of LitData's chunk format.

The tables map the small integers stored in ``data_format`` names (``no_header_tensor:18``) and in the
``numpy``/``tensor`` leaf headers to dtypes. Their order is part of the on-disk format and never changes.
The torch table lists aliases (``float``/``float32`` ...) under separate indexes; a writer resolves a dtype
to the LAST index that names it (``torch.int64`` -> 18), and a reader accepts every index.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from streamscope._core.errors import FormatError

__all__ = [
    "NUMPY_DTYPES",
    "TORCH_DTYPE_NAMES",
    "TORCH_INDEX_NUMPY",
    "numpy_dtype",
    "numpy_dtype_index",
    "torch_dtype",
    "torch_dtype_index",
    "torch_loaded",
    "torch_tables",
]


#: torch dtype index -> attribute name on the ``torch`` module.
TORCH_DTYPE_NAMES: tuple[str, ...] = (
    "float32",
    "float",
    "float64",
    "double",
    "complex64",
    "cfloat",
    "complex128",
    "cdouble",
    "float16",
    "half",
    "bfloat16",
    "uint8",
    "int8",
    "int16",
    "short",
    "int32",
    "int",
    "int64",
    "long",
    "bool",
    "uint16",
)

#: numpy dtype index -> dtype.
NUMPY_DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(t)
    for t in (
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
        np.complex64,
        np.complex128,
        np.bool_,
        np.object_,
        np.bytes_,
        np.str_,
        np.void,
    )
)

_NUMPY_TO_INDEX: dict[np.dtype, int] = {}
for _i, _d in enumerate(NUMPY_DTYPES):
    _NUMPY_TO_INDEX[_d] = _i

#: numpy dtype indexes whose raw bytes round-trip (object arrays hold pointers; sized S/U/V do not fit).
_NUMPY_RAW_OK = frozenset(range(14))

_torch_tables: tuple[list[Any], dict[Any, int]] | None = None


def _torch() -> Any:
    import torch  # noqa: PLC0415 (torch is heavy; import it only when a tensor is involved)

    return torch


def torch_tables() -> tuple[list[Any], dict[Any, int]]:
    """``(index -> torch.dtype list, torch.dtype -> writer index)``; the writer index is the last alias."""
    global _torch_tables
    if _torch_tables is None:
        torch = _torch()
        by_index = [getattr(torch, name) for name in TORCH_DTYPE_NAMES]
        to_index = {dt: i for i, dt in enumerate(by_index)}  # later aliases overwrite earlier ones
        _torch_tables = (by_index, to_index)
    return _torch_tables


_TORCH_TO_NUMPY_NAME = {
    "float32": "float32", "float": "float32", "float64": "float64", "double": "float64",
    "complex64": "complex64", "cfloat": "complex64", "complex128": "complex128", "cdouble": "complex128",
    "float16": "float16", "half": "float16", "uint8": "uint8", "int8": "int8", "int16": "int16",
    "short": "int16", "int32": "int32", "int": "int32", "int64": "int64", "long": "int64", "bool": "bool",
    "uint16": "uint16",
}  # fmt: skip

#: torch dtype index -> numpy dtype with the same bytes (None for bfloat16).
TORCH_INDEX_NUMPY: tuple[np.dtype | None, ...] = tuple(
    np.dtype(_TORCH_TO_NUMPY_NAME[n]) if n in _TORCH_TO_NUMPY_NAME else None for n in TORCH_DTYPE_NAMES
)


def torch_dtype(index: int) -> Any:
    """The torch dtype stored under ``index``."""
    by_index, _ = torch_tables()
    if not 0 <= index < len(by_index):
        raise FormatError(f"unknown torch dtype index {index}; valid indexes are 0..{len(by_index) - 1}")
    return by_index[index]


def torch_dtype_index(dtype: Any) -> int:
    """The index a writer stores for torch ``dtype`` (the last alias)."""
    _, to_index = torch_tables()
    try:
        return to_index[dtype]
    except KeyError:
        raise FormatError(f"torch dtype {dtype} has no index in the chunk format") from None


def numpy_dtype(index: int) -> np.dtype:
    """The numpy dtype stored under ``index``."""
    if not 0 <= index < len(NUMPY_DTYPES):
        raise FormatError(f"unknown numpy dtype index {index}; valid indexes are 0..{len(NUMPY_DTYPES) - 1}")
    return NUMPY_DTYPES[index]


def numpy_dtype_index(dtype: np.dtype) -> int | None:
    """The index of numpy ``dtype`` if its raw bytes can be stored (native order, fixed size), else None."""
    idx = _NUMPY_TO_INDEX.get(dtype)
    if idx is None or idx not in _NUMPY_RAW_OK:
        return None
    return idx


def torch_loaded() -> Any:
    """The torch module if it is already imported (an object can only be a tensor then), else None."""
    return sys.modules.get("torch")
