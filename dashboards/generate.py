"""Generate ``dashboards/streamscope.json``, the Grafana dashboard of a streamscope job, from the metric registry.

Usage (Python >= 3.11: grafana-foundation-sdk needs it; the pinned 11.6 schema build is in the test extra)::

    python -m dashboards.generate            # rewrite dashboards/streamscope.json
    python -m dashboards.generate --check    # exit 1 when the committed JSON is not what the registry gives

Every metric name comes from ``streamscope.events.registry`` (``prometheus_name(M.LOADER_WAIT)``), and a
selector filters only by the variables whose attribute the metric carries (``dataset`` is an attribute of the
loader's metrics, not of the wait's; both sides of a ratio by the same ones), so a renamed metric or attribute
changes the JSON and the test that regenerates it fails until the JSON is committed again. The live knobs and
their units come from ``streamscope._core.config`` (bytes on one panel, counts on another), likewise.
``dashboards/README.md`` says what each panel shows.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamscope._core import config
from streamscope.events.registry import Instrument, M, Metric, prometheus_label, prometheus_name

if sys.version_info < (3, 11):  # pragma: no cover - the message is the point
    raise SystemExit("dashboards/generate.py needs Python >= 3.11 (grafana-foundation-sdk uses typing.Self)")

from grafana_foundation_sdk.builders import bargauge, common, dashboard, heatmap, prometheus, stat, timeseries
from grafana_foundation_sdk.cog import encoder
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as dashboard_models
from grafana_foundation_sdk.models import heatmap as heatmap_models
from grafana_foundation_sdk.models import prometheus as prometheus_models

OUTPUT = Path(__file__).resolve().parent / "streamscope.json"
UID = "streamscope-loader"
TITLE = "streamscope: data loading"

#: Dashboard variables -> the registry attribute each one filters (``job`` is Prometheus's own target label).
VARIABLES: dict[str, str | None] = {"job": None, "rank": "rank", "dataset": "dataset"}
DATASOURCE = dashboard_models.DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "[$__rate_interval]"


# -- PromQL, from registry names only ------------------------------------------------------------------------------


def series(metric: Metric, suffix: str = "", like: Metric | None = None, extra: str = "") -> str:
    """``metric``'s series filtered by the dashboard's variables: ``job`` always, ``rank``/``dataset`` when the
    metric has that attribute (and ``like``, the other side of a ratio, has it too: both sides of a division are
    filtered by the same variables, or a chosen dataset would divide a rank's whole wait by that dataset's batches).
    ``suffix`` picks a histogram's ``_bucket``/``_sum``/``_count`` series; ``extra`` is one more matcher."""
    if suffix and metric.instrument is not Instrument.HISTOGRAM:
        raise ValueError(f"{metric.name} is a {metric.instrument.value}, it has no {suffix} series")
    matchers = [
        f'{var if attr is None else prometheus_label(attr)}=~"${var}"'
        for var, attr in VARIABLES.items()
        if attr is None or (attr in metric.attributes and (like is None or attr in like.attributes))
    ]
    if extra:
        matchers.append(extra)
    return f"{prometheus_name(metric)}{suffix}{{{', '.join(matchers)}}}"


def rate(metric: Metric, suffix: str = "", like: Metric | None = None) -> str:
    if metric.instrument is Instrument.COUNTER or suffix:
        return f"rate({series(metric, suffix, like)}{RATE})"
    raise ValueError(f"rate() of {metric.name}, a {metric.instrument.value}: only counters and buckets grow")


#: How the generator writes a ratio: ``numerator`` RATIO ``denominator`` (tests split expressions at it).
RATIO = "\n  / "


def sum_by(labels: Sequence[str], inner: str, op: str = "sum") -> str:
    return f"{op} by ({', '.join(labels)}) ({inner})"


def quantile(q: float, metric: Metric) -> str:
    return f"histogram_quantile({q:g}, {sum_by(['le'], rate(metric, '_bucket'))})"


def by(*attributes: str) -> tuple[str, ...]:
    """Grouping labels: Prometheus's ``job`` and the label of each registry attribute."""
    return ("job", *(prometheus_label(a) for a in attributes))


RANK = by("rank")


def ms_per_batch() -> str:
    """The exposed data-loading time of each rank: its wait per batch in ms (Ray's panel, with the rank kept)."""
    wait = sum_by(RANK, rate(M.LOADER_WAIT))
    # the wait is per rank (no dataset attribute): so are the batches it is divided by, whatever $dataset says
    batches = sum_by(RANK, rate(M.LOADER_BATCHES, like=M.LOADER_WAIT))
    return f"1000 * {wait}{RATIO}{batches}"


