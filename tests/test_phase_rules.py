"""Rules judged per inference phase: the facts rules read are computed again over each phase, the phases split
the run's window, and a phase finding carries its phase and its cost to the phase and to the run."""

from __future__ import annotations

import json

import pytest

from nsys_diagnose.reports.render import render

from conftest import scenario_analysis


def _window(facts, column: str = "window_ns") -> int:
    return sum(r[column] for r in facts.rows("gpu_utilization"))


def test_an_eager_decode_hidden_by_long_prefills_is_found_in_decode() -> None:
    facts, report = scenario_analysis("prefill_heavy_eager_decode")
    run = facts.first("launch_overhead")
    assert run["overhead_ratio"] < 0.15  # over the whole run the launch gaps look harmless
    assert set(facts.phases) == {"prefill", "decode"}
    decode = facts.phases["decode"].first("launch_overhead")
    assert decode["overhead_ratio"] == pytest.approx(0.62, abs=0.05)
    assert facts.phases["prefill"].first("launch_overhead")["overhead_ratio"] < 0.02

    launch = [f for f in report.findings if f.rule == "launch-bound"]
    assert [(f.phase, f.subject) for f in launch] == [("decode", "decode · GPU 0")]
    finding = launch[0]
    share = _window(facts.phases["decode"]) / _window(facts)
    assert 0.15 < share < 0.25
    assert finding.impact == pytest.approx(decode["launch_idle_fraction"])
    assert finding.run_impact == pytest.approx(finding.impact * share)
    assert finding.severity == "warning"  # ~12 % of the run: more than the 5 % below which a finding is info

    verdict = report.verdict
    assert (verdict.primary, verdict.rule, verdict.phase) == ("launch-bound", "launch-bound", "decode")
    assert verdict.impact == pytest.approx(finding.run_impact)
    assert verdict.headline.startswith("In decode (bounds time per output token): GPU starved by kernel-launch "
                                       "overhead (costs ≈62 % of decode's")
    assert "Prefill: no bottleneck (kernels run 99 % of its window" in verdict.headline
    # the advice is the decode's: the profile is vLLM's, and its decode runs eager
    assert "--enforce-eager" in finding.remediation[0]


@pytest.mark.parametrize("name", ["prefill_heavy_eager_decode", "prefill_decode_nvtx"])
def test_the_phases_split_the_run(name: str) -> None:
    facts, _ = scenario_analysis(name)
    assert facts.phases
    for column in ("window_ns", "busy_ns", "compute_busy_ns", "kernel_count", "op_count", "idle_launch_ns"):
        assert sum(_window(scoped, column) for scoped in facts.phases.values()) == _window(facts, column), column
    syncs = lambda fs: sum(r["sync_calls"] for r in fs.rows("sync_overview"))  # noqa: E731
    assert sum(syncs(scoped) for scoped in facts.phases.values()) == syncs(facts)


def test_a_phase_finding_replaces_the_run_finding_of_the_same_rule() -> None:
    # the decode of prefill_decode_nvtx is launch-bound over the whole run too; it is reported once, for decode
    _, report = scenario_analysis("prefill_decode_nvtx")
    assert [(f.rule, f.phase) for f in report.findings if f.rule == "launch-bound"] == [("launch-bound", "decode")]
    assert "launch-bound" not in {o.rule for o in report.passed}


def test_runs_without_phase_ranges_are_judged_whole() -> None:
    facts, report = scenario_analysis("eager_decode")  # its NVTX ranges are 'execute_model': no phase
    assert facts.phases == {}
    assert all(f.phase is None and f.run_impact == f.impact for f in report.findings)
    assert report.verdict.phase is None and not report.verdict.headline.startswith("In ")


def test_every_format_names_the_phase_and_both_costs() -> None:
    _, report = scenario_analysis("prefill_heavy_eager_decode")
    data = json.loads(render(report, "json"))
    finding = next(f for f in data["findings"] if f["rule"] == "launch-bound")
    assert finding["phase"] == "decode" and 0.1 < finding["run_impact"] < finding["impact"]
    assert data["verdict"]["phase"] == "decode"
    md = render(report, "md")
    assert "Warning: GPU starved by kernel-launch overhead · decode · GPU 0" in md
    assert "costs ≈62 % of decode's GPU time, ≈12 % of the run's" in md
    assert "launch-bound · decode · GPU 0 · costs 62 % of decode, 12 % of the run" in render(report, "terminal")
    assert "of decode&#39;s GPU time" in render(report, "html") or "of decode's GPU time" in render(report, "html")
