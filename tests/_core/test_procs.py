import os
import subprocess
import sys

from streamscope._core.procs import pid_alive


def test_own_process_is_alive():
    assert pid_alive(os.getpid())


def test_exited_and_zombie_processes_are_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # Not reaped yet: a zombie once it exits.
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert not pid_alive(child.pid)
    child.wait()
    assert not pid_alive(child.pid)


def test_nonsense_pids():
    assert not pid_alive(0)
    assert not pid_alive(-5)
