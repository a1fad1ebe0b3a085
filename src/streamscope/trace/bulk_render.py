"""The ``X`` lines of bulk entries (``ph`` ``X+``, see :mod:`streamscope.events.bus`): entries of one shape rendered
together with numpy (:func:`render_bulks`, through :func:`~.render_rows.render_rows`), any other entry on its own
from ``%`` templates (:func:`bulk_lines`). :mod:`.litracer` describes the lines and their timing."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from streamscope.events import BULK, Bulk, EventBatch
from streamscope.events.bus import joined
from streamscope.trace.line_fields import ENV_KEYS, FRAC, PLANS, careful, head, key_plan, proc_env, sanitize_key
from streamscope.trace.line_order import Run
from streamscope.trace.render_rows import render_rows

__all__ = ["bulk_lines", "bulk_ts", "render_bulks"]

# numpy's module-level helpers (np.stack, np.flatnonzero, ndarray.any, ...) run Python code of their own; after
# a fork every object they touch costs a page fault on first write (refcounts): C-level equivalents, ufunc
# reductions and ndarray methods instead (measured: ~40 fewer faults per flush after a fork, of ~420)
_any = np.logical_or.reduce
_all = np.logical_and.reduce


def bulk_ts(t0: int, off: int, b: Bulk) -> np.ndarray:
    """Epoch-ns ``ts`` of each event of a bulk entry that began at ``t0`` (epoch ns)."""
    if b.starts is None or b.ends is None:
        share = max(0, b.t1 + off - t0) // b.n
        return t0 + np.arange(b.n, dtype=np.int64) * share
    return np.asarray(b.starts, dtype=np.int64) + off


def _int_strs(v: Any) -> list[str]:
    """Decimal strings of a column of integers (raises ValueError/TypeError for anything else)."""
    if isinstance(v, np.ndarray) and v.dtype.kind in "iu":
        return list(map(str, v.tolist()))
    return [str(int(x)) for x in v]


def bulk_lines(t0: int, off: int, mid: str, b: Bulk, env: dict[str, int]) -> str:
    """The ``X`` lines of one bulk entry starting at ``t0`` (epoch ns).

    Each line is a fixed sequence of pieces: constant ones (head, keys, common fields, env, tail) and
    per-event ones (timestamp, column values, measured duration). The pieces are laid out column by column
    with slice assignment into one list and joined once.
    """
    n = b.n
    cols = {k: _int_strs(v) for k, v in b.cols.items()}
    if any(len(c) != n for c in cols.values()):
        raise ValueError(f"bulk {mid!r}: columns of unequal length, expected {n}")
    common = {k: v for k, v in b.fields.items() if k not in cols and k != "dur"}
    args, _dur, env_s = careful("X", common, env)
    ts = bulk_ts(t0, off, b)
    if b.starts is None or b.ends is None:
        share = max(0, b.t1 + off - t0) // n
        durs = None
        end = f"; {args}dur: {share // 1000}{FRAC[share % 1000]}s: t; {env_s}ph: X;\n"
    else:
        durs = np.maximum(np.asarray(b.ends, dtype=np.int64) - (ts - off), 0)
        end = f"; {args}dur: "
    slots: list[Any] = ["ts: ", list(map(str, (ts // 1000).tolist())), [FRAC[x] for x in (ts % 1000).tolist()]]
    sep = mid
    for k, strs in cols.items():
        slots.append(sep + sanitize_key(k))
        slots.append(strs)
        sep = "; "
    slots.append(end)
    if durs is not None:
        slots.append(list(map(str, (durs // 1000).tolist())))
        slots.append([FRAC[x] for x in (durs % 1000).tolist()])
        slots.append(f"s: t; {env_s}ph: X;\n")
    width = len(slots)
    parts: list[str] = [""] * (n * width)
    for i, piece in enumerate(slots):
        parts[i::width] = piece if type(piece) is list else [piece] * n
    return "".join(parts)


def render_bulks(batch: EventBatch) -> tuple[list[Run], set[int], list[int]]:
    """The bulk entries of ``batch`` rendered together, as runs for :func:`ordered_pieces`, the ids of the
    entries they hold, and the process of each run.

    Entries of one shape (process, thread, name, category, field keys, timing kind) whose values are all
    non-negative ints form a group, rendered in ONE pass (:func:`render_rows`); its lines all have one width,
    numbers right-aligned with space padding. Groups of one thread whose lines take turns (a loop's ``stall``,
    ``decode_batch`` and ``batch`` series, see :func:`_turns`) are rendered as one, a row per turn holding one
    line of each, so they come out in ts order as one block. Entries of any other shape are left out (the
    caller renders them one by one with :func:`bulk_lines`).
    """
    off = batch.epoch_offset_ns
    groups: dict[tuple[Any, ...], list[tuple[int, Bulk]]] = {}
    for ph, name, cat, ts_ns, pid, tid, fields in batch.events:
        if ph != BULK:
            continue
        b = cast(Bulk, fields)  # Event types its last member for the common case: a BULK entry holds a Bulk
        if b.n <= 0:
            continue
        common = b.fields
        if any(type(v) is not int or v < 0 for v in common.values()):
            continue
        key = (pid, tid, name, cat, tuple(b.cols), tuple(common), b.starts is None or b.ends is None)
        groups.setdefault(key, []).append((ts_ns, b))
    done: set[int] = set()
    prepared: list[tuple[list[Any], np.ndarray]] = []  # per group: its line segments and ts
    group_pids: list[int] = []
    by_thread: dict[tuple[int, int], list[tuple[np.ndarray, int, int]]] = {}  # (ts, group, first row) per entry
    env_texts: dict[int, str | None] = {}  # pid -> its rank/worker fields as text; None: not the standard five
    for (pid, tid, name, cat, col_keys, common_keys, shared), entries in groups.items():
        if pid not in env_texts:
            env = batch.env_of(pid)
            env_texts[pid] = proc_env(env)[1] if env.keys() == ENV_KEYS else None
        env_s = env_texts[pid]
        if env_s is None:
            continue  # the careful per-entry path
        keys = col_keys + common_keys
        plan = PLANS[keys] if keys in PLANS else key_plan(keys)
        if "dur" in keys or plan is None or not ENV_KEYS.isdisjoint(keys):
            continue  # collisions, env overrides: the careful per-entry path
        try:
            segs, ts = _group_segments(entries, off, pid, tid, name, cat, col_keys, common_keys, shared, env_s)
        except (ValueError, TypeError, OverflowError):
            continue
        done.update(id(b) for _, b in entries)
        g = len(prepared)
        prepared.append((segs, ts))
        group_pids.append(pid)
        segments = by_thread.setdefault((pid, tid), [])
        row = 0
        for _, b in entries:  # one segment per entry: a series' events of one take
            segments.append((ts[row : row + b.n], g, row))
            row += b.n
    runs: list[Run] = []
    pids: list[int] = []  # the process of each run
    rest: list[list[np.ndarray]] = [[] for _ in prepared]  # per group: its rows not in a block
    for (pid, _tid), segments in by_thread.items():
        segments.sort(key=lambda seg: int(seg[0][0]))
        cluster = [segments[0]]
        end = int(cluster[0][0][-1])
        for seg in segments[1:] + [None]:  # segments whose time spans overlap may take turns
            if seg is None or int(seg[0][0]) > end:
                for members, n, ts in _turns(cluster, rest):
                    try:
                        runs.append(_render_block(members, n, ts, prepared))
                        pids.append(pid)
                    except (ValueError, TypeError, OverflowError):
                        for g, r0 in members:
                            rest[g].append(np.arange(r0, r0 + n))
                cluster = []
            if seg is not None:
                cluster.append(seg)
                end = max(end, int(seg[0][-1]))
    for (segs, ts), rows, pid in zip(prepared, rest, group_pids):
        if not rows:
            continue
        pids.append(pid)
        idx = np.concatenate(rows)
        if len(idx) == len(ts) and _all(idx == np.arange(len(ts))):
            pick = segs  # the whole group
        else:
            pick = [seg if type(seg) is str else (seg[0][idx], seg[1]) for seg in segs]
        if len(idx) > _FEW:
            try:
                m = render_rows(len(idx), pick)
                runs.append((ts[idx], m.reshape(-1).data, m.shape[1]))  # a view: no copy until the join
                continue
            except (ValueError, TypeError, OverflowError):
                pass  # a negative value: formatted line by line
        runs.append((ts[idx], _render_few(len(idx), pick), 0))
    return runs, done, pids


#: Up to this many lines of a group are formatted one by one (a handful of vector operations costs more).
_FEW = 4


def _group_segments(
    entries: list[tuple[int, Bulk]],
    off: int,
    pid: int,
    tid: int,
    name: str,
    cat: str,
    col_keys: tuple[str, ...],
    common_keys: tuple[str, ...],
    shared: bool,
    env_s: str,
) -> tuple[list[Any], np.ndarray]:
    """The line segments (constant text and ``(values, dec3)`` numbers) of a group of bulk entries, and ts.

    Raises:
        ValueError, TypeError, OverflowError: a column that is not integers (the caller's careful path).
    """
    sizes = [b.n for _, b in entries]
    n = sum(sizes)
    if shared:
        shares = np.array([max(0, b.t1 - t0) // b.n for t0, b in entries], dtype=np.int64)
        t0s = np.array([t0 for t0, _ in entries], dtype=np.int64) + off
        counts = np.array(sizes, dtype=np.int64)
        first = counts.cumsum() - counts
        k = np.arange(n, dtype=np.int64) - first.repeat(counts)
        durs = shares.repeat(counts)
        ts = t0s.repeat(counts) + k * durs
    else:
        starts = joined([b.starts for _, b in entries], np.int64)
        ts = starts + off
        durs = np.maximum(joined([b.ends for _, b in entries], np.int64) - starts, 0)
    segs: list[Any] = []
    sep = ""
    for c in col_keys:
        v = joined([b.cols[c] for _, b in entries])
        if v.dtype.kind not in "iu" or len(v) != n:
            raise ValueError(c)
        segs += [sep + sanitize_key(c), (v.astype(np.int64, copy=False), False)]
        sep = "; "
    for c in common_keys:
        vals = [b.fields[c] for _, b in entries]
        if all(x == vals[0] for x in vals):
            segs.append(f"{sep}{sanitize_key(c)}{vals[0]}")  # the same on every line: constant text
        else:
            segs += [sep + sanitize_key(c), (np.array(vals, dtype=np.int64).repeat(sizes), False)]
        sep = "; "
    segs = ["ts: ", (ts, True), f"; pid: {pid}; tid: {tid}; {head(name, cat)}", *segs]
    segs += [sep + "dur: ", (durs, True), f"; s: t; {env_s}ph: X;\n"]
    return segs, ts


def _turns(
    cluster: list[tuple[np.ndarray, int, int]], rest: list[list[np.ndarray]]
) -> list[tuple[list[tuple[int, int]], int, np.ndarray]]:
    """Which rows of a cluster of segments (one thread, overlapping time spans) take turns.

    Segments of distinct groups with about the same number of lines (at most 2 apart, e.g. a loop's last
    ``stall`` after its last ``batch``) are tried together: ordered by their first ts, their first ``n`` lines
    (``n`` the smallest count) must take turns in ts order (row ``j`` of each, then row ``j + 1`` of each).
    Returns the blocks: ((group, first row) of each member in turn order, ``n``, the ts of the lines in
    order); every other row is added to ``rest``.
    """
    blocks = []
    pending = sorted(cluster, key=lambda seg: len(seg[0]))
    while pending:
        n = len(pending[0][0])
        take = [seg for seg in pending if len(seg[0]) <= n + 2]
        pending = pending[len(take) :]
        groups = {seg[1] for seg in take}
        if len(take) > 1 and len(groups) == len(take) and n > 0:
            take.sort(key=lambda seg: int(seg[0][0]))
            ts = np.array([seg[0][:n] for seg in take]).T.reshape(-1)  # row j of each in turn
            if not _any(ts[1:] < ts[:-1]):
                blocks.append(([(g, r0) for _, g, r0 in take], n, ts))
                take = [(t[n:], g, r0 + n) for t, g, r0 in take if len(t) > n]
        for ts_, g, r0 in take:
            rest[g].append(np.arange(r0, r0 + len(ts_)))
    return blocks


def _render_block(
    members: list[tuple[int, int]], n: int, ts: np.ndarray, prepared: list[tuple[list[Any], np.ndarray]]
) -> Run:
    """One run of ``n`` rows, each the next line of every member group in turn (ONE :func:`render_rows`)."""
    segs: list[Any] = []
    for g, r0 in members:
        segs += [seg if type(seg) is str else (seg[0][r0 : r0 + n], seg[1]) for seg in prepared[g][0]]
    m = render_rows(n, segs)
    ends = (m[0] == 10).nonzero()[0] + 1  # where each member's line ends within a row
    if len(ends) != len(members) or ends[-1] != m.shape[1]:
        raise ValueError("a constant part holds a newline")
    starts = (np.arange(n)[:, None] * m.shape[1] + np.concatenate(([0], ends[:-1]))).reshape(-1)
    return ts, m.reshape(-1).data, starts


def _render_few(n: int, segs: list[Any]) -> bytes:
    """``n`` lines formatted one by one (no padding): for a few leftover lines of a group."""
    cols: list[Any] = [seg if type(seg) is str else seg[0].tolist() for seg in segs]
    dec3 = [type(seg) is not str and seg[1] for seg in segs]
    lines = []
    for r in range(n):
        parts = []
        for col, d in zip(cols, dec3):
            if type(col) is str:
                parts.append(col)
            elif d:
                v = col[r]
                parts.append(f"{v // 1000}{FRAC[v % 1000][:4]}")
            else:
                parts.append(str(col[r]))
        lines.append("".join(parts))
    return "".join(lines).encode("utf-8", "replace")
