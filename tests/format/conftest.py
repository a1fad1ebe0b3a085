"""Shared helpers for the format tests."""

from __future__ import annotations

import os
from collections import OrderedDict, defaultdict, deque
from typing import Any

import numpy as np

os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")  # litdata would query PyPI when reading


def same(a: Any, b: Any) -> bool:
    """Deep equality that understands arrays, tensors, PIL images and the pytree containers."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if type(a).__module__.startswith("PIL") and hasattr(a, "tobytes"):
        return a.mode == b.mode and a.size == b.size and a.tobytes() == b.tobytes()
    if type(a) is not type(b):
        return False
    if isinstance(a, (dict, OrderedDict, defaultdict)):
        return list(a.keys()) == list(b.keys()) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple, deque)):
        if isinstance(a, deque) and a.maxlen != b.maxlen:
            return False
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and a != a:
        return b != b
    return bool(a == b)


from tests.support.ld076_fixtures import ld076, ld076_data  # noqa: E402, F401 (fixtures)
