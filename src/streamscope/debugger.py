"""LitData-compatible location of ``enable_tracer`` (``litdata.debugger.enable_tracer``)."""
