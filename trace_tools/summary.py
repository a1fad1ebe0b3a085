"""``summary``: per-category and per-rank/worker latency statistics, and the stall report.

Everything is gathered in one streaming pass: histograms are bounded (:mod:`trace_tools.stats`); the stall report
keeps the begin/end pair of every activity span of each rank as two floats (16 bytes a span, no strings).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streamscope.events import kinds as ek
from trace_tools.errors import TraceToolError
from trace_tools.model import LOOP_SPAN_NAMES, Normalizer, Point, Problems, Proc, Span
from trace_tools.parse import ParseStats, describe_no_events, read_events
from trace_tools.plots import Timeline
from trace_tools.stall import CLASSES, LABELS, RankLog, StallResult, activity_class, analyse, recommendation
from trace_tools.stats import LogHist, fmt_us


@dataclass
class CounterStat:
    """Samples of one counter."""

    n: int = 0
    min: float = float("inf")
    max: float = float("-inf")
    last: float = 0.0


#: Time bins of the wait-share picture (fewer when the loop waited fewer times).
WAIT_BINS = 60

#: Decisions of the tuner kept for the report (the ones beyond are counted).
MAX_DECISIONS = 200


@dataclass
class TunerLog:
    """The auto-tuner's ``tune`` events of one rank: its budgets, decisions (one row per knob moved) and states."""

    label: str
    started: dict[str, str] = field(default_factory=dict)
    decisions: list[tuple[float, dict[str, str]]] = field(default_factory=list)
    notes: list[tuple[float, str, str]] = field(default_factory=list)  # (ts, settled/resumed/budget/..., text)
    changes: dict[str, list[int]] = field(default_factory=dict)  # knob -> [by the tuner, by the user]
    more: int = 0

    def add(self, p: Point) -> None:
        a = p.args
        if p.name == "decision":
            if len(self.decisions) < MAX_DECISIONS:
                self.decisions.append((p.ts, a))
            else:
                self.more += 1
        elif p.name == "started":
            self.started = a
        elif p.name in ("settled", "resumed", "restored", "budget"):
            if len(self.notes) < MAX_DECISIONS:
                text = a.get("reason") or a.get("values") or ""
                if p.name == "budget":
                    text = f"{a.get('knob')} {a.get('old')} -> {a.get('new')} (the {a.get('reason')} budget)"
                self.notes.append((p.ts, p.name, text))
        elif "knob" in a and "source" in a:  # the board's own event for a value change (named by the knob)
            c = self.changes.setdefault(a["knob"], [0, 0])
            c[0 if a["source"] == "tuner" else 1] += 1


@dataclass
class Summary:
    """The result of :func:`summarize`."""

    path: str
    parse: ParseStats
    problems: Problems
    runs: int
    by_cat: dict[str, LogHist] = field(default_factory=dict)
    by_name: dict[tuple[str, str], LogHist] = field(default_factory=dict)
    by_where: dict[tuple[str, str, str], LogHist] = field(default_factory=dict)
    instants: dict[tuple[str, str], int] = field(default_factory=dict)
    instant_examples: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    counters: dict[str, CounterStat] = field(default_factory=dict)
    stalls: list[StallResult] = field(default_factory=list)
    unfinished: int = 0
    timeline: Timeline | None = None
    first_ts: float = float("inf")
    last_ts: float = float("-inf")
    tuners: list[TunerLog] = field(default_factory=list)