def decode_cpu_per_batch() -> str:
    """The thread CPU time the workers spent producing each batch, in ms (the tuner's decode cost per batch)."""
    cpu = sum_by(RANK, rate(M.LOADER_DECODE_CPU))
    batches = sum_by(RANK, rate(M.LOADER_BATCHES, like=M.LOADER_DECODE_CPU))
    return f"1000 * {cpu}{RATIO}{batches}"


def wait_share() -> str:
    """Each rank's wait over wall time (seconds waited per second): the share of its step spent waiting."""
    return sum_by(RANK, rate(M.LOADER_WAIT))


def hit_ratio() -> str:
    hits = sum_by(RANK, rate(M.CACHE_HITS))
    misses = sum_by(RANK, rate(M.CACHE_MISSES, like=M.CACHE_HITS))
    return f"{hits}{RATIO}({hits} + {misses})"


def model_max(metric: Metric, labels: Sequence[str]) -> str:
    """A gauge of the capacity model (one series per rank and loader), its max over the loaders of each group of
    ``labels``: per rank (``RANK``), or the slowest rank (``("job",)``)."""
    return sum_by(labels, series(metric), op="max")


#: Knob units drawn on the bytes axis; every other live knob counts something (chunks, requests, items) or is a
#: flag (0/1), and is drawn on the counts axis: 2.5e10 bytes beside a depth of 2 on one linear axis flattens the 2.
BYTE_UNITS = ("bytes",)


def live_knobs() -> dict[str, str]:
    """Each live knob (the ones the tuner moves) and its unit, from ``_core/config.py``, sorted by name."""
    return {row["name"]: row["unit"] for row in config.table() if row["live"]}


def knob_values(units: str) -> str:
    """The knobs' gauge, per rank and knob, for the knobs in bytes (``units="bytes"``) or all the others."""
    in_bytes = sorted(k for k, unit in live_knobs().items() if unit in BYTE_UNITS)
    op = "=~" if units == "bytes" else "!~"
    pick = f'{prometheus_label("knob")}{op}"{"|".join(in_bytes)}"'
    return sum_by(by("rank", "knob"), series(M.KNOB_VALUE, extra=pick), op="max")


def _knob_list(units: str) -> str:
    knobs = live_knobs()
    chosen = {k: u for k, u in knobs.items() if (u in BYTE_UNITS) == (units == "bytes")}
    by_unit: dict[str, list[str]] = {}
    for k, u in chosen.items():
        by_unit.setdefault(u, []).append(k)
    return "; ".join(f"{u}: {', '.join(ks)}" for u, ks in sorted(by_unit.items()))


def knob_changes() -> str:
    """The tuner's decisions: a knob's gauge changed within the interval (the tuner moves only live knobs)."""
    return f"changes({series(M.KNOB_VALUE)}{RATE}) > 0"


# -- panels ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str
    instant: bool = False
    heatmap: bool = False


@dataclass(frozen=True)
class PanelSpec:
    kind: str  # timeseries, stat, bargauge, heatmap
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    width: int = 8
    height: int = 8
    stacked: bool = False
    min: float | None = None
    max: float | None = None
    axis_label: str = ""


@dataclass(frozen=True)
class RowSpec:
    title: str
    panels: tuple[PanelSpec, ...] = field(default_factory=tuple)


def q(expr: str, legend: str, **kw: Any) -> Query:
    return Query(expr, legend, **kw)


PER_RANK = "rank {{rank}} ({{job}})"
PER_RANK_DATASET = "rank {{rank}} {{dataset}}"


def per_rank(values: Callable[[Metric], str], *metrics: tuple[str, Metric], op: str = "sum") -> tuple[Query, ...]:
    """One query a metric, summed (``op``) per rank: ``values(metric)`` is its series or rate; a non-empty label
    leads the legend ("retries, rank 0 (job)")."""
    return tuple(
        q(sum_by(RANK, values(m), op=op), f"{label}, {PER_RANK}" if label else PER_RANK) for label, m in metrics
    )


def p50_p99(metric: Metric) -> tuple[Query, ...]:
    return (q(quantile(0.5, metric), "p50"), q(quantile(0.99, metric), "p99"))


