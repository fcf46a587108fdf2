"""Every idle gap gets one cause from what the issuing host thread did, and every format shows them all."""

from __future__ import annotations

import json

import pytest

from conftest import scenario_analysis
from nsys_diagnose.reports.render import render
from nsys_diagnose.vocabulary import IDLE_CAUSES, WINDOW_PARTS


def _idle(name: str) -> dict[str, float]:
    facts, _ = scenario_analysis(name)
    gpu = facts.rows("gpu_utilization")[0]
    total = gpu["idle_ns"]
    return {c.key: gpu[c.column] / total for c in IDLE_CAUSES}


@pytest.mark.parametrize("scenario, cause, share", [
    ("eager_decode", "launch", 0.95),        # the host is inside or between launch calls, a few µs each
    ("sync_storm", "sync", 0.9),             # a device sync after every kernel, next launch right after it
    ("alloc_churn", "allocation", 0.9),      # cudaMalloc / cudaFree in every iteration
    ("graph_host_gaps", "host", 0.95),       # milliseconds of scheduling between CUDA-graph steps
    ("tiny_kernels_queued", "gpu-side", 0.9),  # the host is ahead; 2 µs gaps between 3 µs kernels
    ("uvm_migration_storm", "uvm", 0.5),
])
def test_each_scenario_idles_for_the_reason_it_was_built_for(scenario, cause, share):
    idle = _idle(scenario)
    assert idle[cause] >= share, idle


def test_the_window_parts_add_up_to_the_window():
    for name in ("eager_decode", "pageable_copies", "graph_host_gaps", "hidden_copies"):
        facts, report = scenario_analysis(name)
        for gpu, window in zip(facts.rows("gpu_utilization"), report.window):
            assert sum(p.ns for p in window.parts) == gpu["window_ns"]
            assert [p.key for p in window.parts] == [p.key for p in WINDOW_PARTS]


def test_gpu_utilisation_counts_kernels_only_and_copies_get_their_own_share():
    facts, report = scenario_analysis("pageable_copies")
    gpu = facts.rows("gpu_utilization")[0]
    assert gpu["utilization"] < 0.02 and gpu["copy_only_fraction"] > 0.9
    metrics = {m.key: m.value for m in report.key_metrics}
    assert metrics["gpu_utilization"] < 0.02 and metrics["copy_only_fraction"] > 0.9
    assert metrics["gpu_active_fraction"] > 0.9


def test_host_work_is_named_by_its_nvtx_ranges_and_os_calls():
    facts, _ = scenario_analysis("graph_host_gaps")
    row = facts.rows("host_idle")[0]
    assert [r["name"] for r in row["top_ranges"]] == ["schedule", "process_outputs"]
    assert row["top_os_calls"][0]["name"] == "poll" and 0.1 < row["os_call_share"] < 0.5
    assert row["graph_share"] == 1.0


def test_a_sync_followed_by_long_host_work_is_host_work():
    # graph_host_gaps synchronises once per step, then schedules for milliseconds: the sync is not the cause
    idle = _idle("graph_host_gaps")
    assert idle["sync"] < 0.01


@pytest.mark.parametrize("fmt", ["terminal", "md", "html", "json"])
def test_every_format_shows_every_part_of_the_window(fmt):
    _, report = scenario_analysis("tiny_kernels_queued")
    text = render(report, fmt)
    if fmt == "json":
        parts = json.loads(text)["window"][0]["parts"]
        assert [p["key"] for p in parts] == [p.key for p in WINDOW_PARTS]
        return
    labels = [p.short for p in WINDOW_PARTS] if fmt == "terminal" else [p.label for p in WINDOW_PARTS]
    for label in labels:
        assert label in text, (fmt, label)
