"""Command line: ``streamscope demo``, ``streamscope knobs``, ``streamscope cache path|clear``."""

from __future__ import annotations

import argparse
import sys


def _cmd_knobs(_args: argparse.Namespace) -> int:
    from streamscope._core import config

    rows = config.table()
    for r in rows:
        live = " (live)" if r["live"] else ""
        print(f"{r['name']:<28} default={r['default']!r} [{r['unit']}]{live}  env={r['env']}\n    {r['doc']}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from streamscope.cli.demo import run_demo

    return run_demo(args.output, args.samples, args.workers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamscope", description=__doc__)
    sub = parser.add_subparsers(dest="cmd")
    p = sub.add_parser("demo", help="optimize a synthetic dataset, stream it with tracing on, summarise")
    p.add_argument("--output", default="demo_output", help="where the dataset, trace and summary go")
    p.add_argument("--samples", type=int, default=5000, help="number of synthetic samples")
    p.add_argument("--workers", type=int, default=2, help="optimize and DataLoader worker processes")
    p.set_defaults(func=_cmd_demo)
    k = sub.add_parser("knobs", help="print every knob with its default, unit and environment variable")
    k.set_defaults(func=_cmd_knobs)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
