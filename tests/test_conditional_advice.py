"""Advice follows the evidence: remediation steps carry `when:` conditions over the finding's row or another
fact, references are chosen per stack, and a symptom never outranks the traced cause of its idle time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_in_process import run_cli
from nsys_diagnose.diagnosis.evaluate import Evaluation
from nsys_diagnose.diagnosis.verdict import idle_cause_rules, verdict
from nsys_diagnose.diagnosis.rules import load_rules
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.compute import FactSet
from nsys_diagnose.model.findings import Finding
from nsys_diagnose.base.units import fmt_ratio
from nsys_diagnose.base.vocabulary import Kind, Severity

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "fixtures" / "examples" / "eager_decode.sqlite"

TEAM_RULE = """\
id: acme/launch-advice
title: Launch advice on conditions
category: launch-bound
severity: warning
fact: launch_overhead
params:
  max_ratio: {default: 0.1, unit: ratio, doc: Overhead ratio budget.}
when:
  - overhead_ratio > $max_ratio
message: "GPU {{ row.device_id }} overhead {{ row.overhead_ratio }}"
why: Because.
remediation:
  - "Always shown."
  - text: "Shown: the overhead ratio is above 0.1."
    when: [overhead_ratio > 0.1]
  - text: "Hidden: the overhead ratio is not above 2."
    when: [overhead_ratio > 2]
  - text: "Shown: the capture has kernels ({{ row.kernel_count }} on this GPU)."
    when: [capture_health.kernel_count > 0]
  - text: "Hidden: the capture has kernels."
    when: [capture_health.kernel_count == 0, overhead_ratio > 0.1]
