"""Processes of ``bench_autotune.py``: a zygote that forks each arm's process, and a sampler of their memory and cache.

**Zygote.** Every arm runs in its own process, forked from a zygote that imported torch and numpy once and nothing
of either engine. A fresh interpreter per arm would pay torch's import each time (3 s of CPU, over 10 s of wall
time on a loaded 2-core machine) for ~70 arms; a fork from a process that never imported LitData, streamscope or
obstore starts as clean as a fresh one (no obstore runtime, no engine state) and imports its engine itself, with
the arm's environment variables and ``sys.path`` in place first. The zygote holds no threads, so forking it is safe.
Protocol: one JSON line per request on its stdin, one JSON answer line on its stdout (``fork`` -> ``{"pid"}``,
``poll`` -> ``{"status": exit code, negative signal, or null while running}``).

**Sampler.** A thread of the harness samples, at ``hz``, the resident set size of each arm process with all its
descendants (DataLoader workers) and the bytes of files under each cache directory; it keeps the peaks and the
maximum per second. RSS counts pages shared between a process and its forked workers once per process, so the
sum is an upper bound of the memory used (PSS would need ``/proc/<pid>/smaps`` on every sample).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import psutil

_HERE = os.path.dirname(os.path.abspath(__file__))


class Zygote:
    """The forking parent of every arm process (see the module docstring)."""

    def __init__(self, python: str = sys.executable, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [python, os.path.abspath(__file__), "--zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            bufsize=1,
        )
        ready = self._read()
        if ready.get("ready") is not True:
            raise RuntimeError(f"zygote did not start: {ready}")
        self.imports_s = float(ready.get("imports_s", 0.0))

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"zygote exited (code {self.proc.poll()})")
        return json.loads(line)

    def _ask(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def fork(self, spec: dict[str, Any], env: dict[str, str], sys_path: list[str], out: str, log: str) -> int:
        """Start one arm process; its pid."""
        return int(
            self._ask({"op": "fork", "spec": spec, "env": env, "sys_path": sys_path, "out": out, "log": log})["pid"]
        )

    def poll(self, pid: int) -> int | None:
        """The exit code of ``pid`` (negative: killed by that signal), or None while it runs."""
        return self._ask({"op": "poll", "pid": pid})["status"]

    def wait(self, pids: list[int], timeout: float) -> dict[int, int]:
        """Exit codes of ``pids``; those still running after ``timeout`` seconds are killed (their workers too)."""
        deadline = time.monotonic() + timeout
        codes: dict[int, int] = {}
        while len(codes) < len(pids):
            for pid in pids:
                if pid not in codes:
                    st = self.poll(pid)
                    if st is not None:
                        codes[pid] = st
            if len(codes) < len(pids):
                if time.monotonic() > deadline:
                    for pid in pids:
                        if pid not in codes:
                            kill_tree(pid)
                    deadline = time.monotonic() + 30
                time.sleep(0.2)
        return codes

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def kill_tree(pid: int) -> None:
    """Kill ``pid`` (an arm process this harness started) and its descendants."""
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def _serve() -> None:  # pragma: no cover - runs in the zygote process
    t0 = time.perf_counter()
    import numpy  # noqa: F401
    import torch  # noqa: F401

    imports_s = time.perf_counter() - t0
    sys.path.insert(0, _HERE)
    out = sys.stdout
    print(json.dumps({"ready": True, "imports_s": imports_s}), file=out, flush=True)
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "fork":
            pid = os.fork()
            if pid == 0:
                _child(msg)  # never returns
            print(json.dumps({"pid": pid}), file=out, flush=True)
        elif msg["op"] == "poll":
            got, status = os.waitpid(int(msg["pid"]), os.WNOHANG)
            code = None if got == 0 else os.waitstatus_to_exitcode(status)
            print(json.dumps({"status": code}), file=out, flush=True)


def _child(msg: dict[str, Any]) -> None:  # pragma: no cover - runs in a forked arm process
    code = 1
    try:
        fd = os.open(msg["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        sys.stdin = open(os.devnull)
        os.environ.update(msg["env"])
        sys.path[:0] = msg["sys_path"]
        from _autotune_loop import child_main

        code = child_main(msg["spec"], msg["out"])
    finally:
        os._exit(code)


class Sampler:
    """Samples RSS of process trees and bytes under cache directories at ``hz`` in a thread (see module doc)."""

    def __init__(self, roots: dict[str, int], cache_dirs: dict[str, str], hz: float = 10.0) -> None:
        self.roots = roots  # label -> pid
        self.cache_dirs = cache_dirs  # label -> directory
        self.period = 1.0 / hz
        self.peak_rss: dict[str, int] = {k: 0 for k in roots}
        self.peak_rss_total = 0
        self.peak_cache: dict[str, int] = {k: 0 for k in cache_dirs}
        self.rss_per_second: list[int] = []  # max total RSS per second
        self.cache_per_second: list[int] = []  # max total cache bytes per second
        self.samples = 0
        self._procs: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def start(self) -> Sampler:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _proc(self, pid: int) -> psutil.Process:
        p = self._procs.get(pid)
        if p is None:
            p = self._procs[pid] = psutil.Process(pid)
        return p

    def _tree_rss(self, pid: int) -> int:
        try:
            root = self._proc(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0
        total = 0
        for p in procs:
            try:
                total += (self._proc(p.pid) if p.pid in self._procs else p).memory_info().rss
            except psutil.Error:
                continue
        return total

    @staticmethod
    def dir_bytes(path: str) -> int:
        """Bytes of the files under ``path`` now (files vanishing meanwhile count 0)."""
        total = 0
        for dirpath, _dirs, files in os.walk(path):
            for name in files:
                try:
                    total += os.stat(os.path.join(dirpath, name)).st_size
                except OSError:
                    continue
        return total

    def sample(self) -> None:
        """Take one sample now."""
        sec = int(time.monotonic() - self._t0)
        rss_total = 0
        for label, pid in self.roots.items():
            rss = self._tree_rss(pid)
            rss_total += rss
            self.peak_rss[label] = max(self.peak_rss[label], rss)
        self.peak_rss_total = max(self.peak_rss_total, rss_total)
        cache_total = 0
        for label, d in self.cache_dirs.items():
            b = self.dir_bytes(d)
            cache_total += b
            self.peak_cache[label] = max(self.peak_cache[label], b)
        for series, value in ((self.rss_per_second, rss_total), (self.cache_per_second, cache_total)):
            while len(series) <= sec:
                series.append(0)
            series[sec] = max(series[sec], value)
        self.samples += 1

    def _run(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            self.sample()
            nxt += self.period
            delay = nxt - time.monotonic()
            if delay < 0:
                nxt = time.monotonic()  # fell behind (a loaded machine): no burst of catch-up samples
            elif self._stop.wait(delay):
                break


if __name__ == "__main__" and sys.argv[1:] == ["--zygote"]:
    _serve()
