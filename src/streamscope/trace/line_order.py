"""The lines of a write in ts order: runs of lines (plain events, bulk entries, rendered groups) cut into the
longest in-order pieces, as memoryviews (nothing copied), for one ``os.writev``."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Run", "ordered_pieces"]

# numpy's module-level helpers (np.stack, np.flatnonzero, ndarray.any, ...) run Python code of their own; after
# a fork every object they touch costs a page fault on first write (refcounts): C-level equivalents, ufunc
# reductions and ndarray methods instead (measured: ~40 fewer faults per flush after a fork, of ~420)
_any = np.logical_or.reduce


#: A run of lines for :func:`ordered_pieces`: the ts of each line, the lines (bytes or a 1-D byte buffer), and
#: where each line starts in them (one width for all, an array of offsets, or 0: found by the newlines).
Run = tuple[Any, Any, Any]


def ordered_pieces(runs: list[Run], pids: list[Any] | None = None) -> list[Any]:
    """The lines of ``runs`` in ts order (with ``pids``, the process of each run or of each of its lines:
    process by process, each in ts order; only each thread's order matters, and interleaving the processes
    would cut the lines into many more pieces).

    Complete events are recorded when they end and bulk entries when a whole batch or series is done, so the
    recording order is not always the begin order; in ts order every thread's timestamps are monotonic in
    the file, as readers that match B/E per thread expect. The sort is stable (events with one ts keep the
    order of the runs) and done on the ts alone; the output is the longest pieces of consecutive lines of one
    run (a batch's sample events, a loop's side-by-side series stay one piece), cut with byte offsets as
    memoryviews (nothing is copied). A run whose lines do not all end in a newline (cannot happen: values never
    hold one) makes the batch keep the order of its runs.
    """
    lens = [len(r[0]) for r in runs]
    total = sum(lens)
    if not total:
        return []
    ts_all = np.concatenate([np.asarray(r[0], dtype=np.int64) for r in runs])
    if pids is not None:
        pid_all = np.concatenate(
            [
                np.full(n, p, dtype=np.int64) if type(p) is int else np.asarray(p, dtype=np.int64)
                for p, n in zip(pids, lens)
            ]
        )
        order = np.lexsort((ts_all, pid_all))  # stable
    elif not _any(ts_all[1:] < ts_all[:-1]):
        return [r[1] for r in runs]
    else:
        order = ts_all.argsort(kind="stable")
    run_of = np.arange(len(runs)).repeat(lens)
    cut = ((order[1:] != order[:-1] + 1) | (run_of[order[1:]] != run_of[order[:-1]])).nonzero()[0] + 1
    starts = np.empty(total + 1, dtype=np.int64)  # where each line starts in its run
    row = 0
    for (_ts, data, where), n in zip(runs, lens):
        if not n:
            continue
        if type(where) is int and where and len(data) == where * n:
            starts[row : row + n] = np.arange(0, len(data), where)
        elif type(where) is not int and len(where) == n:
            starts[row : row + n] = where
        else:
            nl = (np.frombuffer(data, dtype=np.uint8) == 10).nonzero()[0] + 1
            if len(nl) != n or nl[-1] != len(data):
                return [r[1] for r in runs]
            starts[row] = 0
            starts[row + 1 : row + n] = nl[:-1]
        row += n
    ends = np.empty(total, dtype=np.int64)  # where each line ends in its run: the next line's start, or the run's end
    ends[:-1] = starts[1:total]
    last = np.array(lens, dtype=np.int64).cumsum() - 1
    full = [i for i, n in enumerate(lens) if n]
    ends[last[full]] = [len(runs[i][1]) for i in full]
    firsts = order[np.concatenate(([0], cut))]
    lasts = order[np.concatenate((cut - 1, [total - 1]))]
    views = [memoryview(r[1]) for r in runs]
    return [views[r][a:b] for r, a, b in zip(run_of[firsts].tolist(), starts[firsts].tolist(), ends[lasts].tolist())]
