"""`diagnose profile` with the real nsys, end to end: a CPU-only Python program that marks five NVTX ranges (through
the NVTX injection library nsys provides, tests/nvtx_ctypes_program.py) is captured, its .qdstrm imported where nsys
leaves one (Debian's nsight-systems 2022.4), exported and diagnosed. Skipped, saying why, where no nsys is installed:
CI machines have none.

Each run is waited for, not timed, in a session of its own whose process group is killed when it returns; nsys's
agent, a daemon outside that group, is found by the `reaped` fixture (tests/conftest.py). A capture that fails
because nsys could not start or keep that agent (engine/capture/run.py AGENT_FAILURES: a busy machine can make the
agent too slow for nsys) is run once more, with a warning that says so."""

from __future__ import annotations

import json
import os
import shutil
import sys
import warnings
from pathlib import Path

import pytest

from nsys_diagnose.capture.run import AGENT_FAILURES

from conftest import run_in_own_session

NSYS = os.environ.get("NSYS_DIAGNOSE_NSYS") or shutil.which("nsys")
PROGRAM = Path(__file__).with_name("nvtx_ctypes_program.py")

pytestmark = pytest.mark.skipif(
    NSYS is None, reason="SKIPPED: no nsys on PATH (nor NSYS_DIAGNOSE_NSYS), so the end-to-end capture with the "
                         "real Nsight Systems did not run; install nsys (Debian: nsight-systems, contrib non-free) "
                         "to run it")


def _on_every_cpu() -> None:
    """In the capture's process, before nsys starts: undo the one-CPU affinity of this xdist worker (conftest.py
    _share_the_cpus), which every subprocess inherits. nsys, its agent, its launcher and the program would all share
    that one CPU with the worker's other load, and a starved agent is one nsys loses ("Connection to the Agent
    lost"); the capture gets what a user's run gets, every CPU."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))


def _profile(tmp_path: Path, *argv: str):
    """`diagnose profile --out-dir DIR ARGV` with the real nsys: (the finished run, DIR). Run once more, with a
    warning, when nsys wrote no report because it lost its agent; any other result is returned as it is."""
    for attempt in (1, 2):
        out = tmp_path / f"run-{attempt}"
        done = run_in_own_session([sys.executable, "-m", "nsys_diagnose.cli", "profile", "--out-dir", str(out),
                                   *argv], cwd=tmp_path, preexec_fn=_on_every_cpu)
        lost = done.returncode != 0 and "nsys wrote no report" in done.stderr \
            and any(marker in done.stderr for marker in AGENT_FAILURES)
        if not lost or attempt == 2:
            return done, out
        said = next(line for line in done.stderr.splitlines() if "nsys wrote no report" in line)
        warnings.warn(f"nsys lost its agent, a transient failure of nsys on a busy machine; running the capture once "
                      f"more: {said[:300]}")
    raise AssertionError("unreachable")


@pytest.mark.slow(reason="runs the real nsys end to end (about 10 s)")
def test_real_nsys_captures_the_nvtx_ranges_of_a_cpu_only_program(tmp_path, reaped):
    done, out = _profile(tmp_path, "-f", "json", "--", sys.executable, str(PROGRAM))
    assert done.returncode == 0, done.stderr
    assert "nvtx ranges go to the tool" in done.stderr  # nsys's injection library took the ranges
    assert "the program exited with status 0" in done.stderr
    report = json.loads(done.stdout)
    assert report["facts"]["capture_health"][0]["nvtx_range_count"] == 5
    assert report["facts"]["capture_health"][0]["kernel_count"] == 0
    assert sorted(r["name"] for r in report["facts"]["nvtx_summary"]) == [f"step {i}" for i in range(5)]
    assert report["verdict"]["rule"] == "capture-nvtx-only"  # judged as a capture without CUDA work
    assert "the program did no CUDA work while it was captured" in report["verdict"]["headline"]
    for name in ("profile.nsys-rep", "profile.sqlite", "report.md", "capture.json", "capture.log"):
        assert (out / name).is_file(), name
    assert not (out / "profile.qdstrm").exists()  # imported, where nsys left one


@pytest.mark.slow(reason="runs the real nsys end to end (about 10 s)")
def test_real_nsys_rejecting_a_value_is_reported_as_nsys_rejecting_it(tmp_path, reaped):
    done, _ = _profile(tmp_path, "--nsys-arg=--sample=bogus", "--", sys.executable, "-c", "pass")
    assert done.returncode == 2, done.stderr
    assert "nsys rejected its arguments (it said: Illegal --sample argument" in done.stderr
    assert "failed: exit status" not in done.stderr
