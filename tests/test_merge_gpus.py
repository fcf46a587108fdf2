"""The same rule firing on several GPUs is one finding that lists them, led by the worst GPU."""

from __future__ import annotations

from nsys_diagnose.diagnosis.merge import merge_gpus
from nsys_diagnose.model.findings import Finding
from nsys_diagnose.reports.render import render
from nsys_diagnose.base.vocabulary import Kind, Severity

from conftest import analysis, real, requires_real


def _finding(rule: str, subject: str | None, impact: float, severity: Severity = Severity.WARNING,
             phase: str | None = None) -> Finding:
    return Finding(rule=rule, title=rule, category="launch-bound", kind=Kind.CAUSE, severity=severity,
                   subject=subject, message=f"{subject} costs {impact:.0%}", impact=impact, phase=phase,
                   run_impact=impact, evidence=[], remediation=[], references=[], row={"impact": impact})


def test_one_rule_on_three_gpus_reads_once_led_by_the_worst() -> None:
    findings = [_finding("launch-bound", "GPU 2", 0.3), _finding("pcie-bound", "GPU 0", 0.2),
                _finding("launch-bound", "GPU 0", 0.5), _finding("launch-bound", "GPU 1", 0.1, Severity.INFO)]
    merged = merge_gpus(findings)
    assert [(f.rule, f.subject) for f in merged] == [("launch-bound", "GPUs 0, 1, 2"), ("pcie-bound", "GPU 0")]
    lead = merged[0]
    assert (lead.message, lead.impact, lead.severity) == ("GPU 0 costs 50%", 0.5, Severity.WARNING)
    assert [(a.subject, a.impact, a.severity) for a in lead.also_on] == [("GPU 1", 0.1, Severity.INFO),
                                                                          ("GPU 2", 0.3, Severity.WARNING)]


def test_phases_and_other_subjects_stay_apart() -> None:
    findings = [_finding("launch-bound", "decode · GPU 1", 0.6, phase="decode"),
                _finding("launch-bound", "prefill · GPU 0", 0.2, phase="prefill"),
                _finding("launch-bound", "decode · GPU 0", 0.4, phase="decode"),
                _finding("slow-launch-calls", "cudaLaunchKernel", 0.1),
                _finding("slow-launch-calls", "cuLaunchKernel", 0.1)]
    merged = merge_gpus(findings)
    assert [f.subject for f in merged] == ["decode · GPUs 0, 1", "prefill · GPU 0", "cudaLaunchKernel",
                                           "cuLaunchKernel"]
    assert merged[0].message == "decode · GPU 1 costs 60%" and merged[0].also_on[0].subject == "decode · GPU 0"


@requires_real
def test_a_two_gpu_export_gets_one_pcie_finding_naming_both_gpus() -> None:
    _, report = analysis(real("h100_2gpu_1s"))
    pcie = [f for f in report.findings if f.rule == "pcie-bound"]
    assert [f.subject for f in pcie] == ["GPUs 0, 1"] and [a.subject for a in pcie[0].also_on] == ["GPU 0"]
    assert report.verdict.headline.endswith("The same on GPU 0 (≈95 %).")
    md = render(report, "md")
    assert md.count("GPU stalled by host-device transfers · GPUs 0, 1") == 1 and "Also on GPU 0 (costs ≈95 %)." in md
    assert "also on: GPU 0 (costs 95 %)" in render(report, "terminal")
