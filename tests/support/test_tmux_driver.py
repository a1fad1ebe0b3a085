"""tmux drives an interactive program: it types at its prompt, reads the screen and sees it exit."""

from __future__ import annotations

import re
import sys
import time

import pytest

from tests.support.tmux_driver import TmuxSession

# a prompt loop: answers each line, exits with the status typed after "exit"
PROGRAM = r"""
import shutil, sys
print("size", "%dx%d" % tuple(shutil.get_terminal_size()), "env", __import__("os").environ.get("GREETING"))
while True:
    line = input("name? ")
    if line.startswith("exit"):
        sys.exit(int(line.split()[1]))
    print("hello", line.upper())
"""


def test_types_at_the_prompt_and_reads_the_answer() -> None:
    with TmuxSession([sys.executable, "-c", PROGRAM], width=100, height=30, env={"GREETING": "hi"}) as tm:
        screen = tm.wait_for_text("name? ", timeout=10)
        assert "size 100x30 env hi" in screen
        assert tm.exit_status() is None
        tm.send_text("world")
        screen = tm.wait_for_text("hello WORLD", timeout=5)
        assert screen.splitlines()[-1] == "name?"  # the next prompt (trailing blank trimmed)
        tm.send_text("exit 3")
        assert tm.wait_for_exit(timeout=5) == 3
        assert "name? exit 3" in tm.capture()  # the last screen stays readable after the exit


def test_keys_by_name_interrupt_the_program() -> None:
    with TmuxSession([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"]) as tm:
        tm.wait_for_text("ready")
        tm.send_keys("C-c")
        status = tm.wait_for_exit(timeout=5)
        assert status in (1, 130)  # KeyboardInterrupt: Python exits 1, or dies by SIGINT
        assert tm.wait_for_text("KeyboardInterrupt", timeout=2, history=True)


def test_a_shell_string_and_a_regex_and_resize() -> None:
    with TmuxSession("printf 'a=%s\\n' 42; read x", width=60, height=10) as tm:
        assert re.search(r"a=\d+", tm.wait_for_text(re.compile(r"a=4\d")))
        tm.resize(80, 20)
        assert (tm.width, tm.height) == (80, 20)
        tm.send_keys("Enter")
        assert tm.wait_for_exit(timeout=5) == 0


def test_wait_for_text_times_out_showing_the_screen() -> None:
    with TmuxSession([sys.executable, "-c", "print('something else'); input()"]) as tm:
        tm.wait_for_text("something else")
        with pytest.raises(
            TimeoutError,
            match=r"'never shown' not on the screen within 0.2 s \(program still "
            r"running\); screen:\nsomething else",
        ):
            tm.wait_for_text("never shown", timeout=0.2)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between the open and the read
        return False
    return state not in ("Z", "X")  # a zombie has ended; whether it is reaped yet is its new parent's affair


def test_kill_ends_the_program_and_the_server() -> None:
    import psutil

    tm = TmuxSession([sys.executable, "-c", "print('ready'); input()"])
    try:
        tm.wait_for_text("ready")
        shell = tm.pid()
        (program,) = psutil.Process(shell).children()
        pids = [shell, program.pid]
        assert all(_running(p) for p in pids)
        sock_dir = tm.socket.parent
    finally:
        tm.kill()
    tm.kill()
    assert not sock_dir.exists()
    deadline = time.monotonic() + 5
    while any(_running(p) for p in pids):  # the SIGHUP reaches them asynchronously
        if time.monotonic() > deadline:
            pytest.fail(f"{[p for p in pids if _running(p)]} outlived their tmux server")
        time.sleep(0.02)


def test_too_small_a_terminal_is_refused() -> None:
    with pytest.raises(ValueError, match="3x3 terminal is too small"):
        TmuxSession(["true"], width=3, height=3)
