"""``streamscope top``'s layout of one rank: its lines, wrapped to the terminal's width, and the numbers' formats.

:func:`rank_lines` lays a :class:`~streamscope.cli.top_rates.RankView` out as labelled sections (``wait``,
``split``, ``flow``, ``download``, ``cache``, ``knobs``, ``model``), each item two spaces apart and wrapped at the
width with continuation lines at :data:`INDENT`; ``…`` stands for a number not known yet, ``-`` for none.
"""

from __future__ import annotations

from collections.abc import Sequence

from streamscope.cli.top_rates import RankView
from streamscope.storage.redact import redact

__all__ = ["INDENT", "WIDTH", "model_items", "rank_lines", "speedup_text"]


def _rounded(pct: dict[str, float]) -> dict[str, int]:
    """Whole percents that sum to exactly 100 (largest remainders), for percents that sum to 100."""
    out = {k: int(x) for k, x in pct.items()}
    rest = sorted(pct, key=lambda k: (out[k] - pct[k], list(pct).index(k)))  # largest remainder first
    for k in rest[: max(0, 100 - sum(out.values()))]:
        out[k] += 1
    return out


#: The width the screen is laid out for when the terminal's is not known, and the least it is laid out for.
WIDTH = 80
INDENT = " " * 12  # where a section's text begins ("  download  ")


def _fit(label: str | None, items: Sequence[str], width: int) -> list[str]:
    """``items`` two spaces apart after a section's ``label`` (padded to the indent; None: from the first column),
    wrapped at ``width`` with continuation lines at the indent. An item longer than a line is cut (with ``…``)."""
    room = width - len(INDENT)
    lines: list[str] = []
    cur, empty = ("" if label is None else f"  {label:<10}"), True
    for item in items:
        if len(item) > room:
            item = item[: room - 1] + "…"
        if empty:
            cur, empty = cur + item, False
        elif len(cur) + 2 + len(item) <= width:
            cur += "  " + item
        else:
            lines.append(cur)
            cur = INDENT + item
    lines.append(cur)
    return lines


def _num(x: float | None, fmt: str = "{:,.1f}", none: str = "…") -> str:
    return none if x is None else fmt.format(x)


def _secs(x: float | None) -> str:
    if x is None:
        return "…"
    if x == float("inf"):
        return ">60 s"
    return f"{x * 1000:.3g} ms" if x < 1 else f"{x:.3g} s"


def _bytes(x: float | None) -> str:
    if x is None:
        return "…"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(x) < 1000 or unit == "TB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1000.0
    return f"{x:.1f} TB"


def _count(x: float) -> str:
    return f"{x:.1f}" if x < 10 else f"{x:.0f}"


def speedup_text(x: float) -> str:
    return f"x{x:.2f}" if x < 10 else f"x{x:.1f}" if x < 100 else f"x{x:,.0f}"


def model_items(v: RankView) -> list[str]:
    """The ``model`` line's items: the speed-up if the loop never waited, then the storage's side."""
    if v.speedup is None:
        return ["…"]
    out = [f"{speedup_text(v.speedup)} if no wait"]
    if not v.st_delivered and not v.st_in_flight:
        return [*out, "no downloads"]

    def ms(x: float | None) -> str:
        return "-" if not x else f"{x * 1000:.3g}"

    out += [
        f"{_count(v.st_in_flight or 0.0)}/{_count(v.st_saturation or 0.0)} in flight",
        f"W0 {ms(v.st_w0)} now {ms(v.st_latency)} ms",
        f"{(v.st_delivered or 0.0) / 1e6:.2f} MB/s",
    ]
    return out + (["SATURATED"] if v.st_saturated else [])


def rank_lines(v: RankView, width: int = WIDTH) -> list[str]:
    """One rank's part of the screen, no line longer than ``width`` (laid out for at least 40 columns)."""
    width = max(40, width)
    where = redact(v.url).removeprefix("http://").removesuffix("/metrics")
    names = [f"{d}," for d in v.datasets[:-1]] + v.datasets[-1:]  # each its own item: a long list wraps
    head = [f"rank {v.rank}", where] + ([f"datasets: {names[0]}", *names[1:]] if names else [])
    if v.split is None:
        split = ["…"]
    elif not v.split:
        split = ["no wait (not reported by the workers yet)" if (v.wait_s or 0.0) > 0 else "no wait"]
    else:
        split = [f"{st} {pct}%" for st, pct in _rounded(v.split).items()]
    knobs = [f"{k}={x:g}" for k, x in sorted(v.knobs.items())] or ["-"]
    ms = "-" if v.ms_per_batch is None and v.batches_s == 0 else _num(v.ms_per_batch, "{:.1f}")
    p50 = _secs(v.dl_p50) if v.dl_p50 is not None else "-"
    p99 = _secs(v.dl_p99) if v.dl_p99 is not None else "-"
    return [
        *_fit(None, head, width),
        *_fit("wait", [f"{_num(v.wait_pct, '{:.1f}%')} of the time", f"{ms} ms/batch"], width),
        *_fit("split", split, width),
        *_fit(
            "flow",
            [
                f"{_num(v.samples_s)} samples/s",
                f"{_num(v.mb_s, '{:.2f}')} MB/s",
                f"{_num(v.batches_s)} batches/s",
                f"workers {_num(v.workers, '{:g}', '-')}",
                f"queue {_num(v.queue, '{:g}', '-')}",
                f"prefetched {_num(v.prefetch, '{:g}', '-')}",
                f"samples {v.samples:,.0f}",
            ],
            width,
        ),
        *_fit(
            "download",
            [
                f"{_num(v.in_flight, '{:g}', '0')} in flight",
                f"{_num(v.dl_mb_s, '{:.2f}')} MB/s",
                f"p50 {p50}",
                f"p99 {p99}",
                f"retries {_num(v.retries, '{:g}', '0')}",
                f"errors {_num(v.errors, '{:g}', '0')}",
            ],
            width,
        ),
        *_fit(
            "cache",
            [
                _bytes(v.cache_bytes) if v.cache_bytes is not None else "-",
                f"hit {_num(v.hit_pct, '{:.0f}%', '-')}",
                f"evicted {_num(v.evictions, '{:g}', '0')}",
            ],
            width,
        ),
        *_fit("knobs", knobs, width),
        *_fit("model", model_items(v), width),
    ]
