"""A Ray driver for the tests, in a process of its own (the test process never imports Ray):
``python -m tests.processing._ray_script OPS.json RESULT.json``.

OPS is a list of ``{"call": "connect", "address": ...}`` (``ray.init``, kept for the later ops),
``{"call": "touch", "path": ...}``, ``{"call": "drain", "path": folder}`` (the inputs logged there, then removed) and
``{"call": "optimize" | "map", "fn": name in _node_fns, "inputs": [...], "output_dir": ...,
"executor": null | "ray" | {"address": ..., ...RayExecutor kwargs}, "kwargs": {...}, "env": {...},
"trace_log": path | null}``, run in order. RESULT gets one entry per op: ``{"ok": true}`` or ``{"error": <class>,
"message": ...}``, with ``"seconds"`` (wall time) and ``"stderr"`` (what the op wrote there: the progress bar).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from typing import Any

from tests.processing import _node_fns


def run(op: dict[str, Any]) -> dict[str, Any]:
    from streamscope.processing import functions
    from streamscope.processing.ray_executor import RayExecutor

    if op["call"] == "touch":
        open(op["path"], "w").close()
        return {"ok": True, "seconds": 0.0}
    if op["call"] == "drain":  # the inputs logged in a folder so far (then emptied)
        calls = []
        for name in sorted(os.listdir(op["path"])):
            with open(os.path.join(op["path"], name)) as f:
                calls += [int(x) for x in f.read().split()]
            os.unlink(os.path.join(op["path"], name))
        return {"ok": True, "seconds": 0.0, "calls": sorted(calls)}
    if op["call"] == "connect":  # the driver joins once: later executors find Ray initialised and reuse workers
        import ray

        t0 = time.perf_counter()
        ray.init(address=op["address"], logging_level="ERROR")
        return {"ok": True, "seconds": time.perf_counter() - t0}

    os.environ.update(op.get("env") or {})
    ex = op.get("executor")
    if isinstance(ex, dict):
        ex = RayExecutor(**ex)
    kwargs = dict(op.get("kwargs") or {})
    if kwargs.get("key_fn"):
        kwargs["key_fn"] = getattr(_node_fns, kwargs["key_fn"])
    if op.get("trace_log"):
        from streamscope.api.tracing import enable_tracer

        enable_tracer(
            categories=["epoch", "read", "sample", "download", "upload", "write", "crash"], log_file=op["trace_log"]
        )
    call = functions.optimize if op["call"] == "optimize" else functions.map
    err = io.StringIO()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stderr(err):
            call(getattr(_node_fns, op["fn"]), op["inputs"], op["output_dir"], executor=ex, **kwargs)
        out: dict[str, Any] = {"ok": True}
    except Exception as exc:  # the test asserts on the class and the message
        out = {"error": type(exc).__name__, "message": str(exc)}
    out["seconds"] = time.perf_counter() - t0
    out["stderr"] = err.getvalue()[-4000:]
    if op.get("trace_log"):
        from streamscope.api.tracing import flush_tracer

        flush_tracer()
        out["driver_pid"] = os.getpid()
    for k in op.get("env") or {}:
        os.environ.pop(k, None)
    return out


def main(ops_file: str, result_file: str) -> None:
    with open(ops_file) as f:
        ops = json.load(f)
    results = []
    for op in ops:
        results.append(run(op))
        with open(result_file, "w") as f:  # after each op: a crash keeps what ran
            json.dump(results, f)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
