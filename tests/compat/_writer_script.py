"""Write the compat datasets with one engine, in its own process: ``python -m tests.compat._writer_script ENGINE OUT KIND``.

Run as a script so the real LitData (spawn start method) can import the functions from ``tests.compat._fns``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from tests.compat import _fns

KINDS = (
    "readme",
    "mixed",
    "batched",
    "fast_dev_run",
    "checkpoint",
    "dict",
    "gen_zstd",
    "tokens",
    "two_workers",
    "append",
    "overwrite",
)


def write(ld: object, out: str, kind: str) -> None:
    """Write dataset ``kind`` into ``out`` with the public API of ``ld`` (litdata or streamscope)."""

    def opt(**kwargs: Any) -> None:
        # each worker takes a contiguous range of the inputs: LitData 0.2.68's default, while 0.2.76's default
        # shares one queue among the workers (which worker writes which sample then depends on timing)
        ld.optimize(keep_data_ordered=True, **kwargs)  # type: ignore[attr-defined]

    if kind == "readme":
        opt(
            fn=_fns.random_images,
            inputs=list(range(60)),
            output_dir=out,
            num_workers=2,
            chunk_bytes="2KB",
            verbose=False,
        )
    elif kind == "mixed":
        opt(fn=_fns.mixed, inputs=list(range(25)), output_dir=out, chunk_size=7, num_workers=1, verbose=False)
    elif kind == "batched":
        opt(
            fn=_fns.batch_sum,
            inputs=list(range(20)),
            output_dir=out,
            batch_size=3,
            chunk_size=4,
            num_workers=2,
            verbose=False,
        )
    elif kind == "fast_dev_run":
        # an int, kept per worker (LitData: "items per process"). LitData 0.2.68 treats fast_dev_run=True as 1
        # item (bool is an int there) although it means its default of 10; streamscope keeps 10 for True
        # (documented difference, LitData's bug not copied)
        opt(
            fn=_fns.sample,
            inputs=list(range(50)),
            output_dir=out,
            chunk_size=4,
            num_workers=2,
            fast_dev_run=7,
            verbose=False,
        )
    elif kind == "checkpoint":
        opt(
            fn=_fns.sample,
            inputs=list(range(12)),
            output_dir=out,
            chunk_size=5,
            num_workers=1,
            use_checkpoint=True,
            verbose=False,
        )
    elif kind == "dict":
        opt(fn=_fns.sample, inputs=list(range(50)), output_dir=out, chunk_size=8, num_workers=1, verbose=False)
    elif kind == "gen_zstd":
        opt(
            fn=_fns.pairs,
            inputs=list(range(30)),
            output_dir=out,
            chunk_bytes="1KB",
            compression="zstd",
            num_workers=1,
            verbose=False,
        )
    elif kind == "tokens":
        from importlib import import_module

        loader_mod = import_module(f"{ld.__name__}.streaming.item_loader")  # type: ignore[attr-defined]
        opt(
            fn=_fns.tokens,
            inputs=list(range(30)),
            output_dir=out,
            chunk_size=300,
            num_workers=1,
            item_loader=loader_mod.TokensLoader(),
            verbose=False,
        )
    elif kind == "two_workers":
        opt(fn=_fns.sample, inputs=list(range(40)), output_dir=out, chunk_size=6, num_workers=2, verbose=False)
    elif kind in ("append", "overwrite"):
        opt(fn=_fns.sample, inputs=list(range(20)), output_dir=out, chunk_size=8, num_workers=1, verbose=False)
        opt(
            fn=_fns.shifted,
            inputs=list(range(10)),
            output_dir=out,
            chunk_size=8,
            num_workers=1,
            mode=kind,
            verbose=False,
        )
    else:
        raise ValueError(kind)


if __name__ == "__main__":
    engine, out_dir, which = sys.argv[1], sys.argv[2], sys.argv[3]
    write(importlib.import_module(engine), out_dir, which)
