"""``breakpoint()`` stops in pdb inside multiprocessing workers (where the builtin one reads /dev/null)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

SCRIPT = r"""
import multiprocessing as mp
import sys


def work(kind):
    x = 41
    if kind == "ours":
        import streamscope as ld
        ld.breakpoint()
    else:
        import pdb
        pdb.Pdb(nosigint=True).set_trace()
    print("after", x, flush=True)


if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    p = ctx.Process(target=work, args=(sys.argv[2],))
    p.start()
    p.join(30)
    print("exit", p.exitcode, flush=True)
"""


def _printed_42(out: str) -> bool:
    """pdb printed the value 42 (on its own line or after a prompt; not a "42" inside a temp path)."""
    return re.search(r"(?:^|\(Pdb\) )42$", out, re.M) is not None


def _run(tmp_path, method: str, kind: str) -> str:
    script = tmp_path / "bp.py"
    script.write_text(SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), method, kind],
        input="p x + 1\nx = 99\nc\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_breakpoint_reads_commands_in_a_worker(tmp_path, method: str) -> None:
    out = _run(tmp_path, method, "ours")
    assert _printed_42(out)  # `p x + 1` was read from the terminal's stdin and evaluated in the worker's frame
    assert "after 99" in out  # `x = 99` changed the frame, `c` continued
    assert "exit 0" in out


def test_builtin_pdb_cannot_read_in_a_worker(tmp_path) -> None:
    """The control: why LitData ships its own breakpoint (plain pdb in a worker sees /dev/null)."""
    out = _run(tmp_path, "fork", "builtin")
    assert "(Pdb)" in out  # it did stop ...
    assert not _printed_42(out)  # ... but never saw our commands: it read EOF from /dev/null and quit the worker
    assert "exit 1" in out  # BdbQuit


def test_litdata_path_and_top_level_name() -> None:
    import streamscope
    from streamscope.utilities.breakpoint import breakpoint as bp

    assert streamscope.breakpoint is bp