def per_dataset_and_sum(metric: Metric) -> tuple[Query, ...]:
    """A counter's rate per rank and dataset, and its sum over everything selected."""
    return (q(sum_by(by("rank", "dataset"), rate(metric)), PER_RANK_DATASET), q(f"sum({rate(metric)})", "all selected"))


def ts(title: str, description: str, queries: tuple[Query, ...], **kw: Any) -> PanelSpec:
    """A time series panel; its y axis starts at 0 unless ``min`` says otherwise."""
    return PanelSpec("timeseries", title, description, queries, **{"min": 0, **kw})


def rows() -> tuple[RowSpec, ...]:
    """The dashboard's rows and panels (what ``dashboards/README.md`` describes)."""
    stage = [prometheus_label("stage")]
    return (
        RowSpec(
            "Overview",
            (
                ts(
                    "Exposed data-loading time per rank (ms per batch)",
                    "How long each rank's training loop waited for its next batch, per batch: the loader's "
                    "exposed time (Ray's 'exposed data loading time', per rank).",
                    (q(ms_per_batch(), PER_RANK),),
                    unit="ms",
                ),
                ts(
                    "Data wait, share of the step per rank",
                    "Seconds each rank's loop waited for data per second of wall time: the share of its step "
                    "lost to data loading (above ~5% the job is input-bound).",
                    (q(wait_share(), PER_RANK),),
                    unit="percentunit",
                ),
                ts(
                    "Straggler: max exposed data-loading time across ranks",
                    "The slowest rank's wait per batch against the mean over ranks: in synchronous training "
                    "every rank waits for the slowest one.",
                    (
                        q(sum_by(["job"], ms_per_batch(), op="max"), "max over ranks ({{job}})"),
                        q(sum_by(["job"], ms_per_batch(), op="avg"), "mean over ranks ({{job}})"),
                    ),
                    unit="ms",
                ),
                PanelSpec(
                    "stat",
                    "Time to first batch",
                    "From the start of the last epoch's iteration (workers started) to its first batch, per rank.",
                    (
                        q(
                            sum_by(by("rank", "dataset"), series(M.LOADER_TIME_TO_FIRST_BATCH), op="max"),
                            PER_RANK_DATASET,
                        ),
                    ),
                    unit="s",
                    width=12,
                    height=5,
                ),
                ts(
                    "Telemetry health: events dropped, exporter errors",
                    "Trace events dropped because a buffer was full, exporter (sink) failures, and the spans and "
                    "metric points exporters could not deliver (e.g. an OTLP endpoint down), per second. "
                    "Non-zero: the trace or the exported metrics miss something.",
                    per_rank(
                        rate,
                        ("dropped", M.EVENTS_DROPPED),
                        ("export errors", M.EXPORT_ERRORS),
                        ("export dropped", M.EXPORT_DROPPED),
                    ),
                    unit="cps",
                    width=12,
                    height=5,
                ),
            ),
        ),
        RowSpec(
            "Is the wait the loader's or the storage's?",
            (
                ts(
                    "Speed-up if the loop never waited, per rank and the slowest rank",
                    "The capacity model's (step + wait) / step per batch over its last window "
                    "(streamscope.model.speedup): what each rank's loop would gain if it never waited for data (1: "
                    "it does not wait). In synchronous training every rank goes at the slowest rank's pace: its "
                    "speed-up is the job's. Beside the storage panels: in flight below the saturation point with "
                    "the latency near W0, the wait is the loader's to fix (more in flight, more workers: what the "
                    "tuner does); at the saturation point with the latency above W0, it is the storage's.",
                    (
                        q(model_max(M.MODEL_SPEEDUP, RANK), PER_RANK),
                        q(model_max(M.MODEL_SPEEDUP, ("job",)), "slowest rank ({{job}})"),
                    ),
                    unit="short",
                    width=12,
                    min=1,
                    axis_label="x (step + wait) / step",
                ),
                ts(
                    "Storage: requests in flight vs the saturation point",
                    "Storage requests under way per rank (Little's law: completions/s x mean latency) against the "
                    "saturation point the model measured (the bandwidth-delay product: max requests/s of the last "
                    "30 s x W0): in flight beyond it only raises the latency.",
                    (
                        q(model_max(M.STORAGE_IN_FLIGHT, RANK), f"in flight, {PER_RANK}"),
                        q(model_max(M.STORAGE_SATURATION, RANK), f"saturates at, {PER_RANK}"),
                    ),
                    unit="short",
                    width=12,
                ),
                ts(
                    "Storage latency: unloaded (W0) vs now",
                    "W0, the storage's unloaded latency (the lowest window-mean latency of the last 30 s), against "
                    "the mean latency of the last window: far above W0 the storage queues.",
                    (
                        q(model_max(M.STORAGE_UNLOADED_LATENCY, RANK), f"W0, {PER_RANK}"),
                        q(model_max(M.STORAGE_LATENCY, RANK), f"now, {PER_RANK}"),
                    ),
                    unit="s",
                    width=8,
                ),
                ts(
                    "Storage delivered",
                    "Bytes per second the storage delivered to each rank over the model's last window.",
                    (q(model_max(M.STORAGE_DELIVERED, RANK), PER_RANK),),
                    unit="Bps",
                    width=8,
                ),
                ts(
                    "Storage saturated",
                    "1 while the model finds the storage saturated (latency over 1.5 x W0 with more in flight than "
                    "the saturation point, or requests retried), per rank.",
                    (q(model_max(M.STORAGE_SATURATED, RANK), PER_RANK),),
                    unit="short",
                    width=8,
                    max=1,
                ),
            ),
        ),
        RowSpec(
            "Wait attribution",
            (
                ts(
                    "Wait by stage (share of wall time, mean over the selected ranks)",
                    "The loop's wait split by what the DataLoader workers were doing meanwhile (download, "
                    "decompress, read, decode, or nothing: idle); the stages stack up to the wait's share.",
                    (q(sum_by(stage, rate(M.LOADER_WAIT_STAGE), op="avg"), "{{stage}}"),),
                    unit="percentunit",
                    width=12,
                    stacked=True,
                ),
                PanelSpec(
                    "bargauge",
                    "Wait by stage over the time range",
                    "Seconds of wait attributed to each stage over the dashboard's time range, summed over the "
                    "selected ranks.",
                    (
                        q(
                            sum_by(stage, f"increase({series(M.LOADER_WAIT_STAGE)}[$__range])"),
                            "{{stage}}",
                            instant=True,
                        ),
                    ),
                    unit="s",
                    width=6,
                    min=0,
                ),
                ts(
                    "Wait per batch p50 / p99",
                    "Quantiles of the loop's wait for each batch over the selected ranks.",
                    p50_p99(M.LOADER_WAIT_DURATION),
                    unit="s",
                    width=6,
                ),
            ),
        ),
        RowSpec(
            "Throughput",
            (
                ts(
                    "Samples/s",
                    "Samples handed to the training loop per second, per rank and dataset, and their sum.",
                    per_dataset_and_sum(M.LOADER_SAMPLES),
                    unit="suffix: samples/s",
                    width=6,
                ),
                ts(
                    "MB/s delivered",
                    "Tensor bytes of the batches handed to the training loop per second.",
                    per_dataset_and_sum(M.LOADER_BYTES),
                    unit="Bps",
                    width=6,
                ),
                ts(
                    "Decode CPU per batch (ms)",
                    "Thread CPU time the DataLoader workers (the loop's own process without workers) spent "
                    "producing each batch: reading, decompressing and decoding its samples (the tuner's decode "
                    "cost per batch).",
                    (q(decode_cpu_per_batch(), PER_RANK),),
                    unit="ms",
                    width=6,
                ),
                ts(
                    "DataLoader result queue and workers",
                    "Worker messages waiting in the DataLoader's result queue (0 while the loop waits: the "
                    "workers are behind), and the worker processes alive.",
                    per_rank(series, ("queued", M.LOADER_QUEUE_DEPTH), ("workers", M.LOADER_WORKERS)),
                    width=6,
                ),
            ),
        ),
        RowSpec(
            "Storage",
            (
                ts(
                    "Download latency p50 / p99",
                    "Quantiles of the time to download one chunk, over the selected ranks.",
                    p50_p99(M.DOWNLOAD_DURATION),
                    unit="s",
                ),
                PanelSpec(
                    "heatmap",
                    "Download latency heatmap",
                    "Chunk downloads per second in each latency bucket.",
                    (q(sum_by(["le"], rate(M.DOWNLOAD_DURATION, "_bucket")), "{{le}}", heatmap=True),),
                    unit="s",
                ),
                ts(
                    "Download MB/s",
                    "Bytes of chunks downloaded per second.",
                    per_rank(rate, ("", M.DOWNLOAD_BYTES)),
                    unit="Bps",
                ),
                ts(
                    "Retries and errors",
                    "Storage requests retried after a retryable error, and chunk downloads that failed, per second.",
                    per_rank(rate, ("retries", M.DOWNLOAD_RETRIES), ("errors", M.DOWNLOAD_ERRORS)),
                    unit="cps",
                    width=12,
                ),
                ts(
                    "Downloads in flight",
                    "Chunk downloads under way in the prefetchers of each rank's workers.",
                    per_rank(series, ("", M.DOWNLOAD_IN_FLIGHT)),
                    width=12,
                ),
            ),
        ),
        RowSpec(
            "Cache",
            (
                ts(
                    "Cache bytes",
                    "Bytes of chunks in the local cache (as of its last eviction pass).",
                    per_rank(series, ("", M.CACHE_SIZE), op="max"),
                    unit="bytes",
                    width=6,
                ),
                ts(
                    "Cache hit ratio",
                    "Chunks asked for that were already in the cache, over all chunks asked for.",
                    (q(hit_ratio(), PER_RANK),),
                    unit="percentunit",
                    width=6,
                    max=1,
                ),
                ts(
                    "Cache hits, misses, evictions",
                    "Chunks per second found in the cache, fetched, and evicted.",
                    per_rank(
                        rate, ("hits", M.CACHE_HITS), ("misses", M.CACHE_MISSES), ("evictions", M.CACHE_EVICTIONS)
                    ),
                    unit="cps",
                    width=6,
                ),
                ts(
                    "Prefetch depth",
                    "Chunks fetched or being fetched ahead of each worker's reader and not yet released.",
                    (q(sum_by(by("rank", "worker"), series(M.PREFETCH_DEPTH)), "rank {{rank}} worker {{worker}}"),),
                    width=6,
                ),
            ),
        ),
        RowSpec(
            "Tuner",
            (
                ts(
                    "Live knob values: bytes",
                    "The live knobs (docs/knobs.md) counted in bytes, which the tuner moves ("
                    + _knob_list("bytes")
                    + "); its decisions are the dashboard's 'Tuner decisions' annotations.",
                    (q(knob_values("bytes"), "{{knob}}, rank {{rank}}"),),
                    unit="bytes",
                    width=12,
                    min=None,
                ),
                ts(
                    "Live knob values: counts",
                    "The other live knobs (docs/knobs.md), which count chunks, requests or items, or are flags "
                    "(1 on, 0 off): " + _knob_list("counts") + ". Apart from the bytes, so that a depth of 2 is "
                    "not flattened by a cache of 25 GB.",
                    (q(knob_values("counts"), "{{knob}}, rank {{rank}}"),),
                    unit="short",
                    width=12,
                    min=None,
                ),
            ),
        ),
    )