def summarize(path: str, with_timeline: bool = True) -> Summary:
    """Read the log at ``path`` once and gather the summary.

    Raises:
        TraceToolError: for an unreadable or empty log, or one with no events.
    """
    pstats = ParseStats()
    norm = Normalizer()
    by_cat: dict[str, LogHist] = {}
    by_name: dict[tuple[str, str], LogHist] = {}
    by_proc: dict[tuple[str, str, int], LogHist] = {}
    procs: dict[int, Proc] = {}
    instants: dict[tuple[str, str], int] = {}
    inst_ex: dict[tuple[str, str], list[str]] = {}
    counters: dict[str, CounterStat] = {}
    tuners: dict[tuple[int, int], TunerLog] = {}
    ranks: dict[tuple[int, int], RankLog] = {}
    tl = Timeline() if with_timeline else None
    unfinished = 0
    first = float("inf")
    last = float("-inf")
    for kind, obj in norm.run(read_events(path, pstats)):
        if kind == "E":
            s: Span = obj  # type: ignore[assignment]
            e = s.e if s.e is not None else s.b
            d = e - s.b
            if s.b < first:
                first = s.b
            if e > last:
                last = e
            key = (s.cat, s.name)
            h = by_name.get(key)
            if h is None:
                h = by_name[key] = LogHist()
                if s.cat not in by_cat:
                    by_cat[s.cat] = LogHist()
            h.add(d)
            by_cat[s.cat].add(d)
            pkey = (s.cat, s.name, s.proc.uuid)
            hw = by_proc.get(pkey)
            if hw is None:
                hw = by_proc[pkey] = LogHist()
                procs[s.proc.uuid] = s.proc
            hw.add(d)
            rkey = (s.proc.run, s.proc.rank)
            rl = ranks.get(rkey)
            if rl is None:
                rl = ranks[rkey] = RankLog()
            cls = activity_class(s.cat, s.name)
            if cls is not None:
                a = rl.activity[cls]
                a.append(s.b)
                a.append(e)
            elif s.cat == ek.STALL.cat:
                rl.stalls.append(s.b)
                rl.stalls.append(e)
            elif s.cat == ek.BATCH.cat and s.name == ek.BATCH.name:
                rl.batches.append((s.args.get("epoch", ""), s.b, e))
            elif s.cat == ek.EPOCH.cat and s.name in LOOP_SPAN_NAMES:
                rl.loops.append((s.args.get("epoch", ""), s.b, e))
                if str(s.args.get("workers", "")).strip() == "0":
                    # num_workers=0: the loop decodes its batches itself, so its waits are decoding (where no
                    # download, decompress or read span says otherwise)
                    rl.activity["sample"].extend((s.b, e))
            if tl is not None:
                if s.cat == ek.EPOCH.cat:
                    tl.add_epoch(s.proc, s.name, s.args.get("epoch", ""), s.b, e)
                else:
                    tl.add(s.proc, s.cat, s.b, e)
        elif kind == "B" or kind == "U":
            if tl is not None:
                tl.note(obj.b)  # type: ignore[attr-defined]
        elif kind == "I":
            p: Point = obj  # type: ignore[assignment]
            if tl is not None:
                tl.note(p.ts)
            first = min(first, p.ts)
            last = max(last, p.ts)
            key = (p.cat, p.name)
            instants[key] = instants.get(key, 0) + 1
            msg = p.args.get("error") or p.args.get("reason") or p.args.get("url") or ""
            lst = inst_ex.setdefault(key, [])
            if msg and len(lst) < 3:
                lst.append(f"{p.proc.label}: {msg}")
            if p.cat == ek.TUNER.cat:
                tkey = (p.proc.run, p.proc.rank)
                tlog = tuners.get(tkey)
                if tlog is None:
                    tlog = tuners[tkey] = TunerLog(
                        (f"run {p.proc.run + 1} · " if p.proc.run else "") + f"rank {p.proc.rank}"
                    )
                tlog.add(p)
        elif kind == "C":
            p = obj  # type: ignore[assignment]
            if tl is not None:
                tl.note(p.ts)
            c = counters.get(p.name)
            if c is None:
                c = counters[p.name] = CounterStat()
            c.n += 1
            c.min = min(c.min, p.value)
            c.max = max(c.max, p.value)
            c.last = p.value
        elif kind == "U":
            unfinished += 1
    if pstats.events == 0:
        raise TraceToolError(describe_no_events(path, pstats))
    # a process is named once the whole log is seen (its first lines may not tell main from worker)
    by_where: dict[tuple[str, str, str], LogHist] = {}
    for (cat, name, uuid), h in by_proc.items():
        key = (cat, name, procs[uuid].label)
        if key in by_where:
            by_where[key].merge(h)
        else:
            by_where[key] = h
    stalls = []
    for (run, rank), rl in sorted(ranks.items()):
        label = (f"run {run + 1} · " if norm.runs > 1 else "") + f"rank {rank}"
        r = analyse(label, rl, WAIT_BINS if with_timeline else 0)
        if r.source != "none" or rl.stalls or rl.batches:
            stalls.append(r)
    return Summary(
        path, pstats, norm.problems, norm.runs, by_cat, by_name, by_where, instants, inst_ex, counters, stalls,
        unfinished, tl, first, last, [tuners[k] for k in sorted(tuners)],
    )  # fmt: skip


