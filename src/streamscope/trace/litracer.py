"""Litracer-compatible log lines (LitData's tracer format): the encoder, a pure function of an event batch.

The exporter that appends them to a file is :class:`streamscope.trace.exporters.LitracerFileSink` (this encoder
over the :mod:`streamscope.trace.files` transport), which ``STREAMSCOPE_TRACE_SINKS`` names ``litracer`` (its old
value ``streamscope.trace.litracer:LitracerFileSink`` too: both are installed by ``streamscope/__init__.py``).

Every line is one event as ``key: value;`` pairs that Litracer's parser accepts (split on ``;``, then on the
first ``:``, keys lower-cased, values trimmed, lines without ``ph`` skipped, one reused struct per parser
worker). So every line carries every struct field, in this order::

    ts: <µs since the Unix epoch, 3 decimals>; pid: <pid>; tid: <threading.get_ident()>; name: <name>;
    cat: <cat>; cname: <colour>; <call-site fields>; dur: <µs, 0 unless X>; s: t;
    dist_world_size: ..; dist_global_rank: ..; dist_num_nodes: ..; worker_world_size: ..; worker_rank: ..;
    ph: <B|E|I|C|X>;

Rules the encoder enforces:

* values are sanitized: ``;`` becomes ``,``, CR, LF and the other line separators become a space, and a
  value is cut at :data:`MAX_VALUE_CHARS` characters (Go's line scanner refuses lines over 64 KiB); a value
  with a URL or a ``name=value`` pair is redacted first (``storage.redact``: URL userinfo, signed query
  parameters, registered secrets), since call sites that forget to (an error message quoting a URL) would
  otherwise write credentials to a file people attach to bug reports;
* keys are reduced to ``[A-Za-z0-9_.-]``; a call-site key that collides (case-insensitively) with a struct
  field (``name, ph, ts, dur, pid, tid, cat, cname, s, args``) is written as ``arg_<key>``;
  a call-site key equal to a rank/worker field replaces that field (LitData's rule); keys that would read
  the same to the parser (it lower-cases them) get a ``_2``, ``_3`` ... suffix;
* ``ph`` is the LAST pair of the line: a line cut short (a full disk during a write) has no ``ph`` and every
  parser skips it, and the next write starts on a fresh line.

Bulk entries (``ph`` ``X+``, see :mod:`streamscope.events.bus`) are written as one ``X`` line per event,
with the entry's integer columns (``chunk``, ``item``) first, then its common fields, then ``dur``:

* events timed one by one (``events.each``, the per-sample path): ``ts``/``dur`` are each event's own
  measured begin and duration;
* events done together in one vectorised call (``events.bulk``, the batch path at level ``sample``): the
  line carries ``batched: n``, and ``ts = t0 + k * share``, ``dur = share`` with ``share`` the measured
  interval of the call divided evenly by ``n`` (integer ns). The durations of a batch's sample events sum to
  its measured decode time (up to < n ns of rounding); no per-sample timing is claimed beyond that.

Bulk lines of one shape are rendered together with numpy (:func:`_render_rows`: a constant template per
shape, every digit from one look-up table, numbers right-aligned with spaces, so a shape's lines have one
width); a shape it cannot take (values that are not non-negative ints, colliding keys) is rendered per entry
from ``%`` templates (:func:`_bulk_lines`).

``ts`` is CLOCK_MONOTONIC plus one anchor shared by the processes of a run (see ``EventBatch``), so it is
monotonic per thread and comparable across processes. Each write holds its lines in ``ts`` order (complete
events are recorded when they end, so the recording order is not always the begin order), and the recorder
holds back a thread's events behind a complete event still open there, so every thread's timestamps are
monotonic in the file. ``tid`` is ``threading.get_ident()`` like LitData.
"""

from __future__ import annotations

import re
from typing import Any, cast

import numpy as np

from streamscope.events import BULK, CNAMES, Bulk, EventBatch
from streamscope.events.bus import joined
from streamscope.storage.redact import redact

__all__ = [
    "MAX_VALUE_CHARS",
    "STRUCT_FIELDS",
    "encode",
    "encode_bytes",
    "encode_pieces",
    "sanitize_key",
    "sanitize_value",
]


MAX_VALUE_CHARS = 1024
STRUCT_FIELDS = frozenset({"name", "ph", "ts", "dur", "pid", "tid", "cat", "cname", "s", "args"})
_LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_TABLE = {ord(";"): ",", **{ord(c): " " for c in _LINE_BREAKS}}
_BAD_KEY = re.compile(r"[^A-Za-z0-9_.\-]")

