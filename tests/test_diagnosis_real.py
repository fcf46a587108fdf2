"""The diagnosis of the real exports says what an expert reading them would say (SOURCES.md)."""

from __future__ import annotations


import pytest

from conftest import REAL_EXPORTS, analysis, assert_findings_finite, real, requires_real

pytestmark = requires_real


@pytest.fixture(scope="module")
def reports():
    return lambda fragment: analysis(real(fragment))[1]


def _finding(report, rule):
    found = [f for f in report.findings if f.rule == rule]
    assert found, f"{rule} did not fire; findings: {[f.rule for f in report.findings]}"
    return found[0]


@pytest.mark.parametrize("path", REAL_EXPORTS, ids=lambda p: p.name.split("__")[0])
def test_every_real_export_is_diagnosed_with_finite_numbers(path):
    report = analysis(path)[1]
    assert report.verdict.headline
    assert_findings_finite(report)


def test_openmp_offload_is_pcie_bound_with_pageable_memory(reports):
    r = reports("RajaATAli")
    assert r.verdict.primary == "pcie-bound"
    pageable = _finding(r, "pageable-memory-copies")
    assert pageable.severity == "warning" and pageable.row["pageable_count"] == 200
    assert "pcie-bound" in pageable.agrees and pageable.impact > 0.75  # what pinning buys, at most the stall share


def test_two_h100_slice_is_pcie_bound_with_pinned_copies_and_idle_kernels(reports):
    r = reports("h100_2gpu_1s")
    assert r.verdict.primary == "pcie-bound"
    # one finding for both GPUs, led by the worse; the other GPU's numbers ride along in also_on
    merged = [f for f in r.findings if f.rule == "pcie-bound"]
    assert [f.subject for f in merged] == ["GPUs 0, 1"]
    found = [merged[0], *merged[0].also_on]
    for f in found:
        assert f.row["main_direction"] == "HtoD"
        assert f.row["pcie_bytes"] > 25e9          # ≈ 25 GB to each GPU, ≈ 50 GB in all
        assert f.row["pinned_bytes"] > 0.99 * f.row["pcie_bytes"]
        # the device-to-device copies (≈ 30 GB a GPU) and the memsets are counted apart, not as PCIe traffic
        assert f.row["pcie_count"] == 227 and f.row["dtod_count"] == 225 and f.row["memset_count"] == 11
        assert f.row["dtod_bytes"] > 29e9 and f.row["peer_count"] == 0
        assert 0.9 < f.row["pcie_stall_fraction"] < 0.97
        assert f.row["compute_utilization"] < 0.05  # GPUs ≈ 2 % busy with kernels
        assert "227 host-device copies" in f.message
    assert 50e9 < sum(f.row["pcie_bytes"] for f in found) < 52e9
    assert r.metrics["pcie_bytes"] == sum(f.row["pcie_bytes"] for f in found)
    assert r.metrics["memset_count"] == 22
    # GPU utilisation is kernel time: ≈ 2 %, not the 99 % that counting copies as busy would print
    assert 0.015 < r.metrics["gpu_utilization"] < 0.03
    assert r.metrics["copy_only_fraction"] > 0.9 and r.metrics["gpu_active_fraction"] > 0.99


def test_launch_latency_outliers_of_the_h100_slice_are_not_slow_launches(reports):
    """A few launches blocked for milliseconds make the mean 30-130x the median (5-6 µs): not slow launches."""
    r = reports("h100_2gpu_1s")
    rows = {row["name"]: row for row in r.facts["launch_api"]}
    assert rows["cudaLaunchKernel"]["mean_ns"] > 100_000 and rows["cudaLaunchKernel"]["p50_ns"] < 10_000
    assert not [f for f in r.findings if f.rule == "slow-launch-calls"]