def _row(label: str, h: LogHist) -> str:
    return (
        f"  {label:<52} {h.count:>9} {fmt_us(h.total):>11} {fmt_us(h.quantile(0.5)):>10} "
        f"{fmt_us(h.quantile(0.95)):>10} {fmt_us(h.max):>10}"
    )


def _ms(v: str | None) -> str:
    return "?" if v in (None, "") else f"{float(v):.2f}"


def _pct(v: object) -> str:
    try:
        return f"{float(v):+.1%}"  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "?"


def format_tuner(s: Summary) -> list[str]:
    """The tuner section: per rank, its budgets, every decision with the wait before and after, its states."""
    out = ["Tuner (tune events: the auto-tuner's decisions and the loop's wait per batch before and after each)"]
    t0 = s.first_ts if s.first_ts != float("inf") else 0.0
    for t in s.tuners:
        st = t.started
        head = f"  {t.label}:"
        if st:
            ram = float(st.get("ram_budget") or 0) / 1e9
            head += (
                f" RAM budget {ram:.2f} GB ({st.get('ram_from', '?')}), {st.get('cpus', '?')} cores, "
                f"workers up to {st.get('max_workers', '?')} (started with {st.get('workers', '?')})"
            )
        out.append(head)
        rows = sorted(
            [(ts, "d", a) for ts, a in t.decisions] + [(ts, "n", (name, text)) for ts, name, text in t.notes],
            key=lambda r: r[0],
        )
        kept = rolled = 0
        for ts, kind, item in rows:
            at = f"+{(ts - t0) / 1e6:8.2f} s"
            if kind == "n":
                name, text = item  # type: ignore[misc]
                out.append(f"    {at}  {name}: {text}")
                continue
            a: dict[str, str] = item  # type: ignore[assignment]
            outcome = a.get("outcome", "?")
            kept += outcome == "kept"
            rolled += outcome == "rolled back"
            out.append(
                f"    {at}  #{a.get('decision', '?'):<3} {a.get('knob', '?')} {a.get('old', '?')} -> {a.get('new', '?')}"
                f"  {outcome:<11} wait {_ms(a.get('wait_before_ms'))} -> {_ms(a.get('wait_after_ms'))} ms/batch"
                + (  # the model's prediction and the paired check (tune/README.md)
                    f"  model {_pct(a.get('predicted_gain'))}, {a['check']} {_pct(a.get('gain'))}"
                    f" ({_pct(a.get('gain_lo'))} .. {_pct(a.get('gain_hi'))}, {a.get('blocks', '?')} blocks)"
                    if a.get("check")
                    else ""
                )
                + f"  [{a.get('cause', '?')}] {a.get('reason', '')}"
            )
        if t.more:
            out.append(f"    ... and {t.more} more decision rows")
        if not t.decisions:
            out.append("    no decision recorded")
        else:
            out.append(f"    {kept} knob moves kept, {rolled} rolled back")
        if t.changes:
            moved = ", ".join(f"{k} {c[0]}x by the tuner" + (f", {c[1]}x by the user" if c[1] else "")
                              for k, c in sorted(t.changes.items()))  # fmt: skip
            out.append(f"    knob value changes: {moved}")
    return out