# numpy's module-level helpers (np.stack, np.flatnonzero, ndarray.any, ...) run Python code of their own; after
# a fork every object they touch costs a page fault on first write (refcounts). The encoder uses C-level
# equivalents, ufunc reductions and ndarray methods (measured: ~40 fewer faults per flush after a fork, of ~420).
_any = np.logical_or.reduce
_all = np.logical_and.reduce

_key_cache: dict[str, str] = {}
_head_cache: dict[tuple[str, str], str] = {}


def sanitize_value(value: Any) -> str:
    """A value as it may appear in a line: no ``;``, no line break, at most MAX_VALUE_CHARS characters."""
    t = type(value)
    if t is int or t is float:
        return repr(value)
    try:
        s = value if t is str else str(value)
    except Exception:  # a field whose __str__ fails must not cost the batch
        s = f"<unprintable {t.__name__}>"
    if "://" in s or "=" in s:
        # a URL or a name=value pair may carry a credential (userinfo, a signed query, an error message quoting
        # either): masked as in OTLP spans, before the cut, so the cut never leaves half a secret unmasked
        s = redact(s)
    if len(s) > MAX_VALUE_CHARS:
        s = s[:MAX_VALUE_CHARS]
    return s.translate(_TABLE).strip()


def sanitize_key(key: str) -> str:
    """A call-site key as it may appear in a line (``key: `` prefix included)."""
    out = _key_cache.get(key)
    if out is None:
        k = _BAD_KEY.sub("_", str(key)) or "_"
        if k.lower() in STRUCT_FIELDS:
            k = f"arg_{k}"
        out = f"{k}: "
        if len(_key_cache) < 4096:
            _key_cache[key] = out
    return out


def _head(name: str, cat: str) -> str:
    h = _head_cache.get((name, cat))
    if h is None:
        h = f"name: {sanitize_value(name)}; cat: {sanitize_value(cat)}; cname: {CNAMES.get(cat, 'generic_work')}; "
        if len(_head_cache) < 4096:
            _head_cache[(name, cat)] = h
    return h


_SLOW = None
_PHASES = frozenset("BEICXibenM")
_ENV_KEYS = frozenset(("dist_world_size", "dist_global_rank", "dist_num_nodes", "worker_world_size", "worker_rank"))
_Plan = tuple[list[str], "list[str] | None"]
_plan_cache: dict[tuple[str, ...], _Plan | None] = {}


def _plan(keys: tuple[str, ...]) -> _Plan | None:
    """``key: `` prefixes for a field-key tuple, or None when the event needs the careful path.

    The second list (prefixes without the last key) is set when ``dur`` is the last key: an ``X`` event
    then takes it as the struct's ``dur``; any other event writes it as ``arg_dur``.
    """
    plan = [sanitize_key(k) for k in keys]
    lows = [p.lower() for p in plan]
    out: _Plan | None = (plan, plan[:-1] if keys[-1] == "dur" else None)
    if "dur" in keys[:-1] or not _ENV_KEYS.isdisjoint(keys) or len(set(lows)) != len(lows):
        out = _SLOW
    elif any(low[:-2] in _ENV_KEYS for low in lows):
        out = _SLOW
    if len(_plan_cache) < 4096:
        _plan_cache[keys] = out
    return out


def _careful(ph: str, fields: dict[str, Any], env: dict[str, int]) -> tuple[str, str, str]:
    """(args, dur, env part) for events whose keys collide, override env fields or carry dur."""
    sv = sanitize_value
    dur = "0"
    parts = []
    seen = {f"{k}: " for k in env}
    for k, v in fields.items():
        if k in env:
            continue
        if k == "dur" and ph == "X":
            dur = sv(v)
            continue
        pre = sanitize_key(k)
        low = pre.lower()
        if low in seen:  # distinct call-site keys that read the same to the parser
            i = 2
            while f"{low[:-2]}_{i}: " in seen:
                i += 1
            pre = low = f"{low[:-2]}_{i}: "
        seen.add(low)
        parts.append(pre + sv(v) + "; ")
    env_s = "".join(f"{k}: {sv(fields.get(k, v))}; " for k, v in env.items())
    return "".join(parts), dur, env_s


