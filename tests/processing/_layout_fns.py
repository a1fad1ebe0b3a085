"""Sample functions of the cross-engine layout tests, importable by both engines' spawned workers.

No streamscope import here: LitData runs them in its own process without streamscope's sources on the path.
``CASES`` maps a case name to ``(fn name, optimize keyword arguments)``; ``plain`` turns a sample, as either engine
writes or reads it, into comparable JSON values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def rows(i: int) -> dict[str, Any]:
    """JSON-like dict rows (LitData 0.2.76: Arrow footer); lists of fixed length so 0.2.68 can write them too."""
    return {
        "index": i,
        "text": f"row {i}" * (i % 3 + 1),
        "score": i / 4,
        "ok": i % 2 == 0,
        "tags": ["a", f"t{i}"],
        "meta": {"k": i},
    }


def tensors(i: int) -> dict[str, Any]:
    """Tensors and arrays (classic pytree chunks in both versions)."""
    return {"x": torch.arange(i % 5 + 1, dtype=torch.float32) + i, "y": np.full((2, 3), i, dtype=np.int16), "i": i}


def json_leaf(i: int) -> dict[str, Any]:
    """A tensor next to a list of varying length (LitData 0.2.76: the list is one ``json`` leaf, classic chunk)."""
    return {"x": torch.arange(3, dtype=torch.int64) * i, "tags": [f"t{j}" for j in range(i % 3)], "n": i}


def json_leaf_068(i: int) -> dict[str, Any]:
    """``json_leaf`` with a fixed-length list (LitData 0.2.68 flattens a list into leaves, so their number must
    not change)."""
    return {"x": torch.arange(3, dtype=torch.int64) * i, "tags": [f"t{i}", "u"], "n": i}


def fused(i: int) -> dict[str, Any]:
    """Rows whose list items are ints before sample 10 and strings after (two workers then infer different
    types for ``vals`` and the index merge fuses them), with a field that is None on every other sample."""
    return {"id": f"k{i}", "n": i, "vals": [i, i + 1] if i < 10 else [f"s{i}"], "note": f"x{i}" if i % 2 else None}


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "rows": ("rows", {"chunk_size": 7}),
    "tensors": ("tensors", {"chunk_bytes": 400}),
    "zstd": ("tensors", {"chunk_size": 6, "compression": "zstd"}),
    "json_leaf": ("json_leaf", {"chunk_size": 7}),
    "fused": ("fused", {"chunk_size": 4}),
}


def fn_of(case: str, layout: str) -> Any:
    name = CASES[case][0]
    if name == "json_leaf" and layout == "0.2.68":
        name = "json_leaf_068"
    return globals()[name]


def plain(x: Any) -> Any:
    """Comparable JSON: tensors/arrays tagged with their dtype, tuples as lists, bytes as hex."""
    if isinstance(x, torch.Tensor):
        return ["tensor", str(x.dtype).replace("torch.", ""), x.tolist()]
    if isinstance(x, np.ndarray):
        return ["ndarray", str(x.dtype), x.tolist()]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (bytes, bytearray, memoryview)):
        return ["bytes", bytes(x).hex()]
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x
