"""Epoch-plan cost side by side with LitData's shuffler, in one run.

Two measurements for one rank of a DDP job (default: 10M samples in 10k chunks, world size 8, 4 workers,
batch size 32, shuffle on):

* setup: what an epoch start computes before the first sample. streamscope: ``make_plan`` plus the chunk
  schedule of every worker. LitData 0.2.68: the chunk permutation plus
  ``_associate_chunks_and_intervals_to_workers`` (the body of ``FullShuffle.get_chunks_and_intervals_per_workers``).
* indexes: producing the (chunk, item) index of every sample one worker reads in the epoch. streamscope:
  ``batch_arrays`` for each batch of the worker. LitData: the per-chunk ``FullShuffle.__call__`` permutation
  (``RandomState(...).permutation(...).tolist()``) for each interval of the worker.

Run: ``PYTHONPATH=src:. python benchmarks/bench_plan.py [--samples N] [--chunk-size C]``. Prints the timings
(best of ``--repeat``) and ratios (LitData time / streamscope time: > 1 means streamscope is faster) and writes
``benchmarks/results/bench_plan.json``.

Internals used, because they are what is measured: ``streamscope.engine.plan.make_plan`` (the epoch plan has no
public face; datasets build it) and, on LitData's side, its shuffler's private helpers.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import _results
import numpy as np

from streamscope.engine.plan import make_plan


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--chunk-size", type=int, default=1000)
    ap.add_argument("--world-size", type=int, default=8)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_plan.json")
    args = ap.parse_args()
    run = _results.start("bench_plan", args)

    from litdata.streaming.shuffle import FullShuffle
    from litdata.utilities.env import _DistributedEnv
    from litdata.utilities.shuffle import _associate_chunks_and_intervals_to_workers

    n_chunks = args.samples // args.chunk_size
    sizes = [args.chunk_size] * n_chunks
    ws, nw, b, seed, epoch, rank = args.world_size, args.workers, args.batch_size, 42, 1, args.world_size // 2

    def ours_setup() -> object:
        plan = make_plan(
            sizes, world_size=ws, rank=rank, batch_size=b, drop_last=False, shuffle=True, seed=seed, epoch=epoch
        )
        return [plan.chunk_schedule_for_worker(w, nw) for w in range(nw)]

    intervals = []
    start = 0
    for s in sizes:
        intervals.append([start, start, start + s, start + s])
        start += s
    env = _DistributedEnv(ws, rank, 1)

    def litdata_setup() -> object:
        idx = np.random.RandomState([seed, epoch]).permutation(range(len(intervals)))
        shuffled = np.asarray(intervals)[idx].tolist()
        return _associate_chunks_and_intervals_to_workers(env, idx, shuffled, False, nw, b)

    plan = make_plan(
        sizes, world_size=ws, rank=rank, batch_size=b, drop_last=False, shuffle=True, seed=seed, epoch=epoch
    )

    def ours_indexes() -> object:
        p = make_plan(
            sizes, world_size=ws, rank=rank, batch_size=b, drop_last=False, shuffle=True, seed=seed, epoch=epoch
        )
        return [p.batch_arrays(j) for j in p.batches_for_worker(1, nw)]

    chunks_l, intervals_l = litdata_setup()  # type: ignore[misc]
    gw = rank * nw + 1
    shuffler = FullShuffle.__new__(FullShuffle)
    shuffler.seed = seed

    def litdata_indexes() -> object:
        out = []
        for pos, iv in enumerate(intervals_l[gw]):
            out.append(shuffler(np.arange(iv[1], iv[2]), len(chunks_l[gw]), epoch, pos))
        return out

    def ours_make_plan() -> object:
        return make_plan(
            sizes, world_size=ws, rank=rank, batch_size=b, drop_last=False, shuffle=True, seed=seed, epoch=epoch
        )

    def ours_window_setup() -> object:
        p = make_plan(
            sizes,
            world_size=ws,
            rank=rank,
            batch_size=b,
            drop_last=False,
            shuffle=True,
            seed=seed,
            epoch=epoch,
            shuffle_buffer=10_000,
        )
        return p.chunk_schedule_for_worker(0, nw)

    n_worker = sum(len(c) for c, _ in ours_indexes())  # type: ignore[attr-defined]
    n_lit = sum(iv[2] - iv[1] for iv in intervals_l[gw])
    res = {
        "samples": args.samples,
        "chunks": n_chunks,
        "world_size": ws,
        "workers": nw,
        "batch_size": b,
        "setup_s": {"streamscope": _best(ours_setup, args.repeat), "litdata": _best(litdata_setup, args.repeat)},
        "indexes_s": {"streamscope": _best(ours_indexes, args.repeat), "litdata": _best(litdata_indexes, args.repeat)},
        "worker_samples": {"streamscope": n_worker, "litdata": int(n_lit)},
        "rank_batches": plan.num_batches,
    }
    res["streamscope_only_s"] = {
        "make_plan": _best(ours_make_plan, args.repeat),
        "make_plan_and_one_worker_schedule_shuffle_buffer_10000": _best(ours_window_setup, args.repeat),
    }
    for key, val in res["streamscope_only_s"].items():
        print(f"streamscope {key}: {val:.4f} s")
    for key in ("setup_s", "indexes_s"):
        r = res[key]
        r["ratio_litdata_over_streamscope"] = r["litdata"] / r["streamscope"]
        print(
            f"{key:10s} streamscope {r['streamscope']:.4f} s   litdata {r['litdata']:.4f} s   ratio {r['ratio_litdata_over_streamscope']:.2f}x"
        )
    print(f"worker samples: streamscope {n_worker}, litdata {n_lit}")
    run.write(res, summary=summarize(res), out=args.out)


def summarize(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: setup and per-worker index times of both engines and LitData's time over ours."""
    return [
        {
            "measure": key[: -len("_s")],
            "streamscope s": round(res[key]["streamscope"], 4),
            "LitData s": round(res[key]["litdata"], 4),
            "LitData / streamscope": round(res[key]["ratio_litdata_over_streamscope"], 2),
        }
        for key in ("setup_s", "indexes_s")
    ]


if __name__ == "__main__":
    main()
