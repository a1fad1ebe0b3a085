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

Bulk lines of one shape are rendered together with numpy (:func:`~.render_rows.render_rows`: a constant template per
shape, every digit from one look-up table, numbers right-aligned with spaces, so a shape's lines have one
width); a shape it cannot take (values that are not non-negative ints, colliding keys) is rendered per entry
from ``%`` templates (:func:`~.bulk_render.bulk_lines`).

``ts`` is CLOCK_MONOTONIC plus one anchor shared by the processes of a run (see ``EventBatch``), so it is
monotonic per thread and comparable across processes. Each write holds its lines in ``ts`` order (complete
events are recorded when they end, so the recording order is not always the begin order), and the recorder
holds back a thread's events behind a complete event still open there, so every thread's timestamps are
monotonic in the file. ``tid`` is ``threading.get_ident()`` like LitData.
"""

from __future__ import annotations

from typing import Any

from streamscope.events import BULK, EventBatch
from streamscope.trace.bulk_render import bulk_lines, bulk_ts, render_bulks
from streamscope.trace.line_fields import (
    FRAC,
    MAX_VALUE_CHARS,
    PHASES,
    STRUCT_FIELDS,
    TEMPLATES,
    args_template,
    careful,
    head,
    proc_env,
    sanitize_key,
    sanitize_value,
)
from streamscope.trace.line_order import Run, ordered_pieces

# two steps of a flush, by the names they had here before the split: benchmarks/bench_tracer_flush.py times them
# in place (it wraps litracer._render_bulks and litracer._ordered_pieces, which encode_pieces calls by these names)
_render_bulks = render_bulks
_ordered_pieces = ordered_pieces

__all__ = [
    "MAX_VALUE_CHARS",
    "STRUCT_FIELDS",
    "encode",
    "encode_bytes",
    "encode_pieces",
    "sanitize_key",
    "sanitize_value",
]


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
    tpls = TEMPLATES
    frac = FRAC
    mids: dict[tuple[int, int, str, str], str] = {}
    tails: dict[tuple[int, str], str] = {}
    procs: dict[int, tuple[dict[str, int], str, bool]] = {}  # pid -> its fields, their text, standard keys
    bulk_runs, done, bulk_pids = _render_bulks(batch) if any(e[0] == BULK for e in batch.events) else ([], set(), [])
    runs: list[Run] = []  # plain events (one run), bulk entries rendered one by one, the vectorised ones
    run_pids: list[Any] = []  # the process of each run (of each line, for the plain events' run)
    run_ts: list[int] = []  # ts of the lines in ``parts``
    line_pids: list[int] = []  # the process of each line in ``parts`` (a batch of several processes)
    unordered = False  # an X or bulk entry was recorded at its end, after events that began later
    for ph, name, cat, ts_ns, pid, tid, fields in batch.events:
        t = ts_ns + off
        proc = procs.get(pid)
        if proc is None:
            proc = procs[pid] = proc_env(envs.get(pid, env) if envs else env)
        penv = proc[0]
        mid = mids.get((pid, tid, name, cat))
        if mid is None:
            mid = mids[(pid, tid, name, cat)] = f"pid: {pid}; tid: {tid}; {head(name, cat)}"
        if ph == BULK:
            unordered = True
            if id(fields) not in done:
                text = bulk_lines(t, off, mid, fields, penv).encode("utf-8", "replace")  # type: ignore[arg-type]
                runs.append((bulk_ts(t, off, fields), text, 0))  # type: ignore[arg-type]
                run_pids.append(pid)
            continue
        run_ts.append(t)
        if envs:
            line_pids.append(pid)
        if ph == "X":
            unordered = True
        if fields:
            keys = tuple(fields)
            tpl = tpls[keys] if keys in tpls else args_template(keys)
            if tpl is None or not proc[2]:
                args, dur, env_s = careful(ph, fields, penv)
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
            tail = tails[(pid, ph)] = f"; s: t; {proc[1]}ph: {ph if ph in PHASES else sv(ph)};\n"
        ext(("ts: ", str(t // 1000), frac[t % 1000], mid, args, dur, tail))
    if not unordered:
        return ["".join(parts).encode("utf-8", "replace")]
    if parts:
        runs.insert(0, (run_ts, "".join(parts).encode("utf-8", "replace"), 0))
        run_pids.insert(0, line_pids)
    return _ordered_pieces(runs + bulk_runs, run_pids + bulk_pids if envs else None)
