"""The compat datasets, written with one engine: ``python -m tests.compat._writer_script ENGINE OUT KIND``.

Run as a script (``test_optimize_parity``: each engine in its own process, so the real LitData's spawn start
method can import the functions from ``tests.compat._fns``), or :func:`write` in-process (the session fixtures
of ``tests/compat/conftest.py`` write streamscope's copies of the same datasets).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from tests.compat import _fns

#: kind -> the optimize() calls that write it, in order: (fn of ``_fns``, number of inputs, other arguments).
#: ``item_loader`` names a class of the engine's ``streaming.item_loader``.
DATASETS: dict[str, list[tuple[str, int, dict[str, Any]]]] = {
    "readme": [("random_images", 60, {"num_workers": 2, "chunk_bytes": "2KB"})],
    "mixed": [("mixed", 25, {"chunk_size": 7, "num_workers": 1})],
    "batched": [("batch_sum", 20, {"batch_size": 3, "chunk_size": 4, "num_workers": 2})],
    # an int, kept per worker (LitData: "items per process"). LitData 0.2.68 treats fast_dev_run=True as 1 item
    # (bool is an int there) although it means its default of 10; streamscope keeps 10 for True (documented
    # difference, LitData's bug not copied)
    "fast_dev_run": [("sample", 50, {"chunk_size": 4, "num_workers": 2, "fast_dev_run": 7})],
    "checkpoint": [("sample", 12, {"chunk_size": 5, "num_workers": 1, "use_checkpoint": True})],
    "dict": [("sample", 50, {"chunk_size": 8, "num_workers": 1})],
    "gen_zstd": [("pairs", 30, {"chunk_bytes": "1KB", "compression": "zstd", "num_workers": 1})],
    "tokens": [("tokens", 30, {"chunk_size": 300, "num_workers": 1, "item_loader": "TokensLoader"})],
    "two_workers": [("sample", 40, {"chunk_size": 6, "num_workers": 2})],
    "append": [
        ("sample", 20, {"chunk_size": 8, "num_workers": 1}),
        ("shifted", 10, {"chunk_size": 8, "num_workers": 1, "mode": "append"}),
    ],
    "overwrite": [
        ("sample", 20, {"chunk_size": 8, "num_workers": 1}),
        ("shifted", 10, {"chunk_size": 8, "num_workers": 1, "mode": "overwrite"}),
    ],
}
KINDS = tuple(DATASETS)


def write(ld: Any, out: str, kind: str) -> None:
    """Write dataset ``kind`` into ``out`` with the public API of ``ld`` (litdata or streamscope)."""
    if kind not in DATASETS:
        raise ValueError(kind)
    for fn, n, kwargs in DATASETS[kind]:
        if "item_loader" in kwargs:
            loaders = importlib.import_module(f"{ld.__name__}.streaming.item_loader")
            kwargs = {**kwargs, "item_loader": getattr(loaders, kwargs["item_loader"])()}
        # each worker takes a contiguous range of the inputs: LitData 0.2.68's default, while 0.2.76's default
        # shares one queue among the workers (which worker writes which sample then depends on timing)
        ld.optimize(
            fn=getattr(_fns, fn), inputs=list(range(n)), output_dir=out, keep_data_ordered=True, verbose=False, **kwargs
        )


if __name__ == "__main__":
    engine, out_dir, which = sys.argv[1], sys.argv[2], sys.argv[3]
    write(importlib.import_module(engine), out_dir, which)
