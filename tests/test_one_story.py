"""The parts of a report agree: a finding's cost is what its what-if buys (one saving model), steps exist only where
the program loops, a busy GPU's verdict is its kernels, findings that round to 0 % or restate another are not listed
as findings of their own."""

from __future__ import annotations

import pytest

from conftest import scenario_analysis
from nsys_diagnose.diagnosis.whatif import saving
from nsys_diagnose.reports.render import render

ROW = {"device_id": 0, "phase": None, "source": "nvtx", "steps": 20, "measured_step_ns": 1_000_000,
       "launch_gaps_step_ns": 400_000, "host_gaps_step_ns": 950_000, "copies_pinned_step_ns": 1_000_000,
       "host_work_ns": 900_000, "pinned_measured": True, "pinned_gbps": 24.0}


def test_the_cost_a_finding_states_is_what_its_replay_buys():
    model = saving("launch-gaps", ROW, share=0.9)
    assert model is not None and model.gains and model.why_not is None
    assert model.cost == pytest.approx(0.6) and model.speedup == pytest.approx(2.5)


def test_a_replay_never_promises_more_than_the_share_the_rule_measured():
    model = saving("launch-gaps", ROW, share=0.3)
    assert model is not None and model.capped
    assert model.projected_ns == 700_000 and model.cost == pytest.approx(0.3)
    assert model.speedup is not None and model.speedup <= 1 / (1 - 0.3) + 1e-9


def test_host_work_that_is_the_step_keeps_its_cost_and_says_which_fix_helps():
    model = saving("host-gaps", ROW, share=0.7)
    assert model is not None and model.cost == pytest.approx(0.7)
    assert model.why_not is not None and "only making the host work itself faster" in model.why_not


def test_copies_already_pinned_say_pinning_cannot_help():
    model = saving("copies-pinned", ROW, share=0.8)
    assert model is not None and not model.gains and model.cost == pytest.approx(0.8)
    assert model.why_not is not None and "already run pinned at 24.0 GB/s" in model.why_not


def test_a_cause_outside_the_repeating_steps_keeps_its_cost_and_says_where_it_lies():
    """Pageable copies of a model load before the decode loop: pinning shortens the load, not a step."""
    model = saving("copies-pinned", {**ROW, "pinned_measured": False}, share=0.4)
    assert model is not None and not model.gains and model.cost == pytest.approx(0.4)
    assert model.why_not is not None and "outside the repeating steps" in model.why_not


def test_a_cause_the_whole_window_replay_finds_off_the_critical_path_costs_what_the_replay_finds():
    model = saving("copies-pinned", {**ROW, "source": "window", "steps": 1, "pinned_measured": False}, share=0.4)
    assert model is not None and not model.gains and model.why_not is None and model.cost == 0.0


def test_a_handful_of_steps_projects_nothing():
    assert saving("launch-gaps", {**ROW, "steps": 3}, share=0.9) is None


def test_every_what_if_in_a_report_matches_its_findings_cost():
    _, report = scenario_analysis("eager_decode")
    for f in report.findings:
        if f.what_if is not None and f.impact is not None and f.what_if.why_not is None:
            assert f.impact == pytest.approx(1 - f.what_if.projected_step_ns / f.what_if.measured_step_ns)
            assert f"costs {round(f.impact * 100)} %" in render(report, "terminal")


def test_a_program_without_a_loop_has_no_steps():
    """Syncs while the input loads, then one long computation: no step is invented, and the report says so."""
    facts, report = scenario_analysis("no_loop_load_syncs")
    assert facts.rows("steps") == []
    assert report.verdict.primary is None and "kernels run 99 %" in report.verdict.headline
    terminal = render(report, "terminal")
    assert "No repeating loop" in terminal and "TPOT" not in terminal
    assert "No repeating loop" in render(report, "md")
    for f in report.findings:
        assert f.what_if is None or f.what_if.basis == "window"


def test_a_loop_between_syncs_has_steps_with_a_time_weighted_busy_share():
    facts, report = scenario_analysis("busy_gpu_sync_overhead")
    (row,) = facts.rows("steps")
    assert row["source"] == "sync" and row["step_count"] >= 150
    assert row["busy_share"] == pytest.approx(report.metrics["gpu_utilization"], abs=0.03)


def test_a_busy_gpu_is_bound_by_its_kernels_not_a_small_overhead():
    _, report = scenario_analysis("busy_gpu_sync_overhead")
    assert report.verdict.primary is None and report.verdict.rule is None
    assert "GPU-bound" in report.verdict.headline and "fit_lines" in report.verdict.headline
    sync = next(f for f in report.findings if f.rule == "frequent-synchronization")
    assert 0.03 < sync.impact < 0.10  # a secondary finding, listed with its cost
    assert "frequent-synchronization ≈" in report.verdict.headline


def test_findings_that_round_to_zero_are_named_not_listed():
    _, report = scenario_analysis("sync_storm")
    assert all(f.impact is None or f.impact >= 0.005 for f in report.findings)
    assert [a.rule for a in report.also_checked] == ["unfused-elementwise"]
    assert "also checked, each costing under 0.5 %: unfused-elementwise" in render(report, "terminal")
    assert "Also checked" in render(report, "md") and "Also checked" in render(report, "html")


def test_a_symptom_restating_its_cause_folds_into_it():
    _, report = scenario_analysis("eager_decode")
    assert [f.rule for f in report.findings] == ["launch-bound"]
    assert report.findings[0].agrees == ["low-utilization"]
    assert "launch-bound · GPU 0 · costs 54 % · also low-utilization" in render(report, "terminal")
    assert "(also `low-utilization`)" in render(report, "md")


def test_two_causes_replaying_the_same_fix_at_the_same_cost_are_one_finding():
    _, report = scenario_analysis("pageable_copies")
    rules = [f.rule for f in report.findings]
    assert "pageable-memory-copies" in rules and "pcie-bound" not in rules
    lead = next(f for f in report.findings if f.rule == "pageable-memory-copies")
    assert "pcie-bound" in lead.agrees
