"""The :class:`Knob` type (one setting: default, unit, environment variables, type, bounds, step) and the parsers
of knob values from text (environment variables, ``set_value("x", "3GB")``).

Machinery only: the knobs themselves are declared in :mod:`streamscope._core.knobs` and read through
:mod:`streamscope._core.config`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamscope._core.errors import ConfigError

__all__ = ["PARSERS", "Knob", "choice", "parse_bool", "parse_float", "parse_int", "parse_port", "parse_str"]


def parse_bool(raw: str) -> bool:
    """A flag: 1/true/yes/on or 0/false/no/off (case ignored; empty = False)."""
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected a boolean (1/0, true/false), got {raw!r}")


def parse_str(raw: str) -> str:
    """The text as it is."""
    return raw


def parse_int(raw: str) -> int:
    """A whole number (surrounding blanks ignored)."""
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"expected a whole number, got {raw!r}") from None


def parse_float(raw: str) -> float:
    """A finite number (surrounding blanks ignored)."""
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError(f"expected a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {raw!r}")
    return value


#: The parser of each value type, for a knob that declares none.
PARSERS: dict[type, Callable[[str], Any]] = {int: parse_int, float: parse_float, bool: parse_bool, str: parse_str}


@dataclass(frozen=True)
class Knob:
    """One setting: its name, default, unit, environment variable(s) and meaning.

    ``kind`` is the type of its values (int, float, bool or str; None: not checked). ``bounds`` (inclusive) and
    ``step`` are declared by every live knob: :meth:`check` enforces the bounds, and ``step`` is the smallest move
    worth making (the tuner's grid, see :meth:`snap` and :meth:`moved`). ``unset`` is the value that means "the
    dataset's own setting" (``prefetch_depth=0``: each dataset's ``max_pre_download``), or None.
    """

    name: str
    default: Any
    unit: str
    env: tuple[str, ...]
    doc: str
    parse: Callable[[str], Any]
    live: bool = False  # True: may change while a job runs (read it each time you use it, from the board)
    kind: type | None = None
    bounds: tuple[Any, Any] | None = None
    step: Any = None
    unset: Any = None
    value_default: Any = None  # ``default`` as a value of ``kind`` (``"100GB"`` -> 100_000_000_000)
    lazy_default: bool = False  # the default is worked out at each read (it depends on the machine, e.g. "auto")

    def default_value(self) -> Any:
        """The default as a value of ``kind``."""
        return self.check(self.default, f"default of knob {self.name}") if self.lazy_default else self.value_default

    def check(self, value: Any, where: str | None = None) -> Any:
        """``value`` as a value of this knob (a string is parsed first), or :class:`ConfigError` naming ``where``
        (default: the knob) when it has the wrong type or lies outside the bounds."""
        where = where or f"knob {self.name}"
        if isinstance(value, str) and self.kind not in (None, str):
            try:
                value = self.parse(value)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{where}: {exc}") from None
        kind = self.kind
        if kind is not None:
            if kind is bool:
                ok = isinstance(value, bool)
            elif kind is int:
                ok = isinstance(value, int) and not isinstance(value, bool)
            elif kind is float:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                value = float(value) if ok else value
            else:
                ok = isinstance(value, kind)
            if not ok:
                raise ConfigError(f"{where}: expected {kind.__name__}, got {type(value).__name__} {value!r}")
        if self.bounds is not None and kind is not bool:
            lo, hi = self.bounds
            if not lo <= value <= hi:
                raise ConfigError(f"{where}: {value!r} is outside its bounds {lo}..{hi} ({self.unit})")
        return value

    def snap(self, value: float) -> Any:
        """The value of the step grid ``lo, lo + step, ..., hi`` nearest ``value`` (clamped into the bounds)."""
        if self.bounds is None or not self.step:
            raise ConfigError(f"knob {self.name} declares no bounds and step")
        lo, hi = self.bounds
        k = round((min(max(value, lo), hi) - lo) / self.step)
        out = lo + k * self.step
        if out > hi:
            out -= self.step
        return self.kind(out) if self.kind in (int, float, bool) else out

    def moved(self, value: Any, steps: int) -> Any:
        """``value`` moved by ``steps`` steps (negative: down), clamped into the bounds."""
        if self.bounds is None or not self.step:
            raise ConfigError(f"knob {self.name} declares no bounds and step")
        lo, hi = self.bounds
        out = min(max(value + steps * self.step, lo), hi)
        return self.kind(out) if self.kind in (int, float, bool) else out


def choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    """A parser taking one of ``choices`` (case and surrounding blanks ignored)."""

    def parse(raw: str) -> str:
        value = str(raw).strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


def parse_port(raw: str) -> int | None:
    """A TCP port (0..65535; 0 = a free one); empty = off."""
    raw = raw.strip()
    if not raw:
        return None
    port = int(raw)
    if not 0 <= port <= 65535:
        raise ValueError(f"a TCP port is 0..65535, got {port}")
    return port
