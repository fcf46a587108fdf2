"""The diagnosis of the real exports says what an expert reading them would say (SOURCES.md)."""

from __future__ import annotations

import math

import pytest

from conftest import REAL_EXPORTS, analysis, real, requires_real

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
    for f in report.findings:
        assert f.impact is None or 0 <= f.impact <= 1
        for e in f.evidence:
            if isinstance(e.value, float):
                assert math.isfinite(e.value)


def test_openmp_offload_is_pcie_bound_with_pageable_memory(reports):
    r = reports("RajaATAli")
    assert r.verdict.primary == "pcie-bound"
    pageable = _finding(r, "pageable-memory-copies")
    assert pageable.severity == "warning" and pageable.row["pageable_count"] == 200
    assert _finding(r, "pcie-bound").impact > 0.9


def test_two_h100_slice_is_pcie_bound_with_pinned_copies_and_idle_kernels(reports):
    r = reports("h100_2gpu_1s")
    assert r.verdict.primary == "pcie-bound"
    for f in [f for f in r.findings if f.rule == "pcie-bound"]:
        assert f.row["main_direction"] == "HtoD"
        assert f.row["copy_bytes"] > 25e9          # ≈ 25 GB to each GPU, ≈ 50 GB in all
        assert f.row["compute_utilization"] < 0.05  # GPUs ≈ 2 % busy with kernels
    assert sum(f.row["copy_bytes"] for f in r.findings if f.rule == "pcie-bound") > 50e9


def test_openacc_loop_is_launch_bound(reports):
    r = reports("PolPuigPuy")
    assert r.verdict.primary == "launch-bound"
    f = _finding(r, "launch-bound")
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
    assert "98 %" in r.verdict.headline
    assert not [f for f in r.findings if f.rule in ("launch-bound", "low-utilization")]


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
