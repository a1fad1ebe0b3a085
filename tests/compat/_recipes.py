"""LitData's recipe pattern (``DataChunkRecipe``/``MapRecipe`` subclasses run by ``DataProcessor``) on each engine.

``LitSquares``/``LitMarks`` subclass litdata's base classes, ``SsSquares``/``SsMarks`` streamscope's. They are
built on first access (module ``__getattr__``, which pickle uses too), so importing this module imports no
engine, and a spawned worker finds each class by name.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

_BUILT: dict[str, type] = {}


def _build(prefix: str) -> None:
    dp = importlib.import_module({"Lit": "litdata", "Ss": "streamscope"}[prefix] + ".processing.data_processor")

    class Squares(dp.DataChunkRecipe):  # type: ignore[misc, name-defined]
        """Inputs 0..11; each yields its square, and the multiples of 3 a second sample."""

        is_generator = True  # LitData's processor reads it (streamscope looks at what prepare_item returns)

        def prepare_structure(self, input_dir: str | None) -> list[int]:
            return list(range(12))

        def prepare_item(self, item: int) -> Any:
            yield {"i": item, "sq": item * item}
            if item % 3 == 0:
                yield {"i": -item, "sq": 0}

    class Marks(dp.MapRecipe):  # type: ignore[misc, name-defined]
        """Inputs 0..4; each writes ``{item}_{is_last}.txt``."""

        def prepare_structure(self, input_dir: str | None) -> list[int]:
            return list(range(5))

        def prepare_item(self, item: int, output_dir: str, is_last: bool) -> None:
            with open(os.path.join(output_dir, f"{item}_{is_last}.txt"), "w") as f:
                f.write("x")

    for cls in (Squares, Marks):
        name = prefix + cls.__name__
        cls.__name__ = cls.__qualname__ = name
        cls.__module__ = __name__
        _BUILT[name] = cls


def __getattr__(name: str) -> type:
    prefix = "Lit" if name.startswith("Lit") else "Ss" if name.startswith("Ss") else ""
    if not prefix or name[len(prefix) :] not in ("Squares", "Marks"):
        raise AttributeError(name)
    if name not in _BUILT:
        _build(prefix)
    return _BUILT[name]
