"""One story per report: the checker (engine/reports/consistency.py) finds each contradiction it names, and no
report it checks has any: every bundled scenario, every real export, and programs hypothesis makes up."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REAL_EXPORTS, analysis, requires_real, scenario_analysis
from nsys_diagnose.runs.api import diagnose, load_pack
from nsys_diagnose.fixtures._export import ERA_2024, H100_SXM, Proc
from nsys_diagnose.fixtures._kernels import KernelSpec
from nsys_diagnose.fixtures._timeline import DEVICE, HTOD, PAGEABLE, PINNED, Host, _finish, _new_export, _t0, jit
from nsys_diagnose.fixtures.generator import SCENARIOS
from nsys_diagnose.model.report import Report
from nsys_diagnose.reports.consistency import check

REPLAYED = {r.id for r in load_pack().rules.values() if r.spec.what_if}
FAST = ("eager_decode", "prefill_decode_nvtx", "busy_gpu_sync_overhead", "no_loop_load_syncs")


def _report(name: str = "eager_decode") -> Report:
    return scenario_analysis(name)[1].model_copy(deep=True)


# ---------------------------------------------------------------------------------------------------------
# The checker finds what it names (each case breaks one rule of a report that keeps them all).
# ---------------------------------------------------------------------------------------------------------

def test_a_consistent_report_passes():
    assert check(_report(), REPLAYED) == []


def test_a_what_if_beyond_what_removing_the_cost_gives_is_found():
    report = _report()
    f = report.findings[0]
    f.impact = 0.2  # removing a 20 % cost gives at most 1.25x; its what-if says ~2.2x
    assert any("more than removing its cost" in p for p in check(report, REPLAYED, formats=()))


def test_a_large_cost_whose_what_if_gains_nothing_without_saying_why_is_found():
    report = _report()
    w = report.findings[0].what_if
    assert w is not None
    w.projected_step_ns, w.speedup, w.why_not = w.measured_step_ns, 1.0, None
    assert any("gains nothing and does not say why" in p for p in check(report, REPLAYED, formats=()))


def test_a_large_replayed_cost_without_a_what_if_is_found():
    report = _report()
    report.findings[0].what_if = None
    assert any("has no what-if" in p for p in check(report, REPLAYED, formats=()))


def test_a_listed_finding_at_zero_percent_is_found():
    report = _report()
    report.findings.append(report.findings[0].model_copy(update={"rule": "frequent-synchronization",
                                                                 "impact": 0.001, "what_if": None}))
    assert any("rounds to 0 %" in p for p in check(report, REPLAYED, formats=()))


def test_an_overhead_verdict_on_a_busy_gpu_is_found():
    report = _report()
    report.metrics["gpu_utilization"] = 0.95
    report.findings[0].run_impact = report.verdict.impact = 0.06
    assert any("busy in kernels, yet the verdict is an overhead" in p for p in check(report, REPLAYED, formats=()))


def test_a_headline_cost_other_than_its_findings_is_found():
    report = _report()
    report.verdict.impact = 0.9
    assert any("the verdict costs" in p for p in check(report, REPLAYED, formats=()))


def test_token_wording_on_a_run_that_serves_no_tokens_is_found():
    report = _report("busy_gpu_sync_overhead")
    report.findings[0].remediation.append("Raise --max-num-seqs (continuous batching).")
    assert any("continuous batching" in p for p in check(report, REPLAYED, formats=("md",)))


def test_a_format_that_does_not_render_is_found(monkeypatch):
    import nsys_diagnose.reports.consistency as consistency

    def broken(report, fmt, colour=False):
        raise RuntimeError("boom")

    monkeypatch.setattr(consistency, "render", broken)
    assert check(_report(), REPLAYED, formats=("md",)) == ["the md report does not render: RuntimeError: boom"]


# ---------------------------------------------------------------------------------------------------------
# Every report keeps them: a fast band of scenarios, then every scenario and every real export (slow tier).
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FAST)
def test_scenarios_tell_one_story(name):
    assert check(scenario_analysis(name)[1], REPLAYED) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(SCENARIOS) - set(FAST)))
def test_every_scenario_tells_one_story(name):
    assert check(scenario_analysis(name)[1], REPLAYED) == []


@requires_real
@pytest.mark.parametrize("path", REAL_EXPORTS, ids=lambda p: p.name.split("__")[0])
def test_every_real_export_tells_one_story(path):
    assert check(analysis(path)[1], REPLAYED) == []


# ---------------------------------------------------------------------------------------------------------
# Programs made up by hypothesis: loops or none, syncs or none, copies pinned or pageable, NVTX or none, a slow
# host or a fast one, a load before the loop or none.
# ---------------------------------------------------------------------------------------------------------

WORK = KernelSpec("step_kernel(float*, int)", "step_kernel", "_Z11step_kernelPfi", (2048, 1, 1), (256, 1, 1), 32, 0,
                  0, 0)
_program = st.fixed_dictionaries({
    "iterations": st.integers(1, 60), "kernels": st.integers(1, 30), "kernel_us": st.sampled_from([3, 20, 200, 2000]),
    "host_us": st.sampled_from([1, 10, 100, 1000]), "sync": st.booleans(), "nvtx": st.booleans(),
    "copy_kib": st.sampled_from([0, 64, 4096]), "pinned": st.booleans(), "load_chunks": st.integers(0, 12),
    "seed": st.integers(0, 1000),
})


def _write_program(path: Path, p: dict) -> None:
    rng = random.Random(p["seed"])
    x = _new_export(ERA_2024, H100_SXM, 1, nvtx=p["nvtx"], command=("./program", []))
    proc = Proc(40000 + p["seed"], "program")
    x.procs.append(proc)
    h = Host(x, proc, rng, _t0(rng))
    for _ in range(p["load_chunks"]):
        h.memcpy_async(8 << 20, HTOD, PINNED, DEVICE)
        h.stream_sync()
    for _ in range(p["iterations"]):
        start = h.t
        if p["copy_kib"]:
            h.memcpy_sync(p["copy_kib"] << 10, HTOD, PINNED if p["pinned"] else PAGEABLE, DEVICE, (3e9, 20e9))
        for _ in range(p["kernels"]):
            h.launch(WORK, jit(rng, p["kernel_us"] * 1000), host_gap=(p["host_us"] * 500, p["host_us"] * 1500))
        if p["sync"]:
            h.stream_sync()
        if p["nvtx"]:
            h.nvtx(start, text="step")
    h.stream_sync()
    _finish(x, path)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=_program)
def test_made_up_programs_tell_one_story(tmp_path, program):
    path = tmp_path / f"program-{abs(hash(tuple(sorted(program.items()))))}.sqlite"
    _write_program(path, program)
    report = diagnose(path, cache=False)
    assert check(report, REPLAYED) == [], program