# -- building the dashboard -------------------------------------------------------------------------------------------


def _target(query: Query, ref: str) -> prometheus.Dataquery:
    t = prometheus.Dataquery().expr(query.expr).legend_format(query.legend).ref_id(ref).datasource(DATASOURCE)
    if query.heatmap:
        t = t.format(prometheus_models.PromQueryFormat.HEATMAP)
    return t.instant() if query.instant else t.range()


_KINDS: dict[str, Callable[[], Any]] = {
    "timeseries": timeseries.Panel,
    "stat": stat.Panel,
    "bargauge": bargauge.Panel,
    "heatmap": heatmap.Panel,
}


def _panel(spec: PanelSpec) -> Any:
    p = _KINDS[spec.kind]().title(spec.title).description(spec.description).datasource(DATASOURCE)
    p = p.span(spec.width).height(spec.height)
    for i, query in enumerate(spec.queries):
        p = p.with_target(_target(query, chr(ord("A") + i)))
    if spec.kind == "heatmap":
        return (
            p.calculate(False)
            .y_axis(heatmap.YAxisConfig().unit(spec.unit))
            .cell_values(heatmap.CellValues().unit("cps"))
            .color(
                heatmap.HeatmapColorOptions()
                .mode(heatmap_models.HeatmapColorMode.SCHEME)
                .scheme("Oranges")
                .scale(heatmap_models.HeatmapColorScale.EXPONENTIAL)
                .exponent(0.5)
                .steps(64)
            )
        )
    p = p.unit(spec.unit)
    if spec.min is not None:
        p = p.min(spec.min)
    if spec.max is not None:
        p = p.max(spec.max)
    if spec.kind == "timeseries":
        p = p.fill_opacity(40 if spec.stacked else 10).legend(
            common.VizLegendOptions()
            .display_mode(common_models.LegendDisplayMode.LIST)
            .placement(common_models.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        p = p.tooltip(
            common.VizTooltipOptions()
            .mode(common_models.TooltipDisplayMode.MULTI)
            .sort(common_models.SortOrder.DESCENDING)
        )
        if spec.stacked:
            p = p.stacking(common.StackingConfig().mode(common_models.StackingMode.NORMAL))
    elif spec.kind == "bargauge":
        p = p.orientation(common_models.VizOrientation.HORIZONTAL).display_mode(
            common_models.BarGaugeDisplayMode.GRADIENT
        )
    elif spec.kind == "stat":
        p = p.graph_mode(common_models.BigValueGraphMode.AREA).reduce_options(
            common.ReduceDataOptions().calcs(["lastNotNull"]).values(False)
        )
    return p


def _variables() -> list[Any]:
    ds = dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
    out: list[Any] = [ds]
    # each variable's values come from a metric that carries its label; later ones narrow by the earlier ones
    source = {"job": M.LOADER_WAIT, "rank": M.LOADER_WAIT, "dataset": M.LOADER_BATCHES}
    earlier: list[str] = []
    for var in VARIABLES:
        metric = source[var]
        narrow = ", ".join(f'{v}=~"${v}"' for v in earlier)
        selector = f"{prometheus_name(metric)}{{{narrow}}}" if narrow else prometheus_name(metric)
        query = f"label_values({selector}, {var})"
        out.append(
            dashboard.QueryVariable(var)
            .label(var)
            .datasource(DATASOURCE)
            .query(query)
            .refresh(dashboard_models.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dashboard_models.VariableSort.NATURAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(dashboard_models.VariableOption(text="All", value="$__all", selected=True))
        )
        earlier.append(var)
    return out


def _annotation() -> Any:
    return (
        dashboard.AnnotationQuery()
        .name("Tuner decisions")
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color("purple")
        .expr(knob_changes())
    )


#: Keys of a Prometheus annotation that foundation-sdk's generic AnnotationQuery cannot set (Grafana's
#: Prometheus data source reads them; @grafana/schema's types do not declare them).
ANNOTATION_EXTRAS: dict[str, Any] = {
    "titleFormat": "{{knob}} moved (rank {{rank}})",
    "tagKeys": "knob,rank,job",
    "textFormat": "the tuner changed {{knob}} on rank {{rank}} of {{job}}",
}


def build() -> dict[str, Any]:
    """The dashboard as a JSON-ready dict."""
    d = (
        dashboard.Dashboard(TITLE)
        .uid(UID)
        .tags(["streamscope", "data-loading"])
        .description(
            "A streamscope job seen through its Prometheus endpoint: each rank's wait for data and what caused "
            "it, throughput, storage, cache and the tuner. Generated by dashboards/generate.py from the metric "
            "registry."
        )
        .editable()
        .tooltip(dashboard_models.DashboardCursorSync.CROSSHAIR)
        .time("now-30m", "now")
        .refresh("10s")
        .timezone("browser")
        .variables(_variables())
        .annotation(_annotation())
    )
    for row in rows():
        d = d.with_row(dashboard.Row(row.title))
        for spec in row.panels:
            d = d.with_panel(_panel(spec))
    doc = json.loads(json.dumps(d.build(), cls=encoder.JSONEncoder))
    for i, panel in enumerate(doc["panels"], start=1):
        panel["id"] = i  # Grafana needs unique ids; deterministic ones keep the JSON stable
    for ann in doc["annotations"]["list"]:
        if ann.get("name") == "Tuner decisions":
            ann.update(ANNOTATION_EXTRAS)
    return doc


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=False) + "\n"


def expressions(doc: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard: panel targets (rows' nested panels too) and annotations."""
    out: list[str] = []

    def panels(ps: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
        for p in ps:
            yield p
            yield from panels(p.get("panels") or ())

    for p in panels(doc.get("panels") or ()):
        out += [t["expr"] for t in p.get("targets") or () if t.get("expr")]
    out += [a["expr"] for a in (doc.get("annotations") or {}).get("list") or () if a.get("expr")]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dashboards.generate", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed JSON differs from the registry's")
    ap.add_argument("--output", type=Path, default=OUTPUT)
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python -m dashboards.generate", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
