"""Grafana dashboards of streamscope, generated from the metric registry (``python -m dashboards.generate``)."""
