"""Running one command of tools/benchmark.py in a fresh child process and measuring it (wall time, peak RSS, CPU
time), and the results: one Run per execution, one Row per (size, command) line of the report."""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Run:
    """One execution of one command in a child process."""

    wall_s: float
    rss_kib: int
    returncode: int | None
    cpu_s: float = 0.0  # user + system time of the child (and the grandchildren it waited for)
    timed_out: bool = False
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.returncode == 0


@dataclass
class Row:
    """One (size, command) line of the report."""

    kernels: int
    file_mb: float
    command: str
    status: str  # "ok", "failed", "timeout", "skipped"
    argv: list[str] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    wall_s: float | None = None
    peak_rss_mb: float | None = None
    cpu_pct: float | None = None
    x_floor: float | None = None
    speedup_vs_nsys_stats: float | None = None
    speedup_vs_nsys_analyze: float | None = None
    x_export: float | None = None  # a trace row (--kineto): wall time over the export's cold row at this size
    note: str = ""


@dataclass
class Size:
    """A generated (or reused) export."""

    kernels: int
    path: str
    file_mb: float
    generated_s: float | None  # None when an existing file was reused


def measure(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout_s: float,
            stdout_path: Path) -> Run:
    """Run `argv` in a fresh process (its own process group); wall time and the child's peak RSS."""
    stderr_path = stdout_path.with_suffix(stdout_path.suffix + ".stderr")
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        begin = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        timed_out = threading.Event()
        timer = threading.Timer(timeout_s, _kill_group, (proc.pid, timed_out))
        timer.start()
        try:
            _, status, usage = _wait4(proc.pid)
        except BaseException:  # Ctrl-C: leave no orphan behind
            _kill_group(proc.pid, timed_out)
            proc.wait()
            raise
        finally:
            timer.cancel()
        wall = time.perf_counter() - begin
    proc.returncode = os.waitstatus_to_exitcode(status)  # we reaped it; keep Popen from trying again
    return Run(wall_s=wall, rss_kib=usage.ru_maxrss, returncode=proc.returncode, timed_out=timed_out.is_set(),
               stderr_tail=_tail(stderr_path), cpu_s=usage.ru_utime + usage.ru_stime)


def _wait4(pid: int) -> tuple[int, int, Any]:
    while True:
        try:
            return os.wait4(pid, 0)
        except InterruptedError:  # pragma: no cover - PEP 475 retries already
            continue


def _kill_group(pid: int, flag: threading.Event) -> None:
    flag.set()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _tail(path: Path, lines: int = 12, chars: int = 2000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])[-chars:]


def summarise(row: Row, runs: list[Run]) -> Row:
    """Fill status, median wall time and max RSS of `row` from its runs."""
    row.runs = runs
    bad = next((r for r in runs if not r.ok), None)
    if bad is None:
        row.status = "ok"
        row.wall_s = statistics.median(r.wall_s for r in runs)
        row.peak_rss_mb = max(r.rss_kib for r in runs) * 1024 / 1e6
        row.cpu_pct = statistics.median(r.cpu_s / r.wall_s * 100 for r in runs if r.wall_s > 0)
    elif bad.timed_out:
        row.status = "timeout"
        row.wall_s = bad.wall_s
        row.note = f"killed after {bad.wall_s:.0f} s (--timeout)"
    else:
        row.status = "failed"
        row.note = f"exit status {bad.returncode}: " + (bad.stderr_tail or "(no stderr)")
    return row
