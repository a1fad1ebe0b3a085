"""One way for every benchmark to write its result: a file that says what produced it.

``benchmarks/results/<benchmark>.json`` holds the *current* result of each benchmark (older runs live in git
history, not beside it). Every file has the same envelope::

    {
      "benchmark": "bench_stream",
      "meta": {
        "written_at": "2026-12-02T10:11:12Z", "duration_s": 812.4,
        "commit": "0d4a68a...", "dirty": false,            # the checkout whose streamscope was measured
        "machine": {"cpu_count": 2, "cpus_usable": 2, "cpu_model": "...", "ram_bytes": ...,
                    "platform": "Linux-...", "load_avg_start": [...], "load_avg_end": [...]},
        "versions": {"python": "3.12.3", "torch": "2.13.0+cpu", "streamscope": "0.1.0", "litdata": "0.2.68"},
        "argv": ["benchmarks/bench_stream.py", "--rounds", "3"],
        "args": {"rounds": 3, ...}
      },
      "summary": [{"case": "images w=0", "LitData samples/s": 50000, ...}, ...],   # the README's table
      "result": {...}                                                          # everything the script measured
    }

Versions are read from package metadata, not by importing (importing torch or litdata in a process that is
about to be timed would change what is timed). ``benchmarks/report.py`` renders the summaries into README.md.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["RESULTS_DIR", "Run", "describe_machine", "package_version", "result_path", "source_state", "start", "time_calls"]

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(HERE, "results")
_VERSION_LINE = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def result_path(name: str, out: str | None = None) -> str:
    """Where a result goes: ``out`` if given (a bare name lands in results/), else results/<name>.json."""
    if not out:
        return os.path.join(RESULTS_DIR, f"{name}.json")
    if os.sep in out or (os.altsep and os.altsep in out):
        return out
    return os.path.join(RESULTS_DIR, out)


def package_version(dist: str, module: str | None = None, *, path: str | None = None) -> str | None:
    """The version of ``module`` as this interpreter would import it (or as found in folder ``path``), unimported.

    The first ``module`` on ``sys.path`` wins (a LitData unpacked first on ``PYTHONPATH`` shadows the installed
    one), so the version comes from the file that import would load, then from the distribution's metadata.
    """
    module = module or dist
    loaded = sys.modules.get(module) if path is None else None
    if loaded is not None and isinstance(getattr(loaded, "__version__", None), str):
        return str(loaded.__version__)
    try:
        spec = importlib.util.find_spec(module) if path is None else importlib.machinery.PathFinder.find_spec(module, [path])
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        pkg_dir = os.path.dirname(spec.origin)
        for candidate in ("__about__.py", "version.py", "__init__.py"):
            path = os.path.join(pkg_dir, candidate)
            try:
                with open(path, encoding="utf-8") as f:
                    found = _VERSION_LINE.search(f.read())
            except OSError:
                continue
            if found:
                return found.group(1)
    if path is not None:
        return None
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(cwd: str, *argv: str) -> str | None:
    try:
        run = subprocess.run(["git", *argv], cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return run.stdout if run.returncode == 0 else None


def source_state(path: str | None = None) -> dict[str, Any]:
    """Commit and dirty flag of the git checkout holding ``path`` (default: the streamscope that would be imported).

    Changes under ``benchmarks/results/`` do not make a tree dirty: a result not yet committed does not change
    the code it measured.
    """
    if path is None:
        spec = importlib.util.find_spec("streamscope")
        path = os.path.dirname(spec.origin) if spec is not None and spec.origin else HERE
    top = _git(path, "rev-parse", "--show-toplevel")
    if top is None:
        return {"commit": None, "dirty": None, "source": path}
    top = top.strip()
    commit = (_git(top, "rev-parse", "HEAD") or "").strip() or None
    status = _git(top, "status", "--porcelain", "--untracked-files=no") or ""
    changed = [line[3:] for line in status.splitlines() if line[3:] and not line[3:].startswith("benchmarks/results/")]
    return {"commit": commit, "dirty": bool(changed), "source": top}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def describe_machine() -> dict[str, Any]:
    """Cores, CPU model, RAM and platform of this machine, and its load now."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "cpu_model": _cpu_model(),
        "ram_bytes": _ram_bytes(),
        "platform": platform.platform(),
        "load_avg_start": _load(),
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


class Run:
    """One benchmark run: what it ran on, taken at the start; its result, written at the end."""

    def __init__(self, name: str, args: argparse.Namespace | Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.args = _jsonable(args) if args is not None else {}
        self.argv = list(sys.argv)
        self._t0 = time.monotonic()
        self.meta: dict[str, Any] = {"machine": describe_machine(), **source_state()}
        self.meta["versions"] = {
            "python": platform.python_version(),
            "torch": package_version("torch"),
            "streamscope": package_version("streamscope"),
            "litdata": package_version("litdata"),
        }

    def write(
        self,
        result: Mapping[str, Any],
        *,
        summary: Sequence[Mapping[str, Any]] | None = None,
        out: str | None = None,
        versions: Mapping[str, str | None] | None = None,
    ) -> str:
        """Write ``result`` (with ``summary`` rows for the README) and return the path.

        ``out``: another file name or path (exploratory runs that should not replace the current result);
        ``versions``: versions the script knows better than this process (e.g. a LitData run in a child process).
        """
        meta = dict(self.meta)
        meta["machine"] = dict(meta["machine"], load_avg_end=_load())
        if versions:
            meta["versions"] = {**meta["versions"], **versions}
        meta["written_at"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["duration_s"] = round(time.monotonic() - self._t0, 1)
        meta["argv"] = self.argv
        meta["args"] = self.args
        doc = {"benchmark": self.name, "meta": meta, "summary": _jsonable(list(summary or [])), "result": _jsonable(result)}
        path = result_path(self.name, out)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
        print(f"result: {path}", flush=True)
        return path


def start(name: str, args: argparse.Namespace | Mapping[str, Any] | None = None) -> Run:
    """Begin a run of benchmark ``name``: call at the start of ``main``, ``.write(result)`` at the end."""
    return Run(name, args)


def time_calls(fn: Callable[[], object], reads: int) -> dict[str, float]:
    """``fn()`` called ``reads`` times, each timed alone: the best and the median in µs (what one call costs)."""
    ts = []
    for _ in range(reads):
        t0 = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t0)
    return {"best_us": min(ts) / 1e3, "median_us": statistics.median(ts) / 1e3}
