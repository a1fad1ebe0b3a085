"""The knob board: the live knobs of one dataset, in shared memory its DataLoader workers read.

:func:`config.set_value <streamscope._core.config.set_value>` changes a knob in the calling process only, but a
dataset is read by DataLoader worker processes. A :class:`KnobBoard` holds one slot per live knob (see
``config.live_names()``) in a ``multiprocessing.RawArray``, created with the dataset in the process that builds it:
a forked worker inherits the mapping, a spawned (or forkserver) one receives it with the pickled dataset when
torch starts the worker. The creating process writes; every process reads. A reader pays one shared-memory load
per read (:meth:`KnobBoard.reader`, ``benchmarks/bench_knob_read.py``), not the dictionary and environment
lookups of ``config.get``.

Layout (int64 words): word 0 is the board's *version*, bumped at every value change, so a reader that keeps
derived state notices any change with one load; then, per live knob, ``value, seq, flags`` (``seq``: that
knob's changes; ``flags``: :data:`PINNED`). A float knob's value word holds the float's bytes. Only the creating
process writes, under a lock, so words are never written concurrently; an aligned 8-byte store is atomic on the
platforms streamscope runs on, so a reader sees the old value or the new one, never a mix.

Where a value comes from, first match wins (:meth:`KnobBoard.restore`):

1. the knob set explicitly in the creating process (``config.set_value``, or its environment variable), unless
   set to the knob's ``unset`` value: pinned;
2. the dataset's own setting (an argument such as ``max_pre_download``): pinned when the user passed the
   argument (see :func:`~streamscope._core.config.given`);
3. the knob's default (``config.get``): not pinned.

A pinned knob is the user's: :meth:`KnobBoard.propose` (the tuner) refuses to move it and returns False.
``config.set_value`` and ``config.reset`` in the creating process pass the change on to every board it created.
Each value change calls the board's listener ``(knob, old, new, source, reason)``: the cache layer's listener
records it as a ``tune`` event (``streamscope.cache.knobs``).

Pickled outside a process start (``pickle.dumps``, ``copy.deepcopy``), a board becomes a *detached* copy: its
values and pins in a new board owned by the process that unpickles it.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from multiprocessing import context as _mp_context
from typing import Any

from streamscope._core import config
from streamscope._core.errors import ConfigError

__all__ = ["PINNED", "BoardGroup", "KnobBoard", "active", "live_values"]

_HEADER = 1  # word 0: the board's version
_SLOT = 3  # per knob: value, seq, flags
PINNED = 1

#: ``listener(knob, old, new, source, reason)``, called in the writing process after each value change;
#: ``source`` is ``"user"`` or ``"tuner"``.
Listener = Callable[[str, Any, Any, str, str], None]

#: Boards created by this process (the ones ``config.set_value`` reaches).
_OWNED: weakref.WeakSet[KnobBoard] = weakref.WeakSet()
_ACTIVE: list[Any] = [None]  # weak reference to the board (or group) the metrics report


class KnobBoard:
    """The live knobs of one dataset, shared with its DataLoader workers (see the module docstring).

    Args:
        base: the dataset's own settings, ``knob -> (value, given, argument name)``; ``given`` pins the knob.
        listener: called after each value change (in this process), see :data:`Listener`.

    Raises:
        ConfigError: a base value or an environment value of the wrong type or out of bounds (naming the
            argument or the variable).
    """

    def __init__(
        self, base: Mapping[str, tuple[Any, bool, str]] | None = None, listener: Listener | None = None
    ) -> None:
        names = config.live_names()
        self._attach(names, multiprocessing.RawArray("q", _HEADER + _SLOT * len(names)), os.getpid())
        self._listener: Listener | None = listener
        self._base: dict[str, tuple[Any, bool]] = {}
        self._sources: dict[str, str] = {}
        for name, (value, given, arg) in (base or {}).items():
            k = self._knob(name)
            self._base[name] = (k.check(value, f"{arg}={value!r} (knob {name})"), bool(given))
        for name in names:
            value, pinned, source = self._initial(name)
            self._store(name, value, pinned, source, count=False)
        _OWNED.add(self)
        self.activate()

    def _attach(self, names: tuple[str, ...], raw: Any, owner: int) -> None:
        self.names = names
        self._raw = raw
        self._owner = owner
        self._i64 = memoryview(raw).cast("B").cast("q")
        self._f64 = memoryview(raw).cast("B").cast("d")
        self._index = {n: _HEADER + _SLOT * i for i, n in enumerate(names)}
        self._kinds = {n: (config.KNOBS[n].kind if n in config.KNOBS else int) for n in names}
        self._typed = {n: (self._f64 if k is float else self._i64, self._index[n], k) for n, k in self._kinds.items()}
        self._lock = threading.Lock()
        self._listener = None
        self._base = {}
        self._sources = {}

    # --- reading (any process) ---------------------------------------------------------------------

    def reader(self, name: str) -> Callable[[], Any]:
        """A function returning knob ``name``'s value now: one shared-memory load per call (a flag reads as
        0/1). It holds the board's memory, not the board (nor its dataset)."""
        i = self._slot(name)
        view = self._f64 if self._kinds[name] is float else self._i64
        return partial(view.__getitem__, i)

    def value(self, name: str) -> Any:
        """Knob ``name``'s value now, as its type (int, float or bool)."""
        try:
            view, i, kind = self._typed[name]
        except KeyError:
            self._slot(name)  # raises, naming the live knobs
            raise
        v = view[i]
        return bool(v) if kind is bool else v

    def version(self) -> int:
        """Bumped at every value change of any knob of the board (one load)."""
        return int(self._i64[0])

    def seq(self, name: str) -> int:
        """How many times knob ``name``'s value changed since the board was made."""
        return int(self._i64[self._slot(name) + 1])

    def pinned(self, name: str) -> bool:
        """True when the user set knob ``name`` (argument, environment, ``set_value``): the tuner leaves it."""
        return bool(self._i64[self._slot(name) + 2] & PINNED)

    def snapshot(self) -> dict[str, Any]:
        """Every knob's value now."""
        return {n: self.value(n) for n in self.names}

    def source(self, name: str) -> str:
        """Where knob ``name``'s value came from (creating process only): ``default``, ``argument``,
        ``set_value``, an environment variable's name, ``user`` (set on the board) or ``tuner``."""
        self._slot(name)
        return self._sources.get(name, "unknown")

    @property
    def owned(self) -> bool:
        """True in the process that created the board (the one that may write it)."""
        return self._owner == os.getpid()

    # --- writing (the creating process) ------------------------------------------------------------

    def set(self, name: str, value: Any, base: bool = False) -> None:
        """Set knob ``name`` for this board's dataset as the user: the value is pinned. ``base=True`` also makes
        it the dataset's own setting (what :meth:`restore` returns to), as a dataset attribute does.

        Raises:
            ConfigError: a value of the wrong type or out of bounds, or not the creating process.
        """
        value = self._knob(name).check(value)
        if base:
            self._base[name] = (value, True)
        self._write(name, value, True, "user")

    def propose(self, name: str, value: Any, reason: str = "") -> bool:
        """The tuner's move: set knob ``name`` to ``value`` unless the user pinned it. Returns False (nothing
        changed) for a pinned knob, True when the board holds ``value``.

        Raises:
            ConfigError: a value of the wrong type or out of bounds, or not the creating process.
        """
        value = self._knob(name).check(value)
        return self._write(name, value, False, "tuner", reason)

    def restore(self, name: str) -> None:
        """Knob ``name`` back to what the environment, ``set_value`` and the dataset's setting say."""
        value, pinned, source = self._initial(name)
        self._write(name, value, pinned, source)

    def activate(self) -> None:
        """Make this board the one whose values the metrics report (``streamscope.knob.value``)."""
        _ACTIVE[0] = weakref.ref(self)

    def _initial(self, name: str) -> tuple[Any, bool, str]:
        k = self._knob(name)
        found = config.explicit(name)
        if found is not None and not (k.unset is not None and found[0] == k.unset):
            return found[0], True, found[1]
        if name in self._base:
            value, given = self._base[name]
            return value, given, "argument" if given else "default"
        return config.get(name), False, "default"

    def _write(self, name: str, value: Any, pinned: bool, source: str, reason: str = "") -> bool:
        """Store a value (the tuner's only where the knob is not pinned); False when refused."""
        self._own()
        with self._lock:
            if source == "tuner" and self.pinned(name):
                return False
            old = self.value(name)
            self._store(name, value, pinned, source)
        if old != value and self._listener is not None:
            self._listener(name, old, value, "tuner" if source == "tuner" else "user", reason)
        return True

    def _store(self, name: str, value: Any, pinned: bool, source: str, count: bool = True) -> None:
        i = self._slot(name)
        old = self._i64[i]
        if self._kinds[name] is float:
            self._f64[i] = float(value)
        else:
            self._i64[i] = int(value)
        self._i64[i + 2] = PINNED if pinned else 0
        if count and self._i64[i] != old:
            self._i64[i + 1] += 1
            self._i64[0] += 1
        self._sources[name] = source

    def _own(self) -> None:
        if self._owner != os.getpid():
            raise ConfigError(
                f"a knob board is written by the process that created it (pid {self._owner}), not by pid "
                f"{os.getpid()}: set live knobs in the main process"
            )

    def _slot(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise ConfigError(f"{name!r} is not a live knob; live knobs: {', '.join(self.names)}") from None

    def _knob(self, name: str) -> config.Knob:
        self._slot(name)
        return config.KNOBS[name]

    # --- pickling ----------------------------------------------------------------------------------

    def __reduce__(self) -> tuple[Any, ...]:
        if _mp_context.get_spawning_popen() is not None:  # a worker being started: share the memory
            return (_shared, (self.names, self._raw, self._owner))
        pins = {n for n in self.names if self.pinned(n)}
        listener = self._listener
        try:
            pickle.dumps(listener)
        except Exception:  # noqa: BLE001 - a local function: the copy goes without it
            listener = None
        return (_detached, (self.names, self.snapshot(), pins, dict(self._base), listener))

    def __repr__(self) -> str:
        vals = ", ".join(f"{n}={self.value(n)!r}{'*' if self.pinned(n) else ''}" for n in self.names)
        return f"KnobBoard({vals}; * = pinned)"


def _shared(names: tuple[str, ...], raw: Any, owner: int) -> KnobBoard:
    """The board of a worker's parent, over the same memory (read-only here)."""
    board = KnobBoard.__new__(KnobBoard)
    board._attach(names, raw, owner)
    return board


def _detached(
    names: tuple[str, ...],
    values: dict[str, Any],
    pins: set[str],
    base: dict[str, tuple[Any, bool]],
    listener: Listener | None,
) -> KnobBoard:
    """A new board owned by this process, with a copy's values and pins."""
    board = KnobBoard.__new__(KnobBoard)
    board._attach(names, multiprocessing.RawArray("q", _HEADER + _SLOT * len(names)), os.getpid())
    board._listener = listener
    board._base = dict(base)
    for name in names:
        board._store(name, values[name], name in pins, "copy", count=False)
    _OWNED.add(board)
    return board


class BoardGroup:
    """The boards of several datasets read together (a combination of datasets) as one board: reads come
    from the first, writes go to all; a knob pinned on any of them is pinned."""

    def __init__(self, boards: Iterable[KnobBoard]) -> None:
        self.boards = list(boards)
        if not self.boards:
            raise ConfigError("a board group needs at least one board")
        self.names = self.boards[0].names

    def reader(self, name: str) -> Callable[[], Any]:
        return self.boards[0].reader(name)

    def value(self, name: str) -> Any:
        return self.boards[0].value(name)

    def version(self) -> int:
        return sum(b.version() for b in self.boards)

    def seq(self, name: str) -> int:
        return sum(b.seq(name) for b in self.boards)

    def pinned(self, name: str) -> bool:
        return any(b.pinned(name) for b in self.boards)

    def snapshot(self) -> dict[str, Any]:
        return self.boards[0].snapshot()

    def source(self, name: str) -> str:
        return self.boards[0].source(name)

    @property
    def owned(self) -> bool:
        return all(b.owned for b in self.boards)

    def set(self, name: str, value: Any, base: bool = False) -> None:
        for b in self.boards:
            b.set(name, value, base)

    def propose(self, name: str, value: Any, reason: str = "") -> bool:
        if self.pinned(name):
            return False
        return all([b.propose(name, value, reason) for b in self.boards])

    def restore(self, name: str) -> None:
        for b in self.boards:
            b.restore(name)

    def activate(self) -> None:
        self.boards[0].activate()  # the group is made on demand: the metrics report its first board's values


def active() -> KnobBoard | BoardGroup | None:
    """The board the metrics report: the one last created or activated (a loader activates its dataset's when
    it starts an epoch) in this process, while it lives."""
    ref = _ACTIVE[0]
    return ref() if ref is not None else None


def live_values() -> dict[str, float]:
    """Every live knob's value now, as numbers: from the active board, else this process's ``config.get``
    (a knob whose environment value is bad is left out)."""
    board = active()
    if board is not None:
        return {n: float(v) for n, v in board.snapshot().items()}
    out: dict[str, float] = {}
    for name in config.live_names():
        try:
            out[name] = float(config.get(name))
        except (ConfigError, TypeError, ValueError):
            continue
    return out


def _config_changed(name: str, value: Any) -> None:
    """``config.set_value`` / ``config.reset`` of a live knob: every board this process created follows."""
    if name not in config.KNOBS or not config.KNOBS[name].live:
        return
    pid = os.getpid()
    for board in list(_OWNED):
        if board._owner == pid and name in board._index:
            board.restore(name)


config.on_change(_config_changed)
