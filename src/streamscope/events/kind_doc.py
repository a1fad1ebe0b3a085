"""Rewrite the kinds table of ``src/streamscope/events/README.md`` from :mod:`.kind_table`:
``python -m streamscope.events.kind_doc`` (``--print``: write the table to stdout instead)."""

from __future__ import annotations

import os
import sys

from streamscope.events.kind_table import markdown_table, readme_with_table

__all__ = ["README", "main"]


README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md")


def main(argv: list[str]) -> int:
    if "--print" in argv:
        sys.stdout.write(markdown_table())
        return 0
    with open(README, encoding="utf-8") as f:
        new = readme_with_table(f.read())
    with open(README, "w", encoding="utf-8") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
