"""PNG output of ``summary``: a timeline (one row per process and category) and latency histograms.

The timeline is collected in bounded memory: each row holds the busy time per time bin; when the covered time
range needs more than :data:`MAX_BINS` bins, every bin doubles in width (neighbours are added together), so a row
never holds more than ``MAX_BINS`` numbers however long the run.
"""

from __future__ import annotations

import math
from typing import Any

from streamscope._core.optional import require
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
}


class Timeline:
    """Busy time per (row, bin), bins of a common width growing by doubling."""

    def __init__(self, width_us: float = 1000.0) -> None:
        self.width = width_us
        self.origin: float | None = None
        self.lo = 0
        self.hi = -1
        self.rows: dict[tuple[str, str], dict[int, float]] = {}
        self.dropped_rows = 0

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

    def add(self, row: tuple[str, str], b: float, e: float) -> None:
        """Add the busy interval ``[b, e]`` (microseconds) to ``row``."""
        if self.origin is None:
            self.origin = b
        bins = self.rows.get(row)
        if bins is None:
            if len(self.rows) >= MAX_ROWS:
                self.dropped_rows += 1
                return
            bins = self.rows[row] = {}
        x0 = b - self.origin
        x1 = max(e - self.origin, x0)
        while True:
            i0 = math.floor(x0 / self.width)
            i1 = math.floor(x1 / self.width)
            lo = min(self.lo, i0) if self.hi >= self.lo else i0
            hi = max(self.hi, i1) if self.hi >= self.lo else i1
            if hi - lo < MAX_BINS:
                break
            self._grow()
            bins = self.rows[row]
        self.lo, self.hi = lo, hi
        w = self.width
        if i0 == i1:
            bins[i0] = bins.get(i0, 0.0) + (x1 - x0)
            return
        bins[i0] = bins.get(i0, 0.0) + ((i0 + 1) * w - x0)
        for i in range(i0 + 1, i1):
            bins[i] = bins.get(i, 0.0) + w
        bins[i1] = bins.get(i1, 0.0) + (x1 - i1 * w)


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


def render_timeline(tl: Timeline, path: str, title: str) -> None:
    """Draw the timeline to ``path`` (PNG): one row per (process, category), shade = share of the bin busy."""
    import numpy as np
    from matplotlib.colors import to_rgb

    plt = _plt()
    rows = sorted(tl.rows)
    if not rows:
        fig, ax = plt.subplots(figsize=(6, 1.5))
        ax.axis("off")
        ax.text(0.5, 0.5, f"{title}: no spans to draw", ha="center", va="center")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return
    n = len(rows)
    nbins = max(tl.hi - tl.lo + 1, 1)
    img = np.ones((n, nbins, 4))
    img[:, :, 3] = 0.0
    for r, key in enumerate(rows):
        rgb = to_rgb(CAT_COLORS.get(key[1], "#607d8b"))
        for i, v in tl.rows[key].items():
            c = i - tl.lo
            if 0 <= c < nbins:
                img[r, c, :3] = rgb
                img[r, c, 3] = min(1.0, 0.15 + 0.85 * min(v / tl.width, 1.0)) if v > 0 else 0.0
    fig_h = 1.2 + 0.28 * n
    fig, ax = plt.subplots(figsize=(12, fig_h))
    t0 = tl.lo * tl.width / 1e6
    t1 = (tl.hi + 1) * tl.width / 1e6
    ax.imshow(img, aspect="auto", interpolation="nearest", extent=(t0, t1, n - 0.5, -0.5))
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"{p} · {c}" for p, c in rows], fontsize=7)
    ax.set_xlabel("seconds since the first event")
    extra = f" ({tl.dropped_rows} spans in rows beyond {MAX_ROWS} not drawn)" if tl.dropped_rows else ""
    ax.set_title(f"{title}: busy share per {fmt_us(tl.width)} bin{extra}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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
