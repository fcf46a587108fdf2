"""Real PyTorch-profiler traces (fixtures/real-traces/SOURCES.md) get the diagnosis an expert reading them gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.compute import compute_facts
from nsys_diagnose.reading.export import open_export

from conftest import REPO, analysis, assert_findings_finite

pytestmark = pytest.mark.slow

TRACES = REPO / "fixtures" / "real-traces"


def _trace(name: str) -> Path:
    path = TRACES / name
    assert path.is_file(), f"{path} is missing: the real traces are committed with the repository"
    return path


def _rules(report) -> set[str]:
    return {f.rule for f in report.findings}


def _metric(report, key: str):
    return report.metrics[key]


@pytest.mark.parametrize("name", sorted(p.name for p in TRACES.glob("*.json.gz")))
def test_every_real_trace_is_read_as_a_trace_with_finite_numbers(name):
    report = analysis(_trace(name))[1]
    assert report.profile.source_format == "kineto"
    assert report.profile.producer == "PyTorch profiler trace"
    assert report.verdict.headline
    assert_findings_finite(report)


def test_vllm_eager_prefill_on_b200_is_host_bound_inside_vllm_ops():
    facts, report = analysis(_trace("vllm_gptoss_tp8_b200_eager_prefill.json.gz"))
    assert report.profile.stack and report.profile.stack.name == "vllm"
    assert [d["name"] for d in report.profile.devices if d["used"]] == ["NVIDIA B200"]
    assert report.verdict.primary == "host-bound"
    assert {"host-bound", "low-utilization"} <= _rules(report)
    assert _metric(report, "gpu_utilization") < 0.15
    assert _metric(report, "kernel_count") == 768
    # the ATen and vLLM operators the host was inside name the gaps, as NVTX ranges would under nsys
    host = next(f for f in report.findings if f.rule == "host-bound")
    assert "vllm::moe_forward" in host.message
    # vLLM's step label, execute_context_1(...)_generation_0(0), is one prefill step
    with open_export(_trace("vllm_gptoss_tp8_b200_eager_prefill.json.gz")) as export:
        steps = compute_facts(export, facts=load_facts(), helpers={"_steps"}).rows("_steps")
    assert [(s["phase"], s["ctx_reqs"], s["gen_reqs"]) for s in steps] == [("prefill", 1, 0)]


def test_hf_qwen_prefill_on_h100_is_busy_with_unfused_glue():
    report = analysis(_trace("hf_qwen1.5-0.5b_h100_prefill_bs16.json.gz"))[1]
    assert report.verdict.primary == "fusion" and report.verdict.rule == "unfused-elementwise"
    assert _metric(report, "gpu_utilization") > 0.85
    assert "launch-bound" not in _rules(report) and "low-utilization" not in _rules(report)


def test_kineto_sync_events_fill_the_syncs_view():
    with open_export(_trace("hta_a100_event_sync_trace.json.gz")) as export:
        kinds = sorted(r[0] for r in export.query("SELECT sync_type FROM syncs"))
        unnamed = export.query("SELECT count(*) FROM syncs WHERE api_name IS NULL")[0][0]
    assert kinds == ["context_sync", "event_sync", "event_sync", "stream_sync"]
    assert unnamed == 0  # each blocking record names the call that blocked, through its correlation id


def test_a_2022_trace_with_capitalised_categories_is_read():
    path = _trace("hta_old_format_inference_rank_1.json.gz")
    report = analysis(path)[1]
    assert _metric(report, "kernel_count") == 4
    assert report.verdict.primary == "capture"  # four kernels: too little to judge
    # absolute epoch microseconds count from the trace's first microsecond, exactly
    with open_export(path) as export:
        start, end = export.query("SELECT min(start_ns), max(end_ns) FROM kernels")[0]
    assert 0 <= start < end < 10**10 and start % 1000 == 0
