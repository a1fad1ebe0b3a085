"""The metric registry: every metric streamscope publishes, declared once. Our data-loading semantic convention.

A :class:`Metric` names its instrument, unit and attributes the way OpenTelemetry does (dotted names under
``streamscope.``; UCUM units: ``s``, ``By``, ``{chunk}``; no ``total`` in the name: the Prometheus translation
adds ``_total`` and unit suffixes). Exporters, dashboards, the tuner and the tests read the names from here
(``M.LOADER_WAIT.name``); nobody spells one by hand. The table in ``src/streamscope/events/README.md`` is
generated from :data:`METRICS` (:func:`markdown_table`; a test keeps it current).

Attributes are few and bounded: ``rank`` and ``node`` of the training process (one per rank), ``worker`` (a
DataLoader worker's id, below ``num_workers``), ``dataset`` (a short name of the dataset a loader reads),
``stage`` (what the workers were doing during the wait) and ``knob`` (a live knob's name). No chunk, sample, URL
or pid is ever an attribute.

Histograms are in seconds with explicit boundaries suited to data loading (:data:`BUCKETS_S`: 10 µs to 60 s),
not OpenTelemetry's millisecond-shaped defaults.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

__all__ = [
    "ATTRIBUTES",
    "BUCKETS_S",
    "C",
    "G",
    "H",
    "Instrument",
    "M",
    "METRICS",
    "Metric",
    "PROMETHEUS_TYPES",
    "README_BEGIN",
    "README_END",
    "STAGES",
    "U",
    "by_name",
    "markdown_table",
    "prometheus_label",
    "prometheus_name",
    "prometheus_unit",
    "readme_with_table",
    "translate_name",
]


#: Upper bounds (seconds) of every histogram's buckets; a last bucket holds everything above.
BUCKETS_S: tuple[float, ...] = (
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


class Instrument(str, enum.Enum):
    """OpenTelemetry's instrument kinds."""

    COUNTER = "counter"  # only grows (summed over the run's processes, the finished ones included)
    UP_DOWN_COUNTER = "up-down counter"  # a current amount that goes up and down (processes still running)
    HISTOGRAM = "histogram"  # a distribution (bucket counts, sum, count)
    GAUGE = "gauge"  # a value as sampled now (processes still running)


#: Attribute name -> what it holds. Every metric's attributes come from here.
ATTRIBUTES: dict[str, str] = {
    "rank": "global rank of the training process (torch.distributed, or RANK)",
    "node": "node of the training process (GROUP_RANK / NODE_RANK, or rank // LOCAL_WORLD_SIZE)",
    "worker": "DataLoader worker id (0 .. num_workers-1)",
    "dataset": "short name of the dataset a loader reads (the last part of its input directory)",
    "stage": "what the workers were doing during the wait: download, decompress, read, decode, idle",
    "knob": "name of a live knob (docs/knobs.md)",
}

#: The ``stage`` values of :data:`M.LOADER_WAIT_STAGE`, in the priority the split gives them.
STAGES: tuple[str, ...] = ("download", "decompress", "read", "decode", "idle")


@dataclass(frozen=True)
class Metric:
    """One metric: its OpenTelemetry name, instrument, UCUM unit, meaning and attribute names."""

    name: str
    instrument: Instrument
    unit: str
    description: str
    attributes: tuple[str, ...] = ("rank", "node")

    def __post_init__(self) -> None:
        bad = [a for a in self.attributes if a not in ATTRIBUTES]
        if bad or not self.name.startswith("streamscope.") or self.name != self.name.lower():
            raise ValueError(f"metric {self.name!r}: bad name or attributes {bad}")

    @property
    def buckets(self) -> tuple[float, ...] | None:
        """Histogram bucket upper bounds in the metric's unit (None for other instruments)."""
        return BUCKETS_S if self.instrument is Instrument.HISTOGRAM else None


C, U, H, G = Instrument.COUNTER, Instrument.UP_DOWN_COUNTER, Instrument.HISTOGRAM, Instrument.GAUGE
_LOADER = ("rank", "node", "dataset")


