"""The batch processor: takes recorded events off the buffer and hands the traced ones to the exporters.

OpenTelemetry's ``BatchSpanProcessor`` for our event tuples. At every flush it takes the buffer (and the loops'
series) in one batch, holds back what must wait for a complete event still open on its thread (so each thread's
events reach the exporters in begin order), and exports: one :class:`~streamscope.events.exporters.EventBatch`
per process whose events it writes, or one mixed batch for an exporter that takes them (``mixed_batches``).
Exporters are built lazily from their factories (in ``STREAMSCOPE_TRACE_SINKS``, a name the package root
installs, :data:`DEFAULT_SINK`, or a dotted path; or a factory added in this process) and rebuilt after fork. Their failures are counted and reported once, never raised.
"""

from __future__ import annotations

import time

from streamscope._core import config, hooks
from streamscope.events import context
from streamscope.events.bus import Event, take
from streamscope.events.exporters import (
    FLUSH_TIMEOUT_MILLIS,
    EventBatch,
    ExportResult,
    Sink,
    SinkFactory,
    force_flush,
    parse_specs,
    resolve,
)
from streamscope.events.series import open_horizons, take_series
from streamscope.recording.report import Reporter

__all__ = ["BatchProcessor", "DEFAULT_SINK", "factory_of", "mixed_batch"]


#: Sink used when tracing is on and no sink is named: the Litracer log, by the name ``streamscope/__init__.py``
#: provides its factory under (``hooks.sink("litracer")``: ``events`` does not import ``trace``).
DEFAULT_SINK = "litracer"


def factory_of(spec: str) -> SinkFactory:
    """The exporter factory ``spec`` of ``STREAMSCOPE_TRACE_SINKS`` names: one the package root provided under
    that name (:func:`streamscope._core.hooks.sink`), else the ``module:attr`` dotted path, imported now.

    Raises:
        ImportError, AttributeError, TypeError: when the path does not resolve to a callable.
    """
    provided = hooks.find(hooks.sink(spec))
    return provided if provided is not None else resolve(spec)


