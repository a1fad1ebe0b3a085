"""The real LitData 0.2.76, for tests that read what it writes: where to find it, and a subprocess that runs it.

LitData 0.2.68 is the one installed in the test environment; 0.2.76 is a separate unpacked copy put first on
``PYTHONPATH`` of a child process (two versions of one package cannot share a process). Where the copy is:

* ``STREAMSCOPE_LITDATA076_DIR`` (CI points it at its copy): a directory holding the ``litdata`` package;
* else a cached ``pip download`` of the wheel under ``$XDG_CACHE_HOME/streamscope-tests/litdata-0.2.76``.

LitData's keyed datasets (``optimize(key_fn=...)``, ``dataset_update``) need polars, which the test environment
may lack: ``STREAMSCOPE_LITDATA076_EXTRA_PATH`` (``os.pathsep``-separated) is added to the child's path, e.g. a
``pip install --target DIR polars``; without polars the keyed datasets are not written and their tests skip.

:class:`LitData076` is one long-lived child process that calls functions by dotted name and returns pickled
results (a few hundred microseconds a call, so hypothesis can ask it per example). :func:`session_datasets`
writes every dataset the read tests need once per test session, in one child process.
"""

from __future__ import annotations

import os
import pickle
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.2.76"

_SERVER = r"""
import importlib, os, pickle, struct, sys
os.environ["LITDATA_DISABLE_VERSION_CHECK"] = "1"
import litdata
assert litdata.__version__ == "0.2.76", litdata.__version__
inp, out = sys.stdin.buffer, sys.stdout.buffer
sys.stdout = sys.stderr  # LitData prints progress: keep the channel clean
while True:
    head = inp.read(4)
    if len(head) < 4:
        break
    fn, args, kwargs = pickle.loads(inp.read(struct.unpack("<I", head)[0]))
    mod, _, attr = fn.rpartition(".")
    try:
        res = ("ok", getattr(importlib.import_module(mod), attr)(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001
        res = ("err", f"{type(exc).__name__}: {exc}")
    try:
        blob = pickle.dumps(res)
    except Exception as exc:  # noqa: BLE001
        blob = pickle.dumps(("err", f"result does not pickle: {exc}"))
    out.write(struct.pack("<I", len(blob)) + blob)
    out.flush()
"""


def litdata076_dir() -> Path | None:
    """A directory holding LitData 0.2.76's ``litdata`` package, or None when it cannot be found."""
    env = os.environ.get("STREAMSCOPE_LITDATA076_DIR")
    if env:
        return Path(env) if (Path(env) / "litdata" / "__init__.py").exists() else None
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "streamscope-tests" / f"litdata-{VERSION}"
    if (cache / "litdata" / "__init__.py").exists():
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", f"litdata=={VERSION}", "-d", str(cache)],
            check=True,
            capture_output=True,
            timeout=120,
        )
    except (subprocess.SubprocessError, OSError):
        return None
    wheels = list(cache.glob(f"litdata-{VERSION}-*.whl"))
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(cache)
    return cache


def env076(pkg: Path) -> dict[str, str]:
    """The environment of a child process whose ``import litdata`` is 0.2.76 (and ``tests.*`` importable)."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [
                str(pkg),
                str(ROOT),
                *filter(None, os.environ.get("STREAMSCOPE_LITDATA076_EXTRA_PATH", "").split(os.pathsep)),
            ]
        ),
        "LITDATA_DISABLE_VERSION_CHECK": "1",
    }


class LitData076:
    """A child process with LitData 0.2.76 that runs ``module.function(*args, **kwargs)`` on request."""

    def __init__(self, pkg: Path) -> None:
        self.pkg = pkg
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env076(pkg),
            cwd=str(ROOT),
        )

    def call(self, fn: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` (a dotted name) in the child; its exception comes back as a RuntimeError."""
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        blob = pickle.dumps((fn, args, kwargs))
        proc.stdin.write(struct.pack("<I", len(blob)) + blob)
        proc.stdin.flush()
        head = proc.stdout.read(4)
        if len(head) < 4:
            raise RuntimeError(f"the LitData 0.2.76 process died (exit code {proc.poll()})")
        status, value = pickle.loads(proc.stdout.read(struct.unpack("<I", head)[0]))
        if status != "ok":
            raise RuntimeError(f"LitData 0.2.76 {fn}: {value}")
        return value

    def close(self) -> None:
        """Stop the child."""
        proc = self._proc
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:  # its pipe too (left open, a ResourceWarning: an error in this suite)
            proc.stdout.close()


_STATE: dict[str, Any] = {}


def oracle() -> LitData076:
    """The session's LitData 0.2.76 process (skips the test when 0.2.76 cannot be found)."""
    got = _STATE.get("oracle")
    if got is None:
        pkg = litdata076_dir()
        if pkg is None:
            pytest.skip(f"litdata {VERSION} is not available (pip download failed; set STREAMSCOPE_LITDATA076_DIR)")
        got = _STATE["oracle"] = LitData076(pkg)
    return got


def session_datasets(base: Path) -> Path:
    """Every 0.2.76 dataset of ``tests/support/ld076_datasets.py``, written once per session under ``base``."""
    got = _STATE.get("datasets")
    if got is not None:
        return got
    pkg = litdata076_dir()
    if pkg is None:
        pytest.skip(f"litdata {VERSION} is not available (pip download failed; set STREAMSCOPE_LITDATA076_DIR)")
    out = base / "ld076"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.ld076_datasets", str(out)],
        env=env076(pkg),
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"writing the LitData 0.2.76 datasets failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    _STATE["datasets"] = out
    return out


def expected(name: str, **kwargs: Any) -> list[Any]:
    """What LitData 0.2.76 reads from session dataset ``name`` (read from a private copy: reading may write)."""
    key = ("expected", name, tuple(sorted(kwargs.items())))
    got = _STATE.get(key)
    if got is None:
        src = _STATE["datasets"] / name
        got = _STATE[key] = oracle().call("tests.support.ld076_datasets.read_all", str(src), **kwargs)
    return got


def shutdown() -> None:
    """Stop the oracle process (end of session)."""
    got = _STATE.pop("oracle", None)
    if got is not None:
        got.close()
