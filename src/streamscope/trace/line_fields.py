"""The fields of a Litracer line (:mod:`.litracer` describes the format): values and keys sanitized, and the
pieces the encoder caches per process (the ``pid/tid/name/cat`` head, the prefixes and ``%`` templates of a
tuple of call-site keys, the rank/worker fields of a process).

A tuple of keys that collides with the struct fields, overrides a rank/worker field or carries ``dur`` before its
end takes :func:`careful`, the per-event path; every other tuple gets one cached :func:`key_plan` and
:func:`args_template`.
"""

from __future__ import annotations

import re
from typing import Any

from streamscope.events import CNAMES
from streamscope.storage.redact import redact

__all__ = [
    "ENV_KEYS",
    "FRAC",
    "MAX_VALUE_CHARS",
    "PHASES",
    "PLANS",
    "STRUCT_FIELDS",
    "TEMPLATES",
    "args_template",
    "careful",
    "head",
    "key_plan",
    "proc_env",
    "sanitize_key",
    "sanitize_value",
]


MAX_VALUE_CHARS = 1024
STRUCT_FIELDS = frozenset({"name", "ph", "ts", "dur", "pid", "tid", "cat", "cname", "s", "args"})
_LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_TABLE = {ord(";"): ",", **{ord(c): " " for c in _LINE_BREAKS}}
_BAD_KEY = re.compile(r"[^A-Za-z0-9_.\-]")

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


def head(name: str, cat: str) -> str:
    """``name: ..; cat: ..; cname: ..; ``: the part of a line after ``pid`` and ``tid`` (cached per name, category)."""
    h = _head_cache.get((name, cat))
    if h is None:
        h = f"name: {sanitize_value(name)}; cat: {sanitize_value(cat)}; cname: {CNAMES.get(cat, 'generic_work')}; "
        if len(_head_cache) < 4096:
            _head_cache[(name, cat)] = h
    return h


_SLOW = None
#: Phases written as they are (any other ``ph`` is sanitized first).
PHASES = frozenset("BEICXibenM")
#: The standard rank/worker fields of every line.
ENV_KEYS = frozenset(("dist_world_size", "dist_global_rank", "dist_num_nodes", "worker_world_size", "worker_rank"))
_Plan = tuple[list[str], "list[str] | None"]
#: :func:`key_plan` per key tuple (the encoders look it up before calling it).
PLANS: dict[tuple[str, ...], _Plan | None] = {}


def key_plan(keys: tuple[str, ...]) -> _Plan | None:
    """``key: `` prefixes for a field-key tuple, or None when the event needs the careful path.

    The second list (prefixes without the last key) is set when ``dur`` is the last key: an ``X`` event
    then takes it as the struct's ``dur``; any other event writes it as ``arg_dur``.
    """
    plan = [sanitize_key(k) for k in keys]
    lows = [p.lower() for p in plan]
    out: _Plan | None = (plan, plan[:-1] if keys[-1] == "dur" else None)
    if "dur" in keys[:-1] or not ENV_KEYS.isdisjoint(keys) or len(set(lows)) != len(lows):
        out = _SLOW
    elif any(low[:-2] in ENV_KEYS for low in lows):
        out = _SLOW
    if len(PLANS) < 4096:
        PLANS[keys] = out
    return out


def careful(ph: str, fields: dict[str, Any], env: dict[str, int]) -> tuple[str, str, str]:
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
FRAC = [f".{i:03d}; " for i in range(1000)]
#: Call-site field templates per key tuple (see :func:`args_template`).
TEMPLATES: dict[tuple[str, ...], tuple[str, str | None] | None] = {}


def args_template(keys: tuple[str, ...]) -> tuple[str, str | None] | None:
    """``%s`` templates of the call-site fields of ``keys``: all of them, and (when ``dur`` is the last key)
    all but ``dur`` for an ``X`` event, whose ``dur`` is the struct field. None: the careful path."""
    plan = PLANS[keys] if keys in PLANS else key_plan(keys)
    out: tuple[str, str | None] | None = None
    if plan is not None:
        prefixes, without_dur = plan
        full = "".join(p.replace("%", "%%") + "%s; " for p in prefixes)
        short = None if without_dur is None else "".join(p.replace("%", "%%") + "%s; " for p in without_dur)
        out = (full, short)
    if len(TEMPLATES) < 4096:
        TEMPLATES[keys] = out
    return out


def proc_env(env: dict[str, int]) -> tuple[dict[str, int], str, bool]:
    """A process's rank/worker fields, as line text, and whether they are the standard five."""
    return env, "".join(f"{k}: {sanitize_value(v)}; " for k, v in env.items()), env.keys() == ENV_KEYS
