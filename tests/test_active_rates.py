"""Rates per second are taken over the time the verdict judges: the active work, without the stretches in which
nothing was in flight (a server waiting for requests). A rate over the whole capture would call 2,000 syncs in
one second of work "3 per second" because the capture then ran on idle for ten minutes."""

from __future__ import annotations

import pytest

from conftest import analysis, real, requires_real, scenario_analysis, sqlite_ro


@pytest.mark.slow
def test_the_sync_rate_of_a_mostly_idle_server_is_over_its_bursts_of_work() -> None:
    facts, _ = scenario_analysis("idle_server_bursts")  # 5 bursts of decode steps, 1.5-3 s of nothing between
    idle = facts.first("server_idle")
    sync = facts.first("sync_overview")
    assert sync["sync_calls"] >= 60  # one stream sync per decode step at least
    with sqlite_ro(_export("idle_server_bursts")) as con:
        first, last = con.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    active_s = (last - first - idle["idle_ns"]) / 1e9
    assert idle["idle_ns"] / (last - first) > 0.9  # the capture is mostly waiting
    assert sync["active_ns"] / 1e9 == pytest.approx(active_s, rel=1e-9)
    assert sync["calls_per_s"] == pytest.approx(sync["sync_calls"] / active_s, rel=1e-9)
    # over the capture's span the rate would read ten times lower
    assert sync["calls_per_s"] > 10 * sync["sync_calls"] / ((last - first) / 1e9)
    per_api = {r["name"]: r for r in facts.rows("sync_summary")}
    stream = per_api["cudaStreamSynchronize"]
    assert stream["calls_per_s"] == pytest.approx(stream["call_count"] / active_s, rel=1e-9)


@pytest.mark.slow
def test_the_steady_allocation_rate_and_warm_up_skip_the_idle_stretches() -> None:
    facts, _ = scenario_analysis("idle_server_bursts")
    gpu = facts.first("gpu_utilization")
    alloc = facts.first("allocation_overview")
    # the steady state is the last 90 % of the GPU's active time, not of its 7 s span from first to last kernel
    active = gpu["window_end_ns"] - gpu["window_start_ns"] - facts.first("server_idle")["idle_ns"]
    assert alloc["steady_active_ns"] == pytest.approx(0.9 * active, rel=1e-6)
    assert alloc["calls_per_s"] == pytest.approx(alloc["steady_calls"] / (alloc["steady_active_ns"] / 1e9))


def test_without_idle_stretches_the_rate_is_over_the_span_of_api_activity() -> None:
    facts, _ = scenario_analysis("sync_storm")
    assert facts.first("server_idle")["stretch_count"] == 0
    sync = facts.first("sync_overview")
    with sqlite_ro(_export("sync_storm")) as con:
        first, last = con.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    assert sync["active_ns"] == last - first
    assert sync["calls_per_s"] == pytest.approx(sync["sync_calls"] / ((last - first) / 1e9), rel=1e-9)


@requires_real
def test_florian_gemm_syncs_are_1660_per_second_of_work_not_3_per_second_of_capture() -> None:
    # florianmattana__CUDA-Kernels__prof__2025.5.2_windows_RTX5070Ti-laptop_gemm.sqlite: 2,013 blocking calls in
    # 1.21 s of work, then 616 s with nothing in flight before the capture stopped.
    facts, report = analysis(real("florianmattana__CUDA-Kernels"))
    sync = facts.first("sync_overview")
    assert sync["sync_calls"] == 2013
    assert sync["active_ns"] == pytest.approx(1.214e9, rel=1e-3)
    assert sync["calls_per_s"] == pytest.approx(1658, rel=1e-3)
    finding = next(f for f in report.findings if f.rule == "frequent-synchronization")
    assert "1,658/s over 1.21 s of active work" in finding.message
    assert "1,658/s over 1.21 s of active work" in report.verdict.headline


def _export(name: str):
    """The generated export scenario_analysis(name) read."""
    from conftest import _SCENARIO_DIR

    return _SCENARIO_DIR[0] / f"{name}.sqlite"
