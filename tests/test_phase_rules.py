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
    # its cost is what its what-if buys in decode (one saving model), at most the idle share the rule measured
    assert finding.what_if is not None and finding.what_if.phase == "decode"
    assert finding.impact == pytest.approx(1 - finding.what_if.projected_step_ns / finding.what_if.measured_step_ns)
    assert finding.impact <= decode["launch_idle_fraction"]
    assert finding.run_impact == pytest.approx(finding.impact * share)
    assert finding.severity == "warning"  # ~10 % of the run: more than the 5 % below which a finding is info

    verdict = report.verdict
    assert (verdict.primary, verdict.rule, verdict.phase) == ("launch-bound", "launch-bound", "decode")
    assert verdict.impact == pytest.approx(finding.run_impact)
    assert verdict.headline.startswith("In decode (bounds time per output token): GPU starved by kernel-launch "
                                       "overhead (costs ≈54 % of decode's")
    assert "Prefill" not in verdict.headline  # how prefill fares is its own line (Verdict.phases)
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
    assert report.verdict.phases == [] and json.loads(render(report, "json"))["verdict"]["phases"] == []
    assert "PHASES" not in render(report, "terminal") and "bounds TPOT" not in render(report, "md")


def test_every_format_names_the_phase_and_both_costs() -> None:
    _, report = scenario_analysis("prefill_heavy_eager_decode")
    data = json.loads(render(report, "json"))
    finding = next(f for f in data["findings"] if f["rule"] == "launch-bound")
    assert finding["phase"] == "decode" and 0.1 < finding["run_impact"] < finding["impact"]
    assert data["verdict"]["phase"] == "decode"
    md = render(report, "md")
    assert "Warning: GPU starved by kernel-launch overhead · decode · GPU 0" in md
    assert "costs ≈54 % of decode's GPU time, ≈11 % of the run's" in md
    assert "launch-bound · decode · GPU 0 · costs 54 % of decode, 11 % of the run" in render(report, "terminal")
    assert "of decode&#39;s GPU time" in render(report, "html") or "of decode's GPU time" in render(report, "html")


def test_a_short_launch_bound_decode_after_long_prefills_is_the_headline() -> None:
    """40 eager decode steps that lose ~60 % of their time to launch gaps, after three prefills that take ~96 % of
    the window: decode bounds the time per output token however little of the run it takes."""
    facts, report = scenario_analysis("short_decode_after_prefills")
    share = _window(facts.phases["decode"]) / _window(facts)
    assert 0.03 < share < 0.05
    phases = {r["phase"]: r for r in facts.rows("phases")}
    assert (phases["decode"]["step_count"], phases["decode"]["judged_alone"]) == (40, True)
    assert (phases["prefill"]["step_count"], phases["prefill"]["judged_alone"]) == (3, False)

    finding = next(f for f in report.findings if f.rule == "launch-bound")
    assert (finding.phase, finding.subject) == ("decode", "decode · GPU 0")
    assert finding.impact == pytest.approx(0.54, abs=0.05)
    assert finding.run_impact == pytest.approx(finding.impact * share)
    assert finding.run_impact < 0.05  # by its share of the run it would be information only
    assert finding.severity == "warning"
    cost = next(e for e in finding.evidence if e.label == "Cost in decode and in the run")
    assert cost.display == "54 % of decode's GPU time, 2 % of the run's"

    verdict = report.verdict
    assert (verdict.primary, verdict.rule, verdict.phase) == ("launch-bound", "launch-bound", "decode")
    assert verdict.headline.startswith("In decode (bounds time per output token): GPU starved by kernel-launch "
                                       "overhead (costs ≈54 % of decode's GPU time, ≈2 % of the run's)")
    lines = {p.phase: p for p in verdict.phases}
    assert list(lines) == ["prefill", "decode"]
    decode, prefill = lines["decode"], lines["prefill"]
    assert (decode.goal, decode.primary, decode.rule, decode.judged_alone) == ("TPOT", "launch-bound",
                                                                               "launch-bound", True)
    assert decode.line == ("decode (bounds TPOT): launch-bound, ≈54 % of decode's GPU time (≈2 % of the run's): GPU "
                           "starved by kernel-launch overhead; 40 steps, 4 % of the run's GPU window.")
    assert (prefill.goal, prefill.primary, prefill.step_count, prefill.judged_alone) == ("TTFT", None, 3, False)
    assert prefill.line.startswith("prefill (bounds TTFT): no bottleneck; GPU busy 99.9 %, time goes to kernels led "
                                   "by sm90_xmma_gemm_")
    assert prefill.line.endswith("; 3 steps, 96 % of the run's GPU window, too few steps to judge alone.")


