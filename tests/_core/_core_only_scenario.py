"""Run by ``test_optional.py`` in a subprocess whose ``sitecustomize`` hides every optional package: what a user
with only ``pip install streamscope`` gets. Prints one JSON line: each check's outcome.

Usage: python _core_only_scenario.py WORKDIR KEYED_DATASET PIL_DATASET PARQUET_DIR
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import pkgutil
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

RESULTS: dict[str, dict[str, Any]] = {}


def check(name: str, fn: Callable[[], Any]) -> None:
    t0 = time.monotonic()
    try:
        value = fn()
        RESULTS[name] = {"ok": True, "value": value}
    except BaseException as exc:  # noqa: BLE001 - every outcome is reported to the test
        RESULTS[name] = {
            "ok": False,
            "type": type(exc).__name__,
            "msg": str(exc),
            "mro": [c.__name__ for c in type(exc).__mro__],
        }
    RESULTS[name]["seconds"] = round(time.monotonic() - t0, 3)


def import_everything() -> list[str]:
    """Import every module of streamscope and trace_tools; the ones that fail, with why."""
    import streamscope
    import trace_tools

    failed = []
    for pkg in (streamscope, trace_tools):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            try:
                importlib.import_module(info.name)
            except BaseException as exc:  # noqa: BLE001
                failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
    for name in streamscope.__all__:  # the lazily resolved public names
        try:
            getattr(streamscope, name)
        except BaseException as exc:  # noqa: BLE001
            failed.append(f"streamscope.{name}: {type(exc).__name__}: {exc}")
    return failed


def sample(i: int) -> dict[str, Any]:
    return {"index": i, "name": f"s{i}"}


def cli(*argv: str) -> dict[str, Any]:
    from trace_tools.cli import main

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(list(argv))
    return {"code": code, "stderr": err.getvalue()}


def main() -> None:
    work, keyed, pil_ds, parquet_dir = sys.argv[1:5]
    import streamscope as ld

    check("import_everything", import_everything)
    out = os.path.join(work, "plain")
    log = os.path.join(work, "trace.log")

    def optimize_and_stream() -> int:
        ld.optimize(fn=sample, inputs=list(range(20)), output_dir=out, chunk_size=5, num_workers=1, verbose=False)
        ld.enable_tracer("chunk", log_file=log)
        ds = ld.StreamingDataset(out)
        n = sum(len(b["index"]) for b in ld.StreamingDataLoader(ds, batch_size=4))
        ld.enable_tracer("off", log_file=log)
        return n

    check("optimize_and_stream", optimize_and_stream)
    check("trace_validate", lambda: cli("validate", log))
    check("trace_convert_json", lambda: cli("convert", log, "-o", os.path.join(work, "t.json")))
    check("trace_convert_pftrace", lambda: cli("convert", log, "-o", os.path.join(work, "t.pftrace")))
    check("trace_summary_no_plots", lambda: cli("summary", log, "--no-plots"))
    check("trace_summary_plots", lambda: cli("summary", log, "-o", os.path.join(work, "png")))

    def optimize_keys() -> bool:
        target = os.path.join(work, "keyed-out")
        try:
            ld.optimize(
                fn=sample,
                inputs=list(range(20)),
                output_dir=target,
                chunk_size=5,
                num_workers=1,
                verbose=False,
                key_fn=lambda s: s["name"],
            )
        finally:
            RESULTS["optimize_keys_wrote_nothing"] = {"ok": True, "value": not os.path.exists(target)}
        return True

    check("optimize_key_fn", optimize_keys)
    check("get_by_key", lambda: ld.StreamingDataset(keyed).get_by_key("k3"))
    check("pil_leaf", lambda: ld.StreamingDataset(pil_ds)[0])
    check("index_parquet_dataset", lambda: ld.index_parquet_dataset(parquet_dir, num_workers=1))
    check("parquet_reader", lambda: importlib.import_module("streamscope.processing.readers").ParquetReader(work))
    check("fernet", lambda: importlib.import_module("streamscope.utilities.encryption").FernetEncryption("pw"))

    def optimize_on_ray() -> bool:
        target = os.path.join(work, "ray-out")
        try:
            ld.optimize(fn=sample, inputs=[1, 2], output_dir=target, chunk_size=5, verbose=False, executor="ray")
        finally:
            RESULTS["optimize_ray_wrote_nothing"] = {"ok": True, "value": not os.path.exists(target)}
        return True

    check("optimize_ray", optimize_on_ray)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from streamscope.storage import open_store

    s3_opts = {"endpoint_url": f"http://127.0.0.1:{port}", "aws_access_key_id": "AKIAX", "aws_secret_access_key": "x"}
    check(
        "s3_download", lambda: open_store("s3://bucket-x/ds", s3_opts).download_file("c.bin", os.path.join(work, "c"))
    )
    check("gs_get", lambda: open_store("gs://bucket-x/ds", {}).get("index.json"))
    check("azure_get", lambda: open_store("azure://container-x/ds", {}).get("index.json"))
    print(json.dumps(RESULTS))


if __name__ == "__main__":
    main()