def test_simulated_llm_inference_is_host_bound_in_the_weight_loading_ranges(reports):
    r = reports("Sh1mwww")
    assert r.verdict.primary == "host-bound" and r.verdict.rule == "host-bound"
    f = _finding(r, "host-bound")
    assert f.impact > 0.9                                   # ≈ 646 ms of a 679 ms window
    assert f.row["top_range"] == "ensure_layer_*_weights"   # ≈ 87 % of the host-work idle time
    assert f.row["top_ranges"][0]["share"] > 0.8
    assert "ensure_layer_*_weights" in r.verdict.headline
    assert not any("CUDA graph" in step for step in f.remediation)
    # 512 cudaDeviceSynchronize calls wait 8.7 ms in all: information, not the cause
    assert all(g.severity == "info" for g in r.findings if g.rule == "frequent-synchronization")
    assert not [g for g in r.findings if g.rule == "launch-bound"]


def test_openacc_loop_is_launch_bound(reports):
    r = reports("PolPuigPuy")
    assert r.verdict.primary == "launch-bound"
    assert not [g for g in r.findings if g.rule in ("host-bound", "small-kernels") and g.severity != "info"]
    f = _finding(r, "launch-bound")
    assert f.row["launch_idle_share"] > 0.9                 # the host issues work during the ≈ 50 µs gaps
    assert f.row["kernel_count"] == 1934
    assert 1_500 < f.row["mean_kernel_ns"] < 3_500        # ≈ 2 µs kernels
    assert 40_000 < f.row["median_gap_ns"] < 60_000       # ≈ 50 µs apart


def test_perlmutter_vecadd_is_a_unified_memory_storm(reports):
    r = reports("Perlmutter")
    assert r.verdict.primary == "unified-memory"
    assert _finding(r, "uvm-migration-storm").row["uvm_count"] == 14336


def test_rodinia_sync_per_launch_is_reported_but_the_busy_gpu_is_recognised(reports):
    r = reports("Rodinia")
    sync = _finding(r, "frequent-synchronization")
    assert sync.row["most_frequent_api"] == "cudaThreadSynchronize"
    assert sync.row["most_frequent_count"] == 8190
    assert sync.severity == "info" and sync.impact < 0.05   # small GPU-side cost
    assert r.verdict.primary is None
    assert "kernels run 96 %" in r.verdict.headline          # 95.6 % of the window
    assert not [f for f in r.findings if f.severity != "info"]
    idle = r.facts["gpu_utilization"][0]
    assert idle["idle_sync_ns"] > idle["idle_launch_ns"] > 0  # what idle time there is follows the syncs


@pytest.mark.parametrize("fragment, rule", [
    ("YoonKyonghwan", "capture-nvtx-only"),
    ("unschlagbar", "capture-no-kernels"),
    ("davidev886", "capture-no-kernels"),
    ("amir-ghz", "capture-empty"),
])
def test_captures_without_gpu_work_get_a_capture_verdict(reports, fragment, rule):
    r = reports(fragment)
    assert r.verdict.primary == "capture" and r.verdict.rule == rule
    assert not [f for f in r.findings if f.category in ("launch-bound", "low-utilization")]


def test_tiny_captures_are_called_too_short_not_idle(reports):
    for fragment in ("mock__2026", "NVIDIA__Fuser__report1__2024"):
        r = reports(fragment)
        assert r.verdict.primary == "capture" and r.verdict.rule == "capture-too-short"


def test_a_gate_on_gpu_utilisation_catches_kernel_time_that_copies_replaced(reports):
    """Kernels ran ≈ 90 % of the window before and ≈ 2 % after (the rest is copies): the gate must trip."""
    from nsys_diagnose.runs.compare import compare

    c = compare(reports("mfu_2gpu_before"), reports("h100_2gpu_1s"), gates=["gpu_utilization:-5%"])
    assert c.gate_crossed and c.gates[0].crossed
    before, after = (next(m for m in c.metrics if m.key == "gpu_utilization").before,
                     next(m for m in c.metrics if m.key == "gpu_utilization").after)
    assert before > 0.85 and after < 0.03
