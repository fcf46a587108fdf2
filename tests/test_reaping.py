"""The suite's own check that tests reap what they start (tests/conftest.py: PROCESS_MARK_ENV, `reaped`, the session's
end): a process that left the test's process group and session, as nsys's agent does, is still found, named, failed on
and stopped; what a finaliser stopped is not."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import conftest

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds processes through /proc (Linux)")

# A daemon as nsys 2022.4 starts its agent: forked twice (its parent is gone, so PID 1 or a subreaper adopts it), in a
# session of its own; it writes its pid, then waits to be stopped.
DAEMON = ("import os, signal, sys\n"
          "if os.fork():\n    sys.exit(0)\n"
          "os.setsid()\n"
          "open(sys.argv[1] + '.new', 'w').write(str(os.getpid())); os.replace(sys.argv[1] + '.new', sys.argv[1])\n"
          "while True:\n    signal.pause()\n")


def _start_daemon(pid_file: Path, **env) -> int:
    subprocess.run([sys.executable, "-c", DAEMON, str(pid_file)], check=True, **env)  # until the first fork exits
    deadline = time.monotonic() + conftest.LAST_RESORT_S
    while not pid_file.exists():  # the daemon writes it right after the fork: waited for, not timed
        assert time.monotonic() < deadline, "the daemon never wrote its pid"
        time.sleep(0.01)
    return int(pid_file.read_text())


def test_a_daemon_a_test_left_running_is_found_failed_on_and_stopped(tmp_path):
    before = set(conftest.leftover_processes())
    pid = _start_daemon(tmp_path / "daemon.pid")
    assert pid in conftest.leftover_processes() and os.getsid(pid) != os.getsid(0)  # outside every group of ours
    with pytest.raises(pytest.fail.Exception, match=rf"the test left 1 process running \(now stopped\): {pid}: "):
        conftest.check_nothing_left(before, "the test")
    assert pid not in conftest.leftover_processes()


def test_a_daemon_its_finaliser_stopped_is_no_leftover(tmp_path):
    before = set(conftest.leftover_processes())
    pid = _start_daemon(tmp_path / "daemon.pid")
    assert conftest.stop_processes({pid}) == {}  # the finaliser
    conftest.check_nothing_left(before, "the test")  # passes


def test_another_pytest_process_marks_its_own_processes_apart(tmp_path):
    """Another session on the machine (another xdist worker, another engineer's run) has a mark of its own: its
    processes are not this session's leftovers."""
    pid = _start_daemon(tmp_path / "daemon.pid", env={**os.environ, conftest.PROCESS_MARK_ENV: "another-session"})
    try:
        assert pid not in conftest.leftover_processes() and pid in conftest.leftover_processes("another-session")
    finally:
        assert conftest.stop_processes({pid}, "another-session") == {}
