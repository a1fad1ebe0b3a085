"""Drive a terminal program as a person would: in tmux, by keystrokes, reading the screen.

Usage (the ``streamscope top`` test)::

    with TmuxSession([sys.executable, "-m", "streamscope", "top", url], width=120, height=40) as tm:
        screen = tm.wait_for_text("wait %", timeout=10)
        tm.send_keys("q")
        assert tm.wait_for_exit(timeout=5) == 0

Each session runs on its own tmux server (a socket in a temporary directory, no user config), so tests
neither see nor disturb the user's tmux nor each other. The window has a fixed size and no status line, so the
program gets exactly ``width`` x ``height``. Panes stay open after the program exits (remain-on-exit), so its
last screen can still be read; a small ``sh`` wrapper records its exit status. :meth:`TmuxSession.kill` (also on leaving the ``with``) ends
the server and with it the program.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.components import require_program

# default-size: with no client attached, tmux sizes the window from it (80x24 unless set)
_CONF = (
    "set -g remain-on-exit on\nset -g status off\nset -g history-limit 10000\nset -g default-terminal screen\n"
    "set -g default-size {width}x{height}\n"
)
_POLL = 0.05  # tmux offers no blocking "screen changed" call for an arbitrary program, so waits poll
# Runs the program and writes its exit status to the file named by $0. tmux 3.3's own #{pane_dead_status}
# sometimes stays empty for good after the pane died (seen in about 1 run in 4), so the status comes from
# here. The shell catches the keyboard signals (a handler, not an ignore, so the program gets the default
# action back on exec) to outlive a Ctrl-C that ends the program and report its 128 + n.
_WRAPPER = 'trap : INT QUIT; "$@"; s=$?; echo "$s" > "$0.tmp" && mv "$0.tmp" "$0"'

# The environment of the tmux server and so of the program: not nested in a tmux the tests may run under, and
# without COLUMNS/LINES, which would override the terminal's size for the program (pytest-xdist workers have
# COLUMNS=80 LINES=24).
_ENV = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE", "COLUMNS", "LINES")}


class TmuxError(RuntimeError):
    """A tmux command failed; the message holds the command and tmux's stderr."""


class TmuxSession:
    """``command`` (an argv list; or a string for ``sh -c``) in a detached tmux session.

    ``env`` entries are set for the program (on top of this process's environment); ``cwd`` is its directory.
    """

    def __init__(
        self,
        command: Sequence[str] | str,
        *,
        width: int = 120,
        height: int = 40,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ):
        self.tmux = require_program("tmux", "tmux")
        if width < 10 or height < 5:
            raise ValueError(f"a {width}x{height} terminal is too small to drive a program in")
        self.width, self.height = width, height
        self._dir = Path(tempfile.mkdtemp(prefix="tmux-test-"))
        self.socket = self._dir / "sock"
        conf = self._dir / "tmux.conf"
        conf.write_text(_CONF.format(width=width, height=height))
        self.target = "test"
        self._status_file = self._dir / "exit-status"
        program = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        argv = ["/bin/sh", "-c", _WRAPPER, str(self._status_file), *program]
        env_args = [a for k, v in (env or {}).items() for a in ("-e", f"{k}={v}")]
        self._alive = True
        try:
            self._tmux(
                "-f",
                str(conf),
                "new-session",
                "-d",
                "-s",
                self.target,
                "-x",
                str(width),
                "-y",
                str(height),
                "-c",
                str(cwd or os.getcwd()),
                *env_args,
                "--",
                *argv,
            )
        except BaseException:
            self._alive = False
            shutil.rmtree(self._dir, ignore_errors=True)
            raise

    def _tmux(self, *args: str, check: bool = True) -> str:
        # -f only matters to the command that starts the server; later commands talk to it through -S
        cmd = [self.tmux, "-S", str(self.socket), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL, env=_ENV)
        if check and proc.returncode != 0:
            raise TmuxError(f"{' '.join(cmd)} failed (rc={proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout

    # -- input ------------------------------------------------------------------------------------

    def send_keys(self, *keys: str) -> None:
        """Press keys by tmux's names: ``"Enter"``, ``"C-c"``, ``"Up"``, ``"q"``, ``"F5"``..."""
        self._tmux("send-keys", "-t", self.target, *keys)

    def send_text(self, text: str, *, enter: bool = True) -> None:
        """Type ``text`` literally (no key-name lookup), then Enter unless ``enter=False``."""
        self._tmux("send-keys", "-t", self.target, "-l", text)
        if enter:
            self.send_keys("Enter")

    def resize(self, width: int, height: int) -> None:
        self._tmux("resize-window", "-t", self.target, "-x", str(width), "-y", str(height))
        self.width, self.height = width, height

    # -- output -----------------------------------------------------------------------------------

    def capture(self, *, history: bool = False) -> str:
        """The screen as text (trailing blanks trimmed; with ``history`` the scrolled-off lines too)."""
        args = ["capture-pane", "-p", "-t", self.target]
        if history:
            args += ["-S", "-"]
        lines = self._tmux(*args).split("\n")
        return "\n".join(line.rstrip() for line in lines).rstrip("\n")

    def wait_for_text(self, text: str | re.Pattern[str], timeout: float = 10.0, *, history: bool = False) -> str:
        """Wait until the screen shows ``text`` (a substring, or a compiled regex searched); return the screen.

        tmux drops the blanks at the end of each screen line, so they are dropped from a ``text`` string too
        (``"name? "`` matches a prompt ``name? ``). Raises ``TimeoutError`` with the last screen, and says so
        when the program has exited.
        """
        deadline = time.monotonic() + timeout
        needle = text if isinstance(text, re.Pattern) else "\n".join(ln.rstrip() for ln in text.split("\n"))
        while True:
            screen = self.capture(history=history)
            if needle.search(screen) if isinstance(needle, re.Pattern) else needle in screen:
                return screen
            if time.monotonic() >= deadline:
                dead = self.exit_status()
                state = "still running" if dead is None else f"exited with status {dead}"
                shown = text.pattern if isinstance(text, re.Pattern) else text
                raise TimeoutError(
                    f"{shown!r} not on the screen within {timeout:g} s (program {state}); screen:\n{screen}"
                )
            time.sleep(_POLL)

    def exit_status(self) -> int | None:
        """None while the program runs; its exit status once it has exited (128 + n if signal n ended it)."""
        try:
            return int(self._status_file.read_text())
        except FileNotFoundError:
            return None

    def wait_for_exit(self, timeout: float = 10.0) -> int:
        """Wait for the program to exit; return its exit status (see :meth:`exit_status`)."""
        deadline = time.monotonic() + timeout
        while (status := self.exit_status()) is None:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the program did not exit within {timeout:g} s; screen:\n{self.capture()}")
            time.sleep(_POLL)
        return status

    def pid(self) -> int:
        """The process id of the shell that runs the program (and reports its exit status)."""
        return int(self._tmux("display-message", "-p", "-t", self.target, "#{pane_pid}").strip())

    # -- lifetime ---------------------------------------------------------------------------------

    def kill(self) -> None:
        """End the tmux server (SIGHUP to the program) and remove its socket directory. Idempotent."""
        if not self._alive:
            return
        self._alive = False
        try:
            self._tmux("kill-server", check=False)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> TmuxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