class M:
    """Every metric, by a constant name (``M.LOADER_WAIT``)."""

    LOADER_WAIT = Metric(
        "streamscope.loader.wait", C, "s", "Time the training loop waited for its next batch (in the loader's next())."
    )
    LOADER_WAIT_DURATION = Metric(
        "streamscope.loader.wait.duration",
        H,
        "s",
        "The training loop's wait for each batch handed to it, 0 for a batch that was ready (its count is the "
        "batches; its sum leaves out the waits that found an epoch's end).",
    )
    LOADER_WAIT_STAGE = Metric(
        "streamscope.loader.wait.stage",
        C,
        "s",
        "The loop's wait split by what the workers were doing meanwhile: download, decompress, read, decode, or "
        "nothing (idle); each worker's share of a wait is counted once its worker reports (a flush tick after the "
        "wait), then the stages sum to streamscope.loader.wait (see the README's 'wait split').",
        ("rank", "node", "stage"),
    )
    LOADER_TIME_TO_FIRST_BATCH = Metric(
        "streamscope.loader.time_to_first_batch",
        G,
        "s",
        "From the start of the last epoch's iteration (workers started) to its first batch in the loop.",
        _LOADER,
    )
    LOADER_BATCHES = Metric("streamscope.loader.batches", C, "{batch}", "Batches handed to the training loop.", _LOADER)
    LOADER_SAMPLES = Metric(
        "streamscope.loader.samples", C, "{sample}", "Samples in the batches handed to the training loop.", _LOADER
    )
    LOADER_BYTES = Metric(
        "streamscope.loader.bytes", C, "By", "Tensor bytes of the batches handed to the training loop.", _LOADER
    )
    LOADER_QUEUE_DEPTH = Metric(
        "streamscope.loader.queue.depth",
        G,
        "{message}",
        "Worker messages (a batch or a group of batches) waiting in the DataLoader's result queue.",
        _LOADER,
    )
    LOADER_WORKERS = Metric("streamscope.loader.workers", G, "{worker}", "DataLoader worker processes alive.", _LOADER)
    LOADER_DECODE_CPU = Metric(
        "streamscope.loader.decode.cpu",
        C,
        "s",
        "Thread CPU time the workers spent producing batches; without workers, with the tuner on, the loop's "
        "process CPU outside the training step (decoding and the download threads): the tuner's decode cost per "
        "batch.",
    )
    DOWNLOAD_DURATION = Metric("streamscope.download.duration", H, "s", "Time to download one chunk.")
    DOWNLOAD_BYTES = Metric("streamscope.download.bytes", C, "By", "Bytes of the chunks downloaded.")
    DOWNLOAD_RETRIES = Metric(
        "streamscope.download.retries", C, "{retry}", "Storage requests retried after a retryable error."
    )
    DOWNLOAD_ERRORS = Metric("streamscope.download.errors", C, "{error}", "Chunk downloads that failed.")
    DOWNLOAD_IN_FLIGHT = Metric(
        "streamscope.download.in_flight",
        U,
        "{chunk}",
        "Chunk downloads under way (the prefetchers' fetches).",
        ("rank", "node", "worker"),
    )
    CACHE_SIZE = Metric("streamscope.cache.size", G, "By", "Bytes of chunks in the local cache (as last evicted).")
    CACHE_EVICTIONS = Metric("streamscope.cache.evictions", C, "{chunk}", "Chunks evicted from the local cache.")
    CACHE_HITS = Metric("streamscope.cache.hits", C, "{chunk}", "Chunks asked for that were already in the cache.")
    CACHE_MISSES = Metric("streamscope.cache.misses", C, "{chunk}", "Chunks asked for that had to be fetched.")
    PREFETCH_DEPTH = Metric(
        "streamscope.prefetch.depth",
        U,
        "{chunk}",
        "Chunks fetched or being fetched ahead of the reader and not yet released.",
        ("rank", "node", "worker"),
    )
    EVENTS_DROPPED = Metric(
        "streamscope.events.dropped", C, "{event}", "Trace events dropped because a buffer was full."
    )
    EXPORT_ERRORS = Metric(
        "streamscope.events.export.errors", C, "{error}", "Exporter (sink) failures: creations, exports, flushes."
    )
    EXPORT_DROPPED = Metric(
        "streamscope.events.export.dropped",
        C,
        "{item}",
        "Spans and metric points an exporter could not deliver: its bounded queue was full, or the export failed "
        "for good (e.g. an OTLP endpoint unreachable, hanging or refusing).",
    )
    KNOB_VALUE = Metric(
        "streamscope.knob.value",
        G,
        "{value}",  # each knob has its own unit (docs/knobs.md); "1" would read as a ratio in Prometheus
        "The value of each live knob (what the tuner moves).",
        ("rank", "node", "knob"),
    )
    MODEL_SPEEDUP = Metric(
        "streamscope.model.speedup",
        G,
        "1",
        "The speed-up the loop would get if it never waited for data: (step + wait) / step per batch over the last "
        "window (1: the loop does not wait; 2: half its time is waiting). The capacity model's (tune/README.md), "
        "measured whether or not the tuner runs.",
        _LOADER,
    )
    STORAGE_IN_FLIGHT = Metric(
        "streamscope.storage.in_flight",
        G,
        "{request}",
        "Storage requests (chunk downloads) under way on average over the last window: Little's law, completions "
        "per second x their mean latency (all the rank's readers).",
        _LOADER,
    )
    STORAGE_LATENCY = Metric(
        "streamscope.storage.latency",
        G,
        "s",
        "Mean latency of the storage requests completed in the last window (the loaded latency).",
        _LOADER,
    )
    STORAGE_UNLOADED_LATENCY = Metric(
        "streamscope.storage.unloaded_latency",
        G,
        "s",
        "W0, the storage's unloaded latency: the lowest window-mean latency of the last 30 s (a min filter, as "
        "TCP BBR's min RTT).",
        _LOADER,
    )
    STORAGE_DELIVERED = Metric(
        "streamscope.storage.delivered",
        G,
        "By/s",
        "Bytes per second the storage delivered to the rank over the last window.",
        _LOADER,
    )
    STORAGE_SATURATION = Metric(
        "streamscope.storage.saturation",
        G,
        "{request}",
        "The saturation point: the bandwidth-delay product, max requests/s of the last 30 s x W0. In flight beyond "
        "it only raises the latency.",
        _LOADER,
    )
    STORAGE_SATURATED = Metric(
        "streamscope.storage.saturated",
        G,
        "1",
        "1 when the storage is saturated (latency over 1.5 x W0 with more in flight than the saturation point, or "
        "requests retried), else 0.",
        _LOADER,
    )


