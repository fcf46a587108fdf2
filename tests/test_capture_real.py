"""`diagnose profile` with the real nsys, end to end: a CPU-only Python program that marks five NVTX ranges (through
the NVTX injection library nsys provides, tests/nvtx_ctypes_program.py) is captured, its .qdstrm imported where nsys
leaves one (Debian's nsight-systems 2022.4), exported and diagnosed. Skipped, saying why, where no nsys is installed:
CI machines have none."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

NSYS = os.environ.get("NSYS_DIAGNOSE_NSYS") or shutil.which("nsys")
PROGRAM = Path(__file__).with_name("nvtx_ctypes_program.py")

pytestmark = pytest.mark.skipif(
    NSYS is None, reason="SKIPPED: no nsys on PATH (nor NSYS_DIAGNOSE_NSYS), so the end-to-end capture with the "
                         "real Nsight Systems did not run; install nsys (Debian: nsight-systems, contrib non-free) "
                         "to run it")


@pytest.mark.slow(reason="runs the real nsys end to end (about 10 s)")
def test_real_nsys_captures_the_nvtx_ranges_of_a_cpu_only_program(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "nsys_diagnose.cli", "profile", "--out-dir", str(out), "-f", "json",
                           "--", sys.executable, str(PROGRAM)],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)
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
def test_real_nsys_rejecting_a_value_is_reported_as_nsys_rejecting_it(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "nsys_diagnose.cli", "profile", "--out-dir", str(out),
                           "--nsys-arg=--sample=bogus", "--", sys.executable, "-c", "pass"],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "nsys rejected its arguments (it said: Illegal --sample argument" in done.stderr
    assert "failed: exit status" not in done.stderr
