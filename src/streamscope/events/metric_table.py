"""Rewrite the metric table of ``src/streamscope/events/README.md`` from the registry:
``python -m streamscope.events.metric_table`` (``--print``: write the table to stdout instead)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from streamscope.events.registry import markdown_table, readme_with_table

__all__ = ["README", "main", "rewrite"]


README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md")


def rewrite(argv: list[str], table: Callable[[], str], with_table: Callable[[str], str]) -> int:
    """``--print`` in ``argv``: write ``table()`` to stdout; else rewrite :data:`README` through ``with_table``
    (the events README's generated tables: this one and :mod:`.kind_doc`'s)."""
    if "--print" in argv:
        sys.stdout.write(table())
        return 0
    with open(README, encoding="utf-8") as f:
        new = with_table(f.read())
    with open(README, "w", encoding="utf-8") as f:
        f.write(new)
    return 0


def main(argv: list[str]) -> int:
    return rewrite(argv, markdown_table, readme_with_table)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
