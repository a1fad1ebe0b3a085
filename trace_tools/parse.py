"""Streaming parser for Litracer-format trace logs (streamscope's and LitData's).

One event per line: ``key: value;`` pairs split on ``;``, each piece split on its first ``:``, keys trimmed and
lower-cased, values trimmed. Lines without a ``ph`` key are not events (LitData interleaves ordinary log records
such as ``_apply_delete(3, skip_lock=False) called``): they are skipped and counted. Worked example::

    ts:1715000000123456.789;PID:4242; TID:1398; name: download;ph: B;cat: download;chunk: 7;worker_rank: 2;
    -> RawEvent(ph="B", name="download", cat="download", ts=1715000000123456.789, pid=4242, tid=1398,
                args={"chunk": "7", "worker_rank": "2"})

The reader works line by line from a binary file (lines longer than :data:`MAX_LINE` bytes are cut and counted as
unreadable), decodes with ``errors="replace"`` and counts lines with undecodable bytes or NULs as unreadable, so
memory stays bounded whatever the input.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from trace_tools.errors import TraceToolError

#: Longest line accepted, in bytes; longer lines are unreadable (binary garbage without newlines).
MAX_LINE = 1 << 20

#: Keys stored in typed fields (the Litracer TraceEvent struct); every other key is an arg.
STRUCT_KEYS = frozenset({"ph", "name", "ts", "dur", "pid", "tid", "cat", "cname", "s"})


@dataclass(slots=True)
class RawEvent:
    """One parsed event line. ``ts``/``dur`` are microseconds; ``args`` values are the raw strings."""

    ph: str
    name: str
    cat: str
    ts: float
    dur: float
    pid: int
    tid: int
    args: dict[str, str]
    line: int


@dataclass
class ParseStats:
    """Counts of what the reader saw. ``examples`` keeps the first few line numbers per kind of bad line."""

    lines: int = 0
    events: int = 0
    blank: int = 0
    no_ph: int = 0
    unreadable: int = 0
    bad_field: int = 0
    truncated_last: int = 0
    bytes_read: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)

    def note(self, kind: str, text: str, limit: int = 3) -> None:
        """Remember up to ``limit`` examples of ``kind``."""
        lst = self.examples.setdefault(kind, [])
        if len(lst) < limit:
            lst.append(text)


_KEYS: dict[str, str] = {}  # raw key text -> trimmed, lower-cased key (keys repeat on every line)


def split_line(text: str) -> dict[str, str]:
    """Split one log line into its ``key: value`` pairs (keys lower-cased, both sides trimmed)."""
    out: dict[str, str] = {}
    keys = _KEYS
    for piece in text.split(";"):
        key, sep, value = piece.partition(":")
        if sep:
            k = keys.get(key)
            if k is None:
                k = key.strip().lower()
                if len(keys) < 4096:
                    keys[key] = k
            if k:
                out[k] = value.strip()
    return out


def _to_int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return int(float(value))


def parse_line(text: str, line_no: int = 0) -> RawEvent | None:
    """Parse one line into a :class:`RawEvent`; ``None`` when it has no ``ph`` key.

    Raises:
        ValueError: when ``ts``, ``dur``, ``pid`` or ``tid`` is present but not a number, or ``ts`` is missing.
    """
    d = split_line(text)
    ph = d.pop("ph", None)
    if ph is None:
        return None
    ts_text = d.pop("ts", None)
    if ts_text is None:
        raise ValueError("no ts")
    try:
        ts = float(ts_text)
    except ValueError:
        raise ValueError(f"ts {ts_text!r} is not a number") from None
    dur_text = d.pop("dur", "")
    pid_text = d.pop("pid", "0")
    tid_text = d.pop("tid", "0")
    try:
        dur = float(dur_text) if dur_text else 0.0
        pid = _to_int(pid_text) if pid_text else 0
        tid = _to_int(tid_text) if tid_text else 0
    except ValueError:
        raise ValueError(f"dur/pid/tid not a number (dur={dur_text!r} pid={pid_text!r} tid={tid_text!r})") from None
    if ts != ts or ts in (float("inf"), float("-inf")):
        raise ValueError(f"ts {ts_text!r} is not finite")
    name = d.pop("name", "")
    cat = d.pop("cat", "")
    d.pop("cname", None)
    d.pop("s", None)
    return RawEvent(ph.upper() if len(ph) == 1 else ph, name, cat, ts, dur, pid, tid, d, line_no)


def open_log(path: str) -> int:
    """Check ``path`` is a readable, non-empty regular file and return its size.

    Raises:
        TraceToolError: naming the path when it is missing, a directory, unreadable or empty.
    """
    if not os.path.exists(path):
        raise TraceToolError(f"{path}: no such file")
    if os.path.isdir(path):
        raise TraceToolError(f"{path}: is a directory, expected a trace log file")
    try:
        size = os.path.getsize(path)
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise TraceToolError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if size == 0:
        raise TraceToolError(f"{path}: the log is empty (0 bytes), nothing to do")
    return size


def read_events(path: str, stats: ParseStats) -> Iterator[RawEvent]:
    """Yield the events of the log at ``path`` one at a time, counting every other line in ``stats``.

    Raises:
        TraceToolError: when the file cannot be opened or is empty.
    """
    open_log(path)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed in finally; generator
    except OSError as exc:
        raise TraceToolError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        line_no = 0
        readline = f.readline
        while True:
            try:
                raw = readline(MAX_LINE)
            except OSError as exc:
                raise TraceToolError(f"{path}: read error after line {line_no} ({exc.strerror or exc})") from None
            if not raw:
                break
            line_no += 1
            stats.lines += 1
            stats.bytes_read += len(raw)
            complete = raw.endswith(b"\n")
            if not complete and len(raw) >= MAX_LINE:
                # an over-long line: skip the rest of it
                while True:
                    more = readline(MAX_LINE)
                    stats.bytes_read += len(more)
                    if not more or more.endswith(b"\n"):
                        break
                stats.unreadable += 1
                stats.note("unreadable", f"line {line_no}: longer than {MAX_LINE} bytes")
                continue
            text = raw.decode("utf-8", errors="replace")
            if "\ufffd" in text or "\x00" in text:
                stats.unreadable += 1
                stats.note("unreadable", f"line {line_no}: undecodable bytes")
                continue
            text = text.strip()
            if not text:
                stats.blank += 1
                continue
            if not complete and not text.endswith(";"):
                stats.truncated_last += 1
                stats.note("truncated_last", f"line {line_no}: {text[:160]!r}")
                continue
            try:
                ev = parse_line(text, line_no)
            except ValueError as exc:
                stats.bad_field += 1
                stats.note("bad_field", f"line {line_no}: {exc}")
                continue
            if ev is None:
                stats.no_ph += 1
                stats.note("no_ph", f"line {line_no}: {text[:160]!r}")
                continue
            stats.events += 1
            yield ev
    finally:
        f.close()


def describe_no_events(path: str, stats: ParseStats) -> str:
    """The message for a log with no usable event lines."""
    parts = [f"{stats.lines} line(s)"]
    if stats.unreadable:
        parts.append(f"{stats.unreadable} unreadable (binary or undecodable)")
    if stats.no_ph:
        parts.append(f"{stats.no_ph} without 'ph'")
    if stats.bad_field:
        parts.append(f"{stats.bad_field} with bad fields")
    if stats.truncated_last:
        parts.append("a truncated last line")
    return f"{path}: no trace events found ({', '.join(parts)}); is this a streamscope/LitData trace log?"
