"""optimize() as LitData's README uses it, run by both engines: the written datasets must be byte-identical.

Each engine writes in its own process (LitData's optimize starts workers with "spawn", so the functions live in
an importable module, ``tests.compat._fns``). Compared: every file's bytes, and index.json except its
``updated_at`` time stamp. streamscope writes the layout of the LitData it is compared with (the
``write_format`` knob: "0.2.68" for LitData 0.2.68, its default "0.2.76" for 0.2.76), and LitData runs the
same ``litdata`` this process would import.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from tests.compat._writer_script import KINDS

# the module fixture runs 22 optimize processes; on a loaded 2-core machine that outlasted the 300 s default
pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.timeout(900)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


_AT_ONCE = 6


def _litdata_path_and_layout() -> tuple[list[str], str]:
    """The folder to put first on LitData's PYTHONPATH (none for the venv's own), and its layout."""
    import litdata

    here = os.path.dirname(os.path.dirname(os.path.abspath(litdata.__file__)))
    site = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    version = tuple(int(p) for p in litdata.__version__.split(".")[:3])
    return ([] if here in site else [here]), ("0.2.76" if version >= (0, 2, 76) else "0.2.68")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], str]:
    """Every kind written by both engines, all processes at once (LitData's optimize is slow to start)."""
    tmp = str(tmp_path_factory.mktemp("parity"))
    procs = {}
    jobs = [(eng, kind) for eng in ("litdata", "streamscope") for kind in KINDS]
    # At most a few writers at a time (each is a torch process with its own optimize workers: 22 at once
    # exhausted memory on a shared 2-core machine), each in its own session so its whole tree can be killed.
    result = {}
    litdata_path, layout = _litdata_path_and_layout()
    for start in range(0, len(jobs), _AT_ONCE):
        procs = {}
        for eng, kind in jobs[start : start + _AT_ONCE]:
            env = dict(os.environ)
            # LitData runs without our sources on the path (only the tests package); streamscope with them
            env["PYTHONPATH"] = os.pathsep.join(
                [*litdata_path, ROOT] if eng == "litdata" else [os.path.join(ROOT, "src"), ROOT]
            )
            env["STREAMSCOPE_WRITE_FORMAT"] = layout
            env["LITDATA_DISABLE_VERSION_CHECK"] = "1"
            env["DATA_OPTIMIZER_CACHE_FOLDER"] = os.path.join(tmp, f"stage-{eng}-{kind}")
            env["DATA_OPTIMIZER_DATA_CACHE_FOLDER"] = os.path.join(tmp, f"dstage-{eng}-{kind}")
            out = os.path.join(tmp, f"{eng}-{kind}")
            cmd = [sys.executable, "-m", "tests.compat._writer_script", eng, out, kind]
            log = open(os.path.join(tmp, f"{eng}-{kind}.log"), "w")
            procs[(eng, kind)] = (
                subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True),
                out,
                log,
            )
        try:
            for key, (proc, out, log) in procs.items():
                rc = proc.wait(timeout=600)
                assert rc == 0, f"{key} writer failed: {Path(log.name).read_text()[-2000:]}"
                result[key] = out
        finally:
            for proc, _, log in procs.values():
                log.close()
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the writer and any optimize workers it left behind
                except ProcessLookupError:
                    pass
                proc.wait()
    return result


def _contents(d: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        if name == "index.json":
            index = json.loads(data)
            assert "updated_at" in index
            index.pop("updated_at")
            out[name] = index
        else:
            out[name] = data
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_same_bytes_as_litdata(written: dict[tuple[str, str], str], kind: str) -> None:
    theirs, ours = _contents(written[("litdata", kind)]), _contents(written[("streamscope", kind)])
    assert sorted(theirs) == sorted(ours)
    for name in theirs:
        assert theirs[name] == ours[name], f"{kind}: {name} differs"
    assert any(n.endswith(".bin") for n in theirs)
