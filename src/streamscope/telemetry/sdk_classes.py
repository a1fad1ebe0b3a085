"""The OpenTelemetry SDK classes the pipeline subclasses, made once the SDK is imported (lazily: its import costs
0.15-0.25 s): the span processor that queues ended spans for the span pump, the providers whose fork hook keeps the
parent's resource, and a resource that hashes once. :mod:`.pipeline` says why."""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from streamscope._core.optional import require
from streamscope.telemetry.export_stats import Stats

__all__ = ["FEATURE", "make_providers", "make_queue_processor", "make_resource"]


FEATURE = "OTLP export (streamscope.enable_telemetry)"


def _span_processor_base() -> type:
    base: type = require("opentelemetry.sdk.trace", FEATURE).SpanProcessor
    return base


@functools.cache  # the classes are made once (the SDK is imported lazily)
def make_queue_processor() -> type:
    """The span processor class: ended spans into a bounded queue that the span pump exports."""
    base = _span_processor_base()

    class QueueSpanProcessor(base):  # type: ignore[misc, valid-type]
        """Ended spans into a bounded queue (a full queue drops and counts); the span pump exports them."""

        def __init__(self, size: int, batch: int, stats: Stats, wake: threading.Event) -> None:
            self.pid = os.getpid()
            self.size = size
            self.batch = batch
            self.queue: deque[Any] = deque()
            self.stats = stats
            self.wake = wake
            self.closed = False

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            return None

        def on_end(self, span: Any) -> None:
            if self.closed or os.getpid() != self.pid:
                return  # a forked child: its parent exports
            q = self.queue
            if len(q) >= self.size:
                self.stats.drop(
                    "traces", 1, f"the span queue (OTEL_BSP_MAX_QUEUE_SIZE={self.size}) is full: the endpoint is slow"
                )
                return
            q.append(_slim(span))
            if len(q) >= self.batch:
                self.wake.set()

        def take(self, n: int) -> list[Any]:
            q = self.queue
            out: list[Any] = []
            while q and len(out) < n:
                out.append(q.popleft())
            return out

        def shutdown(self) -> None:
            self.closed = True

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return True

    return QueueSpanProcessor


#: What the process-dependent resource detection gives in a forked child of the pipeline (see below): no news.
_UNCHANGED = object()


def _unchanged() -> object:
    return _UNCHANGED


def _fork_hook_without_redetection(sdk_module: str, handle_fork: Callable[[], None]) -> None:
    """Run an SDK provider's fork hook (in a forked child) with its resource re-detection left out.

    opentelemetry-sdk (1.39+) re-runs the process-dependent resource detectors (``service.instance.id``) in every
    forked child, on a thread pool of their own, and merges their resource into the provider's: a few ms and two
    threads per DataLoader worker forked per epoch. A forked child exports nothing through this pipeline (see the
    module doc), so its providers keep the parent's resource; the hook's other work (its locks made anew) runs as
    the SDK has it. The child has one thread here, so swapping the module's function for the call is safe.
    """
    mod = sys.modules.get(sdk_module)
    name = "_get_process_dependent_resource"
    saved = getattr(mod, name, None)
    if saved is None:
        handle_fork()
        return
    setattr(mod, name, _unchanged)
    try:
        handle_fork()
    finally:
        setattr(mod, name, saved)


@functools.cache  # the classes are made once (the SDK is imported lazily)
def make_providers(queue_processor: type) -> tuple[type, type]:
    """The SDK's ``TracerProvider`` and ``MeterProvider`` with :func:`_fork_hook_without_redetection`. The tracer
    provider keeps the SDK's whole hook once a span processor other than ``queue_processor`` is added to it (that
    processor may export from a child)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    class PipelineTracerProvider(TracerProvider):
        exports_in_children = False

        def add_span_processor(self, span_processor: Any) -> None:
            if not isinstance(span_processor, queue_processor):
                self.exports_in_children = True
            super().add_span_processor(span_processor)

        def _handle_fork(self) -> None:
            base = super()._handle_fork
            if self.exports_in_children:
                base()
            else:
                _fork_hook_without_redetection(TracerProvider.__module__, base)

        def _update_resource(self, resource: Any) -> None:
            if resource is not _UNCHANGED:
                super()._update_resource(resource)

    class PipelineMeterProvider(MeterProvider):
        def _handle_fork(self) -> None:
            _fork_hook_without_redetection(MeterProvider.__module__, super()._handle_fork)

        def _update_resource(self, resource: Any) -> None:
            if resource is not _UNCHANGED:
                super()._update_resource(resource)

    return PipelineTracerProvider, PipelineMeterProvider


@functools.cache  # the class is made once (the SDK is imported lazily)
def make_resource() -> type:
    """The SDK's ``Resource`` with its hash computed once."""
    base = require("opentelemetry.sdk.resources", FEATURE).Resource

    class PipelineResource(base):  # type: ignore[misc, valid-type]
        """The SDK's ``Resource`` (immutable) with its hash computed once: the OTLP encoder groups every span by
        resource, and the SDK's hash serialises the attributes to JSON at each call."""

        def __init__(self, resource: Any) -> None:
            super().__init__(resource.attributes, resource.schema_url)
            self._hash: int = super().__hash__()

        def __hash__(self) -> int:
            return self._hash

    return PipelineResource


_READABLE: Any = None


def _slim(span: Any) -> Any:
    """An ended span as a plain ``ReadableSpan`` (its events and links as tuples): what the exporter reads, in about
    a third of the memory of the SDK's live span (its lock and bounded lists), so a full queue stays small."""
    global _READABLE
    try:
        if _READABLE is None:
            _READABLE = require("opentelemetry.sdk.trace", FEATURE).ReadableSpan
        return _READABLE(
            name=span.name,
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=span.attributes,
            events=tuple(span.events),
            links=tuple(span.links),
            kind=span.kind,
            status=span.status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )
    except Exception:
        return span
