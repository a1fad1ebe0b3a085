"""One node of a multi-node job, as a real process: ``python -m tests.processing._node_script SPEC.json``.

SPEC: ``{"call": "optimize" | "map", "fn": "module:name", "inputs": [...], "output_dir": ..., "kwargs": {...},
"key_fn": "module:name" | null, "result": path}``. The node variables come from the environment. The outcome is
written to ``result`` as JSON: ``{"ok": true}`` or ``{"error": <exception class>, "message": ...}``.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any


def _resolve(spec: str) -> Any:
    mod, _, name = spec.partition(":")
    return getattr(importlib.import_module(mod), name)


def main(path: str) -> None:
    with open(path) as f:
        spec = json.load(f)
    from streamscope.processing import functions

    kwargs = dict(spec.get("kwargs") or {})
    if spec.get("key_fn"):
        kwargs["key_fn"] = _resolve(spec["key_fn"])
    call = functions.optimize if spec["call"] == "optimize" else functions.map
    try:
        call(_resolve(spec["fn"]), spec["inputs"], spec["output_dir"], **kwargs)
        out: dict[str, Any] = {"ok": True}
    except Exception as exc:  # the test asserts on the class and the message
        out = {"error": type(exc).__name__, "message": str(exc)}
    with open(spec["result"], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1])
