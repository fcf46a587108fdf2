"""A server waiting for requests: the stretches with nothing in flight are found, reported, and left out of
every judged window, so the verdict is the one of the bursts of work."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nsys_diagnose.fixtures.generator import generate

from conftest import analysis, scenario_analysis


def test_bursts_between_long_waits_get_the_verdict_of_the_bursts() -> None:
    facts, report = scenario_analysis("idle_server_bursts")
    idle = facts.first("server_idle")
    assert idle["stretch_count"] == 4  # between the 5 bursts; the waits before and after lie outside the trace
    assert 0.9 < idle["idle_fraction"] < 1.0
    assert all(s >= 1_000_000_000 for s in (idle["longest_ns"], idle["idle_ns"] / 4))
    gpu = facts.first("gpu_utilization")
    # the window is the bursts' work only: ~5 x 50 ms, not the ~7.7 s from the first kernel to the last
    assert gpu["excluded_ns"] == pytest.approx(idle["idle_ns"], rel=0.01)
    assert 200e6 < gpu["window_ns"] < 320e6
    assert gpu["busy_ns"] + gpu["idle_ns"] == gpu["window_ns"]
    assert 0.3 < gpu["utilization"] < 0.5
    assert report.verdict.rule == "launch-bound"
    assert "Nothing was in flight for 9" in report.verdict.headline
    assert "server waits for requests" in report.verdict.headline
    fired = {f.rule for f in report.findings}
    assert "server-idle" in fired and "gpu-starvation" not in fired
    assert facts.first("launch_overhead")["overhead_ratio"] == pytest.approx(0.63, abs=0.08)
    assert facts.first("gpu_starvation")["long_gap_count"] == 0


def _with_calls(tmp_path: Path, name: str, every_ns: int) -> dict:
    """server_idle of idle_server_bursts with a CUDA call named `name` every `every_ns` inside its first wait."""
    path = tmp_path / f"{name}.sqlite"
    generate("idle_server_bursts", path)
    con = sqlite3.connect(path)
    with con:
        calls = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start").fetchall()
        last_end = calls[0][1]
        for start, end in calls[1:]:
            if start - last_end > 1_000_000_000:
                break
            last_end = max(last_end, end)
        lo, hi = last_end, start  # the first wait: from the end of the first burst to the start of the second
        name_id = con.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
        con.execute("INSERT INTO StringIds VALUES (?, ?)", (name_id, name))
        template = con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1").fetchone()
        for i, t in enumerate(range(lo + every_ns, hi - 10_000, every_ns)):
            row = list(template)
            row[0], row[1], row[4], row[5] = t, t + 2_000, 10_000_000 + i, name_id
            con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({', '.join('?' * len(row))})", row)
    con.close()
    return analysis(path)[0].first("server_idle")


def test_polling_does_not_end_a_wait_but_cuda_work_does(tmp_path: Path) -> None:
    untouched = scenario_analysis("idle_server_bursts")[0].first("server_idle")
    polled = _with_calls(tmp_path, "cudaEventQuery_v3020", every_ns=10_000_000)
    # an idle engine polling an event every 10 ms is still waiting for requests
    assert (polled["stretch_count"], polled["idle_ns"]) == (untouched["stretch_count"], untouched["idle_ns"])
    allocating = _with_calls(tmp_path, "cudaMalloc_v3020", every_ns=700_000_000)
    # a cudaMalloc every 0.7 s cuts the first wait (1.5-3 s) into pieces shorter than a second: no wait there
    assert allocating["stretch_count"] == untouched["stretch_count"] - 1
    assert untouched["idle_ns"] - allocating["idle_ns"] >= 1_500_000_000
