"""What one read of a live knob costs on the hot path: the knob board against ``config.get`` and a plain attribute.

``PYTHONPATH=$PWD/src:$PWD python benchmarks/bench_knob_read.py [--number 1000000] [--repeat 7]`` times, side
by side in one run (interleaved, best of ``--repeat`` rounds of ``--number`` reads each), in ns per read:

* ``attribute``: ``obj.depth``, a plain Python attribute (what a knob fixed at construction costs);
* ``board reader``: ``read()`` where ``read = board.reader("prefetch_depth")``, the way the prefetcher, the
  cache's eviction and the readers read live knobs (one shared-memory load through a ``functools.partial``);
* ``board reader, forked worker``: the same in a forked child, where the board's page is shared with the main
  process that writes it;
* ``board.value``: the typed read by name (two dict lookups, then the load);
* ``memoryview[i]``: the load itself, inline (the floor of a board read);
* ``config.get, not set``: today's read of a live knob left at its default (an override lookup, then every
  environment variable of the knob, then the default);
* ``config.get, set_value``: ``config.get`` of a knob with a run-time override (the override lookup only).

Prints each case in ns/read and as a ratio to the attribute read, and ``config.get`` over the board reader;
writes ``results/bench_knob_read.json`` (``--out``). The absolute numbers move with the machine's load; the
ratios are the result.

Internals used, because they are what is measured: ``streamscope._core.board.KnobBoard`` (its reader and its
memory) and ``streamscope._core.config`` (``get``/``set_value``: the read the board replaces).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import timeit
from typing import Any

from _results import start

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


class _Obj:
    def __init__(self) -> None:
        self.depth = 2


def _cases() -> dict[str, tuple[str, dict[str, Any]]]:
    from streamscope._core import config
    from streamscope._core.board import KnobBoard

    for var in config.KNOBS["prefetch_depth"].env + config.KNOBS["download_concurrency"].env:
        os.environ.pop(var, None)
    config.reset()
    board = KnobBoard({"prefetch_depth": (2, False, "max_pre_download")})
    config.set_value("raw_prefetch", 3)  # an override: config.get's fast path
    env = {
        "obj": _Obj(),
        "read": board.reader("prefetch_depth"),
        "board": board,
        "mv": board._i64,
        "i": board._index["prefetch_depth"],
        "get": config.get,
    }
    return {
        "attribute": ("obj.depth", env),
        "board reader": ("read()", env),
        "board.value": ("board.value('prefetch_depth')", env),
        "memoryview[i]": ("mv[i]", env),
        "config.get, not set": ("get('download_concurrency')", env),
        "config.get, set_value": ("get('raw_prefetch')", env),
    }


def _time(stmt: str, env: dict[str, Any], number: int) -> float:
    return timeit.timeit(stmt, globals=env, number=number) / number * 1e9


def _in_child(stmt: str, env: dict[str, Any], number: int, repeat: int, out: Any) -> None:
    out.put(min(_time(stmt, env, number) for _ in range(repeat)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--number", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_knob_read.json")
    args = ap.parse_args()
    run = start("bench_knob_read", args)

    cases = _cases()
    best: dict[str, float] = {name: float("inf") for name in cases}
    for _ in range(args.repeat):  # interleaved rounds: a load spike hits every case alike
        for name, (stmt, env) in cases.items():
            best[name] = min(best[name], _time(stmt, env, args.number))
    # the same reader in a forked worker (the board's memory is shared with this process)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    stmt, env = cases["board reader"]
    p = ctx.Process(target=_in_child, args=(stmt, env, args.number, args.repeat, q))
    p.start()
    best["board reader, forked worker"] = q.get(timeout=600)
    p.join()

    base = best["attribute"]
    print(f"{'case':<30} {'ns/read':>9} {'x attribute':>12}")
    for name, ns in best.items():
        print(f"{name:<30} {ns:9.1f} {ns / base:12.2f}")
    ratio = best["config.get, not set"] / best["board reader"]
    print(f"\nconfig.get (not set) / board reader: {ratio:.1f}x")
    result = {
        "ns_per_read": {k: round(v, 2) for k, v in best.items()},
        "ratio_to_attribute": {k: round(v / base, 3) for k, v in best.items()},
        "config_get_over_board_reader": round(ratio, 2),
    }
    run.write(result, summary=summarize(result), out=args.out)


def summarize(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: ns per read and the ratio to a plain attribute read."""
    ns, ratio = result["ns_per_read"], result["ratio_to_attribute"]
    return [{"read": k, "ns/read": round(ns[k]), "x attribute": round(ratio[k], 1)} for k in ns]


if __name__ == "__main__":
    main()
