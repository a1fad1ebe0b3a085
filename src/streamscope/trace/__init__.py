"""Trace sinks (Litracer log, Chrome JSON, Perfetto, OTLP) fed by the event bus."""
