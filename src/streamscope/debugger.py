"""LitData-compatible location of ``enable_tracer`` (``litdata.debugger.enable_tracer``)."""

from __future__ import annotations

from streamscope.api.tracing import enable_tracer, flush_tracer, metrics

__all__ = ["enable_tracer", "flush_tracer", "metrics"]