#: ``.<3 digits>; `` for every sub-microsecond remainder of a timestamp (the ts slot after the µs integer).
_FRAC = [f".{i:03d}; " for i in range(1000)]
#: Call-site field templates per key tuple (see :func:`_args_tpl`).
_tpl_cache: dict[tuple[str, ...], tuple[str, str | None] | None] = {}


def _args_tpl(keys: tuple[str, ...]) -> tuple[str, str | None] | None:
    """``%s`` templates of the call-site fields of ``keys``: all of them, and (when ``dur`` is the last key)
    all but ``dur`` for an ``X`` event, whose ``dur`` is the struct field. None: the careful path."""
    plan = _plan_cache[keys] if keys in _plan_cache else _plan(keys)
    out: tuple[str, str | None] | None = None
    if plan is not None:
        prefixes, without_dur = plan
        full = "".join(p.replace("%", "%%") + "%s; " for p in prefixes)
        short = None if without_dur is None else "".join(p.replace("%", "%%") + "%s; " for p in without_dur)
        out = (full, short)
    if len(_tpl_cache) < 4096:
        _tpl_cache[keys] = out
    return out


def encode(batch: EventBatch) -> str:
    """The Litracer lines of ``batch`` (each ends with a newline). Pure function."""
    return encode_bytes(batch).decode("utf-8")


def encode_bytes(batch: EventBatch) -> bytes:
    """The Litracer lines of ``batch`` as UTF-8 bytes. Pure function."""
    return b"".join(encode_pieces(batch))