#: Every metric, in declaration order.
METRICS: tuple[Metric, ...] = tuple(v for k, v in vars(M).items() if isinstance(v, Metric))

_BY_NAME = {m.name: m for m in METRICS}
if len(_BY_NAME) != len(METRICS):
    raise ValueError("a metric name is declared twice")


def by_name(name: str) -> Metric:
    """The metric called ``name``.

    Raises:
        KeyError: naming the unknown metric.
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}") from None


def markdown_table() -> str:
    """The semantic-convention table of the README (name, instrument, unit, attributes, description)."""
    rows = ["| name | instrument | unit | attributes | description |", "|---|---|---|---|---|"]
    for m in METRICS:
        attrs = ", ".join(m.attributes)
        rows.append(f"| `{m.name}` | {m.instrument.value} | `{m.unit}` | {attrs} | {m.description} |")
    rows += ["", "| attribute | meaning |", "|---|---|"]
    rows += [f"| `{k}` | {v} |" for k, v in ATTRIBUTES.items()]
    return "\n".join(rows) + "\n"


# -- the OpenTelemetry-to-Prometheus translation ------------------------------------------------------------------
# OpenTelemetry's "Prometheus and OpenMetrics Compatibility" rules, as the Collector's translator applies them:
# invalid characters become "_" (runs collapsed, none at the ends); the UCUM unit, spelled out, is appended unless
# the name already holds it; an annotation ({chunk}) is no unit; "1" on a gauge becomes "ratio"; "a/b" becomes
# "a_per_b"; a counter (monotonic sum) ends in "_total". The Prometheus endpoint and the dashboards both use this.

_PROM_UNITS: dict[str, str] = {
    "d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds", "us": "microseconds",
    "ns": "nanoseconds", "By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes", "GiBy": "gibibytes",
    "TiBy": "tibibytes", "KBy": "kilobytes", "MBy": "megabytes", "GBy": "gigabytes", "TBy": "terabytes",
    "m": "meters", "V": "volts", "A": "amperes", "J": "joules", "W": "watts", "g": "grams", "Cel": "celsius",
    "Hz": "hertz", "%": "percent", "1": "",
}  # fmt: skip
_PROM_PER_UNITS: dict[str, str] = {
    "s": "second", "min": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year",
}  # fmt: skip
#: The Prometheus metric type of each instrument (an up-down counter is a gauge: it is not monotonic).
PROMETHEUS_TYPES: dict[Instrument, str] = {
    Instrument.COUNTER: "counter",
    Instrument.UP_DOWN_COUNTER: "gauge",
    Instrument.GAUGE: "gauge",
    Instrument.HISTOGRAM: "histogram",
}


def _prom_tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[^a-zA-Z0-9]+", text) if t]


def _unit_words(unit: str, instrument: Instrument) -> tuple[list[str], list[str]]:
    """The words of ``unit``'s main part and of its "per" part (with "per"), empty where it adds nothing."""
    main, _, per = unit.partition("/")
    main, per = main.strip(), per.strip()
    if main == "1" and not per:
        return (["ratio"] if instrument is Instrument.GAUGE else []), []
    main_words = _prom_tokens(_PROM_UNITS.get(main, main)) if main and not ("{" in main or "}" in main) else []
    per_words = _prom_tokens(_PROM_PER_UNITS.get(per, per)) if per and not ("{" in per or "}" in per) else []
    return main_words, (["per", *per_words] if per_words else [])


