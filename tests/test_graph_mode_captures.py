"""Graph-level CUDA-graph captures (--cuda-graph-trace=graph) and captures without kernels: the verdict and key
metrics say what the export really holds."""

from __future__ import annotations

import re

import pytest

from conftest import scenario_analysis


@pytest.fixture(scope="module")
def filled():
    return scenario_analysis("graph_replays_fill")[1]


def test_replays_that_fill_the_window_are_a_busy_gpu_not_a_short_capture(filled):
    assert "capture-too-short" not in {f.rule for f in filled.findings}
    assert filled.verdict.primary is None
    assert re.search(r"CUDA-graph replays fill 99\.9\d % of the window", filled.verdict.headline)
    assert "too little" not in filled.verdict.headline.lower()
    # no cause of the ten replays contradicts the busy GPU, in the run or in a phase
    assert not [f for f in filled.findings if f.kind == "cause" and f.severity != "info"]
    assert all(p.primary is None for p in filled.verdict.phases)


def test_the_node_trace_capture_is_the_first_step(filled):
    lead = filled.findings[0]
    assert (filled.verdict.rule, lead.rule) == ("graph-mode-hides-kernels", "graph-mode-hides-kernels")
    assert "--cuda-graph-trace=node" in lead.remediation[0]


def test_key_metrics_of_a_graph_mode_capture_agree(filled):
    m = filled.metrics
    window = filled.facts["gpu_utilization"][0]["window_ns"]
    # ten ~780 ms replays and thirty ~2.6 us eager kernels: the replays count everywhere, as in the utilisation
    assert m["kernel_count"] == 40
    assert m["gpu_active_ns"] == pytest.approx(m["gpu_utilization"] * window, rel=1e-3)
    assert m["mean_kernel_ns"] == pytest.approx(m["gpu_active_ns"] / m["kernel_count"], rel=1e-6)
    assert m["mean_kernel_ns"] > 100e6


def test_a_capture_with_launches_but_no_kernel_records_blames_the_platform():
    report = scenario_analysis("cuda_api_only")[1]
    f = next(f for f in report.findings if f.rule == "capture-no-kernels")
    assert report.verdict.rule == "capture-no-kernels"
    assert "300 of them kernel launches" in f.message and "WSL2" in f.remediation[0]
    # the kernels ran unrecorded, so copy time is no measure of a stall: no copy finding claims a cost
    assert not [f for f in report.findings if f.category == "pcie-bound"]
