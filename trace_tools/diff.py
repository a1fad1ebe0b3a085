"""``diff``: what got faster or slower between two runs, per category (and per span name within it)."""

from __future__ import annotations

from trace_tools.stall import CLASSES, LABELS
from trace_tools.stats import LogHist, fmt_us
from trace_tools.summary import Summary


def _change(a: float, b: float) -> float | None:
    if a <= 0:
        return None if b <= 0 else float("inf")
    return (b - a) / a


def verdict(a: LogHist, b: LogHist, threshold: float) -> str:
    """``faster``/``slower``/``same``/``new``/``gone`` from the medians (p50) of two histograms."""
    if a.count == 0:
        return "new"
    if b.count == 0:
        return "gone"
    ch = _change(a.quantile(0.5), b.quantile(0.5))
    if ch is None or abs(ch) < threshold:
        return "same"
    return "slower" if ch > 0 else "faster"


def _pct(ch: float | None) -> str:
    if ch is None:
        return "-"
    if ch == float("inf"):
        return "+inf"
    return f"{100.0 * ch:+.1f}%"


def diff_rows(a: Summary, b: Summary, threshold: float) -> list[tuple[str, str, LogHist, LogHist]]:
    """(label, verdict, hist A, hist B) per category, then per (category, name) when a category has several."""
    rows = []
    for cat in sorted(set(a.by_cat) | set(b.by_cat)):
        ha, hb = a.by_cat.get(cat, LogHist()), b.by_cat.get(cat, LogHist())
        rows.append((cat, verdict(ha, hb, threshold), ha, hb))
        names = sorted({n for c, n in a.by_name if c == cat} | {n for c, n in b.by_name if c == cat})
        if len(names) > 1:
            for n in names:
                na, nb = a.by_name.get((cat, n), LogHist()), b.by_name.get((cat, n), LogHist())
                rows.append((f"  {n}", verdict(na, nb, threshold), na, nb))
    return rows


def format_diff(a: Summary, b: Summary, threshold: float = 0.1) -> str:
    """The report comparing run A (baseline) with run B."""
    out = [
        f"A = {a.path}",
        f"B = {b.path}",
        f"(a change counts when the median moves by at least {100 * threshold:.0f}%)",
        "",
    ]
    out.append(
        f"  {'category / name':<22} {'verdict':<7} {'count A':>9} {'count B':>9} {'p50 A':>9} {'p50 B':>9} "
        f"{'p50':>8} {'p95 A':>9} {'p95 B':>9} {'p95':>8} {'total A':>10} {'total B':>10} {'total':>8}"
    )
    for label, v, ha, hb in diff_rows(a, b, threshold):
        out.append(
            f"  {label:<22} {v:<7} {ha.count:>9} {hb.count:>9} {fmt_us(ha.quantile(0.5)):>9} "
            f"{fmt_us(hb.quantile(0.5)):>9} {_pct(_change(ha.quantile(0.5), hb.quantile(0.5))):>8} "
            f"{fmt_us(ha.quantile(0.95)):>9} {fmt_us(hb.quantile(0.95)):>9} "
            f"{_pct(_change(ha.quantile(0.95), hb.quantile(0.95))):>8} {fmt_us(ha.total):>10} {fmt_us(hb.total):>10} "
            f"{_pct(_change(ha.total, hb.total)):>8}"
        )
    wa = sum(r.wait_us for r in a.stalls)
    wb = sum(r.wait_us for r in b.stalls)
    out.append("")
    if a.stalls or b.stalls:
        word = "less" if wb < wa else "more" if wb > wa else "the same"
        out.append(
            f"Training loop waited {fmt_us(wa)} (A) vs {fmt_us(wb)} (B): {_pct(_change(wa, wb))}, B waits {word}"
        )
        for c in (*CLASSES, "idle"):
            pa = sum(r.parts.get(c, 0.0) for r in a.stalls)
            pb = sum(r.parts.get(c, 0.0) for r in b.stalls)
            if pa or pb:
                out.append(f"    {LABELS[c]:<44} {fmt_us(pa):>10} -> {fmt_us(pb):>10}")
    faster = [lbl.strip() for lbl, v, _, _ in diff_rows(a, b, threshold) if v == "faster" and not lbl.startswith(" ")]
    slower = [lbl.strip() for lbl, v, _, _ in diff_rows(a, b, threshold) if v == "slower" and not lbl.startswith(" ")]
    out.append(f"Faster in B: {', '.join(faster) or 'nothing'}; slower in B: {', '.join(slower) or 'nothing'}")
    return "\n".join(out)
