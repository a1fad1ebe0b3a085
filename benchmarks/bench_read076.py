"""Reading a LitData 0.2.76 Arrow-footer dataset: streamscope vs LitData 0.2.76 side by side, in one run.

Workload: ``--rows`` (default 200,000) dict rows ``{"id": str, "text": str (~60 chars), "n": int, "score": float,
"ok": bool}`` written by LitData 0.2.76's own writer (``BinaryWriter``, ``--chunk-size`` rows per chunk, default
25,000: 8 chunks). Every chunk is a 0.2.76 "slim" chunk: empty items and an Arrow IPC footer (``LDARW01``). The
dataset is written once under ``--root`` (default ``$STREAMSCOPE_BENCH_DIR`` or ``/tmp/streamscope-bench``).

Cases, each engine the same way, batch size ``--batch`` (default 256), no shuffle, local files in page cache:

* ``iter-w0``: ``for sample in dataset`` (samples/s);
* ``iter-w2``: ``torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)`` (samples one by one);
* ``loader-w0`` / ``loader-w2``: ``StreamingDataLoader(dataset, batch_size, num_workers)`` (collated batches).

Every run is a fresh Python process (the engine's own imports only: LitData 0.2.76 is put first on
``PYTHONPATH`` of its processes), which builds the dataset and the loader, runs one warm-up epoch, then times a
second full epoch (worker start-up included, for both engines). Engines alternate; the best of ``--rounds`` is
kept per case (the machine is shared: the best is the least disturbed). Prints samples/s and the ratio
streamscope / LitData (target >= 1.0), and writes ``benchmarks/results/bench_read076.json``.

Run: ``PYTHONPATH=$PWD/src python benchmarks/bench_read076.py --litdata076 /path/to/unpacked/litdata-0.2.76``
(or set ``STREAMSCOPE_LITDATA076_DIR``); ``--quick`` for a 20,000-row smoke run.

Public API only (``streamscope.StreamingDataset``/``StreamingDataLoader``; LitData's ``BinaryWriter`` writes).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
CASES = ("iter-w0", "iter-w2", "loader-w0", "loader-w2")


def row(i: int) -> dict[str, Any]:
    return {
        "id": f"doc-{i:08d}",
        "text": f"the quick brown fox {i} jumps over the lazy dog number {i * 7 % 1000}",
        "n": i,
        "score": i / 3.0,
        "ok": i % 2 == 0,
    }


def write(out: str, rows: int, chunk_size: int) -> None:
    """Write the dataset with LitData 0.2.76 (run in a process whose ``litdata`` is 0.2.76)."""
    import litdata
    from litdata.streaming.writer import BinaryWriter

    assert litdata.__version__ == "0.2.76", litdata.__version__
    w = BinaryWriter(out, chunk_size=chunk_size)
    for i in range(rows):
        w.add_item(i, row(i))
    w.done()
    w.merge()


def run_case(engine: str, case: str, data: str, batch: int, cache: str) -> dict[str, Any]:
    """One timed epoch (after a warm-up epoch) of ``case`` with ``engine``, in this process."""
    mode, workers = case.split("-w")
    w = int(workers)
    if engine == "litdata":
        import litdata as eng

        assert eng.__version__ == "0.2.76", eng.__version__
    else:
        import streamscope as eng
    from torch.utils.data import DataLoader

    def epoch() -> tuple[int, float]:
        t0 = time.perf_counter()
        ds = eng.StreamingDataset(data, cache_dir=cache)
        if mode == "iter":
            it = iter(ds) if w == 0 else iter(DataLoader(ds, batch_size=None, num_workers=w))
            n = sum(1 for _ in it)
        else:
            loader = eng.StreamingDataLoader(ds, batch_size=batch, num_workers=w)
            n = sum(len(b["n"]) for b in loader)
        return n, time.perf_counter() - t0

    epoch()  # warm-up: page cache, imports, first-use costs
    n, secs = epoch()
    return {"engine": engine, "case": case, "samples": n, "seconds": secs, "samples_per_s": n / secs}


def _child(engine: str, ld076: str, *args: str) -> dict[str, Any]:
    env = dict(os.environ, LITDATA_DISABLE_VERSION_CHECK="1")
    if engine == "litdata":
        env["PYTHONPATH"] = ld076  # LitData 0.2.76 only: none of our sources on the path
    else:
        env["PYTHONPATH"] = SRC
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *args], env=env, capture_output=True, text=True, timeout=3600
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} {args}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ensure_dataset(root: str, ld076: str, rows: int, chunk_size: int) -> str:
    out = os.path.join(root, f"arrow076-{rows}-{chunk_size}")
    if not os.path.exists(os.path.join(out, "index.json")):
        os.makedirs(root, exist_ok=True)
        _child("litdata", ld076, "--write", out, "--rows", str(rows), "--chunk-size", str(chunk_size))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--litdata076", default=os.environ.get("STREAMSCOPE_LITDATA076_DIR"))
    ap.add_argument("--root", default=os.environ.get("STREAMSCOPE_BENCH_DIR", "/tmp/streamscope-bench"))
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--chunk-size", type=int, default=25_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--quick", action="store_true", help="20,000 rows, one round")
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_read076.json")
    # internal: one run in this process
    ap.add_argument("--write")
    ap.add_argument("--run", nargs=4, metavar=("ENGINE", "CASE", "DATA", "CACHE"))
    args = ap.parse_args()

    if args.write:
        write(args.write, args.rows, args.chunk_size)
        print(json.dumps({"written": args.write}))
        return
    if args.run:
        engine, case, data, cache = args.run
        print(json.dumps(run_case(engine, case, data, args.batch, cache)))
        return

    if not args.litdata076 or not os.path.isdir(os.path.join(args.litdata076, "litdata")):
        sys.exit("bench_read076 needs an unpacked LitData 0.2.76: --litdata076 DIR or STREAMSCOPE_LITDATA076_DIR")
    from _results import package_version, start

    bench = start("bench_read076", args)
    if args.quick:
        args.rows, args.chunk_size, args.rounds = 20_000, 5_000, 1
    data = ensure_dataset(args.root, args.litdata076, args.rows, args.chunk_size)
    cases = [c for c in args.cases.split(",") if c]
    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for case in cases:
            order = ("litdata", "streamscope") if r % 2 == 0 else ("streamscope", "litdata")
            for engine in order:
                cache = os.path.join(args.root, f"cache-read076-{engine}-{os.getpid()}")
                res = _child(engine, args.litdata076, "--batch", str(args.batch), "--run", engine, case, data, cache)
                runs.append(res)
                print(f"round {r} {case:9s} {engine:11s} {res['samples_per_s']:>12,.0f} samples/s", flush=True)
    summary: dict[str, Any] = {}
    print(f"\n{'case':9s} {'LitData 0.2.76':>16s} {'streamscope':>14s} {'ratio':>7s}")
    for case in cases:
        best = {
            e: max(x["samples_per_s"] for x in runs if x["case"] == case and x["engine"] == e)
            for e in ("litdata", "streamscope")
        }
        ratio = best["streamscope"] / best["litdata"]
        summary[case] = {**best, "ratio_streamscope_over_litdata": ratio}
        print(f"{case:9s} {best['litdata']:>16,.0f} {best['streamscope']:>14,.0f} {ratio:>6.2f}x")
    result = {
        "rows": args.rows,
        "chunk_size": args.chunk_size,
        "batch": args.batch,
        "rounds": args.rounds,
        "summary": summary,
        "runs": runs,
    }
    versions = {"litdata": package_version("litdata", path=args.litdata076)}  # what the LitData children ran
    bench.write(result, summary=summarize(result), out=args.out, versions=versions)


def summarize(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: best samples/s of each engine per case and their ratio."""
    return [
        {
            "case": case,
            "LitData 0.2.76 samples/s": round(best["litdata"]),
            "streamscope samples/s": round(best["streamscope"]),
            "ratio": round(best["ratio_streamscope_over_litdata"], 2),
        }
        for case, best in result["summary"].items()
    ]


if __name__ == "__main__":
    main()
