"""``streamscope-trace``: convert, validate, summarise and diff streamscope/LitData trace logs.

Exit codes: 0 ok; 1 problems found in the log (``validate``), or the input had damaged lines / mixed runs
(``convert``/``summary`` still write their output and say what was wrong); 2 usage or user errors (bad path,
empty or non-trace log, unwritable output, a missing optional package such as matplotlib for the plots),
reported on stderr in one line, without a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from streamscope._core.errors import MissingDependencyError
from streamscope.events import CATEGORIES
from trace_tools.errors import TraceToolError
from trace_tools.parse import ParseStats

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise TraceToolError(f"{self.prog}: {message}")


def _categories(text: str | None) -> frozenset[str] | None:
    if not text:
        return None
    cats = frozenset(c.strip().lower() for c in text.split(",") if c.strip())
    unknown = sorted(cats - set(CATEGORIES))
    if unknown:
        raise TraceToolError(
            f"--cat: unknown categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}; valid: {', '.join(CATEGORIES)}"
        )
    return cats


def _input_warnings(path: str, ps: ParseStats, runs: int) -> list[str]:
    w = []
    if ps.truncated_last:
        w.append(f"{path}: the last line is truncated and was skipped ({ps.examples['truncated_last'][0]})")
    if ps.unreadable:
        w.append(
            f"{path}: {ps.unreadable} unreadable line(s) (binary or not UTF-8) skipped, e.g. {ps.examples['unreadable'][0]}"
        )
    if ps.bad_field:
        w.append(
            f"{path}: {ps.bad_field} event line(s) with a bad ts/pid/tid skipped, e.g. {ps.examples['bad_field'][0]}"
        )
    if runs > 1:
        w.append(f"{path}: the log mixes {runs} runs; they are kept apart as 'run N' processes")
    return w


def _report_input(path: str, ps: ParseStats, runs: int) -> int:
    warnings = _input_warnings(path, ps, runs)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    return EXIT_PROBLEMS if warnings else EXIT_OK


def cmd_convert(a: argparse.Namespace) -> int:
    from trace_tools.convert import convert

    r = convert(a.log, a.output, _categories(a.cat))
    c = r.counts
    print(
        f"wrote {r.out} ({r.format}): {c['E']} spans, {c['I']} instants, {c['C']} counter samples, {r.flows} flows"
        f" from {r.parse.lines} lines" + (f" ({r.parse.no_ph} non-event lines skipped)" if r.parse.no_ph else "")
    )
    for kind in ("unmatched_B", "unmatched_E", "improper_nesting"):
        n = r.problems.counts.get(kind, 0)
        if n:
            print(f"note: {n} x {kind} (run `streamscope-trace validate {a.log}` for details)", file=sys.stderr)
    return _report_input(a.log, r.parse, r.runs)


def cmd_validate(a: argparse.Namespace) -> int:
    from trace_tools.validate import format_validation, validate

    ignore = frozenset(k.strip() for k in (a.ignore or "").split(",") if k.strip())
    if a.allow_non_events:
        ignore |= {"no_ph"}
    v = validate(a.log, ignore)
    print(format_validation(v, quiet=a.quiet))
    return EXIT_PROBLEMS if v.failures() else EXIT_OK


def _plot_dir(log: str, out: str | None) -> str:
    if out is None:
        return os.path.dirname(os.path.abspath(log))
    if os.path.exists(out) and not os.path.isdir(out):
        raise TraceToolError(f"-o {out}: exists and is not a directory")
    if not os.path.isdir(out):
        try:
            os.makedirs(out)
        except OSError as exc:
            raise TraceToolError(f"-o {out}: cannot create the directory ({exc.strerror or exc})") from None
    if not os.access(out, os.W_OK):
        raise TraceToolError(f"-o {out}: directory is not writable")
    return out


def cmd_summary(a: argparse.Namespace) -> int:
    from trace_tools.summary import format_summary, summarize

    if not a.no_plots:
        from trace_tools.plots import require_matplotlib

        require_matplotlib()  # before the work, not after the report
    plot_dir = None if a.no_plots else _plot_dir(a.log, a.output)
    s = summarize(a.log, with_timeline=not a.no_plots)
    print(format_summary(s, per_worker=not a.brief))
    if plot_dir is not None:
        from trace_tools.plots import render_histograms, render_timeline, render_waits

        if plot_dir and not os.access(plot_dir, os.W_OK):
            raise TraceToolError(f"{plot_dir}: directory is not writable, use -o DIR for the PNGs")
        name = os.path.basename(a.log)
        base = os.path.join(plot_dir, name)
        wait_path, tl_path, hist_path = base + ".waits.png", base + ".timeline.png", base + ".latency.png"
        try:
            assert s.timeline is not None
            lay = render_timeline(s.timeline, tl_path, name)
            render_waits(
                s.stalls, wait_path, f"{name}: the training loop's wait for data", lay.start_us, lay.boundaries
            )
            render_histograms(s.by_cat, hist_path, f"{name}: span durations per category")
        except OSError as exc:
            raise TraceToolError(f"{plot_dir}: cannot write the PNGs ({exc.strerror or exc})") from None
        print("")
        print(f"waits:      {wait_path}")
        print(f"timeline:   {tl_path}")
        print(f"histograms: {hist_path}")
    return _report_input(a.log, s.parse, s.runs)


def cmd_diff(a: argparse.Namespace) -> int:
    from trace_tools.diff import format_diff
    from trace_tools.summary import summarize

    sa = summarize(a.a, with_timeline=False)
    sb = summarize(a.b, with_timeline=False)
    print(format_diff(sa, sb, a.threshold / 100.0))
    return max(_report_input(a.a, sa.parse, sa.runs), _report_input(a.b, sb.parse, sb.runs))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used for ``--help`` docs)."""
    p = _Parser(
        prog="streamscope-trace", description="Convert, validate, summarise and diff streamscope/LitData trace logs."
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    c = sub.add_parser("convert", help="to Chrome JSON (.json/.json.gz) or native Perfetto (.pftrace)")
    c.add_argument("log")
    c.add_argument("-o", "--output", required=True, help="output file: .json, .json.gz or .pftrace")
    c.add_argument("--cat", help="comma list of categories to keep (default: all)")
    c.set_defaults(func=cmd_convert)
    v = sub.add_parser(
        "validate", help="report unmatched B/E, non-event lines, backwards timestamps, unknown categories"
    )
    v.add_argument("log")
    v.add_argument("-q", "--quiet", action="store_true", help="print a one-line summary")
    v.add_argument(
        "--allow-non-events", action="store_true", help="do not fail on lines without 'ph' (LitData log lines)"
    )
    v.add_argument("--ignore", help="comma list of problem kinds not to fail on")
    v.set_defaults(func=cmd_validate)
    s = sub.add_parser("summary", help="latency per category and rank/worker, the stall report, PNG plots")
    s.add_argument("log")
    s.add_argument("-o", "--output", help="directory for the PNGs (default: next to the log)")
    s.add_argument("--no-plots", action="store_true", help="do not write PNGs")
    s.add_argument("--brief", action="store_true", help="omit the per rank/worker table")
    s.set_defaults(func=cmd_summary)
    d = sub.add_parser("diff", help="what got faster or slower from run A to run B")
    d.add_argument("a")
    d.add_argument("b")
    d.add_argument(
        "--threshold", type=float, default=10.0, help="percent change of the median that counts (default 10)"
    )
    d.set_defaults(func=cmd_diff)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except TraceToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MissingDependencyError as exc:  # an optional package: its one line, with the pip command
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as exc:  # a package that should be there and is not: the same, no traceback
        print(f"error: {exc}: reinstall streamscope (pip install streamscope)", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): stop quietly, without a flush error at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:  # e.g. a disk filling up while writing plots
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
