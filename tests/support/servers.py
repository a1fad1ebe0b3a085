"""What the emulator fixtures share: a server subprocess on loopback and the rule for a missing emulator.

A test that needs an emulator (the GCS emulator, Azurite) skips only when the emulator cannot be found or
started, and says why loudly (a warning as well as the skip reason). Under CI (``CI=true``) it fails
instead, as the other external components do (``tests/support/components.py``): ``./run.sh test`` installs both emulators, so a missing one there is a broken install step, never
a reason to pass without running the tests.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Sequence

import pytest

from tests.support.components import in_ci


def emulator_unavailable(what: str, why: str) -> None:
    """Skip the calling test loudly, or fail it under CI, because emulator ``what`` is missing (``why``)."""
    message = f"{what} is not available: {why}. `./run.sh test` installs it."
    if in_ci():
        pytest.fail(f"CI must run the {what} tests, but {message}", pytrace=False)
    warnings.warn(f"SKIPPING the {what} tests: {message}", UserWarning, stacklevel=2)
    pytest.skip(f"{what} unavailable: {why}")


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (for servers that cannot bind port 0 themselves)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A server subprocess whose output is kept (for error messages) and which is killed on :meth:`stop`.

    Args:
        args: The command line.
        name: What the server is, for messages.
        cwd: Working directory (a scratch folder: some servers write files next to them).
        env: Extra environment variables.
    """

    def __init__(self, args: Sequence[str], name: str, cwd: str | None = None, env: dict[str, str] | None = None):
        self.name = name
        self.lines: list[str] = []
        self._new_line = threading.Condition()
        full_env = dict(os.environ)
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            full_env.pop(var, None)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=full_env,
            close_fds=True,
            start_new_session=True,  # a Ctrl-C of the test run does not reach it first; stop() ends it
        )
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        try:
            for raw in self.proc.stdout:
                with self._new_line:
                    if len(self.lines) < 5000:
                        self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                    self._new_line.notify_all()
        except (ValueError, OSError):
            pass  # stop() closed the pipe while a child of the server still held it open: its output ends here
        with self._new_line:
            self._new_line.notify_all()

    @property
    def output(self) -> str:
        """The last lines the server printed."""
        with self._new_line:
            return "\n".join(self.lines[-40:])

    def wait_for_line(self, pick: Callable[[str], str | None], timeout: float) -> str:
        """The first non-None ``pick(line)`` over the server's output; RuntimeError on exit or timeout."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._new_line:
            while True:
                for line in self.lines[seen:]:
                    got = pick(line)
                    if got is not None:
                        return got
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if self.proc.poll() is not None or left <= 0:
                    state = f"exited with {self.proc.returncode}" if self.proc.poll() is not None else "timed out"
                    raise RuntimeError(f"{self.name} did not start ({state}): {self.output[-2000:]}")
                self._new_line.wait(min(left, 0.2))

    def wait_until_answers(self, url: str, timeout: float) -> None:
        """Poll ``url`` until the server answers any HTTP status; RuntimeError on exit or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except urllib.error.HTTPError:
                return  # it answered
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                state = f"exited with {self.proc.returncode}" if self.proc.poll() is not None else "timed out"
                raise RuntimeError(f"{self.name} did not answer at {url} ({state}): {self.output[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Terminate the server (kill it if it does not exit within 5 s)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        # the reader first, then the pipe: closed under a reading thread, the read fails in that thread (an
        # unhandled thread exception, an error in this suite)
        self._drainer.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
