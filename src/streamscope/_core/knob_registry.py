"""The registry of knobs: declaring one (:func:`knob`), reading it (:func:`get`, :func:`explicit`), setting it at
run time (:func:`set_value`, :func:`reset`), and telling a parameter's default from a value the caller gave
(:func:`default_arg`, :func:`given`).

Machinery only: the knobs are declared in :mod:`streamscope._core.knobs`, which :mod:`streamscope._core.config`
imports; read knobs through ``config`` (importing this module alone declares none).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from streamscope._core.errors import ConfigError
from streamscope._core.knob import PARSERS, Knob, parse_str

__all__ = [
    "KNOBS",
    "default_arg",
    "explicit",
    "get",
    "given",
    "knob",
    "live_names",
    "on_change",
    "reset",
    "set_value",
    "table",
]


KNOBS: dict[str, Knob] = {}
_overrides: dict[str, Any] = {}
_lock = threading.Lock()
#: Called as ``hook(name, value)`` after :func:`set_value` (``value`` None after :func:`reset`): see :func:`on_change`.
_HOOKS: list[Callable[[str, Any], None]] = []


def on_change(hook: Callable[[str, Any], None]) -> None:
    """Call ``hook(name, value)`` after every :func:`set_value` (``value`` None after :func:`reset`): the knob
    boards of this process pass the change on to their workers (see :mod:`streamscope._core.board`)."""
    _HOOKS.append(hook)


def knob(
    name: str,
    default: Any,
    unit: str,
    env: str | tuple[str, ...],
    doc: str,
    parse: Callable[[str], Any] | None = None,
    live: bool = False,
    *,
    kind: type | None = None,
    bounds: tuple[Any, Any] | None = None,
    step: Any = None,
    unset: Any = None,
    lazy_default: bool = False,
) -> Knob:
    """Declare a knob. ``env`` may list several variable names; the first one set wins.

    ``kind`` defaults to the type of ``default`` (None when the default is None, or a string read by a custom
    ``parse``). A live knob must declare ``bounds`` and ``step``. ``lazy_default``: the default is parsed at each
    read, not at import (a default that measures the machine; importing reads no disk and no environment).
    """
    if name in KNOBS:
        raise ConfigError(f"knob {name!r} declared twice")
    envs = (env,) if isinstance(env, str) else tuple(env)
    if kind is None and default is not None and not (isinstance(default, str) and parse is not None):
        kind = type(default)
    if parse is None:
        parse = PARSERS.get(kind or type(default), parse_str)
    if live and (bounds is None or not step or kind not in (int, float, bool)):
        raise ConfigError(f"live knob {name!r} must be a number or a flag and declare bounds and a step")
    if bounds is not None and not bounds[0] <= bounds[1]:
        raise ConfigError(f"knob {name!r}: bounds {bounds} are empty")
    if step is not None and not step > 0:
        raise ConfigError(f"knob {name!r}: step must be > 0, got {step!r}")
    k = Knob(name, default, unit, envs, doc, parse, live, kind, bounds, step, unset)
    value_default = default if default is None or lazy_default else k.check(default, f"default of knob {name}")
    k = Knob(name, default, unit, envs, doc, parse, live, kind, bounds, step, unset, value_default, lazy_default)
    KNOBS[name] = k
    return k


def _knob(name: str) -> Knob:
    try:
        return KNOBS[name]
    except KeyError:
        raise ConfigError(f"unknown knob {name!r}; known: {', '.join(sorted(KNOBS))}") from None


def _from_env(k: Knob) -> tuple[Any, str] | None:
    """(value, variable) of the first environment variable of ``k`` that is set, checked; None when none is."""
    for var in k.env:
        raw = os.environ.get(var)
        if raw is not None:
            where = f"environment variable {var}={raw!r} (knob {k.name})"
            try:
                value = k.parse(raw)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{where} is not valid: {exc}") from None
            return k.check(value, where), var
    return None


def get(name: str) -> Any:
    """Current value of knob ``name`` in this process (the run-time override, the environment, the default)."""
    k = _knob(name)
    if name in _overrides:
        return _overrides[name]
    found = _from_env(k)
    return found[0] if found is not None else k.default_value()


def explicit(name: str) -> tuple[Any, str] | None:
    """``(value, where)`` when the user set knob ``name`` explicitly in this process: by :func:`set_value`
    (``where`` = ``"set_value"``) or by environment variable (``where`` = its name); None otherwise."""
    k = _knob(name)
    if name in _overrides:
        return _overrides[name], "set_value"
    return _from_env(k)


class _IntDefault(int):
    """A parameter's default int: equal to the int, but told apart from the same value passed by the caller."""

    __slots__ = ()


class _StrDefault(str):
    """A parameter's default string (see :class:`_IntDefault`)."""

    __slots__ = ()


def default_arg(value: Any) -> Any:
    """``value`` marked as a parameter's default, for :func:`given` (``max_pre_download: int = default_arg(2)``;
    the signature still shows ``2`` and compares equal to it)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"default_arg takes an int or a str, got {value!r}")
    return _IntDefault(value) if isinstance(value, int) else _StrDefault(value)


def given(value: Any) -> bool:
    """False for a value made by :func:`default_arg` (the caller left the parameter out), True otherwise: a
    dataset argument the user gave pins its knob (the tuner leaves it)."""
    return type(value) not in (_IntDefault, _StrDefault)


def set_value(name: str, value: Any) -> None:
    """Set a knob at run time in this process, and on every knob board this process created (so a live knob
    reaches the DataLoader workers too; there it is pinned: the tuner leaves it alone).

    Raises:
        ConfigError: unknown knob, or a value of the wrong type or outside the knob's bounds (naming the knob).
    """
    value = _knob(name).check(value)
    with _lock:
        _overrides[name] = value
    for hook in list(_HOOKS):
        hook(name, value)


def reset(name: str | None = None) -> None:
    """Drop run-time overrides (all of them, or one); the boards of this process go back to what the
    environment and their dataset's arguments say."""
    with _lock:
        names = list(_overrides) if name is None else [name]
        for n in names:
            _overrides.pop(n, None)
    for hook in list(_HOOKS):
        for n in names:
            hook(n, None)


def live_names() -> tuple[str, ...]:
    """The live knobs, sorted by name (the slots of a knob board)."""
    return tuple(sorted(n for n, k in KNOBS.items() if k.live))


def table() -> list[dict[str, Any]]:
    """All knobs as rows (name, default, unit, env, live, bounds, step, doc), sorted by name."""
    return [
        {
            "name": k.name,
            "default": k.default,
            "unit": k.unit,
            "env": ", ".join(k.env),
            "live": k.live,
            "bounds": k.bounds,
            "step": k.step,
            "doc": k.doc,
        }
        for k in sorted(KNOBS.values(), key=lambda k: k.name)
    ]