@pytest.mark.slow
def test_a_phase_with_fewer_steps_than_phase_min_steps_keeps_its_run_share(tmp_path) -> None:
    from nsys_diagnose.runs.api import diagnose
    from nsys_diagnose.diagnosis.config import Config, apply_set
    from nsys_diagnose.fixtures.generator import generate

    path = tmp_path / "short.sqlite"
    generate("short_decode_after_prefills", path)
    config = Config()
    apply_set(config, "facts.phase_min_steps=41")  # decode has 40 steps
    report = diagnose(path, config, cache=False)
    finding = next(f for f in report.findings if f.rule == "launch-bound")
    assert finding.phase == "decode" and finding.run_impact < 0.05
    assert finding.severity == "info"  # rated by its ~2 % of the run, as before phases were judged alone
    assert report.verdict.primary is None and report.verdict.headline.startswith("No bottleneck found")
    decode = next(p for p in report.verdict.phases if p.phase == "decode")
    assert (decode.primary, decode.judged_alone, decode.step_count) == (None, False, 40)
    assert decode.line.endswith("; 40 steps, 4 % of the run's GPU window, too few steps to judge alone.")
    assert [(o.target, o.value) for o in report.overrides] == [("facts.phase_min_steps", 41)]


def test_prefill_heavy_eager_decode_names_decode_and_both_goals() -> None:
    _, report = scenario_analysis("prefill_heavy_eager_decode")
    lines = {p.phase: p for p in report.verdict.phases}
    assert (lines["decode"].goal, lines["decode"].primary, lines["decode"].step_count) == ("TPOT", "launch-bound", 24)
    assert (lines["prefill"].goal, lines["prefill"].primary, lines["prefill"].step_count) == ("TTFT", None, 6)
    assert lines["prefill"].judged_alone and lines["decode"].judged_alone
    assert lines["prefill"].line.startswith("prefill (bounds TTFT): no bottleneck; GPU busy 99 %")
    assert lines["prefill"].line.endswith("; 6 steps, 81 % of the run's GPU window.")


@pytest.mark.slow
def test_a_range_nested_in_a_range_of_its_phase_is_one_step(tmp_path) -> None:
    """An inner 'decode_step' range inside each 'decode' range on the same thread: still 40 decode steps."""
    import sqlite3

    from conftest import analysis
    from nsys_diagnose.fixtures.generator import generate

    path = tmp_path / "nested.sqlite"
    generate("short_decode_after_prefills", path)
    con = sqlite3.connect(path)
    with con:
        columns = [r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")]
        decode = con.execute("SELECT * FROM NVTX_EVENTS WHERE text = 'decode'").fetchall()
        assert len(decode) == 40
        for row in decode:
            inner = dict(zip(columns, row))
            inner.update(start=inner["start"] + 1_000, end=inner["end"] - 1_000, text="decode_step")
            con.execute(f"INSERT INTO NVTX_EVENTS ({', '.join(inner)}) VALUES ({', '.join('?' * len(inner))})",
                        list(inner.values()))
    con.close()
    facts, _ = analysis(path)
    decode = next(r for r in facts.rows("phases") if r["phase"] == "decode")
    assert (decode["range_count"], decode["step_count"]) == (80, 40)


def test_every_format_lists_the_phase_lines() -> None:
    _, report = scenario_analysis("short_decode_after_prefills")
    line = "decode (bounds TPOT): launch-bound, ≈54 % of decode"
    assert json.loads(render(report, "json"))["verdict"]["phases"][1]["line"].startswith(line)
    assert f"> - {line}" in render(report, "md")
    html = render(report, "html")
    assert "<li><strong>" + line in html
    assert "launch-bound <span class=\"small\">· costs ≈54 % of decode&#39;s GPU time</span>" in html
    terminal = render(report, "terminal")
    assert "  · " + line in terminal
    assert terminal.index("· decode (bounds TPOT") < terminal.index("FINDINGS")


@pytest.mark.slow
def test_configured_phases_named_context_and_generation_bound_ttft_and_tpot(tmp_path) -> None:
    """TensorRT-LLM's names for the phases: configured as phase names they take prefill's and decode's goals."""
    from nsys_diagnose.runs.api import diagnose
    from nsys_diagnose.diagnosis.config import Config
    from nsys_diagnose.fixtures.generator import generate

    path = tmp_path / "named.sqlite"
    generate("short_decode_after_prefills", path)
    report = diagnose(path, Config(phase_patterns={"context": "^prefill$", "generation": "^decode$"}), cache=False)
    assert [(p.phase, p.goal) for p in report.verdict.phases] == [("context", "TTFT"), ("generation", "TPOT")]
    assert report.verdict.phase == "generation"
    assert report.verdict.headline.startswith("In generation (bounds time per output token): ")
