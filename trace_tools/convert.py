"""``convert``: a trace log to Chrome JSON (``.json``, ``.json.gz``) or native Perfetto (``.pftrace``), streamed."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from trace_tools.errors import TraceToolError
from trace_tools.model import Normalizer, Problems
from trace_tools.outputs import AtomicOutput, ChromeWriter, PerfettoWriter
from trace_tools.parse import ParseStats, describe_no_events, open_log, read_events

CHROME_SUFFIXES = (".json", ".json.gz")
PERFETTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")


@dataclass
class ConvertResult:
    """What a conversion wrote and what it saw."""

    out: str
    format: str
    parse: ParseStats
    problems: Problems
    runs: int
    counts: dict[str, int] = field(default_factory=dict)
    flows: int = 0


def output_format(out: str) -> str:
    """``"chrome"`` or ``"perfetto"`` from the output file name.

    Raises:
        TraceToolError: for any other suffix.
    """
    low = out.lower()
    if low.endswith(CHROME_SUFFIXES):
        return "chrome"
    if low.endswith(PERFETTO_SUFFIXES):
        return "perfetto"
    raise TraceToolError(
        f"{out}: unknown output type; use a name ending in .json or .json.gz (Chrome JSON) or .pftrace (Perfetto)"
    )


def convert(log: str, out: str, categories: frozenset[str] | None = None) -> ConvertResult:
    """Convert ``log`` to ``out`` in one streaming pass.

    Raises:
        TraceToolError: for a bad input or output path, or a log with no events (no output is left behind).
    """
    fmt = output_format(out)
    open_log(log)
    if os.path.exists(out) and os.path.samefile(log, out):
        raise TraceToolError(f"{out}: is the input log itself; choose another output name")
    sink = AtomicOutput(out, binary=fmt == "perfetto")
    pstats = ParseStats()
    norm = Normalizer(categories)
    counts = {"B": 0, "E": 0, "I": 0, "C": 0, "U": 0}
    flows: set[int] = set()
    try:
        if fmt == "chrome":
            assert sink.text is not None
            writer: ChromeWriter | PerfettoWriter = ChromeWriter(sink.text)
        else:
            writer = PerfettoWriter(sink.binary)
        handle = writer.handle
        for kind, obj in norm.run(read_events(log, pstats)):
            counts[kind] += 1
            if kind == "B":
                fo = obj.flow_out  # type: ignore[attr-defined]
                if fo is not None:
                    flows.add(fo)
            handle(kind, obj)
        if pstats.events == 0:
            raise TraceToolError(describe_no_events(log, pstats))
        writer.close(
            {
                "source": log,
                "converter": "streamscope-trace",
                "lines": pstats.lines,
                "non_event_lines": pstats.no_ph,
                "unreadable_lines": pstats.unreadable,
                "runs": norm.runs,
            }
        )
    except OSError as exc:
        sink.abort()
        raise TraceToolError(f"{out}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        sink.abort()
        raise
    sink.commit()
    return ConvertResult(out, fmt, pstats, norm.problems, norm.runs, counts, len(flows))