def format_summary(s: Summary, per_worker: bool = True) -> str:
    """The human-readable report."""
    out: list[str] = []
    ps = s.parse
    span_s = (s.last_ts - s.first_ts) / 1e6 if s.last_ts > s.first_ts else 0.0
    out.append(
        f"{s.path}: {ps.lines} lines, {ps.events} events, {span_s:.3f} s of trace"
        + (f", {ps.no_ph} non-event lines skipped" if ps.no_ph else "")
        + (f", {ps.unreadable} unreadable lines" if ps.unreadable else "")
        + (f", {s.unfinished} spans never ended" if s.unfinished else "")
    )
    if s.runs > 1:
        out.append(f"WARNING: the log mixes {s.runs} runs; processes are labelled 'run N' and analysed separately")
    head = f"  {'category / name':<52} {'count':>9} {'total':>11} {'p50':>10} {'p95':>10} {'max':>10}"
    out.append("")
    out.append("Spans per category")
    out.append(head)
    for cat in sorted(s.by_cat):
        out.append(_row(cat, s.by_cat[cat]))
        names = sorted(n for c, n in s.by_name if c == cat)
        if len(names) > 1:
            for n in names:
                out.append(_row(f"  {n}", s.by_name[(cat, n)]))
    if per_worker and s.by_where:
        out.append("")
        out.append("Spans per category and rank/worker")
        out.append(head)
        for cat, name, where in sorted(s.by_where):
            out.append(_row(f"{cat}/{name} @ {where}", s.by_where[(cat, name, where)]))
    if s.instants:
        out.append("")
        out.append("Instants")
        for (cat, name), n in sorted(s.instants.items()):
            out.append(f"  {cat}/{name}: {n}")
            for ex in s.instant_examples.get((cat, name), []):
                out.append(f"      e.g. {ex}")
    if s.counters:
        out.append("")
        out.append("Counters")
        for name, c in sorted(s.counters.items()):
            out.append(f"  {name}: {c.n} samples, min {c.min:g}, max {c.max:g}, last {c.last:g}")
    if s.tuners:
        out.append("")
        out.extend(format_tuner(s))
    out.append("")
    out.append("Stall report (time the training loop waited for a batch)")
    if not s.stalls:
        out.append("  no stall spans and no batch spans in this log: cannot tell how long the loop waited")
    for r in s.stalls:
        if r.waits == 0:
            out.append(f"  {r.label}: the loop never waited (batch spans with no gaps)")
            continue
        loop = f" of {fmt_us(r.loop_us)} in the loop ({100.0 * r.wait_us / r.loop_us:.1f}%)" if r.loop_us > 0 else ""
        out.append(f"  {r.label}: waited {fmt_us(r.wait_us)} in {r.waits} waits{loop}; from {r.source}")
        if r.activity_spans == 0:
            out.append("    no worker spans recorded for this rank: the split of the wait is unknown")
        for c in (*CLASSES, "idle") if r.activity_spans else ():
            label = LABELS["untraced"] if c == "idle" and "sample" not in r.seen else LABELS[c]
            out.append(f"    {r.percent(c):5.1f}%  {fmt_us(r.parts.get(c, 0.0)):>10}  {label}")
        if r.waits > 1:
            rest = r.wait_us - r.first_wait_us
            out.append(
                f"    first wait {fmt_us(r.first_wait_us)} (worker start-up, first chunks); "
                f"the other {r.waits - 1} waits {fmt_us(rest)}, {fmt_us(rest / (r.waits - 1))} each on average"
            )
        out.append(f"  => {recommendation(r)}")
    return "\n".join(out)
