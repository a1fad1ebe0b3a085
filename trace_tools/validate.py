"""``validate``: find what is wrong with a trace log, in one streaming pass."""

from __future__ import annotations

from dataclasses import dataclass

from trace_tools.model import Normalizer, Problems
from trace_tools.parse import ParseStats, read_events

#: Problem kinds and what they mean (the order of the report).
KINDS: dict[str, str] = {
    "unreadable": "lines that are binary or not UTF-8, or longer than 1 MiB",
    "truncated_last": "a last line cut off mid-event (no newline, no final ';')",
    "no_ph": "lines without a 'ph' key (not events; LitData writes such log lines)",
    "bad_field": "event lines whose ts/dur/pid/tid is missing or not a number",
    "unknown_ph": "events whose 'ph' is not one of B, E, X, I, C, M",
    "unknown_category": "events whose 'cat' is not a streamscope/LitData category",
    "unmatched_B": "B events that never end",
    "unmatched_E": "E events with no open B of the same name on the same pid/tid",
    "ts_backwards": "timestamps that go backwards within one thread",
    "mixed_runs": "the log mixes several runs",
    "bad_counter": "C events without a finite numeric 'value'",
    "no_events": "no event lines at all",
}

#: Kinds reported but not counted as failures (drawing artefacts, not log errors).
INFO_KINDS = frozenset({"improper_nesting"})


@dataclass
class Validation:
    """Counts and examples of every problem kind found."""

    path: str
    parse: ParseStats
    problems: Problems
    ignored: frozenset[str]

    def failures(self) -> dict[str, int]:
        """Problem kinds that make validation fail, with their counts."""
        return {k: n for k, n in self.problems.counts.items() if n and k not in INFO_KINDS and k not in self.ignored}


def validate(path: str, ignore: frozenset[str] = frozenset()) -> Validation:
    """Check the log at ``path``. ``ignore`` lists problem kinds not to fail on (e.g. ``no_ph``).

    Raises:
        TraceToolError: when the file cannot be read or is empty.
    """
    pstats = ParseStats()
    norm = Normalizer()
    for _ in norm.run(read_events(path, pstats)):
        pass
    probs = norm.problems
    for kind in ("unreadable", "truncated_last", "no_ph", "bad_field"):
        n = getattr(pstats, kind)
        if n:
            probs.counts[kind] = n
            probs.examples[kind] = list(pstats.examples.get(kind, []))
    if pstats.events == 0 and "no_events" not in probs.counts:
        probs.counts["no_events"] = 1
        probs.examples["no_events"] = [f"{pstats.lines} lines, none of them an event"]
    return Validation(path, pstats, probs, ignore)


def format_validation(v: Validation, quiet: bool = False) -> str:
    """The report: one line with ``quiet``, else one line per problem kind with examples."""
    fails = v.failures()
    ps = v.parse
    if quiet:
        if not fails:
            return f"OK {v.path}: {ps.events} events in {ps.lines} lines"
        items = ", ".join(f"{k}={n}" for k, n in sorted(fails.items()))
        return f"FAIL {v.path}: {sum(fails.values())} problems ({items}) in {ps.lines} lines"
    out = [f"{v.path}: {ps.lines} lines, {ps.events} events"]
    kinds = list(KINDS) + sorted(k for k in v.problems.counts if k not in KINDS)
    for k in kinds:
        n = v.problems.counts.get(k, 0)
        if not n:
            continue
        tag = "ignored" if (k in v.ignored or k in INFO_KINDS) else "PROBLEM"
        out.append(f"  {tag}: {n} x {k}: {KINDS.get(k, k.replace('_', ' '))}")
        for ex in v.problems.examples.get(k, []):
            out.append(f"      {ex}")
    out.append("OK: no problems found" if not fails else f"FAIL: {sum(fails.values())} problem(s)")
    return "\n".join(out)
