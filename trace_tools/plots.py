"""PNG output of ``summary``: a timeline (epochs, then one row per process and category), the loop's wait over time
split by cause, and latency histograms.

The timeline is collected in bounded memory: each row holds the busy time per time bin; when the covered time
range needs more than :data:`MAX_BINS` bins, every bin doubles in width (neighbours are added together), so a row
never holds more than ``MAX_BINS`` numbers however long the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from streamscope._core.optional import require
from trace_tools.model import LOOP_SPAN_NAMES, Proc
from trace_tools.stall import CLASSES, LABELS, StallResult, recommendation
from trace_tools.stats import LogHist, fmt_us

MAX_BINS = 1200
MAX_ROWS = 64

CAT_COLORS: dict[str, str] = {
    "epoch": "#9e9e9e",
    "batch": "#4caf50",
    "stall": "#e53935",
    "sample": "#8e24aa",
    "download": "#1e88e5",
    "read": "#43a047",
    "decompress": "#fb8c00",
    "delete": "#6d4c41",
    "prefetch": "#00acc1",
    "lock": "#757575",
    "cache": "#fdd835",
    "tune": "#3949ab",
    "crash": "#000000",
    "upload": "#d81b60",
    "write": "#c0ca33",
}


#: Epoch-category spans kept for the timeline (the rest are counted).
MAX_EPOCHS = 512

#: Spans whose begin and end are drawn as lines across the whole timeline: a loop's epoch, an optimize/map job.
BOUNDARY_NAMES = LOOP_SPAN_NAMES | {"optimize", "map"}

#: Row order of categories within a process (others after these, alphabetically).
CAT_ORDER = (
    "stall", "batch", "download", "decompress", "read", "sample", "prefetch", "cache", "delete", "lock",
    "upload", "write", "tune", "crash",
)  # fmt: skip

_ROLE_ORDER = {"loader": 1, "optimize": 2, "": 3}


@dataclass
class EpochMark:
    """One span of category ``epoch`` (a loop's epoch, an optimize/map job, a plan)."""

    proc: Proc
    name: str
    epoch: str
    b: float
    e: float


class Timeline:
    """Busy time per (process, category, bin), bins of a common width growing by doubling; the trace's extent.

    Bins are counted from ``origin`` (the first timestamp seen); ``start``/``end`` are the earliest and latest
    timestamps of any event, and the bins always cover them, so the picture starts at the trace's start.
    """

    def __init__(self, width_us: float = 1000.0) -> None:
        self.width = width_us
        self.origin: float | None = None
        self.lo = 0
        self.hi = -1
        self.start = math.inf
        self.end = -math.inf
        self.rows: dict[tuple[int, str], dict[int, float]] = {}
        self.procs: dict[int, Proc] = {}
        self._alias: dict[tuple[int, str], tuple[int, str]] = {}
        self.epochs: list[EpochMark] = []
        self.dropped_rows = 0
        self.dropped_epochs = 0

    def _grow(self) -> None:
        self.width *= 2.0
        for key, bins in self.rows.items():
            nb: dict[int, float] = {}
            for i, v in bins.items():
                j = i // 2
                nb[j] = nb.get(j, 0.0) + v
            self.rows[key] = nb
        self.lo //= 2
        self.hi //= 2

    def _cover(self, x0: float, x1: float) -> tuple[int, int]:
        """Make the bins cover ``[x0, x1]`` (relative to ``origin``); the bin indices of both ends."""
        while True:
            i0 = math.floor(x0 / self.width)
            i1 = math.floor(x1 / self.width)
            lo = min(self.lo, i0) if self.hi >= self.lo else i0
            hi = max(self.hi, i1) if self.hi >= self.lo else i1
            if hi - lo < MAX_BINS:
                break
            self._grow()
        self.lo, self.hi = lo, hi
        return i0, i1

    def note(self, ts: float) -> None:
        """An event at ``ts`` (microseconds): the trace's extent includes it."""
        if self.origin is None:
            self.origin = ts
        if ts < self.start or ts > self.end:
            self.start = min(self.start, ts)
            self.end = max(self.end, ts)
            self._cover(ts - self.origin, ts - self.origin)

    def add(self, proc: Proc, cat: str, b: float, e: float) -> None:
        """Add the busy interval ``[b, e]`` (microseconds) to the row of ``proc`` and ``cat``."""
        self.note(b)
        self.note(e)
        assert self.origin is not None
        key = self._alias.get((proc.uuid, cat), (proc.uuid, cat))
        if key not in self.rows:
            # a worker named like one seen before (the loader's worker W of a later epoch: a new process unless
            # persistent_workers) adds to that row, so the rows stay bounded by workers, not by epochs
            twin = None
            if proc.worker is not None and proc.role:
                twin = next((k for k in self.rows if k[1] == cat and self.procs[k[0]].label == proc.label), None)
            if twin is not None:
                self._alias[key] = key = twin
            elif len(self.rows) >= MAX_ROWS:
                self.dropped_rows += 1
                return
            else:
                self.rows[key] = {}
                self.procs[proc.uuid] = proc
        x0 = b - self.origin
        x1 = max(e - self.origin, x0)
        i0, i1 = self._cover(x0, x1)
        bins = self.rows[key]
        w = self.width
        if i0 == i1:
            bins[i0] = bins.get(i0, 0.0) + (x1 - x0)
            return
        bins[i0] = bins.get(i0, 0.0) + ((i0 + 1) * w - x0)
        for i in range(i0 + 1, i1):
            bins[i] = bins.get(i, 0.0) + w
        bins[i1] = bins.get(i1, 0.0) + (x1 - i1 * w)

    def add_epoch(self, proc: Proc, name: str, epoch: str, b: float, e: float) -> None:
        """A span of category ``epoch``: drawn as a bar in its process's epoch row."""
        self.note(b)
        self.note(e)
        if len(self.epochs) >= MAX_EPOCHS:
            self.dropped_epochs += 1
            return
        self.epochs.append(EpochMark(proc, name, epoch, b, e))


def proc_order(p: Proc) -> tuple[int, int, int, int, int]:
    """Sort key of a process: run, rank, main before loader workers before optimize workers, worker id."""
    role = 0 if p.worker is None else _ROLE_ORDER.get(p.role, 3)
    return (p.run, p.rank, role, -1 if p.worker is None else p.worker, p.index)


def _cat_order(cat: str) -> tuple[int, str]:
    return (CAT_ORDER.index(cat) if cat in CAT_ORDER else len(CAT_ORDER), cat)


@dataclass
class TimelineLayout:
    """Where :func:`render_timeline` puts things; x in seconds since the trace's start (its first event)."""

    start_us: float  # the trace's start, absolute microseconds
    x_max: float  # the trace's end
    extent: tuple[float, float]  # x range of the binned image
    labels: list[str]  # y labels, top to bottom: epoch rows, then one row per (process, category)
    epoch_rows: int
    row_keys: list[list[tuple[int, str]]]  # per image row, the (process uuid, category) rows drawn in it
    bars: list[tuple[int, float, float, str, bool]]  # (row, x0, x1, text, an epoch or job: not a plan) per span
    boundaries: list[float]  # x of epoch and job starts and ends
    xlim: tuple[float, float] = (0.0, 0.0)  # read back from the drawn axes


def _epoch_text(m: EpochMark) -> str:
    if m.name in LOOP_SPAN_NAMES and m.epoch not in ("", None):
        return f"epoch {m.epoch}"
    return m.name


def timeline_layout(tl: Timeline) -> TimelineLayout:
    """Lay out the timeline: rows by process (ordered by :func:`proc_order`) and category, epochs on top."""
    start = tl.start if tl.start != math.inf else 0.0
    end = tl.end if tl.end != -math.inf else start
    origin = tl.origin if tl.origin is not None else start

    def sec(ts: float) -> float:
        return (ts - start) / 1e6

    # processes with the same label share a row: the loader's workers of each epoch (new processes unless
    # persistent_workers) are one row per worker id, as in the per-worker table
    eprocs = sorted({m.proc.uuid: m.proc for m in tl.epochs}.values(), key=proc_order)
    labels: list[str] = []
    for p in eprocs:
        if f"{p.label} · epochs" not in labels:
            labels.append(f"{p.label} · epochs")
    erow = {p.uuid: labels.index(f"{p.label} · epochs") for p in eprocs}
    n_epoch_rows = len(labels)
    keys: list[list[tuple[int, str]]] = []
    for key in sorted(tl.rows, key=lambda k: (proc_order(tl.procs[k[0]]), _cat_order(k[1]))):
        label = f"{tl.procs[key[0]].label} · {key[1]}"
        if label in labels:
            keys[labels.index(label) - n_epoch_rows].append(key)
        else:
            labels.append(label)
            keys.append([key])
    bars = [(erow[m.proc.uuid], sec(m.b), sec(m.e), _epoch_text(m), m.name in BOUNDARY_NAMES) for m in tl.epochs]
    bounds = sorted({x for m in tl.epochs if m.name in BOUNDARY_NAMES for x in (sec(m.b), sec(m.e))})
    extent = (sec(origin + tl.lo * tl.width), sec(origin + (tl.hi + 1) * tl.width))
    return TimelineLayout(start, sec(end), extent, labels, n_epoch_rows, keys, bars, bounds)


#: what needs matplotlib, in the error when it is missing
PLOTS_FEATURE = "the PNG plots of `streamscope-trace summary` (--no-plots skips them)"


def require_matplotlib() -> Any:
    """``matplotlib``, or a MissingDependencyError naming the ``trace`` extra."""
    return require("matplotlib", PLOTS_FEATURE, "trace")


def _plt():  # type: ignore[no-untyped-def]
    matplotlib = require_matplotlib()
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def render_timeline(tl: Timeline, path: str, title: str) -> TimelineLayout:
    """Draw the timeline to ``path`` (PNG): the epochs on top, then one row per (process, category), shade = share
    of the bin busy; x from the trace's start to its end. Returns the layout, with the x limits the axes got."""
    import numpy as np
    from matplotlib.colors import to_rgb

    plt = _plt()
    lay = timeline_layout(tl)
    if not lay.labels:
        fig, ax = plt.subplots(figsize=(6, 1.5))
        ax.axis("off")
        ax.text(0.5, 0.5, f"{title}: no spans to draw", ha="center", va="center")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return lay
    k = lay.epoch_rows
    n = len(lay.row_keys)
    total = k + n
    fig, ax = plt.subplots(figsize=(13, 1.4 + 0.3 * total))
    if n:
        nbins = max(tl.hi - tl.lo + 1, 1)
        img = np.ones((n, nbins, 4))
        img[:, :, 3] = 0.0
        for r, row in enumerate(lay.row_keys):
            rgb = to_rgb(CAT_COLORS.get(row[0][1], "#607d8b"))
            busy: dict[int, float] = {}
            for key in row:
                for i, v in tl.rows[key].items():
                    busy[i] = busy.get(i, 0.0) + v
            for i, v in busy.items():
                c = i - tl.lo
                if 0 <= c < nbins and v > 0:
                    img[r, c, :3] = rgb
                    img[r, c, 3] = 0.4 + 0.6 * min(v / tl.width, 1.0)  # a short span stays visible
        ax.imshow(img, aspect="auto", interpolation="nearest", extent=(*lay.extent, total - 0.5, k - 0.5))
    x_max = lay.x_max if lay.x_max > 0 else 1e-6
    char = x_max * 0.0052  # the width of one character at fontsize 7 on this figure, in seconds
    label_end: dict[int, float] = {}
    bars = sorted(lay.bars, key=lambda b: (b[0], b[1]))
    last = {row: j for j, (row, *_) in enumerate(bars)}
    for j, (row, x0, x1, text, major) in enumerate(bars):
        ax.broken_barh([(x0, max(x1 - x0, x_max * 1e-3))], (row - 0.38, 0.76), color=("#9e9e9e", "#cfcfcf")[j % 2])
        need = char * (len(text) + 1)
        if x1 - x0 >= need:
            ax.text((x0 + x1) / 2, row, text, ha="center", va="center", fontsize=7, clip_on=True)
            label_end[row] = x1
        elif major and x0 >= label_end.get(row, -math.inf) and x0 + need <= x_max:
            # too narrow for its name: the name starts at the bar, unless an earlier name is in the way
            ax.text(x0, row, " " + text, ha="left", va="center", fontsize=7, clip_on=True)
            label_end[row] = x0 + need
        elif major and last[row] == j and x_max - need >= label_end.get(row, -math.inf):
            # the last bar, too narrow and too close to the end: its name ends at the end of the picture
            ax.text(x_max, row, text + " ", ha="right", va="center", fontsize=7, clip_on=True)
            label_end[row] = x_max
    for x in lay.boundaries:
        ax.axvline(x, color="#616161", linewidth=0.6, linestyle="--", alpha=0.6)
    if k and n:
        ax.axhline(k - 0.5, color="#bdbdbd", linewidth=0.8)
    ax.set_xlim(0.0, x_max)
    ax.set_ylim(total - 0.5, -0.5)
    ax.set_yticks(range(total))
    ax.set_yticklabels(lay.labels, fontsize=7)
    ax.set_xlabel("seconds since the trace start (its first event)")
    extra = ""
    if tl.dropped_rows:
        extra += f"; {tl.dropped_rows} spans in rows beyond {MAX_ROWS} not drawn"
    if tl.dropped_epochs:
        extra += f"; {tl.dropped_epochs} epoch spans beyond {MAX_EPOCHS} not drawn"
    ax.set_title(f"{title}: busy share per {fmt_us(tl.width)} bin, epochs and jobs on top{extra}", fontsize=9)
    fig.tight_layout()
    lay.xlim = tuple(float(v) for v in ax.get_xlim())  # type: ignore[assignment]
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return lay


def render_histograms(hists: dict[str, LogHist], path: str, title: str) -> None:
    """Draw one latency histogram per category to ``path`` (PNG), log-scaled durations."""
    plt = _plt()
    from matplotlib.ticker import NullFormatter

    cats = [c for c in hists if hists[c].count]
    if not cats:
        fig, ax = plt.subplots(figsize=(6, 1.5))
        ax.axis("off")
        ax.text(0.5, 0.5, f"{title}: no spans", ha="center", va="center")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return
    n = len(cats)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    for k, cat in enumerate(cats):
        ax = axes[k // cols][k % cols]
        h = hists[cat]
        # regroup to 4 buckets per doubling for readable bars
        grouped: dict[int, int] = {}
        for i, cnt in h.buckets.items():
            grouped[i // 8] = grouped.get(i // 8, 0) + cnt
        if grouped:
            keys = sorted(grouped)
            lefts = [LogHist.edge(g * 8) for g in keys]
            widths = [LogHist.edge(g * 8 + 8) - LogHist.edge(g * 8) for g in keys]
            ax.bar(lefts, [grouped[g] for g in keys], width=widths, align="edge", color=CAT_COLORS.get(cat, "#607d8b"))
            ax.set_xscale("log")
            lo, hi = lefts[0], lefts[-1] + widths[-1]
            ax.set_xlim(lo / 3.0, hi * 3.0)
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(
            f"{cat}: n={h.count} p50={fmt_us(h.quantile(0.5))} p95={fmt_us(h.quantile(0.95))} max={fmt_us(h.max)}",
            fontsize=8,
        )
        ax.set_xlabel("duration (us)", fontsize=8)
        ax.tick_params(labelsize=7)
    for k in range(len(cats), rows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


#: Colours of the stall report's classes in the wait-share picture.
WAIT_COLORS: dict[str, str] = {
    "download": CAT_COLORS["download"],
    "decompress": CAT_COLORS["decompress"],
    "read": CAT_COLORS["read"],
    "sample": CAT_COLORS["sample"],
    "other": CAT_COLORS["delete"],
    "idle": "#bdbdbd",
}

#: Ranks drawn in the wait-share picture (the report lists them all).
MAX_WAIT_PANELS = 8


def render_waits(
    stalls: list[StallResult], path: str, title: str, start_us: float, boundaries: list[float] | None = None
) -> list[dict[str, tuple[Any, Any]]]:
    """Draw the loop's wait over time to ``path`` (PNG): per rank and time bin, the share of the loop's time it
    waited for data, stacked by what the workers were doing meanwhile (the stall report's split), with the stall
    report's advice under each panel. x in seconds since ``start_us`` (the trace's start, as the timeline).

    Returns, per panel drawn, the bars as the axes hold them: class (and ``"idle"``) -> (bottoms, heights).
    """
    import textwrap

    import numpy as np

    plt = _plt()
    from matplotlib.ticker import PercentFormatter

    drawn = [r for r in stalls if r.over_time is not None and r.waits > 0][:MAX_WAIT_PANELS]
    if not drawn:
        fig, ax = plt.subplots(figsize=(8, 1.6))
        ax.axis("off")
        why = stalls[0] if stalls else None
        text = recommendation(why) if why is not None else "no stall and no batch spans: the loop's wait is unknown"
        ax.text(0.5, 0.5, textwrap.fill(f"{title}: no wait to draw. {text}", 110), ha="center", va="center", fontsize=8)
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return []
    drawn_bars: list[dict[str, tuple[Any, Any]]] = []
    fig, axes = plt.subplots(len(drawn), 1, figsize=(13, 3.6 * len(drawn)), squeeze=False)
    for ax, r in zip((a[0] for a in axes), drawn):
        ov = r.over_time
        assert ov is not None
        left = (ov.edges[:-1] - start_us) / 1e6
        width = float(ov.edges[1] - ov.edges[0]) / 1e6
        bottom = None
        bars: dict[str, tuple[Any, Any]] = {}
        for c in (*CLASSES, "idle"):
            share = ov.share(c)
            label = LABELS["untraced"] if c == "idle" and "sample" not in r.seen else LABELS[c]
            pct = r.percent(c)
            drawn_c = ax.bar(
                left, share, width=width, bottom=bottom, align="edge", color=WAIT_COLORS[c], linewidth=0,
                label=f"{label} ({pct:.0f}% of the wait)" if pct > 0 else None,
            )  # fmt: skip
            bars[c] = (
                np.array([b.get_y() for b in drawn_c.patches]),
                np.array([b.get_height() for b in drawn_c.patches]),
            )
            bottom = share if bottom is None else bottom + share
        drawn_bars.append(bars)
        off = ov.loop_us <= 0
        if off.any():  # no share to draw where the loop did not run (between epochs): say so, not a blank
            ax.bar(
                left[off], 1.0, width=width, align="edge", color="none", edgecolor="#cfcfcf", hatch="///",
                linewidth=0, label="the loop did not run (between epochs)",
            )  # fmt: skip
        if r.loop_us > 0:
            whole = r.wait_us / r.loop_us
            ax.axhline(whole, color="#212121", linewidth=0.8, linestyle=":", label=f"whole run: {100 * whole:.1f}%")
        for x in boundaries or ():
            if left[0] <= x <= left[-1] + width:
                ax.axvline(x, color="#616161", linewidth=0.6, linestyle="--", alpha=0.6)
        ax.set_xlim(left[0], left[-1] + width)
        ax.set_ylim(0.0, 1.0)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylabel("share of the loop's time\nwaiting for data", fontsize=8)
        ax.set_xlabel(f"seconds since the trace start (bins of {fmt_us(width * 1e6)})", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, frameon=False)
        ax.set_title(
            f"{r.label}: the loop waited {fmt_us(r.wait_us)} in {r.waits} waits"
            + (f", {100.0 * r.wait_us / r.loop_us:.1f}% of its {fmt_us(r.loop_us)}" if r.loop_us > 0 else "")
            + f" (from {r.source}); what the workers did meanwhile",
            fontsize=9,
        )
        ax.text(0.0, -0.3, textwrap.fill("=> " + recommendation(r), 170), transform=ax.transAxes, fontsize=8, va="top")
    more = len([r for r in stalls if r.waits > 0]) - len(drawn)
    fig.suptitle(title + (f" ({more} more ranks in the text report)" if more > 0 else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn_bars
