"""The process hooks of the event bus: fork and exit, installed once per process by the first configuration.

* fork: before it, the open spans are noted (:func:`~streamscope.events.context.before_fork`); in the child, the
  recorder starts afresh (a fresh buffer, aggregator and flusher: :meth:`Recorder.after_fork_in_child`);
* exit (``atexit``, and ``threading``'s shutdown hook, which also runs in multiprocessing children): open spans
  closed, events flushed, the final snapshot published (:meth:`Recorder.shutdown`).

The recorder is passed in (:func:`install`), so this module sits below :mod:`.recorder`, which installs the hooks
when it is configured, and :mod:`.setup`, which reads the environment. It also keeps whether this process (or the
parent it was forked from) was configured: :func:`~streamscope.recording.setup.configure_from_env` then leaves it
alone.
"""

from __future__ import annotations

import atexit
import os
import threading
import traceback
from typing import Protocol

from streamscope.events import context
from streamscope.events.bus import ACTIVE

__all__ = ["Hooked", "configured", "install", "mark_configured"]


class Hooked(Protocol):
    """What the hooks call on the recorder (:class:`~streamscope.recording.recorder.Recorder`)."""

    def after_fork_in_child(self) -> None:
        """Start afresh in a forked child."""
        ...

    def shutdown(self) -> None:
        """Close open spans, flush, shut the exporters down; idempotent."""
        ...


_hooks_pid = 0  # the process that installed the hooks (fork hooks are inherited; exit hooks re-armed)
_configured = False  # this process (or the parent it was forked from) was configured


def mark_configured() -> None:
    """This process was configured (from the environment or explicitly)."""
    global _configured
    _configured = True


def configured() -> bool:
    """Whether this process, or the parent it was forked from, was configured."""
    return _configured


def install(rec: Hooked) -> None:
    """Register ``rec``'s fork and exit hooks, once per process (a forked child inherits its parent's fork hook
    and re-arms the exit hooks here)."""
    global _hooks_pid
    pid = os.getpid()
    if _hooks_pid == pid:
        return
    if not _hooks_pid:

        def child() -> None:
            global _hooks_pid
            _hooks_pid = os.getpid()  # the parent's exit hooks are inherited with its registrations
            rec.after_fork_in_child()

        os.register_at_fork(before=_before_fork, after_in_parent=context.after_fork_in_parent, after_in_child=child)
    _hooks_pid = pid

    def exit_hook() -> None:
        try:
            rec.shutdown()
        except Exception:
            traceback.print_exc()

    atexit.register(exit_hook)
    reg = getattr(threading, "_register_atexit", None)
    if reg is not None:
        try:
            reg(exit_hook)  # runs in threading._shutdown: at interpreter exit and in multiprocessing children
        except RuntimeError:
            pass


def _before_fork() -> None:
    if ACTIVE:  # tracing or metrics on (off: a fork costs the tracer nothing)
        try:
            context.before_fork()
        except Exception:  # a fork must never fail for the tracer
            pass