"""


def _pack(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "pack"
    d.mkdir()
    (d / "launch-advice.yaml").write_text(text)
    return d


def test_a_step_whose_condition_is_false_is_not_shown(tmp_path):
    done = run_cli(str(EXAMPLE), "--rule-dir", str(_pack(tmp_path, TEAM_RULE)), "-f", "json", "--no-cache")
    assert done.returncode == 0, done.stderr
    finding = next(f for f in json.loads(done.stdout)["findings"] if f["rule"] == "acme/launch-advice")
    assert finding["remediation"][0] == "Always shown."
    assert finding["remediation"][1] == "Shown: the overhead ratio is above 0.1."
    assert finding["remediation"][2].startswith("Shown: the capture has kernels (")
    assert not [s for s in finding["remediation"] if s.startswith("Hidden")]


@pytest.mark.parametrize("step_when, message", [
    ("[overhead_ratoi > 0.1]", "fact 'launch_overhead' has no column 'overhead_ratoi'; did you mean 'overhead_ratio'?"),
    pytest.param("[capture_healht.kernel_count > 0]", "unknown fact 'capture_healht'", marks=pytest.mark.slow),
    pytest.param("[capture_health.kernel_cnt > 0]", "fact 'capture_health' has no column 'kernel_cnt'",
                 marks=pytest.mark.slow),
    pytest.param("[overhead_ratio > $nope]", "param $nope is not declared under params", marks=pytest.mark.slow),
])
def test_a_broken_step_condition_is_a_rule_error_with_its_line(tmp_path, step_when, message):
    text = TEAM_RULE.replace("[overhead_ratio > 2]", step_when)
    done = run_cli("rules", "check", "--rule-dir", str(_pack(tmp_path, text)))
    assert done.returncode == 2
    line = text.splitlines().index(next(x for x in text.splitlines() if step_when in x)) + 1
    assert f"launch-advice.yaml:{line - 1}:" in done.stdout + done.stderr  # the step's `- text:` line
    assert message in done.stdout + done.stderr


@pytest.mark.slow
def test_another_facts_column_is_refused_in_the_rules_own_conditions(tmp_path):
    text = TEAM_RULE.replace("  - overhead_ratio > $max_ratio\n", "  - capture_health.kernel_count > 0\n")
    done = run_cli("rules", "check", "--rule-dir", str(_pack(tmp_path, text)))
    assert done.returncode == 2
    assert "only a remediation step's `when` may do" in done.stdout + done.stderr


@pytest.mark.slow
def test_explain_shows_each_steps_condition():
    done = run_cli("rules", "explain", "pcie-bound")
    assert done.returncode == 0, done.stderr
    assert "(only when pageable_share > 0.05)" in done.stdout
    assert "References for vLLM profiles" not in done.stdout  # pcie-bound has no stack references
    launch = run_cli("rules", "explain", "launch-bound")
    assert "References for vLLM profiles:" in launch.stdout and "docs.vllm.ai" in launch.stdout


def test_references_of_another_stack_never_show():
    rules = load_rules(load_facts())
    spec = rules["launch-bound"].spec
    assert not [r for r in spec.references if "vllm" in r or "sglang" in r], \
        "serving-stack pages belong under stack_references"
    for rule in rules.values():
        generic = " ".join(rule.spec.references)
        assert "docs.vllm.ai" not in generic and "sglang" not in generic, rule.id


def _symptom(**idle: int) -> Finding:
    row = {"device_id": 0, "idle_sync_ns": 0, "idle_allocation_ns": 0, "idle_launch_ns": 0, "idle_host_ns": 0,
           "idle_gpu_side_ns": 0, "idle_uvm_ns": 0, "idle_other_ns": 0, **idle}
    return Finding(rule="low-utilization", title="GPU mostly idle", category="low-utilization", kind=Kind.SYMPTOM,
                   severity=Severity.WARNING, subject="GPU 0", message="GPU 0 runs kernels 10 % of its window.",
                   impact=0.9, run_impact=0.9, evidence=[], remediation=[], references=[], row=row)


def _cause(rule: str, category: str, severity: Severity, impact: float) -> Finding:
    return Finding(rule=rule, title=rule, category=category, kind=Kind.CAUSE, severity=severity, subject="GPU 0",
                   message="m", impact=impact, run_impact=impact, evidence=[], remediation=[], references=[], row={})


IDLE_RULES = idle_cause_rules(load_rules(load_facts()))


def test_every_traced_idle_cause_has_a_bundled_rule():
    assert sorted(IDLE_RULES) == ["allocation", "gpu-side", "host", "launch", "sync", "uvm"]
    assert IDLE_RULES["host"] == ("host-bound", "host-bound")


def test_the_symptom_names_the_traced_cause_that_explains_most_idle_time():
    """No cause rule passed its thresholds, but 70 % of the idle time is host work: the verdict says host-bound."""
    found = verdict(Evaluation(findings=[_symptom(idle_host_ns=70, idle_launch_ns=30)]), FactSet(), set(),
                    IDLE_RULES)
    assert found.primary == "host-bound" and found.rule == "low-utilization"
    assert "70 % of the idle time being host work outside CUDA" in found.headline


def test_the_causes_own_finding_is_promoted_even_below_warning():
    findings = [_symptom(idle_uvm_ns=90, idle_host_ns=10),
                _cause("uvm-migration-storm", "unified-memory", Severity.INFO, 0.04)]
    found = verdict(Evaluation(findings=findings), FactSet(), set(), IDLE_RULES)
    assert found.primary == "unified-memory" and found.rule == "uvm-migration-storm"


@pytest.mark.slow
def test_an_unknown_idle_cause_is_a_rule_error(tmp_path):
    text = TEAM_RULE.replace("when:\n", "idle_cause: hosts\nwhen:\n", 1)
    done = run_cli("rules", "check", "--rule-dir", str(_pack(tmp_path, text)))
    assert done.returncode == 2 and "unknown idle cause 'hosts'; did you mean 'host'?" in done.stdout + done.stderr


def test_a_symptom_with_no_dominant_cause_stays_the_symptom():
    found = verdict(Evaluation(findings=[_symptom(idle_host_ns=40, idle_launch_ns=35, idle_other_ns=25)]),
                    FactSet(), set(), IDLE_RULES)
    assert found.primary == "low-utilization"


def test_idle_time_with_no_traced_cause_never_names_a_cause():
    found = verdict(Evaluation(findings=[_symptom(idle_other_ns=90, idle_host_ns=10)]), FactSet(), set(), IDLE_RULES)
    assert found.primary == "low-utilization"


@pytest.mark.parametrize("value, text", [(0.998, "99.8 %"), (0.9999, "99.99 %"), (0.999999, "> 99.99 %"),
                                         (0.95, "95 %"), (1.0, "100 %"), (0.0, "0 %"), (0.001, "0.1 %"),
                                         (0.00001, "< 0.01 %")])
def test_a_rounded_share_is_never_all_or_nothing_when_it_is_not(value, text):
    """A headline rounds to whole percents; 99.8 % must not read as 100 % beside a finding that says 99.8 %."""
    assert fmt_ratio(value, 0) == text


_LLM_WORDS = ("continuous batching", "split-KV", "flash-decoding", "TTFT", "TPOT", "decode", "DataLoader")


def _advice(name: str, rule: str) -> list[str]:
    from conftest import scenario_analysis

    _, report = scenario_analysis(name)
    return next(f.remediation for f in report.findings if f.rule == rule)


def test_an_openmp_stencil_with_small_grids_gets_openmp_advice_and_no_llm_serving_advice():
    from conftest import scenario_analysis

    _, report = scenario_analysis("openmp_small_grids")
    assert report.verdict.primary == "occupancy"
    steps = _advice("openmp_small_grids", "small-grids")
    assert "collapse(n)" in steps[0] and "target teams distribute" in steps[0]
    text = json.dumps([f.remediation for f in report.findings])
    assert not [w for w in _LLM_WORDS if w in text], text


def test_a_decode_that_serves_tokens_keeps_its_batching_and_split_kv_advice():
    text = " ".join(_advice("small_grid_decode", "small-grids"))
    assert "continuous batching" in text and "split-KV" in text


def test_dataloader_advice_needs_a_dataloader_and_plain_cuda_gets_cuda_advice():
    steps = _advice("uvm_prefetch_host_print", "host-bound")
    assert not [s for s in steps if "DataLoader" in s]
    assert any("cudaMemcpyAsync into pinned memory" in s for s in steps)


def test_split_k_advice_needs_gemms_in_the_small_grids():
    """An OpenMP stencil has no K dimension to split; a decode whose small grids are GEMVs does."""
    assert not [s for s in _advice("openmp_small_grids", "small-grids") if "split-K" in s]
    split = [s for s in _advice("small_grid_decode", "small-grids") if "split-K" in s]
    assert split and "of the small-grid time" in split[0]


# Each category speaks to plain CUDA, the directive models and PyTorch in their own terms (docs/verdict.md
# "Advice for your stack"): a CUDA, OpenACC or OpenMP profile never reads only framework advice.
_PER_MODEL = ["communication-bound", "interconnect-saturated", "fp32-gemms", "tensor-cores-idle", "unfused-elementwise",
              "low-utilization", "launch-bound", "pcie-bound", "pageable-memory-copies", "small-kernels", "small-grids",
              "latency-bound-kernels", "host-bound", "memory-bound"]


@pytest.mark.parametrize("rule", _PER_MODEL)
def test_each_rule_has_cuda_openacc_openmp_and_pytorch_advice(rule):
    spec = load_rules(load_facts())[rule].spec
    assert {"cuda", "openacc", "openmp", "pytorch"} <= set(spec.stack_remediation), rule


@pytest.mark.parametrize("rule", ["launch-bound", "small-grids", "latency-bound-kernels", "memory-bound"])
def test_why_texts_give_llm_decode_as_one_example_among_others(rule):
    why = load_rules(load_facts())[rule].spec.why
    assert "decode" in why and any(w in why for w in ("stencil", "solver", "sparse")), why


def test_a_plain_cuda_run_has_one_row_that_carries_serves_tokens_and_stays_cuda():
    """software_stack gives a run without stack evidence one `cuda`/`none` row, so `software_stack.serves_tokens`
    is there for a hand-written CUDA LLM; the row is no evidence of a stack."""
    from nsys_diagnose.diagnosis.stacks import detect_stack
    from nsys_diagnose.facts.catalog import Fact
    from nsys_diagnose.facts.compute import FactResult

    row = {"stack": "cuda", "source": "none", "matches": 0, "time_share": None, "example": None,
           "serves_tokens": True}
    fact = Fact(name="software_stack", sql="", path="software_stack.sql")
    stack = detect_stack(FactSet({"software_stack": FactResult(fact, list(row), [row])}))
    assert (stack.name, stack.also) == ("cuda", [])
    assert stack.evidence == ["no kernel, NVTX or process name of a known framework"]
