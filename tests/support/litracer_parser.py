"""A Python port of Litracer's log parser, to check every line streamscope writes.

Rules ported (observability-facts §5.2; Litracer ``litparser.ParseLine``, ``MapToStruct``, ``TraceEvent``):

* lines are split on ``\\n`` (a trailing ``\\r`` is dropped, as Go's ``bufio.ScanLines`` does); a line longer
  than 64 KiB stops Go's scanner, so it is an error here;
* a line is split on ``;``; each piece on its FIRST ``:`` (pieces without one are ignored); the key is
  trimmed and lower-cased, the value trimmed;
* a line without ``ph`` is skipped;
* keys that name a ``TraceEvent`` field (name, ph, ts, dur, pid, tid, cat, cname, s) set that field, parsed
  like ``fmt.Sscanf`` with ``%d``/``%f`` (leading number, trailing input ignored); a conversion failure
  sends the key to ``args``; every other key goes to ``args`` (string values);
* each parser worker REUSES one struct: a field a line omits keeps the previous line's value; ``args`` is
  replaced per line; ``dur``, ``tid``, ``cat``, ``cname`` and ``s`` are omitted from the JSON when empty/0.

:func:`check_line` is the strict check for streamscope's own lines: every struct field present on the line
itself, every typed field convertible, and ``ph`` last.
"""

from __future__ import annotations

import re
from typing import Any

MAX_LINE = 64 * 1024
STRUCT_FIELDS = ("name", "ph", "ts", "dur", "pid", "tid", "cat", "cname", "s")
INT_FIELDS = {"pid", "tid"}
FLOAT_FIELDS = {"ts", "dur"}
OMITEMPTY = {"dur", "tid", "cat", "cname", "s"}
ENV_FIELDS = ("dist_world_size", "dist_global_rank", "dist_num_nodes", "worker_world_size", "worker_rank")

_INT = re.compile(r"\s*[+-]?\d+")
_FLOAT = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


class ParseError(ValueError):
    """A line Litracer would not turn into a proper event."""


def split_pairs(line: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of a line, in order, by Litracer's splitting rules."""
    out = []
    for piece in line.split(";"):
        if ":" not in piece:
            continue
        k, v = piece.split(":", 1)
        out.append((k.strip().lower(), v.strip()))
    return out


def _convert(key: str, value: str) -> Any:
    if key in INT_FIELDS:
        m = _INT.match(value)
        if not m:
            raise ValueError(value)
        return int(m.group())
    if key in FLOAT_FIELDS:
        m = _FLOAT.match(value)
        if not m:
            raise ValueError(value)
        return float(m.group())
    return value


class LitracerParser:
    """One Litracer parser worker (with its reused struct)."""

    def __init__(self) -> None:
        self.struct: dict[str, Any] = {}
        self.warnings: list[str] = []

    def parse_line(self, line: str) -> dict[str, Any] | None:
        """The Chrome event Litracer would emit for ``line``, or None when it skips the line."""
        if len(line) > MAX_LINE:
            raise ParseError(f"line of {len(line)} characters exceeds Go's 64 KiB scanner limit")
        fields = dict(split_pairs(line))
        if "ph" not in fields:
            return None
        args: dict[str, str] = {}
        for k, v in fields.items():
            if k in STRUCT_FIELDS:
                try:
                    self.struct[k] = _convert(k, v)
                except ValueError:
                    self.warnings.append(f"Failed to convert field {k}={v!r}")
                    args[k] = v
            else:
                args[k] = v
        ev = {k: v for k, v in self.struct.items() if not (k in OMITEMPTY and v in ("", 0, 0.0))}
        ev["args"] = args
        return ev

    def parse_text(self, text: str) -> list[dict[str, Any]]:
        """Every event of a log's text, in order."""
        out = []
        for raw in text.split("\n"):
            line = raw[:-1] if raw.endswith("\r") else raw
            ev = self.parse_line(line)
            if ev is not None:
                out.append(ev)
        return out


def check_line(line: str) -> dict[str, Any]:
    """Strictly check one streamscope line and return its event (parsed without struct reuse).

    Raises:
        ParseError: when a struct or rank/worker field is missing from the line, a typed field does not
            convert, a key repeats, or ``ph`` is not the last pair.
    """
    if "\n" in line or "\r" in line:
        raise ParseError(f"line contains a line break: {line!r}")
    pairs = split_pairs(line)
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ParseError(f"repeated key in {line!r}")
    missing = [k for k in (*STRUCT_FIELDS, *ENV_FIELDS) if k not in keys]
    if missing:
        raise ParseError(f"fields {missing} missing from {line!r}")
    if keys[-1] != "ph" or not line.endswith(";"):
        raise ParseError(f"ph is not the last pair of {line!r}")
    p = LitracerParser()
    ev = p.parse_line(line)
    if p.warnings or ev is None:
        raise ParseError(f"{p.warnings} in {line!r}")
    if ev["ph"] not in ("B", "E", "I", "C", "X", "i", "M"):
        raise ParseError(f"bad ph {ev['ph']!r} in {line!r}")
    return ev


def check_log(text: str) -> list[dict[str, Any]]:
    """Check every line of a streamscope log (nothing but events, each complete) and return the events."""
    if text and not text.endswith("\n"):
        raise ParseError("log does not end with a newline")
    return [check_line(line) for line in text.split("\n")[:-1]] if text else []


def unmatched(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``B`` events without a matching ``E`` on the same (pid, tid, name, cat), in order."""
    stacks: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for ev in sorted(events, key=lambda e: e["ts"]):
        key = (ev["pid"], ev.get("tid", 0), ev["name"], ev.get("cat", ""))
        if ev["ph"] == "B":
            stacks.setdefault(key, []).append(ev)
        elif ev["ph"] == "E" and stacks.get(key):
            stacks[key].pop()
    return [e for s in stacks.values() for e in s]