def prometheus_unit(unit: str, instrument: Instrument) -> str:
    """The Prometheus unit suffix of a UCUM ``unit`` ("" for none): ``s`` -> ``seconds``, ``By/s`` ->
    ``bytes_per_second``, ``{chunk}`` -> "", ``1`` -> ``ratio`` on a gauge (nothing otherwise)."""
    main, per = _unit_words(unit, instrument)
    return "_".join(main + per)


def translate_name(name: str, unit: str, instrument: Instrument) -> str:
    """The Prometheus name of an OpenTelemetry metric ``name`` with ``unit`` and ``instrument`` (see above).

    Histograms get the base name: the exposition adds ``_bucket``, ``_sum`` and ``_count``.
    """
    tokens = _prom_tokens(name)
    main, per = _unit_words(unit, instrument)
    ratio = main == ["ratio"]
    if main and not ratio and not (len(main) == 1 and main[0] in tokens):  # a name that holds its unit keeps it
        tokens += main
    if per and tokens[-len(per) :] != per:
        tokens += per
    if instrument is Instrument.COUNTER:
        tokens = [t for t in tokens if t != "total"] + ["total"]
    elif ratio:
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    out = "_".join(tokens)
    return f"_{out}" if out[:1].isdigit() else out


def prometheus_name(metric: Metric) -> str:
    """``metric``'s Prometheus name: ``streamscope.loader.wait`` (counter, ``s``) ->
    ``streamscope_loader_wait_seconds_total``; a histogram's base name (``..._seconds``, series ``_bucket``,
    ``_sum``, ``_count``)."""
    return translate_name(metric.name, metric.unit, metric.instrument)


def prometheus_label(attribute: str) -> str:
    """An attribute's Prometheus label name: invalid characters become "_", runs of "_" collapse (so no name
    starts with the reserved ``__``)."""
    out = re.sub(r"_+", "_", re.sub(r"[^a-zA-Z0-9_]", "_", attribute))
    return f"_{out}" if out[:1].isdigit() else out


README_BEGIN = "<!-- metric table: generated by `python -m streamscope.events.metric_table` -->"
README_END = "<!-- end of the metric table -->"


def readme_with_table(text: str) -> str:
    """``text`` (the events README) with its metric table replaced by the current one.

    Raises:
        ValueError: the README has no table markers.
    """
    head, sep, rest = text.partition(README_BEGIN)
    _, sep2, tail = rest.partition(README_END)
    if not sep or not sep2:
        raise ValueError(f"the README has no {README_BEGIN!r} ... {README_END!r} block")
    return f"{head}{README_BEGIN}\n{markdown_table()}{README_END}{tail}"