def encode_pieces(batch: EventBatch) -> list[Any]:
    """The Litracer lines of ``batch`` as UTF-8 byte buffers (bytes or memoryviews) to be written in order, each
    a run of whole lines: what the file sink hands to one ``os.writev`` without joining them first (a join of
    a flush's lines is a fresh buffer, paid for in page faults after a DataLoader's fork). Pure function.

    Plain events are assembled as string pieces (constant heads and tails cached per process, thread, name
    and category) and joined; bulk entries are rendered together, column-wise with numpy
    (:func:`_render_bulks`). Without complete events the lines keep their recording order; with them, they
    are written in ts order (:func:`_ordered_pieces`).
    """
    env = batch.env
    envs = batch.envs
    off = batch.epoch_offset_ns
    parts: list[str] = []
    ext = parts.extend
    sv = sanitize_value
    tpls = _tpl_cache
    frac = _FRAC
    mids: dict[tuple[int, int, str, str], str] = {}
    tails: dict[tuple[int, str], str] = {}
    procs: dict[int, tuple[dict[str, int], str, bool]] = {}  # pid -> its fields, their text, standard keys
    bulk_runs, done, bulk_pids = _render_bulks(batch) if any(e[0] == BULK for e in batch.events) else ([], set(), [])
    runs: list[_Run] = []  # plain events (one run), bulk entries rendered one by one, the vectorised ones
    run_pids: list[Any] = []  # the process of each run (of each line, for the plain events' run)
    run_ts: list[int] = []  # ts of the lines in ``parts``
    line_pids: list[int] = []  # the process of each line in ``parts`` (a batch of several processes)
    unordered = False  # an X or bulk entry was recorded at its end, after events that began later
    for ph, name, cat, ts_ns, pid, tid, fields in batch.events:
        t = ts_ns + off
        proc = procs.get(pid)
        if proc is None:
            proc = procs[pid] = _proc_env(envs.get(pid, env) if envs else env)
        penv = proc[0]
        mid = mids.get((pid, tid, name, cat))
        if mid is None:
            mid = mids[(pid, tid, name, cat)] = f"pid: {pid}; tid: {tid}; {_head(name, cat)}"
        if ph == BULK:
            unordered = True
            if id(fields) not in done:
                text = _bulk_lines(t, off, mid, fields, penv).encode("utf-8", "replace")  # type: ignore[arg-type]
                runs.append((_bulk_ts(t, off, fields), text, 0))  # type: ignore[arg-type]
                run_pids.append(pid)
            continue
        run_ts.append(t)
        if envs:
            line_pids.append(pid)
        if ph == "X":
            unordered = True
        if fields:
            keys = tuple(fields)
            tpl = tpls[keys] if keys in tpls else _args_tpl(keys)
            if tpl is None or not proc[2]:
                args, dur, env_s = _careful(ph, fields, penv)
                ext(("ts: ", str(t // 1000), frac[t % 1000], mid, args, "dur: ", dur, "; s: t; ", env_s))
                ext(("ph: ", sv(ph), ";\n"))
                continue
            vals = [v if type(v) is int else sv(v) for v in fields.values()]
            short = tpl[1]
            if ph == "X" and short is not None:
                d = vals.pop()
                dur = f"dur: {fields['dur']:.3f}" if type(fields["dur"]) is float else f"dur: {d}"
                args = short % tuple(vals)
            else:
                dur = "dur: 0"
                args = tpl[0] % tuple(vals)
        else:
            args, dur = "", "dur: 0"
        tail = tails.get((pid, ph))
        if tail is None:
            tail = tails[(pid, ph)] = f"; s: t; {proc[1]}ph: {ph if ph in _PHASES else sv(ph)};\n"
        ext(("ts: ", str(t // 1000), frac[t % 1000], mid, args, dur, tail))
    if not unordered:
        return ["".join(parts).encode("utf-8", "replace")]
    if parts:
        runs.insert(0, (run_ts, "".join(parts).encode("utf-8", "replace"), 0))
        run_pids.insert(0, line_pids)
    return _ordered_pieces(runs + bulk_runs, run_pids + bulk_pids if envs else None)


def _proc_env(env: dict[str, int]) -> tuple[dict[str, int], str, bool]:
    """A process's rank/worker fields, as line text, and whether they are the standard five."""
    return env, "".join(f"{k}: {sanitize_value(v)}; " for k, v in env.items()), env.keys() == _ENV_KEYS


#: A run of lines for :func:`_ordered_pieces`: the ts of each line, the lines (bytes or a 1-D byte buffer), and
#: where each line starts in them (one width for all, an array of offsets, or 0: found by the newlines).
_Run = tuple[Any, Any, Any]


def _ordered_pieces(runs: list[_Run], pids: list[Any] | None = None) -> list[Any]:
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


def _bulk_ts(t0: int, off: int, b: Bulk) -> np.ndarray:
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


def _bulk_lines(t0: int, off: int, mid: str, b: Bulk, env: dict[str, int]) -> str:
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
    args, _dur, env_s = _careful("X", common, env)
    ts = _bulk_ts(t0, off, b)
    if b.starts is None or b.ends is None:
        share = max(0, b.t1 + off - t0) // n
        durs = None
        end = f"; {args}dur: {share // 1000}{_FRAC[share % 1000]}s: t; {env_s}ph: X;\n"
    else:
        durs = np.maximum(np.asarray(b.ends, dtype=np.int64) - (ts - off), 0)
        end = f"; {args}dur: "
    slots: list[Any] = ["ts: ", list(map(str, (ts // 1000).tolist())), [_FRAC[x] for x in (ts % 1000).tolist()]]
    sep = mid
    for k, strs in cols.items():
        slots.append(sep + sanitize_key(k))
        slots.append(strs)
        sep = "; "
    slots.append(end)
    if durs is not None:
        slots.append(list(map(str, (durs // 1000).tolist())))
        slots.append([_FRAC[x] for x in (durs % 1000).tolist()])
        slots.append(f"s: t; {env_s}ph: X;\n")
    width = len(slots)
    parts: list[str] = [""] * (n * width)
    for i, piece in enumerate(slots):
        parts[i::width] = piece if type(piece) is list else [piece] * n
    return "".join(parts)


def _cells(spaced: bool, blank_zero: bool = False) -> np.ndarray:
    """0..9999 as four ASCII digits each, one uint32 per number: zero-padded, or leading zeros as spaces
    (``spaced``), and with ``blank_zero`` 0 as four spaces."""
    v = np.arange(10_000)
    chars = (np.stack([v // 1000, v // 100 % 10, v // 10 % 10, v % 10], axis=1) + 48).astype(np.uint8)
    if spaced:
        lead = chars[:, :3]
        lead[np.logical_and.accumulate(lead == 48, axis=1)] = 32
    if blank_zero:
        chars[0] = 32
    return chars.reshape(-1).view(np.uint32)


#: Four ASCII digits for each of 0..9999 as one uint32 cell (bytes in text order), in three regions:
#: zero-padded (``"0007"``), space-padded (``"   7"``), and space-padded with 0 blank (``"    "``: a leading
#: cell of a longer number that is all zeros).
_LUT = np.concatenate([_cells(False), _cells(True), _cells(True, blank_zero=True)])
#: Offset of the space-padded region (the blank region follows at twice this).
_SPACED = 10_000
#: A number's digits above this place that every row shares are written once, as constant text (a ts).
_SHARED_PLACE = 10**12
_INT64_MAX = 2**63 - 1


class _Layout:
    """Where the digits of each number go in a line template (see :func:`_render_rows`); cached per shape.

    The numbers' cells (four digits each, most significant first) are laid end to end: cell ``c`` holds the
    digits of number ``field[c]`` at ``10**(4i) .. 10**(4i+3)`` (``div[c] = 10**(4i)``). Its look-up region
    is chosen per row by comparing the number with ``lo`` and ``hi``: below ``lo`` the cell is all leading
    (blank), below ``hi`` it holds the first significant digit (space-padded), else zero-padded. A number's
    digits are one contiguous run of the cells' bytes; ``copies`` are the slices that place them (the decimal
    point of a ``dec3`` number splits one), ``src``/``dst`` the same as byte indexes.

    The constant text is not part of a layout, only its length in bytes (an int in ``parts``): lines that differ
    only in their text (a DataLoader worker's pid and tid, new every epoch) share one. ``fills`` are the
    placeholders of the numbers, in order, that :meth:`template` puts between the texts.
    """

    __slots__ = ("width", "fills", "field", "div", "lo", "hi", "copies", "src", "dst")

    def __init__(self, parts: tuple[Any, ...]) -> None:
        width = 0
        fills: list[bytes] = []
        field: list[int] = []
        div: list[int] = []
        lo: list[int] = []
        hi: list[int] = []
        copies: list[tuple[int, int, int]] = []  # (first byte in the cells, last + 1, first column in the line)
        k = 0
        for p in parts:
            if type(p) is int:
                width += p
                continue
            digits, dec3, padded = p
            cells = -(-digits // 4)
            first = 4 * (len(field) + cells) - digits  # byte of the number's first digit in the cells
            for i in range(cells - 1, -1, -1):
                field.append(k)
                div.append(10 ** (4 * i))
                if padded or (dec3 and i == 0):  # zero-padded: a ts below its shared digits, a dec3's units cell
                    lo.append(-1)
                    hi.append(-1)
                else:
                    lo.append(10 ** (4 * i) if i else -1)
                    hi.append(min(10 ** (4 * i + 4), _INT64_MAX))  # every int64 is below 10**20
            col = width
            if dec3:
                copies += [(first, first + digits - 3, col), (first + digits - 3, first + digits, col + digits - 2)]
                fills.append(b"0" * (digits - 3) + b".000")
            else:
                copies.append((first, first + digits, col))
                fills.append(b"0" * digits)
            width += len(fills[-1])
            k += 1
        self.width = width
        self.fills = fills
        self.field = np.array(field, dtype=np.intp)
        self.div = np.array(div, dtype=np.int64)[:, None]
        self.lo = np.array(lo, dtype=np.int64)[:, None]
        self.hi = np.array(hi, dtype=np.int64)[:, None]
        self.copies = copies
        self.src = np.concatenate([np.arange(a, b) for a, b, _ in copies])
        self.dst = np.concatenate([np.arange(c, c + b - a) for a, b, c in copies])

    def template(self, texts: list[Any]) -> np.ndarray:
        """One line with every number a placeholder: ``texts`` (the constant parts, in order, as many as the
        layout's text lengths) with :attr:`fills` between them where the numbers go."""
        pieces: list[bytes] = []
        numbers = iter(self.fills)
        for t in texts:
            if t is _NUMBER:
                pieces.append(next(numbers))
            else:
                pieces.append(t)
        return np.frombuffer(b"".join(pieces), dtype=np.uint8)


_layouts: dict[tuple[Any, ...], _Layout] = {}
#: Marks where a number goes among a line's texts (see :meth:`_Layout.template`).
_NUMBER: Any = object()
#: Rows rendered per block by :func:`_render_rows`.
_ROWS = 1024


def _render_rows(n: int, segs: list[Any]) -> np.ndarray:
    """``n`` lines as a uint8 matrix (a row per line): ``segs`` are constant text or ``(values, dec3)`` numbers.

    A number is an int, right-aligned and space-padded to its column's widest value, or with ``dec3`` a count
    of ns written as µs with three decimals (``12.345``). Digits shared by every row (the leading digits of a
    timestamp) are constant text. All digits of all rows come from one look-up in :data:`_LUT`, four digits
    per cell, into a layout cached per shape: a group costs a fixed handful of vector operations however many
    numbers its lines hold (groups are small, a series' events since the last flush, so fixed costs dominate).

    Raises:
        ValueError: a negative value.
    """
    values = np.array([seg[0] for seg in segs if type(seg) is not str])  # a row per number: contiguous
    tops, bottoms = np.maximum.reduce(values, axis=1).tolist(), np.minimum.reduce(values, axis=1).tolist()
    if min(bottoms) < 0:
        raise ValueError("negative value")
    parts: list[Any] = []  # the layout's key: text lengths in bytes and number specs
    texts: list[Any] = []  # the texts (bytes), and _NUMBER where a number goes
    shift = [0] * len(tops)
    k = 0
    for seg in segs:
        if type(seg) is str:
            text = seg.encode("utf-8", "replace")
            parts.append(len(text))
            texts.append(text)
            continue
        dec3 = seg[1]
        shared = tops[k] // _SHARED_PLACE
        if shared and shared == bottoms[k] // _SHARED_PLACE:
            text = str(shared).encode()
            parts.append(len(text))
            texts.append(text)
            shift[k] = shared * _SHARED_PLACE
            parts.append((12, dec3, True))
        else:
            parts.append((max(4 if dec3 else 1, len(str(tops[k]))), dec3, False))
        texts.append(_NUMBER)
        k += 1
    if any(shift):
        values -= np.array(shift, dtype=np.int64)[:, None]
    key = tuple(parts)
    layout = _layouts.get(key)
    if layout is None:
        layout = _Layout(key)
        if len(_layouts) < 1024:
            _layouts[key] = layout
    m = np.empty((n, layout.width), dtype=np.uint8)
    m[:] = layout.template(texts)
    for r in range(0, n, _ROWS):  # blocks of rows: small temporaries, reused by the allocator (no page faults)
        v = values[layout.field, r : r + _ROWS]  # a row per cell
        cells = v // layout.div % 10_000
        region = np.add(v < layout.hi, v < layout.lo, dtype=np.int64)
        region *= _SPACED  # 0: zero-padded, 1: space-padded, 2: blank (the regions are 10_000 apart)
        cells += region
        chars = _LUT.take(cells.T).view(np.uint8)  # a row per line
        if n <= _ROWS:
            m[:, layout.dst] = chars[:, layout.src]  # two calls; slow per row, so big groups use slices
        else:
            block = m[r : r + _ROWS]
            for a, b, col in layout.copies:
                block[:, col : col + b - a] = chars[:, a:b]
    return m


def _render_bulks(batch: EventBatch) -> tuple[list[_Run], set[int], list[int]]:
    """The bulk entries of ``batch`` rendered together, as runs for :func:`_ordered_pieces`, the ids of the
    entries they hold, and the process of each run.

    Entries of one shape (process, thread, name, category, field keys, timing kind) whose values are all
    non-negative ints form a group, rendered in ONE pass (:func:`_render_rows`); its lines all have one width,
    numbers right-aligned with space padding. Groups of one thread whose lines take turns (a loop's ``stall``,
    ``decode_batch`` and ``batch`` series, see :func:`_turns`) are rendered as one, a row per turn holding one
    line of each, so they come out in ts order as one block. Entries of any other shape are left out (the
    caller renders them one by one with :func:`_bulk_lines`).
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
            env_texts[pid] = _proc_env(env)[1] if env.keys() == _ENV_KEYS else None
        env_s = env_texts[pid]
        if env_s is None:
            continue  # the careful per-entry path
        keys = col_keys + common_keys
        plan = _plan_cache[keys] if keys in _plan_cache else _plan(keys)
        if "dur" in keys or plan is None or not _ENV_KEYS.isdisjoint(keys):
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
    runs: list[_Run] = []
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
                m = _render_rows(len(idx), pick)
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
    segs = ["ts: ", (ts, True), f"; pid: {pid}; tid: {tid}; {_head(name, cat)}", *segs]
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
) -> _Run:
    """One run of ``n`` rows, each the next line of every member group in turn (ONE :func:`_render_rows`)."""
    segs: list[Any] = []
    for g, r0 in members:
        segs += [seg if type(seg) is str else (seg[0][r0 : r0 + n], seg[1]) for seg in prepared[g][0]]
    m = _render_rows(n, segs)
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
                parts.append(f"{v // 1000}{_FRAC[v % 1000][:4]}")
            else:
                parts.append(str(col[r]))
        lines.append("".join(parts))
    return "".join(lines).encode("utf-8", "replace")

