"""Litracer-compatible log lines (LitData's tracer format) and the file sink that appends them.

Every line is one event as ``key: value;`` pairs that Litracer's parser accepts (split on ``;``, then on the
first ``:``, keys lower-cased, values trimmed, lines without ``ph`` skipped, one reused struct per parser
worker). So every line carries every struct field, in this order::

    ts: <µs since the Unix epoch, 3 decimals>; pid: <pid>; tid: <threading.get_ident()>; name: <name>;
    cat: <cat>; cname: <colour>; dur: <µs, 0 unless X>; s: t; <call-site fields>;
    dist_world_size: ..; dist_global_rank: ..; dist_num_nodes: ..; worker_world_size: ..; worker_rank: ..;
    ph: <B|E|I|C|X>;

Rules the encoder enforces:

* values are sanitized: ``;`` becomes ``,``, CR, LF and the other line separators become a space, and a
  value is cut at :data:`MAX_VALUE_CHARS` characters (Go's line scanner refuses lines over 64 KiB);
* keys are reduced to ``[A-Za-z0-9_.-]``; a call-site key that collides (case-insensitively) with a struct
  field (``name, ph, ts, dur, pid, tid, cat, cname, s, args``) is written as ``arg_<key>``;
  a call-site key equal to a rank/worker field replaces that field (LitData's rule); keys that would read
  the same to the parser (it lower-cases them) get a ``_2``, ``_3`` ... suffix;
* ``ph`` is the LAST pair of the line: a line cut short (a full disk during a write) has no ``ph`` and every
  parser skips it, and the next write starts on a fresh line.

``ts`` is CLOCK_MONOTONIC plus one anchor shared by the processes of a run (see ``EventBatch``), so it is
monotonic per thread and comparable across processes. ``tid`` is ``threading.get_ident()`` like LitData.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Any

from streamscope._core import config
from streamscope._core.errors import TraceConfigError
from streamscope.events import CNAMES, EventBatch

MAX_VALUE_CHARS = 1024
STRUCT_FIELDS = frozenset({"name", "ph", "ts", "dur", "pid", "tid", "cat", "cname", "s", "args"})
_LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_TABLE = {ord(";"): ",", **{ord(c): " " for c in _LINE_BREAKS}}
_BAD_KEY = re.compile(r"[^A-Za-z0-9_.\-]")
_MAX_WRITE = 1 << 20

_key_cache: dict[str, str] = {}
_head_cache: dict[tuple[str, str], str] = {}


def sanitize_value(value: Any) -> str:
    """A value as it may appear in a line: no ``;``, no line break, at most MAX_VALUE_CHARS characters."""
    t = type(value)
    if t is int or t is float:
        return repr(value)
    s = value if t is str else str(value)
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
_plan_cache: dict[tuple[str, ...], list[str] | None] = {}
_ENV_KEYS = frozenset(("dist_world_size", "dist_global_rank", "dist_num_nodes", "worker_world_size", "worker_rank"))


def _plan(keys: tuple[str, ...]) -> list[str] | None:
    """``key: `` prefixes for a field-key tuple, or None when the event needs the careful path."""
    plan: list[str] | None = [sanitize_key(k) for k in keys]
    lows = [p.lower() for p in plan]  # type: ignore[union-attr]
    if "dur" in keys or not _ENV_KEYS.isdisjoint(keys) or len(set(lows)) != len(lows):
        plan = _SLOW
    elif any(low[:-2] in _ENV_KEYS for low in lows):
        plan = _SLOW
    if len(_plan_cache) < 4096:
        _plan_cache[keys] = plan
    return plan


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


def encode(batch: EventBatch) -> str:
    """The Litracer lines of ``batch`` (each ends with a newline). Pure function."""
    env = batch.env
    env_all = "".join(f"{k}: {sanitize_value(v)}; " for k, v in env.items())
    off = batch.epoch_offset_ns
    out: list[str] = []
    append = out.append
    sv = sanitize_value
    plans = _plan_cache
    heads = _head_cache
    std_env = env.keys() == _ENV_KEYS
    for ph, name, cat, ts_ns, pid, tid, fields in batch.events:
        t = ts_ns + off
        head = heads.get((name, cat)) or _head(name, cat)
        if fields:
            keys = tuple(fields)
            plan = plans[keys] if keys in plans else _plan(keys)
            if plan is None or not std_env:
                args, dur, env_s = _careful(ph, fields, env)
            else:
                args = "".join(
                    [p + (str(v) if type(v) is int else sv(v)) + "; " for p, v in zip(plan, fields.values())]
                )
                dur, env_s = "0", env_all
        else:
            args, dur, env_s = "", "0", env_all
        if ph not in _PHASES:
            ph = sv(ph)
        append(
            f"ts: {t // 1000}.{t % 1000:03d}; pid: {pid}; tid: {tid}; {head}dur: {dur}; s: t; {args}{env_s}ph: {ph};\n"
        )
    return "".join(out)


def open_log(path: str) -> int:
    """Open ``path`` for appending (created if missing) and return the fd.

    Raises:
        TraceConfigError: naming the path when it cannot be opened for writing.
    """
    try:
        parent = os.path.dirname(os.path.abspath(path))
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise TraceConfigError(
            f"trace log file {path!r} cannot be opened for appending: {exc.strerror or exc}"
        ) from None


class LitracerFileSink:
    """Appends Litracer lines to a file with one ``os.write`` per run of whole lines on an O_APPEND fd.

    Several processes may share the file: each write lands whole at the end of the file, so lines never
    interleave. A failed or short write (full disk) drops the rest of the batch, counts the dropped events
    and makes the next write start with a newline, so no line is ever merged with a cut one.

    Args:
        path: the log file; default: the ``trace_log_file`` knob (``STREAMSCOPE_LOG_FILE``).
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path or config.get("trace_log_file")
        self.fd: int | None = open_log(self.path)
        self.written_events = 0
        self.written_bytes = 0
        self.dropped_events = 0
        self._broken_line = False

    def export(self, batch: EventBatch) -> None:
        """Encode and append ``batch``; raises OSError after counting what was lost."""
        if self.fd is None:
            raise OSError(errno.EBADF, f"trace log {self.path!r} is closed")
        data = encode(batch).encode("utf-8", "replace")
        if self._broken_line:
            data = b"\n" + data
        n_events = len(batch.events)
        view = memoryview(data)
        pos = 0
        while pos < len(data):
            end = len(data) if len(data) - pos <= _MAX_WRITE else data.rfind(b"\n", pos, pos + _MAX_WRITE) + 1
            if end <= pos:
                end = min(len(data), pos + _MAX_WRITE)
            try:
                n = os.write(self.fd, view[pos:end])
            except OSError:
                self._lost(data, pos, n_events)
                raise
            if n < end - pos:
                self._lost(data, pos + n, n_events)
                raise OSError(errno.ENOSPC, f"short write to trace log {self.path!r} ({n} of {end - pos} bytes)")
            pos = end
            self._broken_line = False
        self.written_events += n_events
        self.written_bytes += len(data)

    def _lost(self, data: bytes, pos: int, n_events: int) -> None:
        lost = min(n_events, data.count(b"\n", pos))
        self.dropped_events += lost
        self.written_events += max(0, n_events - lost)
        self.written_bytes += pos
        if pos > 0 and data[pos - 1 : pos] != b"\n":
            self._broken_line = True

    def force_flush(self) -> None:
        """Nothing is held back: every export is written immediately."""

    def shutdown(self) -> None:
        """Close the file."""
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        self.shutdown()
