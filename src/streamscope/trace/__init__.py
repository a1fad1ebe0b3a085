"""Trace sinks (Litracer log now; Chrome JSON, Perfetto and OTLP later) fed by the event bus.

Each sink pairs a pure encoder with a transport and registers itself with ``streamscope.events`` through a
factory path such as ``streamscope.trace.litracer:LitracerFileSink`` (see ``streamscope.events.exporters``).
"""

from __future__ import annotations

__all__ = ["LITRACER_SINK"]


LITRACER_SINK = "streamscope.trace.litracer:LitracerFileSink"
