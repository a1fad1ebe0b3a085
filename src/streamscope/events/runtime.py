"""What the event API asks of the runtime behind it, and the runtime installed in this process.

The API (:mod:`streamscope.events`) records into the per-process buffer with no runtime at all. A few of its entry
points need one: ``configure``, ``configure_from_env``, ``ensure_metrics``, ``flush`` and ``metrics_view``, and the
spans of the categories the wait split stages (:mod:`.stages`). The runtime, :mod:`streamscope.recording` (the
recorder, its flusher, the metrics, the hand-over between processes, the wait split), sits in a higher layer: the
API never imports it, not even by a dotted string. It installs itself once per interpreter through
:func:`streamscope.events.set_runtime`, as OpenTelemetry's ``set_tracer_provider`` installs a provider, from its
``install()``; the package root, ``streamscope/__init__.py``, provides the hook that calls it
(:data:`streamscope._core.hooks.RUNTIME`) when it is imported, which Python does before any submodule. So an entry
point called before anything installed the runtime (a spawned DataLoader worker that imported only the engine)
installs it then, through the hook: one lookup, once.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from streamscope._core import hooks
from streamscope._core.errors import TraceConfigError

if TYPE_CHECKING:  # the API's own types, for the protocol's signatures
    from streamscope.events.bus import CompleteSpan, Span
    from streamscope.events.view import MetricsView

__all__ = ["Runtime", "get", "installed", "put"]


class Runtime(Protocol):
    """The runtime's side of the event API: what ``streamscope.events`` calls on it."""

    def configure(self, trace: frozenset[str], metrics: frozenset[str], flush_interval: float | None) -> None:
        """Set the traced and the metrics-only categories of this process and start recording."""
        ...

    def configure_from_env(self, force: bool = False) -> None:
        """Configure this process from the environment, once (see ``streamscope.recording.setup``)."""
        ...

    def ensure_metrics(self, level: str) -> None:
        """Switch metrics recording on at ``level``'s categories unless already covered."""
        ...

    def flush(self, publish: bool, repair: bool) -> None:
        """Hand everything buffered in this process to the exporters and metrics now."""
        ...

    def metrics_view(self) -> MetricsView:
        """The run's metrics as data points of the registry, read without side effects."""
        ...

    def staged_span(self, name: str, cat: str, fields: dict[str, Any], compact: bool) -> Span | CompleteSpan:
        """The span of a category in :data:`~streamscope.events.stages.STAGED` (it moves the stage clock)."""
        ...

    def stage(self, code: int) -> AbstractContextManager[None]:
        """A block this process spends in stage ``code`` without a span (see ``streamscope.events.stage``)."""
        ...


_installed: Runtime | None = None


def put(runtime: Runtime) -> None:
    """Make ``runtime`` this interpreter's (``streamscope.events.set_runtime`` calls this)."""
    global _installed
    _installed = runtime


def installed() -> Runtime | None:
    """The runtime installed so far, None before any."""
    return _installed


def get() -> Runtime:
    """The installed runtime; the first call installs it through the package root's ``runtime`` hook.

    Raises:
        TraceConfigError: nothing provides the hook, or it installed nothing.
    """
    rt = _installed
    if rt is None:
        hooks.get(hooks.RUNTIME)()  # streamscope/__init__.py provides it: streamscope.recording.install
        rt = _installed
        if rt is None:
            raise TraceConfigError(
                "the event runtime hook ran but installed no runtime (streamscope.events.set_runtime)"
            )
    return rt