class BatchProcessor:
    """The exporters of this process and what they have not been given yet.

    Attributes:
        factories: exporter factories added in this process (kept across fork: the child builds its own).
        sinks: ``(spec, exporter)`` of this process, built at the first export; None until then.
        held: events kept for the next take (see :meth:`take`).
        hold_max_ns: how long an open complete event may hold its thread's later events back.
        errors: failed creations, exports, flushes and shutdowns.
        last_take: events in the last take (the flusher drains sooner after a large one).
    """

    def __init__(self, report: Reporter, factories: list[SinkFactory] | None = None) -> None:
        self.report = report
        self.factories: list[SinkFactory] = [] if factories is None else factories
        self.sinks: list[tuple[str, Sink]] | None = None
        self.held: list[Event] = []
        self.hold_max_ns = 30_000_000_000
        self.errors = 0
        self.last_take = 0

    # --- taking ---------------------------------------------------------------------------------------

    def take(self, hold: bool) -> list[Event]:
        """Everything buffered (the series' complete events too) and what was held back, in recording order.

        ``hold``: events behind a complete event still open on their thread stay for the next take.
        """
        take_series()  # the loops' complete events join the buffer
        events = take()
        if self.held:
            events = self.held + events
            self.held = []
        if hold and events:
            events = self._hold_back(events)
        self.last_take = len(events)
        return events

    def _hold_back(self, events: list[Event]) -> list[Event]:
        """Keep for the next take the events a thread recorded after the begin of a complete event still open
        there (its ``X`` is written when it ends): so every thread's events reach the exporters in begin order.

        A horizon older than ``hold_max_ns`` is ignored (a span abandoned without exit must not hold its thread's
        events back for ever).
        """
        horizons = open_horizons()
        if not horizons:
            return events
        oldest = time.monotonic_ns() - self.hold_max_ns
        horizons = {tid: t0 for tid, t0 in horizons.items() if t0 >= oldest}
        if not horizons:
            return events
        out: list[Event] = []
        held = self.held
        for e in events:
            h = horizons.get(e[5])
            (out if h is None or e[3] < h else held).append(e)
        return out

    # --- exporting ------------------------------------------------------------------------------------

    def export(self, events: list[Event], offset_ns: int, env: dict[str, int] | None = None) -> None:
        """Hand the events of one process (``env`` its rank/worker fields; None: this process's) to the exporters."""
        if events:
            self.export_pieces([(events, env)], offset_ns)

    def export_pieces(self, pieces: list[tuple[list[Event], dict[str, int] | None]], offset_ns: int) -> None:
        """Hand each piece (events of one process, its rank/worker fields; None: this process's) to the exporters.

        An exporter that takes mixed batches (``mixed_batches``) gets them all in one: one encoding and one write
        for this process's events and the parcels it adopted (after a DataLoader's fork each call's fixed costs
        are paid again in page faults).
        """
        sinks = self.get_sinks()
        if not sinks:
            return
        own = context.env_fields()
        batches = [EventBatch(events, offset_ns, own if env is None else env) for events, env in pieces if events]
        mixed = None
        for spec, sink in sinks:
            todo = batches
            if len(batches) > 1 and getattr(sink, "mixed_batches", False):
                if mixed is None:
                    mixed = mixed_batch(batches)
                todo = [mixed]
            for batch in todo:
                try:
                    result = sink.export(batch)
                except Exception as exc:
                    self.errors += 1
                    self.report(
                        f"export:{spec}:{type(exc).__name__}", f"sink {spec} failed: {type(exc).__name__}: {exc}"
                    )
                    continue
                if result is ExportResult.FAILURE:
                    self.errors += 1
                    self.report(f"export:{spec}:FAILURE", f"sink {spec} failed to export a batch")

    def force_flush(self, timeout_millis: int = FLUSH_TIMEOUT_MILLIS) -> bool:
        """Ask every exporter to push what it buffered (each within ``timeout_millis``); True when all did."""
        ok = True
        for spec, sink in self.sinks or []:
            try:
                done = force_flush(sink, timeout_millis)
            except Exception as exc:
                done = False
                self.report(f"flush:{spec}:{type(exc).__name__}", f"sink {spec} failed to flush: {exc!r}")
            if not done:
                self.errors += 1
                ok = False
        return ok

    def tick(self) -> None:
        """Let each exporter that has a ``tick()`` method do its periodic work (called at every flush, events or
        not), e.g. take what other processes of the run left for it. Failures are counted and reported once."""
        for spec, sink in self.sinks or ():
            fn = getattr(sink, "tick", None)
            if fn is None:
                continue
            try:
                fn()
            except Exception as exc:
                self.errors += 1
                self.report(f"tick:{spec}:{type(exc).__name__}", f"sink {spec} failed: {type(exc).__name__}: {exc}")

    def get_sinks(self) -> list[tuple[str, Sink]]:
        """This process's exporters, built now if they are not yet."""
        if self.sinks is not None:
            return self.sinks
        sinks: list[tuple[str, Sink]] = []
        names = parse_specs(config.get("trace_sinks"))
        if not names and not self.factories:
            names = [DEFAULT_SINK]  # tracing switched on by the environment alone (e.g. LITDATA_TRACE_LEVEL)
        specs: list[tuple[str, SinkFactory | None]] = [(s, None) for s in names]
        specs += [(getattr(f, "__qualname__", repr(f)), f) for f in self.factories]
        built: list[SinkFactory] = []
        for spec, factory in specs:
            try:
                make = factory or factory_of(spec)
                if make in built:  # two names of one factory (``litracer`` and its old dotted path): one exporter
                    continue
                built.append(make)
                sinks.append((spec, make()))
            except Exception as exc:
                self.errors += 1
                self.report(f"create:{spec}", f"sink {spec} could not be created: {type(exc).__name__}: {exc}")
        self.sinks = sinks
        return sinks

    def shutdown_sinks(self) -> None:
        """Shut every exporter down; they are built again at the next export."""
        for spec, sink in self.sinks or []:
            try:
                sink.shutdown()
            except Exception as exc:
                self.errors += 1
                self.report(f"shutdown:{spec}", f"sink {spec} failed to shut down: {type(exc).__name__}: {exc}")
        self.sinks = None


def mixed_batch(batches: list[EventBatch]) -> EventBatch:
    """One batch holding the events of ``batches`` (each of one process; the first's fields are ``env``)."""
    first = batches[0]
    envs: dict[int, dict[str, int]] = {}
    events: list[Event] = []
    for b in batches:
        events += b.events
        if b is not first:
            envs.update((pid, b.env) for pid in {e[4] for e in b.events})
    return EventBatch(events, first.epoch_offset_ns, first.env, envs)
