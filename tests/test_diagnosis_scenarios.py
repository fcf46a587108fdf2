"""On every generated scenario the verdict names the known primary bottleneck; healthy ones stay quiet."""

from __future__ import annotations

import pytest

from nsys_diagnose.fixtures.generator import SCENARIOS

from conftest import scenario_analysis, slow_but


@pytest.fixture(scope="module")
def report_of():
    return lambda name: scenario_analysis(name)[1]


@pytest.mark.parametrize("name", slow_but(sorted(SCENARIOS), "eager_decode", "prefill_decode_nvtx",
                                           "memory_bound_metrics"))
def test_verdict_names_the_known_primary_bottleneck(report_of, name):
    report = report_of(name)
    assert report.verdict.primary == SCENARIOS[name].expected_primary, report.verdict.headline


@pytest.mark.parametrize("name", slow_but(["healthy_prefill", "graph_decode_node"], "graph_decode_node"))
def test_healthy_profiles_produce_no_warning(report_of, name):
    report = report_of(name)
    assert [f.rule for f in report.findings if f.severity != "info"] == []
    assert report.verdict.headline.startswith("No bottleneck found")


def test_cuda_graphs_in_node_mode_cut_the_overhead_ratio(report_of):
    eager = report_of("eager_decode").metrics
    graphs = report_of("graph_decode_node").metrics
    assert eager["overhead_ratio"] > 0.3 > 0.1 > graphs["overhead_ratio"]
    assert graphs["gpu_utilization"] > eager["gpu_utilization"]
    assert report_of("graph_decode_node").facts["cuda_graphs"][0]["graph_kernel_share"] == 1.0


@pytest.mark.slow
def test_graph_mode_capture_is_not_called_idle(report_of):
    report = report_of("graph_decode_graph")
    assert report.metrics["gpu_utilization"] > 0.8  # graph replays count as kernel time
    assert not [f for f in report.findings if f.category in ("launch-bound", "low-utilization")]
    # the replays are measured, so the trace mode is a note, and the verdict says where the time goes
    note = next(f for f in report.findings if f.rule == "graph-mode-hides-kernels")
    assert note.severity == "info" and report.verdict.primary is None
    assert "CUDA-graph replays" in report.verdict.headline and "--cuda-graph-trace=node" in report.verdict.headline


@pytest.mark.slow
def test_sync_storm_gaps_are_api_latency_not_launch_overhead(report_of):
    report = report_of("sync_storm")
    assert not [f for f in report.findings if f.rule == "launch-bound"]
    sync = next(f for f in report.findings if f.rule == "frequent-synchronization")
    assert sync.row["most_frequent_api"] == "cudaDeviceSynchronize" and sync.row["sync_calls"] == 2000


def test_straggler_rank_is_named(report_of):
    report = report_of("multi_gpu_straggler")
    f = next(f for f in report.findings if f.rule == "multi-gpu-imbalance")
    assert f.row["device_id"] == 1 and 0.2 < f.row["imbalance"] < 0.4


def test_phases_split_prefill_from_decode(report_of):
    phases = {p["phase"]: p for p in report_of("prefill_decode_nvtx").facts["phases"]}
    assert phases["prefill"]["kernel_count"] == 293 and phases["prefill"]["busy_fraction"] > 0.9
    assert phases["decode"]["kernel_count"] == 40 * 293 and phases["decode"]["overhead_ratio"] > 0.3


def test_memory_bound_needs_gpu_metrics_and_says_how_to_get_them(report_of):
    assert report_of("memory_bound_metrics").verdict.primary == "memory-bound"
    skipped = {s.rule: s.reason for s in report_of("eager_decode").skipped}
    assert "--gpu-metrics-devices" in skipped["memory-bound"]
