"""Trace sinks (Litracer log now; Chrome JSON, Perfetto and OTLP later) fed by the event bus.

Each sink pairs a pure encoder with a transport. ``STREAMSCOPE_TRACE_SINKS`` names the Litracer log
:data:`LITRACER_SINK` (``litracer``), the name under which ``streamscope/__init__.py`` provides its factory
(:class:`streamscope.trace.exporters.LitracerFileSink`) to ``streamscope.events``; other sinks by a dotted path
(see ``streamscope.events.exporters``).
"""

from __future__ import annotations

__all__ = ["LITRACER_SINK"]


#: The Litracer log's name in ``STREAMSCOPE_TRACE_SINKS``: the sink the event bus writes when none is named
#: (``streamscope.recording.processor.DEFAULT_SINK``, not imported: ``trace`` does not import the bus's runtime).
LITRACER_SINK = "litracer"
